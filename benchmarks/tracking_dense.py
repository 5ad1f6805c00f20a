"""GNN vs ACTS's CKF at the highest densities: pileup-200 ttbar, or a 5000-muon gun.

Run: ``python benchmarks/tracking_dense.py [--quick] [--init MODEL] [--dataset ttbar_pu200|gun5000]
[--epochs N] [--lr LR] [--max-sample-nodes N --seed-order phi] [--save PATH] [--json]
[--filter-keep F] [--data DIR]``.

The densest comparison of the tracking issue ("ttbar with pileup 200, or a 5000-particle
gun"). A new Interaction Network learns slowly on one core, so this starts from a
trained model (``MODEL.pt`` with its plain module map ``MODEL.map.npz``, as the earlier
per-dataset ``benchmarks/tracking.py --save-models`` wrote them; today's tracking.py trains
one model on all conditions and scores it itself) and optionally
fine-tunes it on the dataset's training events: one step per whole event, or ShaDow
minibatches of at most ``--max-sample-nodes`` hits (``--seed-order phi``: azimuthal
wedges; ``--epochs 0`` scores the given model as it is).

``ttbar_pu200`` is ``benchmarks/tracking_sampled.py``'s pileup-200 set (same directory
names and seeds, so both scripts hold out the same events). ``gun5000`` is 5000 muons per
event (pT 0.5-10 GeV, |eta| < 2.5) with its own seeds; its module map is learnt from its
map and training events, joined with ``--module-map`` when given (module pairs are
geometry). ``--dphi/--phi-slope/--z0`` override tracking.py's doublet cuts: at 5000
muons a graph with those cuts has ~1.1M edges, and the targets (pT >= 1 GeV, a phi slope
of ~0.0003 rad/mm) allow tighter ones. The choice of score cut and minimum track length
(on one training event) and the timing are ``tracking.py``'s; ACTS's seeding + CKF runs
on the same held-out events, scored by the same code.

``--filter-keep F`` puts Exa.TrkX's filter stage between the cuts and the GNN: a per-edge
MLP (``sparsegnn.tracking.filter``) trained on the training graphs, its threshold set to
keep the fraction F of their target edges; it prunes the training graphs before
fine-tuning and every test graph inside the timed reconstruction.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, make_parser
from _tracking import (
    TRACKING_DATA,
    TTBAR_PU200,
    TrackingDataset,
    events_dir,
    gnn_figures,
    tracking_report,
    tracking_row,
)
from sparsegnn.tracking.ckf import evaluate_ckf
from sparsegnn.tracking.doublet_cuts import DoubletCuts
from sparsegnn.tracking.events import read_events
from sparsegnn.tracking.filter import FilterConfig, save_filter, train_filter
from sparsegnn.tracking.infer import load_model
from sparsegnn.tracking.module_map import ModuleMap
from sparsegnn.tracking.pipeline import Reconstruction, tune_and_evaluate
from sparsegnn.tracking.sampling import SEED_ORDERS
from sparsegnn.tracking.settings import TTBAR_CUTS, walkthrough_settings
from sparsegnn.tracking.train import TrackTrainConfig, train

DATASETS = {"ttbar_pu200": TTBAR_PU200,
            "gun5000": TrackingDataset("gun5000", 5000, 0, 30, 8, 3, 5171)}
QUICK = TrackingDataset("gun500", 500, 0, 8, 2, 1, 5301)  # --quick: a smoke run, not a measurement


def module_map(args: argparse.Namespace, ds: TrackingDataset) -> ModuleMap:
    """``--module-map`` (default: beside ``--init``), joined with a map learnt from the
    dataset's map and training events when it has map events of its own."""
    path = args.module_map or (args.init.with_suffix(".map.npz") if args.init else None)
    given = None if path is None else ModuleMap.load(path)
    if not ds.map_events:
        if given is None:
            raise SystemExit(f"{ds.name} has no map events: give --module-map or --init")
        return given
    learnt = ModuleMap.learn(read_events(events_dir(args.data, ds, "map"))
                             + read_events(events_dir(args.data, ds, "train")),
                             "module" if given is None else given.level)
    return learnt if given is None else learnt.union(given)


def doublet_cuts(args: argparse.Namespace) -> DoubletCuts:
    """tracking.py's cuts with the command line's overrides."""
    given = {"dphi": args.dphi, "phi_slope": args.phi_slope, "z0": args.z0}
    return dataclasses.replace(TTBAR_CUTS, **{k: v for k, v in given.items() if v is not None})


