"""``sparsegnn track``: Exa.TrkX-style tracking on TrackML-format events.

Stages, each reading the previous one's files so a run restarts anywhere:
``simulate`` (ACTS particle gun or Pythia8 ttbar + pileup, needs pyacts) ->
``build-graphs`` [-> ``train-filter``, then ``build-graphs --filter``] -> ``train`` ->
``reconstruct`` -> ``evaluate --tracks``. A model file carries how it is used (graph
settings, module map, filter, score cut, track length), so ``reconstruct --model M``
needs no other flags; flags override. ``evaluate`` also runs on raw events alone: with
``--graph truth`` and no ``--model`` it scores the truth-built graph with an oracle.
``ckf`` runs the traditional peer (ACTS seeding + combinatorial Kalman filter) on
simulated events and scores it with the same metrics. The reconstruction itself is
``sparsegnn.tracking.pipeline.Reconstruction``: options become its settings, results are printed.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

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
from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.names import SCORING_PRECISIONS, SEED_ORDERS, TRACK_METHODS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("track", help="particle track reconstruction (Exa.TrkX style)",
                       description=__doc__)
    stages = p.add_subparsers(dest="stage", required=True, metavar="STAGE")
    for add in (_register_simulate, _register_build, _register_train_filter, _register_train,
                _register_reconstruct, _register_evaluate, _register_ckf, _register_demo):
        add(stages)


def _events_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--events", type=Path, default=None,
                   help="directory of TrackML CSV events (default: the TrackML sample event "
                        "from $SPARSEGNN_DATA, the nearest shared/data or the bundled copy)")
    p.add_argument("--limit", type=int_range(1), default=None,
                   help="read only the first N events")


def _events_dir(args: argparse.Namespace) -> Path:
    """``--events``, else the sample event, so ``track evaluate`` runs from a clone alone."""
    from sparsegnn.data.paths import dataset_dir

    return args.events if args.events is not None else dataset_dir("trackml_sample")


def _target_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("target / reconstructable particles")
    g.add_argument("--min-pt", type=float_range(0.0), default=1.0, help="GeV (default 1)")
    g.add_argument("--min-hits", type=int_range(1), default=3)
    g.add_argument("--max-eta", type=float_range(0.0, lo_open=True), default=4.0,
                   help="|eta| bound (default 4)")


_CUT_FLAGS = (("dphi", "rad"), ("dz", "mm"), ("deta", ""), ("phi-slope", "rad/mm"), ("z0", "mm"))


def _graph_flags(p: argparse.ArgumentParser, default: str) -> None:
    """Graph settings; unset ones keep the model's (``--model``) or the defaults."""
    g = p.add_argument_group("graph construction (default: the model's settings, if any)")
    g.add_argument("--graph", choices=("module-map", "truth"), default=None,
                   help=f"module map + cuts, or edges between consecutive hits (default {default})")
    g.add_argument("--module-map", type=Path, default=None,
                   help="module map file (.npz); else the model's, else learnt from "
                        "--train-events (and written here)")
    g.add_argument("--map-level", choices=("module", "layer"), default=None,
                   help="learn module pairs (default), or (volume, layer) pairs for few "
                        "training events")
    g.add_argument("--train-events", type=Path, default=None,
                   help="events to learn the module map from (default: --events, which "
                        "makes graph efficiency optimistic)")
    for cut, unit in _CUT_FLAGS:
        g.add_argument(f"--{cut}", type=float_range(0.0, lo_open=True), default=None,
                       help=f"max |{cut}| {unit}".strip())
    g.add_argument("--min-dr", type=float_range(0.0), default=None,
                   help="pairs closer than this in r (mm) skip the phi-slope and z0 cuts "
                        "(default 1; 10 keeps overlapping-module pairs in dense events)")
    g.add_argument("--map-windows", action="store_true",
                   help="learn the module map with a cut window per module pair (min/max "
                        "of dphi, dz, deta, phi slope, z0 of its segments)")
    g.add_argument("--map-min-pt", type=float_range(0.0), default=0.0,
                   help="learn the map from particles above this pT only (GeV; default 0, "
                        "0.9 for windows fitted to pT >= 1 GeV targets)")
    g.add_argument("--map-workers", type=int_range(1), default=1,
                   help="processes reading --train-events to learn the map (default 1)")
    g.add_argument("--window-margin", type=float_range(0.0), default=None,
                   help="apply the map's windows, widened by this fraction of their width")
    g.add_argument("--window-count-margin", type=float_range(0.0), default=None,
                   help="widen each window by this many widths / segments seen (default 0)")
    g.add_argument("--window-min-count", type=int_range(1), default=None,
                   help="pairs seen fewer times get no window, only the global cuts "
                        "(default 1)")


