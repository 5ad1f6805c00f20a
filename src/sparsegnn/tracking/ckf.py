"""The traditional peer: ACTS seeding + combinatorial Kalman filter + greedy ambiguity resolution.

It runs on events that :mod:`sparsegnn.tracking.simulate` wrote, reading ACTS's own CSV
(``DIR/acts``) so the CKF sees exactly the measurements our TrackML files hold. Our
``hit_id`` is ACTS's ``measurement_id + 1``, so each CKF track comes back as a
:class:`~sparsegnn.tracking.tracks.Tracks` labelling of OUR hits and is scored by
:func:`~sparsegnn.tracking.metrics.track_metrics`, the very code that scores the GNN.

A track state's measurement is found by its module and local position, not by the
source link's index: ACTS's CSV reader reorders the measurements of a module, so the
index is the row in its container, not ``measurement_id``. With the index, every module
holding two or more measurements scrambles hits between tracks; on 5000-muon events 59% of
the CKF's measurements went to the wrong hit (efficiency 0.28 instead of ACTS.md's 0.93).

The settings are the ones ``../shared/reference/ACTS.md`` measured on the generic detector
(grid-triplet seeding in the pixels, CKF with chi2 cuts 15/25, >= 6 measurements and
pT >= 500 MeV, at most 3 shared hits after ambiguity resolution). Seconds per event
count space points, seeding, parameter estimation, CKF and ambiguity resolution, taken
from the Sequencer's per-algorithm timing: reading the CSV and ACTS's truth matchers
(which we do not use) are excluded.
"""

from __future__ import annotations

import csv
import itertools
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sparsegnn.errors import DataFormatError
from sparsegnn.optional import require
from sparsegnn.tracking.events import Event, event_files, read_columns, read_event
from sparsegnn.tracking.metrics import (
    ParticleMatches,
    TrackMetrics,
    combine,
    concat_matches,
    track_metrics,
)
from sparsegnn.tracking.simulate import ACTS_SUBDIR, generic_detector
from sparsegnn.tracking.tracks import Tracks
from sparsegnn.tracking.truth import DEFAULT_TARGETS, TargetConfig

# Seeding space points: every pixel-barrel layer, and the pixel end caps' even layers.
_SEED_LAYERS = [{"volume": 8}, *({"volume": 9, "layer": la} for la in (2, 4, 6, 8)),
                *({"volume": 7, "layer": la} for la in (14, 12, 10, 8))]
# Sequencer algorithm names that make up the reconstruction time.
_RECO_ALGORITHMS = ("SpacePointMaker", "GridTripletSeedingAlgorithm",
                    "TrackParamsEstimationAlgorithm", "TrackFindingAlgorithm",
                    "GreedyAmbiguityResolutionAlgorithm")


@dataclass(frozen=True)
class CkfResult:
    """Per event, the tracks as lists of OUR hit ids; and reconstruction seconds per event."""

    tracks: dict[str, list[list[int]]]
    seconds_per_event: float
    wall_seconds: float  # the whole Sequencer run, CSV reading and start-up included


def run_ckf(events_dir: str | Path, limit: int | None = None,
            max_seeds_per_spm: int = 1) -> CkfResult:
    """Seeding + CKF + ambiguity resolution on the first ``limit`` events in ``events_dir``.

    ``max_seeds_per_spm``: seeds the triplet finder keeps per middle space point (ACTS.md's
    setting is 1; in dense events the best-scoring triplet is often a wrong one, and more
    seeds per point trade time for efficiency)."""
    acts, recon = _import_acts()
    events_dir = Path(events_dir)
    raw = events_dir / ACTS_SUBDIR
    names = _event_names(events_dir, raw, limit)
    work = raw / "ckf"
    work.mkdir(exist_ok=True)
    seed_layers = work / "seed_layers.json"
    seed_layers.write_text(json.dumps(_SEED_LAYERS))
    tracking, field = generic_detector(acts)
    seq = acts.examples.Sequencer(events=len(names), numThreads=1, outputDir=str(work),
                                  logLevel=acts.logging.WARNING, trackFpes=False)
    _add_readers(acts, seq, raw)
    _add_reconstruction(acts, recon, seq, tracking, field, seed_layers, max_seeds_per_spm)
    collector = _collector(acts, seq)
    start = time.perf_counter()
    seq.run()
    wall = time.perf_counter() - start
    tracks = {name: _hit_ids(raw / f"{name}-measurements.csv", collector.tracks.get(i, []))
              for i, name in enumerate(names)}
    return CkfResult(tracks, _reco_seconds(work / "timing.csv") / len(names), wall)


