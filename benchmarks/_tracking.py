"""What the tracking benchmarks (tracking.py, tracking_sampled.py, tracking_dense.py,
tracking_graph.py) share: simulated events on disk, the GNN's figures, rows and report.

How they reconstruct is the library's (sparsegnn.tracking.settings.walkthrough_settings,
pipeline.tune_and_evaluate).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _harness import Row, emit, print_table
from sparsegnn.data.paths import user_cache_dir

if TYPE_CHECKING:
    from sparsegnn.tracking.events import Event
    from sparsegnn.tracking.metrics import ParticleMatches, TrackMetrics
    from sparsegnn.tracking.pipeline import Evaluation, Reconstruction
    from sparsegnn.tracking.truth import TargetConfig

# Simulated events are a cache (made again when missing): the user's cache folder, never
# the checkout, which may be read-only (--data chooses another place).
TRACKING_DATA = user_cache_dir() / "bench_tracking"


@dataclass(frozen=True)
class TrackingDataset:
    """One kind of event: simulation arguments, and train/test sizes and seeds."""

    name: str
    gun: int | None  # muons per event, or None for ttbar
    pileup: int
    map_events: int  # extra events the module map is learnt from (with the training ones)
    train_events: int
    test_events: int
    seed: int


# tracking_sampled.py's large set, also tracking_dense.py's (both hold out the same events)
TTBAR_PU200 = TrackingDataset("ttbar_pu200", None, 200, 0, 4, 2, 71)
_SPLIT_SEED = {"train": 0, "test": 1, "map": 2}


def event_set(ds: TrackingDataset, split: str) -> dict[str, Any]:
    """What ``ds``'s ``split`` is: its generator, event count and simulation seed."""
    count = {"train": ds.train_events, "test": ds.test_events, "map": ds.map_events}[split]
    return {"dataset": ds.name, "split": split, "gun_muons": ds.gun, "pileup": ds.pileup,
            "events": count, "seed": ds.seed + _SPLIT_SEED[split]}


def events_dir(root: Path, ds: TrackingDataset, split: str) -> Path:
    """Simulated events of ``ds``'s ``split``, simulated now unless already there."""
    from sparsegnn.tracking.events import event_files

    directory = root / ds.name / split
    found = event_set(ds, split)
    count, seed = found["events"], found["seed"]
    if directory.is_dir() and len(event_files(directory)) == count:
        return directory
    if ds.gun is not None:
        from sparsegnn.tracking.simulate import GunConfig, simulate_gun

        simulate_gun(directory, GunConfig(events=count, particles=ds.gun, seed=seed))
    else:
        from sparsegnn.tracking.ttbar import TtbarConfig, simulate_ttbar

        simulate_ttbar(directory, TtbarConfig(events=count, pileup=ds.pileup, seed=seed))
    return directory


def gnn_figures(reco: Reconstruction, run: Evaluation) -> dict[str, float]:
    """A tuned reconstruction's figures on the test events of ``run``: seconds and edges
    per event, the tuned cut and track length, mean edge figures, missed particles."""
    edges = run.edges()
    return {"seconds_per_event": run.seconds_per_event,
            "edges_per_event": edges["num_edges"] / len(run.results),
            "cut": reco.config.building.cut,
            "min_track_hits": reco.config.building.min_track_hits,
            **{k: edges[k] for k in ("graph_efficiency", "edge_efficiency", "edge_purity")},
            **run.missed()}


def tracking_row(ds: TrackingDataset, method: str, test: list[Event], m: TrackMetrics,
                 seconds: float, extra: dict[str, Any]) -> Row:
    """One table row: a method on a dataset's test events."""
    return {"dataset": ds.name, "method": method, "events": len(test),
            "hits_per_event": sum(ev.num_hits for ev in test) / len(test),
            "tracking_efficiency": m.efficiency, "fake_rate": m.fake_rate,
            "duplicate_rate": m.duplicate_rate, "trackml_score": m.trackml_score,
            "reconstructable": m.num_reconstructable, "seconds_per_event": seconds, **extra}


def tracking_summary(rows: list[Row]) -> tuple[dict[str, float], dict[str, Any]]:
    """Speedups (CKF s / GNN s per dataset) and flat metrics of GNN and CKF rows."""
    speedups, metrics = {}, {}
    by_key = {(r["dataset"], r["method"]): r for r in rows}
    for name in dict.fromkeys(r["dataset"] for r in rows):
        gnn, ckf = by_key[(name, "gnn")], by_key[(name, "ckf")]
        speedups[f"{name}_gnn_vs_ckf"] = ckf["seconds_per_event"] / gnn["seconds_per_event"]
        for r in (gnn, ckf):
            for key in ("tracking_efficiency", "tracking_efficiency_pt1", "fake_rate",
                        "duplicate_rate", "trackml_score", "seconds_per_event"):
                if key in r:
                    metrics[f"{name}_{r['method']}_{key}"] = r[key]
    return speedups, metrics


def tracking_report(rows: list[Row], as_json: bool) -> None:
    """The table, the speedups and metrics, and the JSON line of GNN and CKF rows."""
    soft = ["tracking_efficiency_pt1"] if any("tracking_efficiency_pt1" in r for r in rows) else []
    print_table(rows, ["dataset", "method", "events", "hits_per_event", "tracking_efficiency",
                       *soft, "fake_rate", "duplicate_rate", "trackml_score",
                       "seconds_per_event"])
    speedups, metrics = tracking_summary(rows)
    emit(rows, speedups, metrics, as_json)


# The targets of the standard efficiency table, reported beside a soft model's own.
HARD_PT = 1.0


def hard_targets(matches: ParticleMatches, targets: TargetConfig) -> dict[str, float]:
    """With soft targets (``--min-pt`` below 1 GeV), the same tracks' efficiency over the
    pT >= 1 GeV particles too: one model's pT > 1 GeV table beside its TrackML score."""
    if targets.min_pt >= HARD_PT:
        return {}
    efficiency, count = matches.efficiency_above(HARD_PT)
    return {"tracking_efficiency_pt1": efficiency, "reconstructable_pt1": count}


def fastest(first: float, again: Callable[[], float], repeats: int) -> float:
    """The least of ``first`` and ``repeats - 1`` more timings from ``again``. This
    machine's speed drifts between passes (up to 2x, docs/results/tracking.md); the GNN
    and the CKF each get the same number of passes over the same events, and the least
    is the time with least interference from other jobs."""
    return min([first, *(again() for _ in range(max(repeats, 1) - 1))])


def head_commit() -> str:
    """The commit this benchmark runs from (``unknown`` outside a git checkout)."""
    found = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                           capture_output=True, text=True, check=False)
    return found.stdout.strip() if found.returncode == 0 else "unknown"