def _reco_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("scoring and track building (default: the model's settings)")
    g.add_argument("--cut", type=float_range(0.0, 1.0), help="edge score cut (default 0.5)")
    g.add_argument("--method", choices=TRACK_METHODS,
                   help="track building (default components; triplets: junctions resolved "
                        "by edge score and helix geometry)")
    g.add_argument("--min-track-hits", type=int_range(1), default=None, help="drop shorter "
                   "tracks (default: keep all; 5 drops most fragments, which count as fakes)")
    g.add_argument("--precision", choices=SCORING_PRECISIONS, default=None,
                   help="edge scoring precision: bf16 runs the network's message passing in "
                        "bfloat16 (faster on CPUs with AMX and on GPUs; default: the "
                        "model's, else fp32)")
    g.add_argument("--max-sample-nodes", type=int_range(1), default=None,
                   help="score ShaDow subgraphs of at most this many hits instead of whole "
                        "events: bounded memory, many times slower (default: whole events)")
    g.add_argument("--min-layers", type=int_range(1), default=None,
                   help="drop tracks crossing fewer distinct layers (default: the model's, "
                        "else 1)")
    g.add_argument("--extend-cut", type=float_range(0.0, 1.0), default=None,
                   help="walkthrough: extend chain ends with free hits through edges down "
                        "to this score (default: no extension)")
    g.add_argument("--bridge-misfit", type=float_range(0.0, lo_open=True), default=None,
                   help="triplets: join chains too short alone across a missing segment "
                        "(no edge) where the helix fits up to this misfit (default: the "
                        "model's, else no bridging)")
    g.add_argument("--merge-cut", type=float_range(0.0, 1.0), default=None,
                   help="walkthrough: merge pieces whose end and start an edge of at least "
                        "this score joins (default: no merging)")


def _targets(args: argparse.Namespace) -> Any:
    from sparsegnn.tracking.truth import DEFAULT_TARGETS, TargetConfig

    has_flags = hasattr(args, "min_pt")  # reconstruct has none: labels only
    return TargetConfig(args.min_pt, args.min_hits, args.max_eta) if has_flags else DEFAULT_TARGETS


def _reconstruction(args: argparse.Namespace, base: Any, events: list[Any], model: Any = None,
                    edge_filter: Any = None) -> Any:
    """The reconstruction the options ask for: the model's (its settings over ``base``),
    or an oracle on ``base``, with every given flag overriding, and its module map."""
    from sparsegnn.tracking.module_map import ModuleMap, learn_module_map
    from sparsegnn.tracking.pipeline import Reconstruction, with_module_map

    device = resolve_device(args.device) if hasattr(args, "device") else "cpu"
    reco = (Reconstruction(base, targets=_targets(args)) if model is None else
            Reconstruction.from_model(model, device, _targets(args), base))
    given = {k: getattr(args, k.replace("-", "_"), None)
             for k in ("graph", "map_level", "min_dr", "cut", "method", "min_track_hits",
                       "window_margin", "window_count_margin", "window_min_count",
                       "extend_cut", "merge_cut", "min_layers", "precision", "bridge_misfit")}
    given |= {c.replace("-", "_"): getattr(args, c.replace("-", "_")) for c, _ in _CUT_FLAGS}
    reco = reco.with_config(**given, sample_nodes=getattr(args, "max_sample_nodes", None))
    if edge_filter is not None:
        reco.edge_filter = edge_filter
    if getattr(args, "graphs", None) is not None:  # saved graphs: no map needed
        return reco
    def learn(level: str) -> Any:
        if args.train_events is None:
            return ModuleMap.learn(events, level, args.map_min_pt, args.map_windows)
        return learn_module_map([args.train_events], level, args.map_min_pt, args.map_windows,
                                args.map_workers)

    return with_module_map(reco, args.module_map, learn)