def _hit_ids(measurements_csv: Path, tracks: list[tuple[np.ndarray, np.ndarray]]
             ) -> list[list[int]]:
    """Each track's states (module ids, local positions) as our hit ids."""
    meas = read_columns(measurements_csv, {"measurement_id": np.int64, "geometry_id": np.int64,
                                           "local0": np.float64, "local1": np.float64})
    modules = np.concatenate([np.empty(0, np.int64), *(m for m, _ in tracks)])
    local = np.concatenate([np.empty((0, 2)), *(xy for _, xy in tracks)])
    rows = match_measurements(meas, modules, local, measurements_csv)
    ids = (meas["measurement_id"][rows] + 1).tolist()
    bounds = np.cumsum([0, *(m.size for m, _ in tracks)])
    return [ids[a:b] for a, b in itertools.pairwise(bounds)]


def match_measurements(meas: dict[str, np.ndarray], module: np.ndarray, local: np.ndarray,
                       source: Path | str = "measurements", tolerance: float = 1e-3
                       ) -> np.ndarray:
    """Row of ``meas`` for each (module, local position) state: same module, nearest position.

    Positions agree to float precision (both come from the same CSV), so a state farther
    than ``tolerance`` (mm) from every measurement of its module is an error, not a match.
    """
    order = np.argsort(meas["geometry_id"], kind="stable")
    gid = meas["geometry_id"][order]
    lo, hi = np.searchsorted(gid, module, "left"), np.searchsorted(gid, module, "right")
    counts = hi - lo
    state = np.repeat(np.arange(module.size), counts)
    cand = order[np.repeat(lo, counts) + np.arange(state.size)
                 - np.repeat(np.cumsum(counts) - counts, counts)]
    dist = np.hypot(meas["local0"][cand] - local[state, 0], meas["local1"][cand] - local[state, 1])
    first = np.lexsort((dist, state))
    keep = np.ones(first.size, dtype=bool)
    keep[1:] = state[first[1:]] != state[first[:-1]]
    best, best_dist = np.full(module.size, -1), np.full(module.size, np.inf)
    best[state[first[keep]]] = cand[first[keep]]
    best_dist[state[first[keep]]] = dist[first[keep]]
    bad = np.flatnonzero(best_dist > tolerance)
    if bad.size:
        raise DataFormatError(f"{source}: {bad.size} CKF measurement(s) match no measurement, "
                              f"e.g. module {module[bad[0]]} at local {local[bad[0]].tolist()}")
    return best


def evaluate_ckf(events_dir: str | Path, limit: int | None = None,
                 targets: TargetConfig = DEFAULT_TARGETS, max_seeds_per_spm: int = 1
                 ) -> tuple[TrackMetrics, CkfResult]:
    """Run the CKF and score its tracks with our metrics, pooled over the events."""
    result = run_ckf(events_dir, limit, max_seeds_per_spm)
    events = [read_event(events_dir, name) for name in result.tracks]
    return score_ckf(result, events, targets)[0], result


def score_ckf(result: CkfResult, events: list[Event], targets: TargetConfig = DEFAULT_TARGETS
              ) -> tuple[TrackMetrics, ParticleMatches]:
    """The CKF's tracks of ``events`` scored with our metrics, pooled, and per particle
    (for efficiencies over other targets and plots)."""
    scored = [track_metrics(ev, tracks_for(ev, result.tracks[ev.name]), targets)
              for ev in events]
    return combine([m for m, _ in scored]), concat_matches([p for _, p in scored])


