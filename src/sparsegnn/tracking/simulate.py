"""Particle-gun events from ACTS (pyacts): generic detector, Fatras, smeared digitisation.

ACTS writes its own CSV flavour (five-column particle barcodes, ``geometry_id``,
measurements mapped to simulated hits); :func:`convert_event` rewrites one event as
TrackML ``hits``/``truth``/``particles`` files so every other stage reads simulated and
Kaggle events the same way; ACTS's own CSV stays in ``DIR/acts`` for the CKF peer
(:mod:`sparsegnn.tracking.ckf`). ``pyacts`` is optional and imported only when simulating.

TrackML's hit weights (which favour a track's first and last hits and high-pT
particles) are not defined for simulated events; the converter gives every hit of a
particle the same weight, normalised to sum 1, so the TrackML score of simulated events
is the fraction of particle hits on correctly matched tracks.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.optional import require
from sparsegnn.tracking.events import read_columns

# Gaussian smearing per detector volume, stddev = pitch / sqrt(12) (pitches in mm).
_PITCH = {7: (0.05, 0.05), 8: (0.05, 0.05), 9: (0.05, 0.05),
          12: (0.08, 1.2), 13: (0.08, 1.2), 14: (0.08, 1.2),
          16: (0.12, 10.8), 17: (0.12, 10.8), 18: (0.12, 10.8)}
_BARCODE = ("particle_id_pv", "particle_id_sv", "particle_id_part", "particle_id_gen",
            "particle_id_subpart")
_BARCODE_BITS = (12, 12, 20, 8, 11)  # 63 bits: packed ids stay positive int64


@dataclass(frozen=True)
class GunConfig:
    """A muon gun: ``particles`` per event, flat in pT, eta and phi, vertex smeared in z.

    ``spread_vertices`` gives every muon its own beam-spot vertex instead of one per
    event: events to learn module-map windows from (:mod:`sparsegnn.tracking.windows`),
    whose z0 and dz ranges must cover the whole luminous region, as pileup does. The
    vertex number must fit its 12 bits of the packed particle id: < 4096 particles.
    """

    events: int = 10
    particles: int = 100
    pt_min: float = 0.5  # GeV
    pt_max: float = 10.0
    eta_max: float = 2.5
    seed: int = 42
    progress: bool = False  # tqdm bars on stderr
    spread_vertices: bool = False


ACTS_SUBDIR = "acts"  # ACTS's own CSV, kept beside the TrackML files for the CKF peer


def simulate_gun(out_dir: str | Path, cfg: GunConfig) -> list[str]:
    """Simulate ``cfg.events`` events into ``out_dir`` as TrackML CSV; returns their prefixes."""
    if cfg.spread_vertices and cfg.particles >= 1 << _BARCODE_BITS[0]:
        raise InvalidValueError(f"spread_vertices takes fewer than {1 << _BARCODE_BITS[0]} "
                                f"particles per event (one vertex each), got {cfg.particles}")
    acts, sim = import_acts()
    u = acts.UnitConstants

    def add_gun(seq: Any, rnd: Any, raw: Path) -> None:
        sim.addParticleGun(
            seq, sim.MomentumConfig(cfg.pt_min * u.GeV, cfg.pt_max * u.GeV, transverse=True),
            sim.EtaConfig(-cfg.eta_max, cfg.eta_max, uniform=True),
            sim.PhiConfig(0.0, 360.0 * u.degree),
            sim.ParticleConfig(1 if cfg.spread_vertices else cfg.particles,
                               acts.PdgParticle.eMuon, randomizeCharge=True),
            multiplicity=cfg.particles if cfg.spread_vertices else 1, vtxGen=beam_spot(acts),
            rnd=rnd, outputDirCsv=str(raw),
        )

    return run_acts(out_dir, cfg.events, cfg.seed, add_gun, cfg.progress)


def import_acts() -> tuple[Any, Any]:
    """``acts`` and ``acts.examples.simulation``, with an install hint when missing."""
    acts = require("acts", "for simulation")
    return acts, require("acts.examples.simulation", "for simulation")


def beam_spot(acts: Any) -> Any:
    """Vertices smeared like the LHC luminous region (ACTS's example values)."""
    u = acts.UnitConstants
    return acts.examples.GaussianVertexGenerator(
        mean=acts.Vector4(0, 0, 0, 0),
        stddev=acts.Vector4(0.0125 * u.mm, 0.0125 * u.mm, 55.5 * u.mm, 1.0 * u.ns))


def generic_detector(acts: Any) -> tuple[Any, Any]:
    """The TrackML-like generic detector's tracking geometry and the 2 T solenoid field."""
    detector = acts.examples.GenericDetector(acts.examples.GenericDetector.Config())
    field = acts.ConstantBField(acts.Vector3(0, 0, 2 * acts.UnitConstants.T))
    return detector.trackingGeometry(), field


def run_acts(out_dir: str | Path, events: int, seed: int,
             add_input: Callable[[Any, Any, Path], None], progress: bool = False) -> list[str]:
    """Generator (``add_input``) -> Fatras -> smeared digitisation, then TrackML CSV.

    ACTS's CSV stays in ``out_dir/acts``: the CKF peer reads its measurements there, so
    both reconstructions see the very same hits.
    """
    acts, sim = import_acts()
    out_dir = Path(out_dir)
    raw = out_dir / ACTS_SUBDIR
    raw.mkdir(parents=True, exist_ok=True)
    digi = raw / "digi.json"
    digi.write_text(json.dumps(_digi_config()))
    tracking, field = generic_detector(acts)
    rnd = acts.examples.RandomNumbers(seed=seed)
    seq = acts.examples.Sequencer(events=events, numThreads=1, outputDir=str(raw),
                                  logLevel=acts.logging.WARNING, trackFpes=False)
    add_input(seq, rnd, raw)
    sim.addFatras(seq, tracking, field, rnd=rnd, outputDirCsv=str(raw))
    sim.addDigitization(seq, tracking, field, digiConfigFile=str(digi), rnd=rnd,
                        outputDirCsv=str(raw))
    with tqdm(total=events, desc="fatras", unit="event", disable=None if progress else True) as bar:
        seq.addAlgorithm(_progress(acts, bar))
        seq.run()
    return [convert_event(raw, f"event{i:09d}", out_dir)
            for i in tqdm(range(events), desc="to TrackML",
                            disable=None if progress else True)]


def _progress(acts: Any, bar: tqdm) -> Any:
    """An algorithm that advances ``bar`` once per simulated event."""
    ex = acts.examples

    class Progress(ex.IAlgorithm):
        def __init__(self) -> None:
            super().__init__("Progress", acts.logging.WARNING)

        def execute(self, context: Any) -> Any:
            bar.update(1)
            return ex.ProcessCode.SUCCESS

    return Progress()


def _digi_config() -> dict:
    entries = [
        {"volume": vol, "value": {"smearing": [
            {"index": i, "mean": 0.0, "stddev": pitch / 12**0.5, "type": "Gauss"}
            for i, pitch in enumerate(pitches)
        ]}}
        for vol, pitches in _PITCH.items()
    ]
    return {"acts-geometry-hierarchy-map": {"format-version": 0,
                                            "value-identifier": "digitization-configuration"},
            "entries": entries}


def convert_event(acts_dir: str | Path, prefix: str, out_dir: str | Path) -> str:
    """Rewrite ACTS's CSV of one event as TrackML hits/truth/particles in ``out_dir``."""
    acts_dir, out_dir = Path(acts_dir), Path(out_dir)
    f64, i64 = np.float64, np.int64
    meas = read_columns(acts_dir / f"{prefix}-measurements.csv",
                        {"measurement_id": i64, "geometry_id": i64, "global_x": f64,
                         "global_y": f64, "global_z": f64})
    link = read_columns(acts_dir / f"{prefix}-measurement-simhit-map.csv",
                        {"measurement_id": i64, "hit_id": i64})
    simhits = read_columns(acts_dir / f"{prefix}-hits.csv", dict.fromkeys(_BARCODE, i64))
    parts_path = acts_dir / f"{prefix}-particles_simulated.csv"
    parts = read_columns(parts_path, {**dict.fromkeys(_BARCODE, i64), "vx": f64, "vy": f64,
                                      "vz": f64, "px": f64, "py": f64, "pz": f64, "q": i64})
    # A measurement that merged several simulated hits takes its first one's particle.
    _, first = np.unique(link["measurement_id"], return_index=True)
    simhit_of = np.full(int(meas["measurement_id"].max(initial=-1)) + 1, -1, dtype=i64)
    simhit_of[link["measurement_id"][first]] = link["hit_id"][first]
    hit_pid = _pack(simhits)[simhit_of[meas["measurement_id"]]]
    pid = _pack(parts)
    order = np.argsort(pid)
    counts = np.bincount(np.searchsorted(pid[order], hit_pid), minlength=pid.size + 1)[:pid.size]
    nhits = np.empty(pid.size, dtype=i64)
    nhits[order] = counts
    gid = meas["geometry_id"]
    hit_id = meas["measurement_id"] + 1
    weight = np.full(hit_id.size, 1.0 / max(hit_id.size, 1))
    _write(out_dir / f"{prefix}-hits.csv", "hit_id,x,y,z,volume_id,layer_id,module_id",
           [hit_id, meas["global_x"], meas["global_y"], meas["global_z"],
            gid >> 56, (gid >> 36) & 0xFFF, (gid >> 8) & 0xFFFFF])
    _write(out_dir / f"{prefix}-truth.csv", "hit_id,particle_id,weight", [hit_id, hit_pid, weight])
    _write(out_dir / f"{prefix}-particles.csv", "particle_id,vx,vy,vz,px,py,pz,q,nhits",
           [pid, parts["vx"], parts["vy"], parts["vz"], parts["px"], parts["py"], parts["pz"],
            parts["q"], nhits])
    return prefix


def _pack(cols: dict[str, np.ndarray]) -> np.ndarray:
    """ACTS's five-part barcode as one positive int64 (fails loudly on overflow)."""
    packed = np.zeros(cols[_BARCODE[0]].shape, dtype=np.int64)
    for name, bits in zip(_BARCODE, _BARCODE_BITS, strict=True):
        value = cols[name]
        if value.size and (value.min() < 0 or value.max() >= 1 << bits):
            raise DataFormatError(f"barcode field {name} does not fit in {bits} bits")
        packed = (packed << bits) | value
    return packed


def _write(path: Path, header: str, columns: list[np.ndarray]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(header + "\n")
        for row in zip(*(c.tolist() for c in columns), strict=True):
            fh.write(",".join(map(repr, row)) + "\n")


def simulate_events(out_dir: str | Path, events: int, seed: int, gun: int | None = None,
                    pileup: int = 0, pt_min: float = 0.5, pt_max: float = 10.0,
                    progress: bool = True) -> dict:
    """``track simulate``: ``gun`` muons per event, or (``gun`` None) Pythia8 ttbar with
    ``pileup`` minimum-bias interactions; what was simulated, as plain data."""
    if pt_min > pt_max:
        raise InvalidValueError(f"--pt-min {pt_min} is above --pt-max {pt_max}")
    if gun is None:
        from sparsegnn.tracking.ttbar import TtbarConfig, simulate_ttbar

        prefixes = simulate_ttbar(out_dir, TtbarConfig(events, pileup, seed, progress))
        return {"out": str(out_dir), "events": prefixes, "ttbar": True, "pileup": pileup}
    cfg = GunConfig(events=events, particles=gun, pt_min=pt_min, pt_max=pt_max, seed=seed,
                    progress=progress)
    return {"out": str(out_dir), "events": simulate_gun(out_dir, cfg),
            "particles_per_event": gun}