def _clean(obj: Any) -> Any:
    """NaN -> None so --json prints valid JSON."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return None if isinstance(obj, float) and math.isnan(obj) else obj


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
    _events_flags(p)
    _graph_flags(p, "module-map")
    _target_flags(p)
    p.add_argument("--filter", type=Path, default=None,
                   help="doublet filter from 'track train-filter': keep only the edges it "
                        "passes (dropped target segments count against graph efficiency)")
    p.add_argument("--out", type=output_dir, required=True,
                   help="output directory (replaced whole: graphs and a manifest)")
    add_json_flag(p)
    p.set_defaults(func=_build)


def _build(args: argparse.Namespace) -> int:
    from sparsegnn.tracking.events import read_events
    from sparsegnn.tracking.pipeline import graph_summary
    from sparsegnn.tracking.settings import RecoConfig
    from sparsegnn.tracking.store import GRAPHS_FORMAT, output_folder

    edge_filter = None
    if args.filter is not None:
        from sparsegnn.tracking.filter import load_filter

        edge_filter = load_filter(args.filter)
    events = read_events(_events_dir(args), args.limit)
    reco = _reconstruction(args, RecoConfig(), events, edge_filter=edge_filter)
    graphs = [reco.graph(ev) for ev in events]
    with output_folder(args.out, GRAPHS_FORMAT) as (tmp, manifest):
        for g in graphs:
            g.save(tmp / f"{g.name}.npz")
        manifest([f"{g.name}.npz" for g in graphs], settings=reco.config.to_dict())
    result = {"out": str(args.out), "graph": reco.config.graph,
              "module_map_pairs": len(reco.module_map or ()), **graph_summary(graphs)}
    summary = (f"{len(graphs)} {reco.config.graph} graphs -> {args.out}: mean "
               f"{result['mean_num_edges']:.0f} edges, efficiency "
               f"{result['mean_efficiency']:.4f}, purity {result['mean_purity']:.4f}")
    return emit(args, _clean(result), summary)


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
    add_json_flag(p)
    p.set_defaults(func=_train_filter)


def _train_filter(args: argparse.Namespace) -> int:
    from sparsegnn.tracking.filter import FilterConfig, filter_summary, save_filter, train_filter
    from sparsegnn.tracking.store import load_graphs

    graphs = load_graphs(args.graphs)
    edge_filter = train_filter(graphs, FilterConfig(hidden=args.hidden, epochs=args.epochs,
                                                    keep=args.keep, seed=args.seed))
    save_filter(args.out, edge_filter)
    result = {"out": str(args.out), "num_graphs": len(graphs), "keep": args.keep,
              **filter_summary(edge_filter, graphs)}
    summary = (f"filter -> {args.out}: on its {len(graphs)} training graphs it keeps "
               f"{result['targets_kept']:.4f} of the target edges with "
               f"{result['edges_kept']:.3f} of the edges")
    return emit(args, _clean(result), summary)


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
    from sparsegnn.tracking.store import graph_paths
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
                      _clean(result), summary)


# ---------------------------------------------------------------------------- reconstruct
def _register_reconstruct(stages: argparse._SubParsersAction) -> None:
    p = stages.add_parser("reconstruct", help="score edges and build tracks (TrackML CSV), "
                          "as the model's saved settings say unless flags override them")
    _events_flags(p)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--graphs", type=Path, default=None,
                   help="saved graphs (default: build them as the model was tuned)")
    p.add_argument("--out", type=output_dir, required=True,
                   help="directory for {event}-tracks.csv (replaced whole, with a manifest)")
    _reco_flags(p)
    _graph_flags(p, "module-map")
    add_device_flag(p)
    add_json_flag(p)
    p.set_defaults(func=_reconstruct)


def _model_and_events(args: argparse.Namespace) -> tuple[Any, list[Any], list[Any] | None]:
    """The model file (read first: a bad --model is refused before minutes of reading),
    the events, and their saved graphs when --graphs is given."""
    from sparsegnn.tracking.events import read_events
    from sparsegnn.tracking.infer import load_track_model
    from sparsegnn.tracking.pipeline import graphs_by_event
    from sparsegnn.tracking.store import load_graphs

    device = resolve_device(args.device)
    found = None if args.model is None else load_track_model(args.model, device)
    events = read_events(_events_dir(args), args.limit)
    graphs = (None if args.graphs is None
              else graphs_by_event(load_graphs(args.graphs), events, args.graphs))
    return found, events, graphs


def _reconstruct(args: argparse.Namespace) -> int:
    from sparsegnn.tracking.settings import RecoConfig
    from sparsegnn.tracking.store import TRACKS_FORMAT, output_folder, tracks_file, write_tracks

    found, events, graphs = _model_and_events(args)
    reco = _reconstruction(args, RecoConfig(), events, found)
    counts = []
    with output_folder(args.out, TRACKS_FORMAT) as (tmp, manifest):
        for i, ev in enumerate(events):
            tracks = reco.run(ev, None if graphs is None else graphs[i]).tracks
            write_tracks(tmp / tracks_file(ev.name), ev, tracks)
            counts.append({"event": ev.name, "num_tracks": int((tracks.sizes() >= 3).sum())})
        manifest([tracks_file(c["event"]) for c in counts], settings=reco.config.to_dict(),
                 model=str(args.model), graphs=None if graphs is None else str(args.graphs))
    result = {"out": str(args.out), "settings": reco.config.to_dict(), "events": counts}
    return emit(args, _clean(result), f"tracks of {len(counts)} events -> {args.out}")


# ---------------------------------------------------------------------------- evaluate
def _register_evaluate(stages: argparse._SubParsersAction) -> None:
    p = stages.add_parser("evaluate", help="edge and tracking metrics against truth")
    _events_flags(p)
    p.add_argument("--tracks", type=Path, default=None,
                   help="score the tracks 'track reconstruct' wrote here (track metrics "
                        "only) instead of reconstructing")
    p.add_argument("--graphs", type=Path, default=None,
                   help="saved graphs (default: build them with the graph flags)")
    p.add_argument("--model", type=Path, default=None,
                   help="trained model (default: oracle scores from the truth labels)")
    p.add_argument("--plots", type=output_dir, default=None, help="write PNG plots here")
    p.add_argument("--report", type=output_file, default=None, metavar="HTML",
                   help="write one static HTML page: settings, metrics, efficiency vs pT "
                        "and eta (needs matplotlib)")
    _reco_flags(p)
    _graph_flags(p, "truth, or the model's")
    _target_flags(p)
    add_device_flag(p)
    add_json_flag(p)
    p.set_defaults(func=_evaluate)


def _evaluate(args: argparse.Namespace) -> int:
    from sparsegnn.tracking.pipeline import evaluate_events, plot_results
    from sparsegnn.tracking.settings import RecoConfig

    if args.tracks is not None:
        return _evaluate_tracks(args)
    found, events, graphs = _model_and_events(args)
    reco = _reconstruction(args, RecoConfig(graph="truth"), events, found)
    evaluation = evaluate_events(reco, events, graphs)
    pooled, cfg = evaluation.tracks, reco.config
    result = {
        "events": len(events), "graph": "saved" if args.graphs else cfg.graph,
        "scores": "model" if found is not None else "oracle", "cut": cfg.cut,
        "method": cfg.method, "min_track_hits": cfg.min_track_hits,
        **evaluation.edges(), **pooled.to_dict(), "missed_particles": evaluation.missed(),
    }
    if args.plots is not None:
        result["plots"] = [str(p) for p in plot_results(evaluation.results, reco.targets,
                                                        args.plots)]
    summary = (f"{len(events)} events, {result['scores']} scores, {cfg.method} at cut "
               f"{cfg.cut}: " + _track_line(pooled) + _missed_line(result["missed_particles"]))
    if args.report is not None:
        _evaluation_report(args, evaluation, reco, _clean(result))
        summary += f"\nreport: {args.report}"
    return emit(args, _clean(result), summary)


def _evaluation_report(args: argparse.Namespace, evaluation: Any, reco: Any,
                       result: dict[str, Any]) -> None:
    """The ``--report`` page: the JSON figures, the settings and efficiency vs pT and eta."""
    from sparsegnn.tracking.metrics import concat_matches
    from sparsegnn.tracking.plots import efficiency_curves
    from sparsegnn.train.report import write_report

    matches = concat_matches([r.matches for r in evaluation.results])
    write_report(args.report, f"sparsegnn track evaluate: {args.events}",
                 {**result, **efficiency_curves(matches, reco.targets),
                  "config": reco.config.to_dict()})


def _evaluate_tracks(args: argparse.Namespace) -> int:
    """Track metrics of the tracks a reconstruct stage wrote (no scores: no edge metrics)."""
    from sparsegnn.tracking.events import read_events
    from sparsegnn.tracking.pipeline import score_written_tracks

    for flag in ("model", "graphs", "plots", "report"):
        if getattr(args, flag) is not None:
            raise InvalidValueError(f"--tracks scores written tracks; --{flag} does not apply")
    events = read_events(_events_dir(args), args.limit)
    pooled, manifest = score_written_tracks(events, args.tracks, _targets(args))
    result = {"tracks": str(args.tracks), "events": len(events),
              "settings": manifest.get("settings"), "model": manifest.get("model"),
              **pooled.to_dict()}
    return emit(args, _clean(result), f"tracks in {args.tracks}: " + _track_line(pooled))


def _track_line(m: Any) -> str:
    return (f"tracking efficiency {m.efficiency:.4f} ({m.num_matched}/{m.num_reconstructable})"
            f", fake rate {m.fake_rate:.4f}, duplicate rate {m.duplicate_rate:.4f}, TrackML "
            f"score {m.trackml_score:.4f}")


def _missed_line(missed: dict[str, int]) -> str:
    """Where the unmatched particles were lost, for the human summary."""
    if not missed["missed"]:
        return ""
    return (f"\n{missed['missed']} reconstructable particles missed, first lost in graph "
            f"construction {missed['lost_in_graph']}, at the score cut "
            f"{missed['lost_at_score_cut']}, in track building "
            f"{missed['lost_in_track_building']}")


# ---------------------------------------------------------------------------- ckf
def _register_ckf(stages: argparse._SubParsersAction) -> None:
    p = stages.add_parser("ckf", help="ACTS seeding + combinatorial Kalman filter (the peer)")
    _events_flags(p)
    _target_flags(p)
    p.add_argument("--max-seeds-per-spm", type=int_range(1), default=1,
                   help="seeds kept per middle space point (more: slower, better in dense "
                        "events)")
    add_json_flag(p)
    p.set_defaults(func=_ckf)


def _ckf(args: argparse.Namespace) -> int:
    from sparsegnn.tracking.ckf import evaluate_ckf

    pooled, run = evaluate_ckf(args.events, args.limit, _targets(args), args.max_seeds_per_spm)
    result = {"events": len(run.tracks), **pooled.to_dict(),
              "seconds_per_event": run.seconds_per_event, "wall_seconds": run.wall_seconds}
    summary = (f"CKF on {len(run.tracks)} events: " + _track_line(pooled) + f", "
               f"{run.seconds_per_event:.3f} s/event (space points + seeding + CKF + ambiguity)")
    return emit(args, _clean(result), summary)


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
    from sparsegnn.tracking.demo import DemoConfig, run_demo

    if args.out.exists() and any(args.out.iterdir()):
        raise DataFormatError(f"{args.out} is not empty; the demo simulates into a fresh "
                              "directory (remove it or pass another --out)")
    given = {k: getattr(args, k) for k in ("particles", "train_events", "test_events", "epochs",
                                           "max_sample_nodes", "cut", "min_track_hits", "seed")}
    cfg = DemoConfig(ckf=not args.no_ckf, progress=not args.no_progress).overridden(**given)
    result = run_demo(args.out, cfg)
    return emit(args, _clean(result.to_dict()), result.summary())
