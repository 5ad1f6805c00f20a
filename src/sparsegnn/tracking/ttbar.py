"""Pythia8 ttbar + minimum-bias pileup -> HepMC3 -> ACTS Fatras: realistic track density.

ACTS's own Pythia8 bindings are not in the pyacts wheel, so Pythia runs through the
``pythia8mc`` wheel and hands its events to ACTS as HepMC3 files (written with
``pyhepmc``); ACTS's HepMC3 reader then overlays ``pileup`` minimum-bias events on each
ttbar event, each at its own vertex drawn from the beam spot, and the rest of the chain
(Fatras, digitisation, TrackML conversion) is the particle gun's.

Pileup is fixed at ``pileup`` interactions per event rather than Poisson-distributed, so
the number of minimum-bias events to generate is known and a seed fixes everything.

Only beams, final-state particles and decayed hadrons/taus go into the HepMC3 record
(Pythia's full record, with its partons and colour strings, gives files that neither
ACTS nor pyhepmc reads back): a particle hangs off its nearest decayed ancestor, so
displaced decay vertices survive, and everything else off the beam-beam vertex.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from sparsegnn.optional import require
from sparsegnn.tracking.simulate import ACTS_SUBDIR, beam_spot, import_acts, run_acts

_COMMON = ["Beams:eCM = 14000.", "ParticleDecays:limitTau0 = on",
           "ParticleDecays:tau0Max = 10.", "Next:numberCount = 0", "Print:quiet = on"]
_TTBAR = ["Top:qqbar2ttbar = on", "Top:gg2ttbar = on"]
_MINBIAS = ["SoftQCD:all = on"]
_MAX_PYTHIA_SEED = 900_000_000
_PURPOSE = "for ttbar simulation"
_GENERATORS = ("pythia8mc", "pyhepmc")  # event generation, then HepMC3 files


@dataclass(frozen=True)
class TtbarConfig:
    """``events`` ttbar events, each with ``pileup`` minimum-bias interactions on top."""

    events: int = 10
    pileup: int = 50
    seed: int = 42
    progress: bool = False


def simulate_ttbar(out_dir: str | Path, cfg: TtbarConfig) -> list[str]:
    """Simulate ``cfg.events`` ttbar + pileup events into ``out_dir`` as TrackML CSV."""
    acts, _ = import_acts()
    hepmc3 = require("acts.examples.hepmc3", _PURPOSE)
    for name in _GENERATORS:  # refuse before writing anything
        require(name, _PURPOSE)

    gen = Path(out_dir) / ACTS_SUBDIR / "generator"
    gen.mkdir(parents=True, exist_ok=True)
    ttbar = write_hepmc(gen / "ttbar.hepmc3", _TTBAR, cfg.events, cfg.seed, cfg.progress)
    inputs = [hepmc3.HepMC3Reader.Input.Fixed(str(ttbar), 1)]
    if cfg.pileup > 0:
        minbias = write_hepmc(gen / "minbias.hepmc3", _MINBIAS, cfg.events * cfg.pileup,
                              cfg.seed + 1, cfg.progress)
        inputs.append(hepmc3.HepMC3Reader.Input.Fixed(str(minbias), cfg.pileup))

    def add_pythia_events(seq: Any, rnd: Any, _raw: Path) -> None:
        _add_hepmc_input(acts, hepmc3, seq, rnd, inputs)

    return run_acts(out_dir, cfg.events, cfg.seed, add_pythia_events, cfg.progress)


def _add_hepmc_input(acts: Any, hepmc3: Any, seq: Any, rnd: Any,
                     inputs: list[Any]) -> None:
    """HepMC3 reader -> particles, keeping what a tracker can see, as ACTS.md found to work.

    The selection drops neutrals and particles Fatras would only waste time on (below
    150 MeV, far forward, or born outside the beam pipe).
    """
    ex, u, level = acts.examples, acts.UnitConstants, acts.logging.WARNING
    seq.addReader(hepmc3.HepMC3Reader(level=level, inputs=inputs, outputEvent="hepmc3_event",
                                      vertexGenerator=beam_spot(acts), randomNumbers=rnd))
    seq.addAlgorithm(hepmc3.HepMC3InputConverter(
        level=level, inputEvent="hepmc3_event", outputParticles="particles_generated",
        outputVertices="vertices_generated", mergePrimaries=False))
    seq.addAlgorithm(ex.ParticleSelector(
        level=level, inputParticles="particles_generated",
        outputParticles="particles_generated_selected", removeNeutral=True,
        ptMin=150 * u.MeV, etaMin=-3.0, etaMax=3.0, rhoMax=24 * u.mm, absZMax=1 * u.m))


def write_hepmc(path: Path, process: list[str], events: int, seed: int, progress: bool) -> Path:
    """Generate ``events`` Pythia8 events of ``process`` into a HepMC3 file."""
    pythia8mc, pyhepmc = (require(name, _PURPOSE) for name in _GENERATORS)
    pythia = pythia8mc.Pythia("", False)
    for line in [*_COMMON, *process, "Random:setSeed = on",
                 f"Random:seed = {seed % _MAX_PYTHIA_SEED + 1}"]:
        pythia.readString(line)
    if not pythia.init():
        raise RuntimeError(f"Pythia8 failed to initialise for {process}")
    with pyhepmc.open(path, "w") as fh:
        for number in tqdm(range(events), desc=f"pythia {path.stem}",
                           disable=None if progress else True):
            while not pythia.next():  # a failed event is retried, as Pythia advises
                pass
            event = pyhepmc.GenEvent()
            event.from_hepevt(number, **_hepevt(pythia.event), fortran=False)
            fh.write(event)
    return path


def _hepevt(record: Any) -> dict[str, np.ndarray]:
    """A Pythia event reduced to beams, final state and decayed hadrons, as HEPEVT arrays."""
    parts = list(record)
    status = np.array([p.statusHepMC() for p in parts], dtype=np.int32)
    beams = np.flatnonzero(status == 4)
    kept = np.concatenate([beams, np.flatnonzero((status == 1) | (status == 2))])
    new_index = np.full(len(parts), -1, dtype=np.int64)
    new_index[kept] = np.arange(kept.size)
    decayed = _decayed_ancestor(parts, status)
    parents = np.full((kept.size, 2), -1, dtype=np.int64)
    for row, i in enumerate(kept[beams.size:], start=beams.size):
        anc = decayed[i]
        parents[row] = (new_index[anc], new_index[anc]) if anc >= 0 else (0, beams.size - 1)
    cols = {name: np.array([getattr(parts[i], name)() for i in kept], dtype=np.float64)
            for name in ("px", "py", "pz", "e", "m", "xProd", "yProd", "zProd", "tProd")}
    return {"px": cols["px"], "py": cols["py"], "pz": cols["pz"], "en": cols["e"],
            "m": cols["m"], "pid": np.array([parts[i].id() for i in kept], dtype=np.int32),
            "status": status[kept], "parents": parents, "vx": cols["xProd"],
            "vy": cols["yProd"], "vz": cols["zProd"], "vt": cols["tProd"]}


def _decayed_ancestor(parts: list[Any], status: np.ndarray) -> np.ndarray:
    """For each particle, its nearest ancestor (via first mothers) that decayed, else -1."""
    ancestor = np.full(len(parts), -2, dtype=np.int64)  # -2: not yet known
    for start in range(len(parts)):
        chain, i = [], start
        while ancestor[i] == -2:
            chain.append(i)
            mother = parts[i].mother1()
            if mother <= 0 or status[mother] == 4:
                result = -1
                break
            if status[mother] == 2:
                result = mother
                break
            i = mother
        else:
            result = ancestor[i]
        ancestor[chain] = result
    return ancestor
