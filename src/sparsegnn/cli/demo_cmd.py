"""``sparsegnn demo``: the main job on a built-in default, in well under a minute.

Trains a 2-layer GCN on Cora and prints test accuracy, epoch time and peak memory. Cora
comes from ``--data-dir`` or ``$SPARSEGNN_DATA`` when given, else from the nearest
``shared/data`` or the copy bundled with the package, so a clone alone runs it offline.
"""

from __future__ import annotations

import argparse

from sparsegnn.cli.common import add_device_flag, add_json_flag, emit, int_range, resolve_device


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="train a GCN on Cora and report accuracy, time, memory")
    p.add_argument("--data-dir", default=None,
                   help="data root holding cora/ (default: $SPARSEGNN_DATA, else the nearest "
                        "shared/data, else the bundled copy)")
    p.add_argument("--seed", type=int_range(0), default=0)
    add_device_flag(p)
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sparsegnn.data import load_any, row_normalize
    from sparsegnn.train import TrainConfig, train_single
    from sparsegnn.train.train_summary import fullgraph_summary

    device = resolve_device(args.device)
    graph = load_any("cora", args.data_dir)
    graph.x = row_normalize(graph.x)
    cfg = TrainConfig(model="gcn", seed=args.seed)
    print(
        f"{graph.name}: {graph.num_nodes} nodes, {graph.num_edges // 2} undirected edges, "
        f"{graph.num_features} features, {graph.num_classes} classes; device {device}"
    )
    _, result = train_single(graph, cfg, device)
    out = {"dataset": graph.name, "model": "gcn", "device": str(device), **result.to_dict()}
    return emit(args, out, fullgraph_summary(graph.name, "gcn", result))
