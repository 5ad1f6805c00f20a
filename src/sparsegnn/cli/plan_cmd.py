"""``sparsegnn plan``: exact per-rank communication volume of a distributed epoch, no ranks.

Parses the options, calls :mod:`sparsegnn.distributed.planning.planner` and prints its result;
``--plot`` draws the per-rank volumes and the block-to-block heat map.
"""

from __future__ import annotations

import argparse
from typing import Any

from sparsegnn.cli.common import (
    add_json_flag,
    add_profile_flags,
    emit,
    float_range,
    int_range,
    output_file,
)
from sparsegnn.names import ALGORITHMS, ATTENTION_MODELS, MODEL_KINDS, PARTITIONERS

# The most ranks a plan is made for: its block-to-block tables grow with the square.
_MAX_RANKS = 4096


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plan", help="per-rank communication volume of distributed training, without ranks",
        description=__doc__,
    )
    p.add_argument("--graph", required=True,
                   help="graph file, dataset name or generator spec (rmat:18, sbm:nodes=...)")
    p.add_argument("--data-dir", default=None, help="folder holding the datasets")
    p.add_argument("--seed", type=int_range(0), default=0, help="generator and partitioner seed")
    p.add_argument("--parts", type=int_range(1, _MAX_RANKS), required=True,
                   help="number of ranks P")
    p.add_argument("--algo", choices=ALGORITHMS, default="1d", help="ignored with --auto")
    p.add_argument("--replication", type=int_range(1, _MAX_RANKS), default=1,
                   help="c for 1.5d")
    p.add_argument("--partitioner", choices=PARTITIONERS, default="block")
    p.add_argument("--comm", choices=("dense", "sparse"), default=None,
                   help="default: sparse on 1d/1.5d, dense on 2d/3d (their only one)")
    p.add_argument("--model", choices=(*MODEL_KINDS, "rgcn"), default="gcn",
                   help="gat/gatv2 are priced by their edge protocol's bytes and kernels; "
                        "rgcn (a typed graph: hsbm:..., a HeteroData file or DGL folder) "
                        "by one SpMM per relation")
    p.add_argument("--hidden", type=int_range(1), default=16,
                   help="hidden width (per head for gat/gatv2)")
    p.add_argument("--heads", type=int_range(1), default=8,
                   help="gat/gatv2: hidden layers' heads (the last layer has one)")
    p.add_argument("--num-layers", type=int_range(1), default=2)
    p.add_argument("--num-bases", type=int_range(1), default=None,
                   help="rgcn: basis decomposition of the relation weights")
    p.add_argument("--num-blocks", type=int_range(1), default=None,
                   help="rgcn: block-diagonal relation weights")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    auto = p.add_argument_group("choosing the distribution (--auto)")
    auto.add_argument("--auto", action="store_true",
                      help="rank every feasible algorithm, replication, comm and partitioner "
                           "by predicted epoch time and memory, and choose")
    add_profile_flags(auto, "--auto")
    auto.add_argument("--max-rank-memory", type=float_range(0.0, lo_open=True), default=None,
                      metavar="GIB", help="only configurations predicted to fit this")
    auto.add_argument("--partitioners", default="block",
                      help="comma-separated partitioners to consider (default: block)")
    auto.add_argument("--overlap", action="store_true",
                      help="for `train --overlap`: count the further blocks of H an "
                           "overlapped dense 1d/1.5d product holds in flight (memory; "
                           "epoch times are predicted without overlap)")
    p.add_argument("--plot", default=None, metavar="FILE.png", type=output_file,
                   help="per-rank volumes and the block heat map (needs matplotlib)")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sparsegnn.errors import InvalidValueError
    from sparsegnn.names import row_wise

    if args.comm is None:
        args.comm = "sparse" if row_wise(args.algo) else "dense"
    elif args.comm == "sparse" and not row_wise(args.algo) and not args.auto:
        raise InvalidValueError(f"--comm sparse applies to --algo 1d and 1.5d, not {args.algo}")
    if args.model == "rgcn":
        return _relational(args)
    if args.auto:
        return _auto(args)
    from sparsegnn.data import load_any
    from sparsegnn.distributed.planning.planner import PlanConfig, PlanGraph, plan, plot

    cfg = PlanConfig(
        parts=args.parts, algo=args.algo, replication=args.replication,
        partitioner=args.partitioner, comm=args.comm, model=args.model, hidden=args.hidden,
        num_layers=args.num_layers, heads=args.heads, dtype=args.dtype, seed=args.seed,
        overlap=args.overlap,
    )
    loaded = load_any(args.graph, args.data_dir, seed=args.seed, progress=True)
    graph = PlanGraph.of(loaded, args.model)
    del loaded  # the edge list (1.9 GiB at rmat:22): nothing reads it past the pattern
    planned, lay = plan(graph, cfg)
    result = {"graph": args.graph, **planned, **_memory(args, lay, cfg)}
    if args.plot:
        plot(result, lay, args.comm, str(args.plot))
        result["plot"] = str(args.plot)
    vol = result["bytes_per_epoch"]
    text = (f"{lay.shape.describe()}, {args.partitioner} partition, {args.comm} comm: "
            f"{vol['total'] / 2**20:.2f} MiB sent per epoch in all, "
            f"{vol['max_per_rank'] / 2**20:.2f} MiB at the busiest rank; predicted peak "
            f"{result['memory_bytes_per_rank'] / 2**20:.1f} MiB per rank")
    return emit(args, result, text)


