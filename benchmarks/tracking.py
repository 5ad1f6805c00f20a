"""Track reconstruction: our Exa.TrkX pipeline (GNN) vs ACTS's combinatorial Kalman filter.

Run: ``python benchmarks/tracking.py [--quick] [--json] [--data DIR] [--epochs N]
[--datasets NAME,...]``.

For each dataset (a 1000-muon particle gun, and Pythia8 ttbar with 50 pileup
interactions; ``--quick``: 200 muons and pileup 5) events are simulated once into
``DIR/<dataset>/{map,train,test}`` (reused when present, seeds fixed) with
``sparsegnn.tracking.simulate``. The GNN learns a module-level module map from the map
and training events (simulation is cheap and the map only needs truth: its coverage of
the target segments grows with the number of events, 0.88 at 34 pileup-50 events and
0.987 at 234), applies the doublet cuts, and trains the Interaction Network (hidden 64,
6 iterations, whole events) on the training events only; both reconstructions then run
on the same held-out test events, and both are scored by
``sparsegnn.tracking.metrics.track_metrics`` (double majority; reconstructable = pT >= 1
GeV, >= 3 hits, |eta| < 4).

Track building is the walkthrough, keeping tracks of at least 5, 6 or 7 hits (the CKF
keeps tracks of >= 6 measurements); that length and the edge-score cut (0.1-0.9) are the
pair with the best efficiency minus fake rate on two training events
(``sparsegnn.tracking.pipeline.tune``). ``--save-models DIR`` writes each model with those
settings and its module map, so ``sparsegnn track reconstruct --events TEST --model
DIR/NAME.pt --out TRACKS`` and ``sparsegnn track evaluate --events TEST --tracks TRACKS``
reproduce the GNN row with no other flags. Seconds per event,
one thread each, CSV reading excluded on both sides: GNN = graph construction + edge scoring + track
building; CKF = space points + seeding + parameter estimation + CKF + greedy ambiguity
resolution (ACTS's own timing). The speedup is CKF time / GNN time (above 1: the GNN is
faster). Training time is reported but not in the per-event time.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, emit, print_table
from sparsegnn.tracking.ckf import evaluate_ckf
from sparsegnn.tracking.events import Event, event_files, read_events
from sparsegnn.tracking.graph import DoubletCuts, HitGraph, ModuleMap
from sparsegnn.tracking.metrics import TrackMetrics
from sparsegnn.tracking.model import INConfig
from sparsegnn.tracking.pipeline import Reconstruction, evaluate_events, tune
from sparsegnn.tracking.settings import RecoConfig
from sparsegnn.tracking.train import TrackTrainConfig, train

DEFAULT_DATA = Path(__file__).resolve().parents[1] / "out" / "bench_tracking"
# Doublet cuts chosen on pileup-50 ttbar training events (docs/tracking.md): pT >~ 0.5 GeV,
# |z0| < 200 mm, pairs under 10 mm apart in r (overlapping modules) skip the slope cuts.
CUTS = DoubletCuts(dphi=0.08, phi_slope=0.0006, z0=200.0, min_dr=10.0)


@dataclass(frozen=True)
class Dataset:
    """One kind of event: simulation arguments, and train/test sizes and seeds."""

    name: str
    gun: int | None  # muons per event, or None for ttbar
    pileup: int
    map_events: int  # extra events the module map is learnt from (with the training ones)
    train_events: int
    test_events: int
    seed: int


FULL = [Dataset("gun1000", 1000, 0, 96, 16, 3, 11),
        Dataset("ttbar_pu50", None, 50, 200, 34, 3, 21)]
QUICK = [Dataset("gun200", 200, 0, 40, 2, 1, 31), Dataset("ttbar_pu5", None, 5, 10, 2, 1, 41)]
_SPLIT_SEED = {"train": 0, "test": 1, "map": 2}


def events_dir(root: Path, ds: Dataset, split: str) -> Path:
    """Simulated events of ``ds``'s ``split``, simulated now unless already there."""
    directory = root / ds.name / split
    count = {"train": ds.train_events, "test": ds.test_events, "map": ds.map_events}[split]
    seed = ds.seed + _SPLIT_SEED[split]
    if directory.is_dir() and len(event_files(directory)) == count:
        return directory
    if ds.gun is not None:
        from sparsegnn.tracking.simulate import GunConfig, simulate_gun

        simulate_gun(directory, GunConfig(events=count, particles=ds.gun, seed=seed))
    else:
        from sparsegnn.tracking.ttbar import TtbarConfig, simulate_ttbar

        simulate_ttbar(directory, TtbarConfig(events=count, pileup=ds.pileup, seed=seed))
    return directory


def gnn_settings(cfg: TrackTrainConfig, cuts: DoubletCuts = CUTS) -> RecoConfig:
    """How the benchmarks reconstruct with a model trained with ``cfg``: module-level map,
    ``cuts``, whole-event scoring, walkthrough (cut and length still to tune)."""
    return RecoConfig(map_level="module", cuts=cuts, train_sample_nodes=cfg.max_sample_nodes,
                      fanouts=tuple(cfg.fanouts), seed_order=cfg.seed_order,
                      method="walkthrough")


