"""``sparsegnn track``: Exa.TrkX-style tracking on TrackML-format events.

Stages, each reading the previous one's files so a run restarts anywhere:
``simulate`` (ACTS particle gun or Pythia8 ttbar + pileup, needs pyacts) ->
``build-graphs`` [-> ``train-filter``, then ``build-graphs --filter``] -> ``train`` ->
``reconstruct`` -> ``evaluate``. ``evaluate`` also runs
on raw events alone: with ``--graph truth`` and no ``--model`` it scores the truth-built
graph with an oracle.
``ckf`` runs the traditional peer (ACTS seeding + combinatorial Kalman filter) on
simulated events and scores it with the same metrics.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from sparsegnn.cli.common import (
    add_device_flag,
    add_json_flag,
    emit,
    float_range,
    int_list,
    int_range,
    output_dir,
    output_file,
    resolve_device,
)
from sparsegnn.data.io import atomic_dir
from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.tracking.events import Event, read_events
from sparsegnn.tracking.graph import DoubletCuts, HitGraph, ModuleMap, module_map_graph, truth_graph
from sparsegnn.tracking.sampling import SEED_ORDERS
from sparsegnn.tracking.truth import TargetConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("track", help="particle track reconstruction (Exa.TrkX style)",
                       description=__doc__)
    stages = p.add_subparsers(dest="stage", required=True, metavar="STAGE")
    _register_simulate(stages)
    _register_build(stages)
    _register_train_filter(stages)
    _register_train(stages)
    _register_reconstruct(stages)
    _register_evaluate(stages)
    _register_ckf(stages)
    _register_demo(stages)


def _events_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--events", type=Path, required=True, help="directory of TrackML CSV events")
    p.add_argument("--limit", type=int_range(1), default=None,
                   help="read only the first N events")


def _target_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("target / reconstructable particles")
    g.add_argument("--min-pt", type=float_range(0.0), default=1.0, help="GeV (default 1)")
    g.add_argument("--min-hits", type=int_range(1), default=3)
    g.add_argument("--max-eta", type=float_range(0.0, lo_open=True), default=4.0,
                   help="|eta| bound (default 4)")


def _graph_flags(p: argparse.ArgumentParser, default: str) -> None:
    g = p.add_argument_group("graph construction")
    g.add_argument("--graph", choices=("module-map", "truth"), default=default,
                   help=f"module map + cuts, or edges between consecutive hits (default {default})")
    g.add_argument("--module-map", type=Path, default=None,
                   help="module map file (.npz); learnt from --train-events when absent")
    g.add_argument("--map-level", choices=("module", "layer"), default="module",
                   help="learn module pairs, or (volume, layer) pairs for few training events")
    g.add_argument("--train-events", type=Path, default=None,
                   help="events to learn the module map from (default: --events, which "
                        "makes graph efficiency optimistic)")
    for cut, unit in (("dphi", "rad"), ("dz", "mm"), ("deta", ""), ("phi-slope", "rad/mm"),
                      ("z0", "mm")):
        g.add_argument(f"--{cut}", type=float_range(0.0, lo_open=True), default=None,
                       help=f"max |{cut}| {unit}".strip())
    g.add_argument("--min-dr", type=float_range(0.0), default=1.0,
                   help="pairs closer than this in r (mm) skip the phi-slope and z0 cuts "
                        "(default 1; 10 keeps overlapping-module pairs in dense events)")


def _targets(args: argparse.Namespace) -> TargetConfig:
    return TargetConfig(args.min_pt, args.min_hits, args.max_eta)


def _cuts(args: argparse.Namespace) -> DoubletCuts:
    return DoubletCuts(args.dphi, args.dz, args.deta, args.phi_slope, args.z0, args.min_dr)


def _build_graphs(args: argparse.Namespace, events: list[Event]) -> tuple[list[HitGraph], int]:
    """Graphs of ``events`` as the flags ask; also the module map's size (0 for truth)."""
    targets = _targets(args)
    if args.graph == "truth":
        return [truth_graph(ev, targets) for ev in events], 0
    if args.module_map is not None and args.module_map.is_file():
        mm = ModuleMap.load(args.module_map)
    else:
        train = events if args.train_events is None else read_events(args.train_events)
        mm = ModuleMap.learn(train, args.map_level)
        if args.module_map is not None:
            mm.save(args.module_map)
    return [module_map_graph(ev, mm, _cuts(args), targets) for ev in events], len(mm)


MANIFEST = "manifest.json"


