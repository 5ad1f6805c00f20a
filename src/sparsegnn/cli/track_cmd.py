"""``sparsegnn track``: Exa.TrkX-style tracking on TrackML-format events.

Stages, each reading the previous one's files so a run restarts anywhere:
``simulate`` (ACTS particle gun or Pythia8 ttbar + pileup, needs pyacts) ->
``build-graphs`` [-> ``train-filter``, then ``build-graphs --filter``] -> ``train`` ->
``reconstruct`` -> ``evaluate --tracks``. A model file carries how it is used (graph
settings, module map, filter, score cut, track length), so ``reconstruct --model M``
needs no other flags; flags override. Without ``--model``, ``reconstruct`` and
``evaluate`` use the model the package ships (:mod:`sparsegnn.tracking.shipped`);
``evaluate --oracle`` scores the truth-built graph by its labels instead.
``ckf`` runs the traditional peer (ACTS seeding + combinatorial Kalman filter) on
simulated events and scores it with the same metrics. The reconstruction itself is
``sparsegnn.tracking.pipeline.Reconstruction``: options become its settings, results are printed.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from sparsegnn.cli.common import (
    add_device_flag,
    add_json_flag,
    add_run_flags,
    emit,
    finish_run,
    float_range,
    int_list,
    int_range,
    output_dir,
    output_file,
    resolve_device,
)
from sparsegnn.cli.track_evaluate import register_ckf, register_evaluate
from sparsegnn.cli.track_options import (
    MODEL_HELP,
    clean,
    events_dir,
    events_flags,
    graph_flags,
    model_and_events,
    reco_flags,
    reconstruction,
    target_flags,
)
from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.names import SEED_ORDERS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("track", help="particle track reconstruction (Exa.TrkX style)",
                       description=__doc__)
    stages = p.add_subparsers(dest="stage", required=True, metavar="STAGE")
    for add in (_register_simulate, _register_build, _register_train_filter, _register_train,
                _register_reconstruct, register_evaluate, register_ckf, _register_demo):
        add(stages)


# ---------------------------------------------------------------------------- simulate
def _register_simulate(stages: argparse._SubParsersAction) -> None:
    p = stages.add_parser("simulate", help="simulate events with ACTS (particle gun, or "
                          "Pythia8 ttbar + pileup)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--gun", type=int_range(1), metavar="N",
                        help="muons per event (particle gun)")
    source.add_argument("--ttbar", action="store_true",
                        help="Pythia8 ttbar events (needs pythia8mc and pyhepmc)")
    p.add_argument("--pileup", type=int_range(0), default=0, metavar="MU",
                   help="with --ttbar: minimum-bias interactions per event (fixed, default 0)")
    p.add_argument("--events", "--num-events", dest="num_events", type=int_range(1),
                   default=10)
    p.add_argument("--pt-min", type=float_range(0.0, lo_open=True), default=0.5,
                   help="GeV (particle gun)")
    p.add_argument("--pt-max", type=float_range(0.0, lo_open=True), default=10.0,
                   help="GeV (particle gun)")
    p.add_argument("--seed", type=int_range(0), default=42)
    p.add_argument("--out", type=output_dir, required=True)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_json_flag(p)
    p.set_defaults(func=_simulate)


def _simulate(args: argparse.Namespace) -> int:
    from sparsegnn.tracking.simulate import simulate_events

    result = simulate_events(args.out, args.num_events, args.seed,
                             None if args.ttbar else args.gun, args.pileup, args.pt_min,
                             args.pt_max, not args.no_progress)
    return emit(args, result, f"simulated {len(result['events'])} events into {args.out}")


# ---------------------------------------------------------------------------- build-graphs
def _register_build(stages: argparse._SubParsersAction) -> None:
    p = stages.add_parser("build-graphs", help="module-map or truth graphs, one .npz per event")
    events_flags(p)
    graph_flags(p, "module-map")
    target_flags(p)
    p.add_argument("--filter", type=Path, default=None,
                   help="doublet filter from 'track train-filter': keep only the edges it "
                        "passes (dropped target segments count against graph efficiency)")
    p.add_argument("--out", type=output_dir, required=True,
                   help="output directory (replaced whole: graphs and a manifest)")
    add_json_flag(p)
    p.set_defaults(func=_build)


def _build(args: argparse.Namespace) -> int:
    from sparsegnn.tracking.events import read_events
    from sparsegnn.tracking.settings import RecoConfig
    from sparsegnn.tracking.stage_runs import build_graphs

    edge_filter = None
    if args.filter is not None:
        from sparsegnn.tracking.filter import load_filter

        edge_filter = load_filter(args.filter)
    events = read_events(events_dir(args), args.limit)
    reco = reconstruction(args, RecoConfig(), events, edge_filter=edge_filter)
    outcome = build_graphs(reco, events, args.out)
    return emit(args, clean(outcome.to_dict()), outcome.summary())


# ---------------------------------------------------------------------------- train-filter
def _register_train_filter(stages: argparse._SubParsersAction) -> None:
    p = stages.add_parser("train-filter", help="train a doublet filter (per-edge MLP that "
                          "prunes fake candidates before the GNN) on built graphs")
    p.add_argument("--graphs", type=Path, required=True, help="directory of graph .npz files")
    p.add_argument("--out", type=output_file, required=True, help="filter checkpoint to write")
    p.add_argument("--keep", type=float_range(0.0, 1.0, lo_open=True), default=0.999,
                   help="fraction of the training graphs' target edges to keep (default 0.999)")
    p.add_argument("--epochs", type=int_range(1), default=6)
    p.add_argument("--hidden", type=int_range(1), default=64)
    p.add_argument("--seed", type=int_range(0), default=0)
    p.add_argument("--val-graphs", type=Path, default=None,
                   help="validation graphs: each epoch reports the fraction of their edges "
                        "dropped at --keep, and the best epoch's weights are kept")
    p.add_argument("--patience", type=int_range(1), default=None,
                   help="with --val-graphs: stop after this many epochs without improvement")
    p.add_argument("--checkpoint", type=output_file, default=None,
                   help="rewrite this training checkpoint after every epoch")
    p.add_argument("--resume", action="store_true",
                   help="continue from --checkpoint up to --epochs")
    add_json_flag(p)
    add_run_flags(p)
    p.set_defaults(func=_train_filter)


def _train_filter(args: argparse.Namespace) -> int:
    from sparsegnn.tracking.filter import FilterConfig, filter_summary, save_filter, train_filter
    from sparsegnn.tracking.stage_outputs import load_graphs

    if args.patience is not None and args.val_graphs is None:
        raise InvalidValueError("--patience needs --val-graphs to watch")
    graphs = load_graphs(args.graphs)
    validation = None if args.val_graphs is None else load_graphs(args.val_graphs)
    cfg = FilterConfig(hidden=args.hidden, epochs=args.epochs, keep=args.keep, seed=args.seed,
                       patience=args.patience, progress=args.progress, logdir=args.logdir)
    edge_filter, history = train_filter(graphs, cfg, args.checkpoint, args.resume, validation)
    save_filter(args.out, edge_filter)
    result = {"out": str(args.out), "num_graphs": len(graphs), "keep": args.keep,
              **filter_summary(edge_filter, graphs), "epochs_run": len(history),
              "history": [asdict(e) for e in history]}
    summary = (f"filter -> {args.out}: on its {len(graphs)} training graphs it keeps "
               f"{result['targets_kept']:.4f} of the target edges with "
               f"{result['edges_kept']:.3f} of the edges")
    return finish_run(args, f"sparsegnn track train-filter: doublet filter on {args.graphs}",
                      clean(result), summary)


# ---------------------------------------------------------------------------- train
def _register_train(stages: argparse._SubParsersAction) -> None:
    p = stages.add_parser("train", help="train the Interaction Network edge classifier")
    p.add_argument("--graphs", type=Path, required=True, help="directory of graph .npz files")
    p.add_argument("--out", type=output_file, required=True, help="model checkpoint to write")
    p.add_argument("--hidden", type=int_range(1), default=64)
    p.add_argument("--iterations", type=int_range(1), default=6,
                   help="message-passing iterations")
    p.add_argument("--epochs", type=int_range(1), default=10)
    p.add_argument("--lr", type=float_range(0.0, lo_open=True), default=1e-3)
    p.add_argument("--pos-weight", type=float_range(0.0, lo_open=True), default=None,
                   help="BCE weight of target edges (default: negatives per positive)")
    p.add_argument("--max-sample-nodes", type=int_range(1), default=None,
                   help="train on ShaDow subgraphs of at most this many hits (every event used)")
    p.add_argument("--fanouts", type=int_list(1), default=[4, 2],
                   help="ShaDow fan-outs per hop (default 4,2)")
    p.add_argument("--seed-order", choices=SEED_ORDERS, default="random",
                   help="which seeds share a ShaDow minibatch: random, or wedges in azimuth "
                        "(whole-event neighbourhoods for most seeds; see docs/tracking.md)")
    p.add_argument("--skip-larger-than", type=int_range(1), default=None,
                   help="whole-event baseline: skip graphs with more hits than this")
    p.add_argument("--seed", type=int_range(0), default=0)
    p.add_argument("--init", type=Path, default=None,
                   help="fine-tune this trained model (its --hidden/--iterations win), e.g. "
                        "a pileup-50 model on pileup-200 events")
    p.add_argument("--checkpoint", type=output_file, default=None,
                   help="rewrite this training checkpoint after every epoch")
    p.add_argument("--resume", action="store_true",
                   help="continue from --checkpoint up to --epochs (optimiser state kept; "
                        "--lr may differ)")
    dist = p.add_argument_group("data-parallel (each rank loads its share of the events)")
    dist.add_argument("--nprocs", type=int_range(1), default=1,
                      help="spawn this many local gloo ranks (under torchrun: its ranks)")
    dist.add_argument("--backend", default=None, help="gloo or nccl (default: nccl on CUDA)")
    dist.add_argument("--timeout", type=float_range(0.0, lo_open=True), default=60.0,
                      help="seconds before ranks give up on a failed peer")
    add_device_flag(p)
    add_json_flag(p)
    add_run_flags(p)
    p.set_defaults(func=_train)


def _train(args: argparse.Namespace) -> int:
    from sparsegnn.tracking.infer import save_model
    from sparsegnn.tracking.model import INConfig
    from sparsegnn.tracking.pipeline import trained_settings
    from sparsegnn.tracking.stage_outputs import graph_paths
    from sparsegnn.tracking.train import TrackTrainConfig, run_training

    device = resolve_device(args.device)  # a bogus --device is refused before any graph is read
    cfg = TrackTrainConfig(
        model=INConfig(hidden=args.hidden, iterations=args.iterations), epochs=args.epochs,
        lr=args.lr, pos_weight=args.pos_weight, max_sample_nodes=args.max_sample_nodes,
        fanouts=tuple(args.fanouts), seed_order=args.seed_order,
        skip_larger_than=args.skip_larger_than, seed=args.seed, progress=args.progress,
        logdir=args.logdir,
    )
    paths = graph_paths(args.graphs)
    num_graphs = len(paths)
    model, report, ranks = run_training(paths, cfg, device, args.init, args.checkpoint,
                                        args.resume, args.nprocs, args.backend, args.timeout)
    if model is None:  # a torchrun rank other than 0: rank 0 writes and reports
        return 0
    save_model(args.out, model, report, trained_settings(cfg, args.graphs))
    last = report.epochs[-1] if report.epochs else None
    history = report.to_dict()["epochs"]
    result = {"out": str(args.out), "num_graphs": num_graphs, "pos_weight": report.pos_weight,
              "epochs_run": len(history), "last_epoch": history[-1] if history else None,
              "history": history}
    summary = f"trained on {num_graphs} graphs -> {args.out}"
    if ranks is not None:
        result.update(ranks)
        summary += (f" over {ranks['world_size']} ranks "
                    f"({ranks['bytes_sent_per_rank'][0]:,} bytes sent by rank 0)")
    if last is not None:
        summary += (f"; last epoch loss {last.loss:.4f}, {last.events_used} events used, "
                    f"{last.events_skipped} skipped, largest step {last.max_step_nodes} hits")
    return finish_run(args, f"sparsegnn track train: Interaction Network on {args.graphs}",
                      clean(result), summary)


# ---------------------------------------------------------------------------- reconstruct
def _register_reconstruct(stages: argparse._SubParsersAction) -> None:
    p = stages.add_parser("reconstruct", help="score edges and build tracks (TrackML CSV), "
                          "as the model's saved settings say unless flags override them")
    events_flags(p)
    p.add_argument("--model", type=Path, default=None, help=MODEL_HELP)
    p.add_argument("--graphs", type=Path, default=None,
                   help="saved graphs (default: build them as the model was tuned)")
    p.add_argument("--out", type=output_dir, required=True,
                   help="directory for {event}-tracks.csv (replaced whole, with a manifest)")
    reco_flags(p)
    graph_flags(p, "module-map")
    add_device_flag(p)
    add_json_flag(p)
    p.set_defaults(func=_reconstruct)


def _reconstruct(args: argparse.Namespace) -> int:
    from sparsegnn.tracking.settings import RecoConfig
    from sparsegnn.tracking.stage_runs import ReconstructRequest, reconstruct

    found, events, graphs = model_and_events(args)
    outcome = reconstruct(ReconstructRequest(
        reconstruction(args, RecoConfig(), events, found), events, args.out, graphs,
        model=str(args.model), graphs_source=None if graphs is None else str(args.graphs)))
    return emit(args, clean(outcome.to_dict()), outcome.summary())


# ---------------------------------------------------------------------------- demo
def _register_demo(stages: argparse._SubParsersAction) -> None:
    p = stages.add_parser("demo", help="small end to end run: simulate -> train -> evaluate, "
                          "next to the CKF on the same events (a few minutes; needs pyacts)")
    p.add_argument("--out", type=output_dir, default=Path("out/track_demo"),
                   help="working directory for events, model and plots (default "
                        "out/track_demo; must be empty or absent)")
    # None = the DemoConfig default (not imported here: it would load torch for every command)
    count, seed, cut = int_range(1), int_range(0), float_range(0.0, 1.0)
    for flag, kind, what in (("particles", count, "muons per event (default 200)"),
                             ("train-events", count, "default 8"),
                             ("test-events", count, "default 2"), ("epochs", count, "default 6"),
                             ("max-sample-nodes", count, "hits per ShaDow training subgraph "
                                                         "(default 1000)"),
                             ("cut", cut, "edge score cut (default 0.5)"),
                             ("min-track-hits", count, "default 5"), ("seed", seed, "default 7")):
        p.add_argument(f"--{flag}", type=kind, default=None, help=what)
    p.add_argument("--no-ckf", action="store_true", help="skip the ACTS CKF comparison")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_json_flag(p)
    p.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from sparsegnn.tracking.track_demo import DemoConfig, run_demo

    if args.out.exists() and any(args.out.iterdir()):
        raise DataFormatError(f"{args.out} is not empty; the demo simulates into a fresh "
                              "directory (remove it or pass another --out)")
    given = {k: getattr(args, k) for k in ("particles", "train_events", "test_events", "epochs",
                                           "max_sample_nodes", "cut", "min_track_hits", "seed")}
    cfg = DemoConfig(ckf=not args.no_ckf, progress=not args.no_progress).overridden(**given)
    result = run_demo(args.out, cfg)
    return emit(args, clean(result.to_dict()), result.summary())