def run_gnn(map_events: list[Event], train_events: list[Event], test_events: list[Event],
            epochs: int, save_to: Path | None = None) -> tuple[TrackMetrics, dict[str, float]]:
    """Train on ``train_events``, reconstruct ``test_events``; pooled metrics and timings.

    ``save_to`` gets the model with its tuned settings and module map (``sparsegnn track
    reconstruct --model`` then reproduces this row) and the map beside it (``.map.npz``)."""
    cfg = TrackTrainConfig(model=INConfig(hidden=64, iterations=6), epochs=epochs)
    reco = Reconstruction(gnn_settings(cfg),
                          module_map=ModuleMap.learn(map_events + train_events, "module"))
    graphs = [reco.graph(ev) for ev in train_events]
    start = time.perf_counter()
    reco.model, report = train(graphs, cfg)
    train_s = time.perf_counter() - start
    metrics, timing, reco = score_gnn(reco, train_events[:2], graphs[:2], test_events)
    if save_to is not None:
        save_to.parent.mkdir(parents=True, exist_ok=True)
        reco.save(save_to, report)
        reco.module_map.save(save_to.with_suffix(".map.npz"))
    return metrics, {**timing, "train_seconds": train_s}


def score_gnn(reco: Reconstruction, tune_events: list[Event], tune_graphs: list[HitGraph],
              test_events: list[Event]) -> tuple[TrackMetrics, dict[str, float], Reconstruction]:
    """Choose the cut and track length on training events (``sparsegnn.tracking.pipeline.
    tune``), then reconstruct and score the test events (graph construction, the filter
    when ``reco`` has one, scoring and track building timed; the ``tune_graphs`` come
    pruned): pooled track metrics, seconds per event and mean edge figures, and the tuned
    reconstruction."""
    reco = tune(reco, tune_events, tune_graphs)
    run = evaluate_events(reco, test_events)
    n = len(test_events)
    edges = run.edges()
    return run.tracks, {
        "seconds_per_event": run.seconds_per_event, "edges_per_event": edges["num_edges"] / n,
        "cut": reco.config.cut, "min_track_hits": reco.config.min_track_hits,
        **{k: edges[k] for k in ("graph_efficiency", "edge_efficiency", "edge_purity")},
        **run.missed()}, reco


def row(ds: Dataset, method: str, test: list[Event], m: TrackMetrics, seconds: float,
        extra: dict[str, Any]) -> Row:
    """One table row: a method on a dataset's test events."""
    return {"dataset": ds.name, "method": method, "events": len(test),
            "hits_per_event": sum(ev.num_hits for ev in test) / len(test),
            "tracking_efficiency": m.efficiency, "fake_rate": m.fake_rate,
            "duplicate_rate": m.duplicate_rate, "trackml_score": m.trackml_score,
            "reconstructable": m.num_reconstructable, "seconds_per_event": seconds, **extra}


def bench(ds: Dataset, root: Path, epochs: int, save_dir: Path | None = None) -> list[Row]:
    """GNN and CKF rows for one dataset (the GNN and its module map saved in ``save_dir``)."""
    map_dir, train_dir = events_dir(root, ds, "map"), events_dir(root, ds, "train")
    test_dir = events_dir(root, ds, "test")
    test = read_events(test_dir)
    save_to = None if save_dir is None else save_dir / f"{ds.name}.pt"
    gnn, timing = run_gnn(read_events(map_dir), read_events(train_dir), test, epochs, save_to)
    ckf, ckf_run = evaluate_ckf(test_dir)
    gnn_extra = {k: v for k, v in timing.items() if k != "seconds_per_event"}
    return [row(ds, "gnn", test, gnn, timing["seconds_per_event"], {"epochs": epochs,
                                                                    **gnn_extra}),
            row(ds, "ckf", test, ckf, ckf_run.seconds_per_event, {})]


def summarise(rows: list[Row]) -> tuple[dict[str, float], dict[str, Any]]:
    """Speedups (CKF s / GNN s per dataset) and flat metrics."""
    speedups, metrics = {}, {}
    by_key = {(r["dataset"], r["method"]): r for r in rows}
    for name in dict.fromkeys(r["dataset"] for r in rows):
        gnn, ckf = by_key[(name, "gnn")], by_key[(name, "ckf")]
        speedups[f"{name}_gnn_vs_ckf"] = ckf["seconds_per_event"] / gnn["seconds_per_event"]
        for r in (gnn, ckf):
            for key in ("tracking_efficiency", "fake_rate", "duplicate_rate",
                        "seconds_per_event"):
                metrics[f"{name}_{r['method']}_{key}"] = r[key]
    return speedups, metrics


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small events, a few minutes")
    p.add_argument("--json", action="store_true", help="print a JSON summary last")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help=f"where simulated events are kept and reused (default {DEFAULT_DATA})")
    p.add_argument("--epochs", type=int, default=None,
                   help="GNN training epochs (default 30, --quick 3)")
    p.add_argument("--datasets", default=None,
                   help="comma-separated subset of the datasets to run (default: all)")
    p.add_argument("--save-models", type=Path, default=None,
                   help="write each dataset's model (NAME.pt) and module map (NAME.map.npz) "
                        "here, e.g. to fine-tune with benchmarks/tracking_dense.py")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)  # ACTS runs one thread too
    epochs = args.epochs or (3 if args.quick else 30)
    datasets = QUICK if args.quick else FULL
    if args.datasets:
        wanted = args.datasets.split(",")
        unknown = sorted(set(wanted) - {ds.name for ds in datasets})
        if unknown:
            raise SystemExit(f"unknown dataset(s) {unknown}; choose from "
                             f"{[ds.name for ds in datasets]}")
        datasets = [ds for ds in datasets if ds.name in wanted]
    report([r for ds in datasets for r in bench(ds, args.data, epochs, args.save_models)],
           args.json)


def report(rows: list[Row], as_json: bool) -> None:
    """The table, the speedups and metrics, and the JSON line of GNN and CKF rows."""
    print_table(rows, ["dataset", "method", "events", "hits_per_event", "tracking_efficiency",
                       "fake_rate", "duplicate_rate", "seconds_per_event"])
    speedups, metrics = summarise(rows)
    emit(rows, speedups, metrics, as_json)


if __name__ == "__main__":
    main()