@contextmanager
def _output_folder(out: Path, kind: str) -> Iterator[tuple[Path, Callable[[list[str]], None]]]:
    """A temp folder that replaces ``out`` whole once the stage has written every file.

    Yields the folder and a function that writes the manifest (call it last, with the
    files written). A failure part-way leaves ``out`` as it was and no partial files.
    Because ``out`` is replaced, a non-empty folder that is not an earlier output of this
    stage is refused rather than deleted. Parent folders it had to create are removed
    again on failure, so a refused run leaves nothing behind.
    """
    _check_replaceable(out, kind)
    created = _missing_parents(out)
    try:
        with atomic_dir(out) as tmp:
            def manifest(files: list[str]) -> None:
                text = json.dumps({"format": kind, "version": 1, "files": files}, indent=1)
                (tmp / MANIFEST).write_text(text, encoding="utf-8")

            yield tmp, manifest
    except BaseException:
        for folder in created:  # innermost first; stop at one something else wrote into
            try:
                folder.rmdir()
            except OSError:
                break
        raise


def _missing_parents(out: Path) -> list[Path]:
    """The parents of ``out`` that do not exist yet (``atomic_dir`` creates them), innermost
    first: what a failed stage must remove so as not to leave empty folders behind."""
    missing = []
    for parent in out.absolute().parents:
        if parent.exists():
            break
        missing.append(parent)
    return missing


def _check_replaceable(out: Path, kind: str) -> None:
    if not out.is_dir() or not any(out.iterdir()):
        return
    try:
        written = json.loads((out / MANIFEST).read_text(encoding="utf-8")).get("format")
    except (OSError, ValueError, AttributeError):
        written = None
    if written != kind:
        raise DataFormatError(f"{out} is not empty and is not an earlier {kind} output; "
                              "the output replaces the folder whole, so name a new one")


def _mean(values: list[float]) -> float | None:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else None