def _memory(args: argparse.Namespace, lay: Any, cfg: Any) -> dict[str, Any]:
    """The busiest rank's predicted peak, as ``train --max-rank-memory`` predicts it for
    ranks that load the graph by name (``--profile``: the machine's process part)."""
    from sparsegnn.distributed.planning.rank_memory import predict_rank_bytes, process_bytes

    profile = None
    if args.profile is not None:
        from sparsegnn.distributed.planning.cost_profile import Profile

        profile = Profile.load(args.profile)
    kinds = predict_rank_bytes(lay, cfg, cfg.value_bytes, process_bytes(profile),
                               whole_graph=True)
    return {"memory_bytes_per_rank": sum(kinds.values()), "memory_per_rank_by_kind": kinds}


def load_profile(path: str | None, parts: int, calibrate: bool, option: str) -> Any:
    """The profile at ``path``, or one measured now where ``calibrate`` asks for it
    (:func:`~sparsegnn.train.train_grid.profile_or_calibrate`, as ``train`` does)."""
    from sparsegnn.train.train_grid import profile_or_calibrate

    return profile_or_calibrate(path, parts, calibrate, option)


def _auto(args: argparse.Namespace) -> int:
    """``plan --auto``: the ranked table and the choice."""
    from sparsegnn.data import load_any
    from sparsegnn.distributed.planning.autoplan import auto_plan
    from sparsegnn.distributed.planning.planner import PlanConfig, PlanGraph

    profile = load_profile(args.profile, args.parts, args.calibrate, "plan --auto")
    loaded = load_any(args.graph, args.data_dir, seed=args.seed, progress=True)
    graph = PlanGraph.of(loaded, args.model)
    del loaded
    base = PlanConfig(args.parts, model=args.model, hidden=args.hidden,
                      num_layers=args.num_layers, heads=args.heads, dtype=args.dtype,
                      seed=args.seed, overlap=args.overlap)
    ranked = auto_plan(graph, args.parts, profile, base,
                       partitioners=tuple(args.partitioners.split(",")),
                       max_rank_memory_gib=args.max_rank_memory)
    return _ranked(args, profile, [c.to_dict() for c in ranked])


