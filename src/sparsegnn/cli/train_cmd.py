"""``sparsegnn train``: full-graph (one process or partitioned ranks) or sampled minibatches.

This module turns the parsed options (:mod:`sparsegnn.cli.train_flags`) into a
:class:`~sparsegnn.train.train_request.TrainRequest`, hands it to
:func:`~sparsegnn.train.train_request.run_train`, which decides the mode (distributed
when ``--nprocs`` > 1, when ``--algo`` is given, under torchrun, for a partitioned
folder as ``--dataset`` or a distributed run's checkpoint folder as ``--checkpoint``;
sampled minibatches with ``--mode minibatch``), checks and trains, and prints the
outcome. ``--task link``/``graph`` and ``--model rgcn`` go to
:mod:`sparsegnn.cli.train_tasks` instead. The options are never rewritten. Like every
CLI module it imports the library only inside functions.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from sparsegnn.cli.common import finish_run, resolve_device
from sparsegnn.cli.train_flags import add_train_flags

if TYPE_CHECKING:
    from sparsegnn.train import TrainConfig
    from sparsegnn.train.train_request import TrainRequest


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a GNN on a graph", description=__doc__)
    add_train_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sparsegnn.cli.train_tasks import is_task_run, run_task
    from sparsegnn.train.task_runs import check_node_source
    from sparsegnn.train.train_request import run_train

    if is_task_run(args):
        outcome = run_task(args, str(resolve_device(args.device)))
    else:
        check_node_source(args.dataset, args.data_dir, args.model)
        outcome = run_train(request_from_args(args))
    if outcome is None:  # not rank 0 of a torchrun job: rank 0 reports
        return 0
    for warning in outcome.warnings:
        print(f"sparsegnn train: warning: {warning}", file=sys.stderr)
    return finish_run(args, outcome.title, outcome.result, outcome.summary)


def request_from_args(args: argparse.Namespace) -> TrainRequest:
    """The :class:`~sparsegnn.train.train_request.TrainRequest` of parsed options; a bogus
    ``--device`` is refused here, before any data is read."""
    from sparsegnn.train.minibatch import MinibatchConfig
    from sparsegnn.train.train_request import RankOptions, TrainRequest

    device = str(resolve_device(args.device))
    minibatch = None if args.mode != "minibatch" else MinibatchConfig(
        args.sampler, tuple(args.fanouts), args.batch_size or 1024, args.bulk)
    ranks = RankOptions(
        nprocs=args.nprocs, algo=args.algo, auto_trials=args.auto_trials,
        profile=args.profile, calibrate=args.calibrate, dropout_masks=args.dropout_masks,
        overlap=args.overlap, replication=args.replication, comm=args.comm,
        partition=args.partition, backend=args.backend, timeout_s=args.timeout,
        max_rank_memory_gib=args.max_rank_memory, topology=args.topology,
        feature_cache_mb=args.feature_cache_mb)
    return TrainRequest(args.dataset, config_from_args(args), minibatch, ranks,
                        data_dir=args.data_dir,
                        normalize_features=not args.no_normalize_features, device=device)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The :class:`~sparsegnn.train.TrainConfig` of parsed ``sparsegnn train`` options; the
    model's paper fills what was not given
    (:func:`~sparsegnn.train.fullgraph.config_for`)."""
    from sparsegnn.train.fullgraph import config_for

    minibatch = args.mode == "minibatch"
    return config_for(
        args.model or ("sage" if minibatch else "gcn"), hidden=args.hidden, heads=args.heads,
        num_layers=args.layers if args.layers is not None else (3 if minibatch else 2),
        dropout=args.dropout, attention_dropout=args.attention_dropout,
        dropout_mask=args.dropout_mask, lr=args.lr,
        weight_decay=args.weight_decay, epochs=args.epochs,
        patience=args.patience, seed=args.seed, dtype=args.dtype, precision=args.precision,
        checkpoint=args.checkpoint,
        checkpoint_every=args.checkpoint_every, resume=args.resume, restart=args.restart,
        progress=args.progress, logdir=args.logdir,
    )