def bench(args: argparse.Namespace) -> list[Row]:
    """Fine-tune (unless ``--epochs 0``), then GNN and CKF rows on the held-out events."""
    ds = QUICK if args.quick else DATASETS[args.dataset]
    cuts = doublet_cuts(args)
    mmap = module_map(args, ds)
    train_events = read_events(events_dir(args.data, ds, "train"))
    test_dir = events_dir(args.data, ds, "test")
    test_events = read_events(test_dir, args.limit_test)
    if args.init is None and not args.epochs:
        raise SystemExit("--epochs 0 scores a given model: give --init")
    model = None if args.init is None else load_model(args.init)
    cfg = TrackTrainConfig(epochs=args.epochs, lr=args.lr, pos_weight=args.pos_weight,
                           max_sample_nodes=args.max_sample_nodes, fanouts=args.fanouts,
                           seed_order=args.seed_order, seed=args.seed)
    reco = Reconstruction(walkthrough_settings(cfg, cuts), model, mmap)
    graphs = [reco.graph(ev) for ev in train_events]
    edges_before = sum(g.num_edges for g in graphs)
    start = time.perf_counter()
    edge_filter = None
    if args.filter_keep is not None:
        edge_filter, _ = train_filter(graphs, FilterConfig(keep=args.filter_keep, seed=args.seed))
        graphs = [edge_filter.prune(g) for g in graphs]
        reco.edge_filter = edge_filter
    filter_seconds = time.perf_counter() - start
    start = time.perf_counter()
    train_report = None
    if args.epochs:
        reco.model, train_report = train(graphs, cfg, init=model, checkpoint=args.checkpoint,
                                         resume=args.resume)
    if args.save and edge_filter is not None:
        save_filter(args.save.with_suffix(".filter.pt"), edge_filter)
    tune_seconds = time.perf_counter() - start
    reco, run = tune_and_evaluate(reco, train_events[:1], graphs[:1], test_events)
    timing = gnn_figures(reco, run)
    if args.save and train_report is not None:  # with its tuned settings, map and filter
        reco.save(args.save, train_report)
    ckf, ckf_run = evaluate_ckf(test_dir, args.limit_test)
    extra = {"init": None if args.init is None else str(args.init), "fine_tune_epochs": args.epochs,
             "fine_tune_seconds": tune_seconds, "module_map_pairs": len(mmap),
             "seed": args.seed, "filter_keep": args.filter_keep,
             "filter_train_seconds": filter_seconds,
             "train_edges_kept_by_filter": sum(g.num_edges for g in graphs) / edges_before,
             **dataclasses.asdict(cuts), **timing}
    extra.pop("seconds_per_event")
    return [tracking_row(ds, "gnn", test_events, run.tracks, timing["seconds_per_event"],
                         extra),
            tracking_row(ds, "ckf", test_events, ckf, ckf_run.seconds_per_event, {})]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = make_parser(__doc__.splitlines()[0],
                    quick_help="smoke run on 500-muon events (2 training, 1 held out) with the "
                               "filter, 3 epochs from scratch unless --init: not a measurement")
    p.add_argument("--init", type=Path, default=None,
                   help="trained model to start from (default: a new Interaction Network, "
                        "hidden 64, 6 iterations; slow to train at these densities)")
    p.add_argument("--dataset", choices=sorted(DATASETS), default="ttbar_pu200")
    p.add_argument("--module-map", type=Path, default=None,
                   help="module map .npz (default: the --init path with .map.npz)")
    p.add_argument("--dphi", type=float, default=None, help=f"default {TTBAR_CUTS.dphi}")
    p.add_argument("--phi-slope", type=float, default=None, help=f"default {TTBAR_CUTS.phi_slope}")
    p.add_argument("--z0", type=float, default=None, help=f"default {TTBAR_CUTS.z0}")
    p.add_argument("--filter-keep", type=float, default=None,
                   help="train a doublet filter on the training graphs that keeps this "
                        "fraction of their target edges (e.g. 0.999), and prune every graph "
                        "with it before the GNN (default: no filter)")
    p.add_argument("--epochs", type=int, default=20, help="fine-tuning epochs (0: none)")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--pos-weight", type=float, default=None,
                   help="BCE weight of target edges (default: negatives per positive)")
    p.add_argument("--max-sample-nodes", type=int, default=None,
                   help="fine-tune on ShaDow minibatches of at most this many hits "
                        "(default: whole events)")
    p.add_argument("--fanouts", type=lambda s: tuple(int(x) for x in s.split(",")),
                   default=(12, 4), help="ShaDow fan-outs per hop (with --max-sample-nodes)")
    p.add_argument("--seed-order", choices=SEED_ORDERS, default="phi",
                   help="which seeds share a ShaDow minibatch (with --max-sample-nodes)")
    p.add_argument("--seed", type=int, default=0, help="seed of the filter and the fine-tune")
    p.add_argument("--save", type=Path, default=None, help="write the fine-tuned model here")
    p.add_argument("--checkpoint", type=Path, default=None,
                   help="training checkpoint rewritten every epoch (a long fine-tune can stop)")
    p.add_argument("--resume", action="store_true",
                   help="continue the fine-tune from --checkpoint up to --epochs")
    p.add_argument("--limit-test", type=int, default=None,
                   help="use only the first N held-out events")
    p.add_argument("--data", type=Path, default=TRACKING_DATA,
                   help=f"where simulated events are kept and reused (default {TRACKING_DATA})")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.quick:
        args.epochs = min(args.epochs, 3)
        args.filter_keep = args.filter_keep or 0.999
    torch.set_num_threads(1)  # ACTS runs one thread too
    tracking_report(bench(args), args.json)


if __name__ == "__main__":
    main()