def tracks_for(event: Event, track_hit_ids: list[list[int]]) -> Tracks:
    """CKF tracks (lists of hit ids) as a :class:`Tracks` labelling of ``event``'s hits.

    Greedy ambiguity resolution still lets tracks share up to three hits, but a labelling
    gives each hit one track: a shared hit stays with the first track that claimed it (the
    CKF's order), so a track can lose a few hits to an earlier one, never gain any.
    """
    flat = np.asarray([h for t in track_hit_ids for h in t], dtype=np.int64)
    index = np.minimum(np.searchsorted(event.hit_id, flat), max(event.num_hits - 1, 0))
    if flat.size and (event.num_hits == 0 or (event.hit_id[index] != flat).any()):
        raise DataFormatError(f"{event.name}: CKF track hit ids not in the event's hits")
    label = np.repeat(np.arange(len(track_hit_ids)), [len(t) for t in track_hit_ids])
    hit_track = np.full(event.num_hits, -1, dtype=np.int64)
    hit_track[index[::-1]] = label[::-1]  # on repeated indices numpy keeps the last write
    return Tracks(event.name, hit_track)


def _import_acts() -> tuple[Any, Any]:
    acts = require("acts", "for the CKF peer")
    return acts, require("acts.examples.reconstruction", "for the CKF peer")


def _event_names(events_dir: Path, raw: Path, limit: int | None) -> list[str]:
    """Our events, checked to be numbered 0..N-1 with ACTS CSV beside them."""
    names = event_files(events_dir)[:limit]
    expected = [f"event{i:09d}" for i in range(len(names))]
    if not names or names != expected:
        raise DataFormatError(f"{events_dir}: expected events event000000000.. as "
                              "'sparsegnn track simulate' writes them")
    missing = [n for n in names if not (raw / f"{n}-measurements.csv").is_file()]
    if missing:
        raise DataFormatError(f"{raw}: no ACTS measurements for {missing[:3]} (simulate again "
                              "with this version: it keeps ACTS's CSV in DIR/acts)")
    return names


def _add_readers(acts: Any, seq: Any, raw: Path) -> None:
    """Particles, simulated hits and measurements from ACTS's CSV, plus the full subset."""
    ex, level = acts.examples, acts.logging.WARNING
    seq.addReader(ex.CsvParticleReader(level=level, inputDir=str(raw),
                                       inputStem="particles_simulated",
                                       outputParticles="particles"))
    seq.addReader(ex.CsvSimHitReader(level=level, inputDir=str(raw), inputStem="hits",
                                     outputSimHits="simhits"))
    seq.addReader(ex.CsvMeasurementReader(
        level=level, inputDir=str(raw), inputSimHits="simhits",
        outputMeasurements="measurements", outputMeasurementSimHitsMap="measurement_simhits_map",
        outputMeasurementParticlesMap="measurement_particles_map"))
    seq.addWhiteboardAlias("particles_selected", "particles")
    seq.addAlgorithm(_all_measurements(acts))


def _all_measurements(acts: Any) -> Any:
    """An algorithm publishing every measurement as ``measurement_subset``.

    Digitisation makes that subset, the CSV reader does not; space-point making and the
    CKF read it.
    """
    ex = acts.examples

    class AllMeasurements(ex.IAlgorithm):
        def __init__(self) -> None:
            super().__init__("AllMeasurements", acts.logging.WARNING)
            self.measurements = ex.ReadDataHandle(self, ex.MeasurementContainer, "Input")
            self.measurements.initialize("measurements")
            self.subset = ex.WriteDataHandle(self, ex.MeasurementSubset, "Output")
            self.subset.initialize("measurement_subset")

        def execute(self, context: Any) -> Any:
            container = self.measurements(context.eventStore)
            self.subset(context, ex.MeasurementSubset(container, range(len(container))))
            return ex.ProcessCode.SUCCESS

    return AllMeasurements()


