"""``sparsegnn train --mode minibatch``: arguments in, a summary (and JSON) out.

The command-line glue of :mod:`sparsegnn.train.minibatch`: it reads the parsed
arguments, loads the graph, runs one process or replicated-topology ranks, and prints.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict
from typing import Any

from sparsegnn.cli.common import emit, resolve_device
from sparsegnn.data import load_any
from sparsegnn.train.fullgraph import (
    TrainConfig,
    check_trainable,
    config_from_args,
    row_normalize,
)
from sparsegnn.train.minibatch import (
    MinibatchConfig,
    MinibatchData,
    fit_minibatch,
    human_summary,
)


def minibatch_config_from_args(args: argparse.Namespace) -> MinibatchConfig:
    return MinibatchConfig(args.sampler, tuple(args.fanouts), args.batch_size, args.bulk)


def run_from_args(args: argparse.Namespace) -> int:
    """``sparsegnn train --mode minibatch``: load, train, print a summary (and JSON)."""
    graph = load_any(args.dataset, args.data_dir, seed=args.seed)
    check_trainable(graph, args.dataset)  # named as given, not as stored in the file
    if not args.no_normalize_features and graph.x is not None:
        graph.x = row_normalize(graph.x)
    cfg = config_from_args(args)
    cfg.model = "sage"
    mb = minibatch_config_from_args(args)
    device = resolve_device(args.device)
    data = MinibatchData.from_graph(graph, cfg.torch_dtype)
    world, comm = 1, None
    if args.nprocs > 1 or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        summary, world, comm = _run_replicated(data, cfg, mb, args)
        if summary is None:  # not rank 0 of a torchrun job: rank 0 reports
            return 0
    else:
        summary = fit_minibatch(data, cfg, mb, device)[1].summary()
    out = {
        "dataset": graph.name,
        "model": "sage",
        "mode": "minibatch",
        "device": str(device),
        "world_size": world,
        **summary,
        "minibatch": asdict(mb),
        "config": {
            k: str(v) if not isinstance(v, int | float | str | bool) else v
            for k, v in asdict(cfg).items()
        },
    }
    if comm is not None:
        out["comm_bytes"] = comm
    return emit(args, out, human_summary(graph.name, mb, summary))


def _run_replicated(
    data: MinibatchData, cfg: TrainConfig, mb: MinibatchConfig, args: argparse.Namespace
) -> tuple[dict[str, Any] | None, int, dict[str, Any]]:
    """Replicated-topology ranks: spawned here (``--nprocs``) or joined (torchrun)."""
    from sparsegnn.train.minibatch_distributed import train_replicated, train_replicated_rank

    if args.nprocs > 1:
        outcomes = train_replicated(
            data, cfg, mb, args.nprocs, backend=args.backend, timeout_s=args.timeout
        )
    else:
        outcomes = [train_replicated_rank(data, cfg, mb, args.backend, args.timeout)]
    first = outcomes[0]
    return (first.summary if first.rank == 0 else None), first.world_size, first.comm
