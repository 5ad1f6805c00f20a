"""``sparsegnn train``: full-graph (one process or partitioned ranks) or sampled minibatches.

This module owns the flags; the work is done by :mod:`sparsegnn.train`. A run is
distributed when ``--nprocs`` > 1, when ``--algo`` is given, or when torchrun launched it
(``WORLD_SIZE`` set); it uses sampled minibatches with ``--mode minibatch``.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict
from pathlib import Path

from sparsegnn.cli.common import (
    add_device_flag,
    add_json_flag,
    emit,
    float_range,
    int_list,
    int_range,
    output_file,
    resolve_device,
)
from sparsegnn.data import load_any
from sparsegnn.train import train_single
from sparsegnn.train.fullgraph import (
    check_trainable,
    config_from_args,
    human_summary,
    row_normalize,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a GNN on a graph", description=__doc__)
    p.add_argument("--dataset", default="cora", help="dataset name, generator spec or graph file")
    p.add_argument(
        "--data-dir", default=None, help="data root (default: $SPARSEGNN_DATA or ../shared/data)"
    )
    p.add_argument(
        "--model",
        choices=("gcn", "sage"),
        default=None,
        help="default: gcn full-graph, sage (GraphSAGE) minibatch",
    )
    p.add_argument("--hidden", type=int_range(1), default=16)
    p.add_argument("--layers", type=int_range(1), default=None,
                   help="default: 2 full-graph, 3 minibatch")
    p.add_argument("--dropout", type=float_range(0.0, 1.0, hi_open=True), default=0.5)
    p.add_argument("--lr", type=float_range(0.0, lo_open=True), default=0.01)
    p.add_argument("--weight-decay", type=float_range(0.0), default=5e-4)
    p.add_argument("--epochs", type=int_range(1), default=200)
    p.add_argument("--patience", type=int_range(1), default=100,
                   help="early-stopping patience (epochs)")
    p.add_argument("--seed", type=int_range(0), default=0)
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument(
        "--no-normalize-features",
        action="store_true",
        help="keep raw features (default: scale each row to sum 1, as for Planetoid)",
    )
    p.add_argument(
        "--checkpoint", type=output_file, default=None,
        help="checkpoint file (written atomically)",
    )
    p.add_argument("--checkpoint-every", type=int_range(1), default=10)
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint if it exists")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_device_flag(p)
    add_json_flag(p)
    dist = p.add_argument_group("distributed full-graph training")
    dist.add_argument("--nprocs", type=int_range(1), default=1,
                      help="spawn this many local ranks")
    dist.add_argument("--algo", choices=("1d", "1.5d", "2d", "3d"), default=None)
    dist.add_argument("--replication", type=int_range(1), default=1,
                      help="replication factor c (1.5D)")
    dist.add_argument(
        "--comm",
        choices=("dense", "sparse"),
        default="dense",
        help="dense: communication-oblivious; sparse: send only needed rows",
    )
    dist.add_argument("--partition", default=None, help="partition file or partitioner name")
    dist.add_argument("--backend", default=None, help="gloo or nccl (default: nccl on CUDA)")
    dist.add_argument(
        "--timeout", type=float_range(0.0, lo_open=True), default=60.0,
        help="seconds before ranks give up on a failed peer",
    )
    mb = p.add_argument_group("sampled minibatch training")
    mb.add_argument("--mode", choices=("fullgraph", "minibatch"), default="fullgraph")
    mb.add_argument("--sampler", choices=("sage", "ladies", "shadow"), default="sage")
    mb.add_argument("--fanouts", type=int_list(1), default=[15, 10, 5],
                    help="per-layer fan-outs (sage, shadow; default 15,10,5)")
    mb.add_argument("--batch-size", type=int_range(1), default=1024)
    mb.add_argument("--bulk", type=int_range(1), default=64, help="minibatches sampled per call")
    p.set_defaults(func=run)


def is_distributed(args: argparse.Namespace) -> bool:
    """Several ranks asked for, an algorithm named, torchrun's WORLD_SIZE, or a sharded graph."""
    from sparsegnn.distributed.shard import is_shard_dir

    return (
        args.nprocs > 1
        or args.algo is not None
        or int(os.environ.get("WORLD_SIZE", "1")) > 1
        or is_shard_dir(args.dataset)
    )


def run(args: argparse.Namespace) -> int:
    resolve_device(args.device)  # a bogus --device is refused before any data is read
    if args.mode == "minibatch":
        from sparsegnn.cli.train_minibatch import run_from_args

        return run_from_args(args)
    if is_distributed(args):
        from sparsegnn.cli.train_distributed import run_from_args

        return run_from_args(args)
    graph = load_any(args.dataset, args.data_dir, seed=args.seed)
    check_trainable(graph, args.dataset)  # a refusal names the --dataset given, not the
    # name stored in the file (often just 'graph')
    if not args.no_normalize_features and graph.x is not None:
        graph.x = row_normalize(graph.x)
    cfg = config_from_args(args)
    device = resolve_device(args.device)
    _, result = train_single(graph, cfg, device)
    out = {
        "dataset": graph.name,
        "model": cfg.model,
        "device": str(device),
        **result.summary(),
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
    }
    return emit(args, out, human_summary(graph.name, cfg.model, result))