def _clean(obj: Any) -> Any:
    """NaN -> None so --json prints valid JSON."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    if isinstance(obj, float) and math.isnan(obj):
        return None
    return obj


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
    from sparsegnn.tracking.simulate import GunConfig, simulate_gun

    progress = not args.no_progress
    if args.pt_min > args.pt_max:
        raise InvalidValueError(f"--pt-min {args.pt_min} is above --pt-max {args.pt_max}")
    if args.ttbar:
        from sparsegnn.tracking.ttbar import TtbarConfig, simulate_ttbar

        prefixes = simulate_ttbar(args.out, TtbarConfig(args.num_events, args.pileup, args.seed,
                                                        progress))
        source = {"ttbar": True, "pileup": args.pileup}
    else:
        cfg = GunConfig(events=args.num_events, particles=args.gun, pt_min=args.pt_min,
                        pt_max=args.pt_max, seed=args.seed, progress=progress)
        prefixes = simulate_gun(args.out, cfg)
        source = {"particles_per_event": args.gun}
    result = {"out": str(args.out), "events": prefixes, **source}
    return emit(args, result, f"simulated {len(prefixes)} events into {args.out}")


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
    events = read_events(args.events, args.limit)
    graphs, map_size = _build_graphs(args, events)
    if args.filter is not None:
        from sparsegnn.tracking.filter import load_filter

        edge_filter = load_filter(args.filter)
        graphs = [edge_filter.prune(g) for g in graphs]
    per_event = []
    with _output_folder(args.out, "sparsegnn-track-graphs") as (tmp, manifest):
        for g in graphs:
            g.save(tmp / f"{g.name}.npz")
            per_event.append({"event": g.name, **g.stats().as_dict()})
        manifest([f"{g.name}.npz" for g in graphs])
    keys = ("num_nodes", "num_edges", "efficiency", "true_efficiency", "purity")
    result = {"out": str(args.out), "graph": args.graph, "module_map_pairs": map_size,
              **{f"mean_{k}": _mean([e[k] for e in per_event]) for k in keys},
              "events": per_event}
    summary = (f"{len(graphs)} {args.graph} graphs -> {args.out}: mean "
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
    from sparsegnn.tracking.filter import FilterConfig, save_filter, train_filter

    graphs = _load_graphs(args.graphs)
    edge_filter = train_filter(graphs, FilterConfig(hidden=args.hidden, epochs=args.epochs,
                                                    keep=args.keep, seed=args.seed))
    save_filter(args.out, edge_filter)
    pruned = [edge_filter.prune(g) for g in graphs]
    result = {"out": str(args.out), "num_graphs": len(graphs), "keep": args.keep,
              "threshold": float(edge_filter.threshold),
              "edges_kept": sum(g.num_edges for g in pruned) / sum(g.num_edges for g in graphs),
              "targets_kept": (sum(int(g.target.sum()) for g in pruned)
                               / sum(int(g.target.sum()) for g in graphs)),
              "mean_purity_after": _mean([g.stats().purity for g in pruned])}
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
    p.set_defaults(func=_train)


def _graph_paths(directory: Path) -> list[Path]:
    paths = sorted(directory.glob("*.npz")) if directory.is_dir() else []
    if not paths:
        raise DataFormatError(f"{directory}: no graph .npz files (run 'track build-graphs')")
    return paths


def _load_graphs(directory: Path) -> list[HitGraph]:
    return [HitGraph.load(p) for p in _graph_paths(directory)]


def _train(args: argparse.Namespace) -> int:
    from sparsegnn.distributed import in_torchrun
    from sparsegnn.tracking.model import INConfig
    from sparsegnn.tracking.train import TrackTrainConfig, save_model

    resolve_device(args.device)  # a bogus --device is refused before any graph is read
    cfg = TrackTrainConfig(
        model=INConfig(hidden=args.hidden, iterations=args.iterations), epochs=args.epochs,
        lr=args.lr, pos_weight=args.pos_weight, max_sample_nodes=args.max_sample_nodes,
        fanouts=tuple(args.fanouts), seed_order=args.seed_order,
        skip_larger_than=args.skip_larger_than, seed=args.seed,
    )
    parallel = args.nprocs > 1 or in_torchrun()
    num_graphs = len(_graph_paths(args.graphs))
    model, report, ranks = (_train_ranks(args, cfg) if parallel else
                            (*_train_here(args, cfg), None))
    if model is None:  # a torchrun rank other than 0: rank 0 writes and reports
        return 0
    save_model(args.out, model, report)
    last = report.epochs[-1] if report.epochs else None
    result = {"out": str(args.out), "num_graphs": num_graphs, **report.as_dict()}
    summary = f"trained on {num_graphs} graphs -> {args.out}"
    if ranks is not None:
        result.update(ranks)
        summary += (f" over {ranks['world_size']} ranks "
                    f"({ranks['bytes_sent_per_rank'][0]:,} bytes sent by rank 0)")
    if last is not None:
        summary += (f"; last epoch loss {last.loss:.4f}, {last.events_used} events used, "
                    f"{last.events_skipped} skipped, largest step {last.max_step_nodes} hits")
    return emit(args, _clean(result), summary)


def _train_here(args: argparse.Namespace, cfg: Any) -> tuple[Any, Any]:
    from sparsegnn.tracking.train import load_model, train

    init = None if args.init is None else load_model(args.init)
    return train(_load_graphs(args.graphs), cfg, resolve_device(args.device), init,
                 args.checkpoint, args.resume)


def _train_ranks(args: argparse.Namespace, cfg: Any) -> tuple[Any, Any, dict[str, Any] | None]:
    """Spawned ranks (``--nprocs``), or this process's rank of a torchrun job; the model
    and report on rank 0 (``None`` elsewhere) and what every rank sent."""
    from sparsegnn.distributed import in_torchrun
    from sparsegnn.tracking.train import train_data_parallel, train_rank

    paths = [str(p) for p in _graph_paths(args.graphs)]
    init = None if args.init is None else str(args.init)
    checkpoint = None if args.checkpoint is None else str(args.checkpoint)
    if in_torchrun():  # every rank ends with the same weights and the all-rank report
        results = [train_rank(paths, cfg, init, checkpoint, args.backend, args.timeout,
                              args.resume)]
        if results[0].rank != 0:
            return None, None, None
        model, report = results[0].model(), results[0].report
    else:
        model, report, results = train_data_parallel(paths, cfg, args.nprocs, init, checkpoint,
                                                     args.backend, args.timeout,
                                                     resume=args.resume)
    return model, report, {
        "world_size": results[0].world_size, "events_per_rank": [r.events for r in results],
        "bytes_sent_per_rank": [sum(p["sent"] for p in r.comm.values()) for r in results],
        "comm_bytes": [r.comm for r in results]}


# ---------------------------------------------------------------------------- reconstruct
def _register_reconstruct(stages: argparse._SubParsersAction) -> None:
    p = stages.add_parser("reconstruct", help="score edges and build tracks (TrackML CSV)")
    _events_flags(p)
    p.add_argument("--graphs", type=Path, required=True)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--out", type=output_dir, required=True,
                   help="directory for {event}-tracks.csv (replaced whole, with a manifest)")
    _reco_flags(p)
    add_device_flag(p)
    add_json_flag(p)
    p.set_defaults(func=_reconstruct)


def _reco_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cut", type=float_range(0.0, 1.0), default=0.5, help="edge score cut")
    p.add_argument("--method", choices=("components", "walkthrough"), default="components")
    p.add_argument("--min-track-hits", type=int_range(1), default=1,
                   help="drop built tracks with fewer hits (default 1: keep all; 5 cuts most "
                        "fragments of split particles, which count as fakes)")
    p.add_argument("--max-sample-nodes", type=int_range(1), default=None,
                   help="score ShaDow subgraphs of at most this many hits instead of whole "
                        "events: bounded memory, many times slower (default: whole events)")


def _reconstruct(args: argparse.Namespace) -> int:
    from sparsegnn.tracking.pipeline import score_edges, write_tracks
    from sparsegnn.tracking.reco import build_tracks
    from sparsegnn.tracking.train import load_model

    device = resolve_device(args.device)
    model = load_model(args.model, device)
    graphs = {g.name: g for g in _load_graphs(args.graphs)}
    counts = []
    with _output_folder(args.out, "sparsegnn-track-tracks") as (tmp, manifest):
        for ev in read_events(args.events, args.limit):
            if ev.name not in graphs:
                raise DataFormatError(f"{args.graphs}: no graph for event {ev.name}")
            scores = score_edges(graphs[ev.name], model, device, args.max_sample_nodes)
            tracks = build_tracks(scores, args.cut, args.method, args.min_track_hits)
            write_tracks(tmp / f"{ev.name}-tracks.csv", ev, tracks)
            counts.append({"event": ev.name, "num_tracks": int((tracks.sizes() >= 3).sum())})
        manifest([f"{c['event']}-tracks.csv" for c in counts])
    result = {"out": str(args.out), "events": counts}
    return emit(args, result, f"tracks of {len(counts)} events -> {args.out}")


# ---------------------------------------------------------------------------- evaluate
def _register_evaluate(stages: argparse._SubParsersAction) -> None:
    p = stages.add_parser("evaluate", help="edge and tracking metrics against truth")
    _events_flags(p)
    p.add_argument("--graphs", type=Path, default=None,
                   help="saved graphs (default: build them with the graph flags)")
    p.add_argument("--model", type=Path, default=None,
                   help="trained model (default: oracle scores from the truth labels)")
    p.add_argument("--plots", type=output_dir, default=None, help="write PNG plots here")
    _reco_flags(p)
    _graph_flags(p, "truth")
    _target_flags(p)
    add_device_flag(p)
    add_json_flag(p)
    p.set_defaults(func=_evaluate)


def _evaluate(args: argparse.Namespace) -> int:
    from sparsegnn.tracking.metrics import combine
    from sparsegnn.tracking.pipeline import (
        edge_summary,
        evaluate_event,
        missed_summary,
        plot_results,
        score_edges,
    )
    from sparsegnn.tracking.train import load_model

    device = resolve_device(args.device)
    # The model first: a bad --model is refused before minutes of reading and building.
    model = load_model(args.model, device) if args.model is not None else None
    events = read_events(args.events, args.limit)
    if args.graphs is not None:
        saved = {g.name: g for g in _load_graphs(args.graphs)}
        missing = [ev.name for ev in events if ev.name not in saved]
        if missing:
            raise DataFormatError(f"{args.graphs}: no graph for event(s) {missing}")
        graphs = [saved[ev.name] for ev in events]
    else:
        graphs = _build_graphs(args, events)[0]
    results = [evaluate_event(ev, g, score_edges(g, model, device, args.max_sample_nodes),
                              args.cut, args.method, _targets(args), args.min_track_hits)[0]
               for ev, g in zip(events, graphs, strict=True)]
    pooled = combine([r.tracks for r in results])
    result = {
        "events": len(results), "graph": "saved" if args.graphs else args.graph,
        "scores": "model" if model is not None else "oracle", "cut": args.cut,
        "method": args.method,
        **edge_summary(results),
        **pooled.as_dict(),
        "missed_particles": missed_summary(results),
    }
    if args.plots is not None:
        result["plots"] = [str(p) for p in plot_results(results, _targets(args), args.plots)]
    summary = (
        f"{len(results)} events, {result['scores']} scores, {args.method} at cut {args.cut}: "
        f"tracking efficiency {pooled.efficiency:.4f} ({pooled.num_matched}/"
        f"{pooled.num_reconstructable}), fake rate {pooled.fake_rate:.4f}, duplicate rate "
        f"{pooled.duplicate_rate:.4f}, TrackML score {pooled.trackml_score:.4f}"
        + _missed_line(result["missed_particles"])
    )
    return emit(args, _clean(result), summary)


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
    result = {"events": len(run.tracks), **pooled.as_dict(),
              "seconds_per_event": run.seconds_per_event, "wall_seconds": run.wall_seconds}
    summary = (
        f"CKF on {len(run.tracks)} events: tracking efficiency {pooled.efficiency:.4f} "
        f"({pooled.num_matched}/{pooled.num_reconstructable}), fake rate "
        f"{pooled.fake_rate:.4f}, duplicate rate {pooled.duplicate_rate:.4f}, "
        f"{run.seconds_per_event:.3f} s/event (space points + seeding + CKF + ambiguity)"
    )
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
    cfg = replace(DemoConfig(), **{k: v for k, v in given.items() if v is not None},
                  ckf=not args.no_ckf, progress=not args.no_progress)
    result = run_demo(args.out, cfg)
    return emit(args, _clean(result.to_dict()), result.summary())
