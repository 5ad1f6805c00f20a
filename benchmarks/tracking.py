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
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    TRACKING_DATA,
    Row,
    TrackingDataset,
    events_dir,
    gnn_figures,
    make_parser,
    tracking_report,
    tracking_row,
)
from sparsegnn.tracking.ckf import evaluate_ckf
from sparsegnn.tracking.events import Event, read_events
from sparsegnn.tracking.graph import ModuleMap
from sparsegnn.tracking.metrics import TrackMetrics
from sparsegnn.tracking.model import INConfig
from sparsegnn.tracking.pipeline import Reconstruction, tune_and_evaluate
from sparsegnn.tracking.settings import walkthrough_settings
from sparsegnn.tracking.train import TrackTrainConfig, train

FULL = [TrackingDataset("gun1000", 1000, 0, 96, 16, 3, 11),
        TrackingDataset("ttbar_pu50", None, 50, 200, 34, 3, 21)]
QUICK = [TrackingDataset("gun200", 200, 0, 40, 2, 1, 31),
         TrackingDataset("ttbar_pu5", None, 5, 10, 2, 1, 41)]


def run_gnn(map_events: list[Event], train_events: list[Event], test_events: list[Event],
            epochs: int, save_to: Path | None = None) -> tuple[TrackMetrics, dict[str, float]]:
    """Train on ``train_events``, reconstruct ``test_events``; pooled metrics and timings.

    ``save_to`` gets the model with its tuned settings and module map (``sparsegnn track
    reconstruct --model`` then reproduces this row) and the map beside it (``.map.npz``)."""
    cfg = TrackTrainConfig(model=INConfig(hidden=64, iterations=6), epochs=epochs)
    reco = Reconstruction(walkthrough_settings(cfg),
                          module_map=ModuleMap.learn(map_events + train_events, "module"))
    graphs = [reco.graph(ev) for ev in train_events]
    start = time.perf_counter()
    reco.model, report = train(graphs, cfg)
    train_s = time.perf_counter() - start
    reco, run = tune_and_evaluate(reco, train_events[:2], graphs[:2], test_events)
    if save_to is not None:
        save_to.parent.mkdir(parents=True, exist_ok=True)
        reco.save(save_to, report)
        reco.module_map.save(save_to.with_suffix(".map.npz"))
    return run.tracks, {**gnn_figures(reco, run), "train_seconds": train_s}


def bench(ds: TrackingDataset, root: Path, epochs: int, save_dir: Path | None = None
          ) -> list[Row]:
    """GNN and CKF rows for one dataset (the GNN and its module map saved in ``save_dir``)."""
    map_dir, train_dir = events_dir(root, ds, "map"), events_dir(root, ds, "train")
    test_dir = events_dir(root, ds, "test")
    test = read_events(test_dir)
    save_to = None if save_dir is None else save_dir / f"{ds.name}.pt"
    gnn, timing = run_gnn(read_events(map_dir), read_events(train_dir), test, epochs, save_to)
    ckf, ckf_run = evaluate_ckf(test_dir)
    gnn_extra = {k: v for k, v in timing.items() if k != "seconds_per_event"}
    return [tracking_row(ds, "gnn", test, gnn, timing["seconds_per_event"],
                         {"epochs": epochs, **gnn_extra}),
            tracking_row(ds, "ckf", test, ckf, ckf_run.seconds_per_event, {})]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = make_parser(__doc__.splitlines()[0], quick_help="small events, under a minute once "
                    "simulated (simulating them the first time takes longer)")
    p.add_argument("--data", type=Path, default=TRACKING_DATA,
                   help=f"where simulated events are kept and reused (default {TRACKING_DATA})")
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
    tracking_report([r for ds in datasets for r in bench(ds, args.data, epochs,
                                                         args.save_models)], args.json)


if __name__ == "__main__":
    main()
