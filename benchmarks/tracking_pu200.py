"""GNN vs ACTS's CKF at pileup 200: a trained model fine-tuned on whole pileup-200 events.

Run: ``python benchmarks/tracking_pu200.py --init MODEL [--epochs N] [--lr LR]
[--save PATH] [--json] [--data DIR]``.

The densest comparison of the tracking issue. A new Interaction Network trained on four
pileup-200 events learns slowly on one core, so this starts from a model trained on
pileup-50 events (``benchmarks/tracking.py --datasets ttbar_pu50 --save-models DIR``
writes ``DIR/ttbar_pu50.pt`` and its module map ``DIR/ttbar_pu50.map.npz``) and
fine-tunes it on the pileup-200 training events, one step per whole event
(``--epochs 0`` scores the given model as it is). The events are
``benchmarks/tracking_sampled.py``'s pileup-200 events (same directory names and seeds,
so both scripts hold out the same events); the doublet cuts, the choice of score cut and
minimum track length (on one training event) and the timing are ``tracking.py``'s.
ACTS's seeding + CKF runs on the same held-out events, scored by the same code.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row
from sparsegnn.tracking.ckf import evaluate_ckf
from sparsegnn.tracking.events import read_events
from sparsegnn.tracking.graph import ModuleMap, module_map_graph
from sparsegnn.tracking.train import TrackTrainConfig, load_model, save_model, train
from tracking import CUTS, DEFAULT_DATA, events_dir, report, row, score_gnn
from tracking_sampled import FULL as SAMPLED_DATASETS

PU200 = SAMPLED_DATASETS[1]


def bench(args: argparse.Namespace) -> list[Row]:
    """Fine-tune (unless ``--epochs 0``), then GNN and CKF rows on the held-out events."""
    module_map = ModuleMap.load(args.module_map or args.init.with_suffix(".map.npz"))
    train_events = read_events(events_dir(args.data, PU200, "train"))
    test_dir = events_dir(args.data, PU200, "test")
    test_events = read_events(test_dir, args.limit_test)
    graphs = [module_map_graph(ev, module_map, CUTS) for ev in train_events]
    model = load_model(args.init)
    start = time.perf_counter()
    if args.epochs:
        cfg = TrackTrainConfig(epochs=args.epochs, lr=args.lr, pos_weight=args.pos_weight)
        model, report = train(graphs, cfg, init=model, checkpoint=args.checkpoint,
                              resume=args.resume)
        if args.save:
            save_model(args.save, model, report)
    tune_seconds = time.perf_counter() - start
    gnn, timing = score_gnn(model, module_map, train_events[:1], graphs[:1], test_events)
    ckf, ckf_run = evaluate_ckf(test_dir, args.limit_test)
    extra = {"init": str(args.init), "fine_tune_epochs": args.epochs,
             "fine_tune_seconds": tune_seconds, **timing}
    extra.pop("seconds_per_event")
    return [row(PU200, "gnn", test_events, gnn, timing["seconds_per_event"], extra),
            row(PU200, "ckf", test_events, ckf, ckf_run.seconds_per_event, {})]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--init", type=Path, required=True, help="trained model to start from")
    p.add_argument("--module-map", type=Path, default=None,
                   help="module map .npz (default: the --init path with .map.npz)")
    p.add_argument("--epochs", type=int, default=20, help="fine-tuning epochs (0: none)")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--pos-weight", type=float, default=None,
                   help="BCE weight of target edges (default: negatives per positive)")
    p.add_argument("--save", type=Path, default=None, help="write the fine-tuned model here")
    p.add_argument("--checkpoint", type=Path, default=None,
                   help="training checkpoint rewritten every epoch (a long fine-tune can stop)")
    p.add_argument("--resume", action="store_true",
                   help="continue the fine-tune from --checkpoint up to --epochs")
    p.add_argument("--limit-test", type=int, default=None,
                   help="use only the first N held-out events")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help=f"where simulated events are kept and reused (default {DEFAULT_DATA})")
    p.add_argument("--json", action="store_true", help="print a JSON summary last")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)  # ACTS runs one thread too
    report(bench(args), args.json)


if __name__ == "__main__":
    main()
