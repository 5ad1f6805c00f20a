"""``sparsegnn demo``: the main job on a built-in default, in well under a minute.

Trains a 2-layer GCN on Cora (from the data root) and prints test accuracy, epoch time
and peak memory. Without the data root it says so and uses a generated community graph.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sparsegnn.cli.common import add_device_flag, add_json_flag, emit, int_range, resolve_device
from sparsegnn.errors import DataFormatError

_FALLBACK = "sbm:nodes=3000,blocks=7,degree=8"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="train a GCN on Cora and report accuracy, time, memory")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--seed", type=int_range(0), default=0)
    add_device_flag(p)
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sparsegnn.cli.train_cmd import fullgraph_summary
    from sparsegnn.data import load_any, row_normalize
    from sparsegnn.train import TrainConfig, train_single

    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        # a folder the user named: a typo must not quietly train on the generated graph
        raise DataFormatError(f"{args.data_dir}: --data-dir is not a directory")
    device = resolve_device(args.device)
    try:
        graph = load_any("cora", args.data_dir)
    except DataFormatError as err:
        print(f"Cora not available ({err}); using a generated graph {_FALLBACK}")
        graph = load_any(_FALLBACK, seed=args.seed)
    if graph.x is not None:
        graph.x = row_normalize(graph.x)
    cfg = TrainConfig(model="gcn", seed=args.seed)
    print(
        f"{graph.name}: {graph.num_nodes} nodes, {graph.num_edges // 2} undirected edges, "
        f"{graph.num_features} features, {graph.num_classes} classes; device {device}"
    )
    _, result = train_single(graph, cfg, device)
    out = {"dataset": graph.name, "model": "gcn", "device": str(device), **result.to_dict()}
    return emit(args, out, fullgraph_summary(graph.name, "gcn", result))
