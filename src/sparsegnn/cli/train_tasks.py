"""``sparsegnn train`` for link prediction, graph classification and R-GCN: the typed
request of the parsed options, handed to :mod:`sparsegnn.train.task_runs`.

A flag the user did not pass (None) is left out of the request, so each task's own
defaults apply (:class:`~sparsegnn.train.link_task.LinkRequest`: PyG's link example;
:class:`~sparsegnn.train.graph_task.GraphRequest`: the GIN paper;
:class:`~sparsegnn.train.rgcn_task.RGCNRequest`: PyG's entity classification). Like
every CLI module it imports the library only inside functions.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparsegnn.train.graph_task import GraphRequest
    from sparsegnn.train.link_task import LinkRequest
    from sparsegnn.train.rgcn_task import RGCNRequest
    from sparsegnn.train.train_request import TrainOutcome


def is_task_run(args: argparse.Namespace) -> bool:
    """Whether the options ask for a task other than homogeneous node classification."""
    return args.task != "node" or args.model == "rgcn"


def run_task(args: argparse.Namespace, device: str) -> TrainOutcome:
    """The outcome of the task the options ask for."""
    from sparsegnn.train.task_runs import run_graph_task, run_link_task, run_rgcn_task

    _refuse_node_only(args)
    if args.task == "link":
        return run_link_task(args.dataset, link_request(args), args.data_dir, device)
    if args.task == "graph":
        return run_graph_task(args.dataset, graph_request(args), args.data_dir, device)
    return run_rgcn_task(rgcn_request(args, device))


def link_request(args: argparse.Namespace) -> LinkRequest:
    from sparsegnn.train.link_task import LinkRequest

    return LinkRequest(**_given(
        model=args.model, decoder=args.decoder, hidden=args.hidden,
        out_channels=args.out_channels, num_layers=args.layers, dropout=args.dropout,
        lr=args.lr, weight_decay=args.weight_decay, epochs=args.epochs,
        patience=args.patience, seed=args.seed, val=args.val_ratio, test=args.test_ratio,
        negatives=args.negatives, neg_ratio=args.neg_ratio,
        normalize_features=not args.no_normalize_features, split_out=args.split_out),
        **_loop(args))


def graph_request(args: argparse.Namespace) -> GraphRequest:
    from sparsegnn.train.graph_task import GraphRequest

    return GraphRequest(**_given(
        model=args.model, hidden=args.hidden, num_layers=args.layers, dropout=args.dropout,
        pool=args.pool, lr=args.lr, lr_step=args.lr_step, weight_decay=args.weight_decay,
        batch_size=args.batch_size, epochs=args.epochs, folds=args.folds,
        fold_seed=args.fold_seed, seed=args.seed), **_loop(args))


def rgcn_request(args: argparse.Namespace, device: str) -> RGCNRequest:
    from pathlib import Path

    from sparsegnn.train.rgcn_task import RGCNRequest

    loop = _loop(args)
    loop.pop("checkpoint_every")
    return RGCNRequest(**_given(
        source=args.dataset,
        data_dir=None if args.data_dir is None else Path(args.data_dir),
        hidden=args.hidden, num_layers=args.layers, num_bases=args.num_bases,
        num_blocks=args.num_blocks, dropout=args.dropout, lr=args.lr,
        weight_decay=args.weight_decay, epochs=args.epochs, patience=args.patience,
        seed=args.seed, device=device), **loop)


def _refuse_node_only(args: argparse.Namespace) -> None:
    """These tasks train on one process, full-graph (graph batches: ``--batch-size``): the
    flags of ranks and sampled minibatches are refused rather than ignored."""
    from sparsegnn.errors import InvalidValueError

    given = [flag for flag, on in (
        ("--nprocs", args.nprocs > 1), ("--algo", args.algo is not None),
        ("--mode minibatch", args.mode == "minibatch"), ("--restart", args.restart),
        ("--precision bf16", args.precision != "fp32")) if on]
    if given:
        what = f"--task {args.task}" if args.task != "node" else "--model rgcn"
        raise InvalidValueError(f"{what} trains on one process in fp32; drop "
                                f"{', '.join(given)}")


def _loop(args: argparse.Namespace) -> dict[str, Any]:
    """The options every task's epoch loop shares, as given (``progress`` None: a bar on a
    terminal)."""
    return {"checkpoint": args.checkpoint, "checkpoint_every": args.checkpoint_every,
            "resume": args.resume, "progress": args.progress, "logdir": args.logdir}


def _given(**values: Any) -> dict[str, Any]:
    """The options the user passed: None means not given, so the request's default holds."""
    return {k: v for k, v in values.items() if v is not None}
