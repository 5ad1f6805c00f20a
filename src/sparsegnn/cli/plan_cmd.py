"""``sparsegnn plan``: exact per-rank communication volume of a distributed epoch, no ranks.

Parses the options, calls :mod:`sparsegnn.distributed.planner` and prints its result;
``--plot`` draws the per-rank volumes and the block-to-block heat map.
"""

from __future__ import annotations

import argparse
from typing import Any

from sparsegnn.cli.common import add_json_flag, emit, int_range, output_file
from sparsegnn.names import ALGORITHMS, PARTITIONERS

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
    p.add_argument("--algo", choices=ALGORITHMS, default="1d")
    p.add_argument("--replication", type=int_range(1, _MAX_RANKS), default=1,
                   help="c for 1.5d")
    p.add_argument("--partitioner", choices=PARTITIONERS, default="block")
    p.add_argument("--comm", choices=("dense", "sparse"), default="sparse")
    p.add_argument("--model", choices=("gcn", "sage"), default="gcn")
    p.add_argument("--hidden", type=int_range(1), default=16)
    p.add_argument("--num-layers", type=int_range(1), default=2)
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--plot", default=None, metavar="FILE.png", type=output_file,
                   help="per-rank volumes and the block heat map (needs matplotlib)")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sparsegnn.data import load_any
    from sparsegnn.distributed.planner import PlanConfig, PlanGraph, plan, plot

    cfg = PlanConfig(
        parts=args.parts, algo=args.algo, replication=args.replication,
        partitioner=args.partitioner, comm=args.comm, model=args.model, hidden=args.hidden,
        num_layers=args.num_layers, dtype=args.dtype, seed=args.seed,
    )
    loaded = load_any(args.graph, args.data_dir, seed=args.seed, progress=True)
    graph = PlanGraph.of(loaded, args.model)
    del loaded  # the edge list (1.9 GiB at rmat:22): nothing reads it past the pattern
    planned, lay = plan(graph, cfg)
    result = {"graph": args.graph, **planned}
    if args.plot:
        plot(result, lay, args.comm, str(args.plot))
        result["plot"] = str(args.plot)
    vol = result["bytes_per_epoch"]
    text = (f"{lay.shape.describe()}, {args.partitioner} partition, {args.comm} comm: "
            f"{vol['total'] / 2**20:.2f} MiB sent per epoch in all, "
            f"{vol['max_per_rank'] / 2**20:.2f} MiB at the busiest rank")
    return emit(args, result, text)