def _ranked(args: argparse.Namespace, profile: Any, rows: list[dict[str, Any]]) -> int:
    """Print (or emit as JSON) the ranked configurations and the choice; 2 where none
    fits ``--max-rank-memory``."""
    choice = rows[0] if rows and rows[0]["fits"] else None
    result = {"graph": args.graph, "ranks": args.parts, "profile": args.profile or "measured now",
              "profile_world_size": profile.world_size, "max_rank_memory_gib":
              args.max_rank_memory, "choice": choice, "candidates": rows}
    if args.model in ATTENTION_MODELS:
        result["attention_rates"] = profile.attention_rates_source()
    lines = [f"{'algo':>5} {'c':>2} {'comm':>6} {'partitioner':>11} {'epoch ms':>9} "
             f"{'compute':>8} {'comm ms':>8} {'MiB/rank':>9} fits"]
    for r in rows:
        lines.append(f"{r['algo']:>5} {r['replication']:>2} {r['comm']:>6} "
                     f"{r['partitioner']:>11} {r['epoch_s'] * 1e3:9.2f} "
                     f"{r['compute_s'] * 1e3:8.2f} {r['comm_total_s'] * 1e3:8.2f} "
                     f"{r['memory_bytes_per_rank'] / 2**20:9.1f} {'yes' if r['fits'] else 'no'}")
    if result.get("attention_rates", "measured") != "measured":
        lines.append(f"attention kernels {result['attention_rates']}")
    if choice is None:
        lines.append("no configuration fits --max-rank-memory; use more ranks")
    else:
        lines.append(f"choice: {choice['algo']} (c={choice['replication']}, {choice['comm']} "
                     f"comm, {choice['partitioner']} partition), predicted "
                     f"{choice['epoch_s'] * 1e3:.2f} ms per epoch")
    emit(args, result, "\n".join(lines))
    return 0 if choice is not None else 2


def _relational(args: argparse.Namespace) -> int:
    """``plan --model rgcn``: one configuration's bytes and memory (and its predicted
    epoch given ``--profile``), or with ``--auto`` every configuration ranked."""
    from sparsegnn.distributed.planning.planner import PlanConfig
    from sparsegnn.distributed.planning.rank_memory import process_bytes
    from sparsegnn.distributed.planning.relational_cost import (
        relational_auto_plan,
        relational_plan,
    )

    graph = relational_graph(args.graph, args.data_dir, args.seed)
    cfg = PlanConfig(
        parts=args.parts, algo=args.algo, replication=args.replication,
        partitioner=args.partitioner, comm=args.comm, model="rgcn", hidden=args.hidden,
        num_layers=args.num_layers, num_bases=args.num_bases, num_blocks=args.num_blocks,
        dtype=args.dtype, seed=args.seed)
    if not args.auto:
        profile = None if args.profile is None else load_profile(args.profile, args.parts,
                                                                 False, "plan")
        planned, _ = relational_plan(graph, cfg, profile, process_bytes(profile))
        result = {"graph": args.graph, **planned}
        vol = result["bytes_per_epoch"]
        text = (f"{cfg.algo} on {planned['ranks']} ranks, {cfg.partitioner} partition, "
                f"{cfg.comm} comm, R-GCN of {planned['num_relations']} relations: "
                f"{vol['total'] / 2**20:.2f} MiB sent per epoch in all, "
                f"{vol['max_per_rank'] / 2**20:.2f} MiB at the busiest rank; predicted peak "
                f"{result['memory_bytes_per_rank'] / 2**20:.1f} MiB per rank")
        if "cost" in result:
            text += f"; predicted epoch {result['cost']['epoch_s'] * 1e3:.2f} ms"
        return emit(args, result, text)
    profile = load_profile(args.profile, args.parts, args.calibrate, "plan --auto")
    ranked = relational_auto_plan(graph, args.parts, profile, cfg,
                                  partitioners=tuple(args.partitioners.split(",")),
                                  max_rank_memory_gib=args.max_rank_memory,
                                  process_bytes=process_bytes(profile))
    return _ranked(args, profile, [c.to_dict() for c in ranked])


def relational_graph(source: str, data_dir: str | None, seed: int) -> Any:
    """The planner's form of a typed graph, loaded as ``train --model rgcn`` loads it."""
    from pathlib import Path

    from sparsegnn.distributed.planning.relational_cost import RelationalPlanGraph
    from sparsegnn.train.rgcn_task import RGCNRequest, relational_problem

    typed, rel = relational_problem(RGCNRequest(
        source=source, data_dir=None if data_dir is None else Path(data_dir), seed=seed))
    return RelationalPlanGraph.of(rel, typed.num_classes)