def _add_reconstruction(acts: Any, recon: Any, seq: Any, tracking: Any, field: Any,
                        seed_layers: Path, max_seeds_per_spm: int) -> None:
    """Seeding, CKF and greedy ambiguity resolution with ACTS.md's settings."""
    u = acts.UnitConstants
    recon.addSeeding(
        seq, tracking, field, seedingAlgorithm=recon.SeedingAlgorithm.GridTriplet,
        seedFinderConfigArg=recon.SeedFinderConfigArg(
            r=(33 * u.mm, 200 * u.mm), deltaR=(1 * u.mm, 300 * u.mm),
            collisionRegion=(-250 * u.mm, 250 * u.mm), z=(-2000 * u.mm, 2000 * u.mm),
            maxSeedsPerSpM=max_seeds_per_spm, sigmaScattering=5, radLengthPerSeed=0.1,
            minPt=500 * u.MeV, impactMax=3 * u.mm),
        seedFinderOptionsArg=recon.SeedFinderOptionsArg(bFieldInZ=2 * u.T, beamPos=(0, 0)),
        initialSigmas=[1 * u.mm, 1 * u.mm, 1 * u.degree, 1 * u.degree, 0, 1 * u.ns],
        initialSigmaQoverPt=0.1 * u.e / u.GeV, initialSigmaPtRel=0.1,
        initialVarInflation=[1.0] * 6, geoSelectionConfigFile=str(seed_layers))
    recon.addCKFTracks(
        seq, tracking, field,
        recon.TrackSelectorConfig(pt=(500 * u.MeV, None), nMeasurementsMin=6),
        recon.CkfConfig(chi2CutOffMeasurement=15.0, chi2CutOffOutlier=25.0,
                        numMeasurementsCutOff=10, seedDeduplication=True, stayOnSeed=True),
        writeTrackSummary=False, writePerformance=False)
    recon.addAmbiguityResolution(
        seq, recon.AmbiguityResolutionConfig(maximumSharedHits=3, maximumIterations=1000000,
                                             nMeasurementsMin=6),
        writeTrackSummary=False, writePerformance=False)


def _collector(acts: Any, seq: Any) -> Any:
    """An algorithm keeping each event's final tracks: per track the module (geometry id)
    and the local position of every measurement state.

    Outliers (measurements the fit rejected) and holes are not the track's hits.
    """
    ex = acts.examples

    class CollectTracks(ex.IAlgorithm):
        def __init__(self) -> None:
            super().__init__("CollectTracks", acts.logging.WARNING)
            self.input = ex.ReadDataHandle(self, ex.ConstTrackContainer, "Input")
            self.input.initialize("ambi_tracks")
            self.tracks: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}

        def execute(self, context: Any) -> Any:
            self.tracks[context.eventNumber] = [
                _positions([_state_position(ex, s) for s in track.trackStatesReversed
                            if s.typeFlags.isMeasurement])
                for track in self.input(context.eventStore)]
            return ex.ProcessCode.SUCCESS

    collector = CollectTracks()
    seq.addAlgorithm(collector)
    return collector


def _state_position(ex: Any, state: Any) -> tuple[int, np.ndarray]:
    """Module id and the two local coordinates of a measurement state (every measurement of
    the generic detector's smeared digitisation is two-dimensional)."""
    module = int(ex.IndexSourceLink.fromSourceLink(state.uncalibratedSourceLink)
                 .geometryId().value)
    local = np.asarray(state.effectiveCalibrated, dtype=np.float64).ravel()
    if local.size != 2:
        raise DataFormatError(f"a {local.size}-D CKF measurement on module {module}: only "
                              "2-D measurements are mapped back to hits")
    return module, local


def _positions(states: list[tuple[int, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    modules = np.array([m for m, _ in states], dtype=np.int64)
    return modules, np.array([xy for _, xy in states], dtype=np.float64).reshape(-1, 2)


def _reco_seconds(timing_csv: Path) -> float:
    """Total seconds of the reconstruction algorithms in the Sequencer's timing file."""
    with open(timing_csv, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return sum(float(r["time_total_s"]) for r in rows
               if r["identifier"].split(":")[-1] in _RECO_ALGORITHMS)
