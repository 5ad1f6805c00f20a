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
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparsegnn.train.graph_task import GraphRequest
    from sparsegnn.train.kg_link import KGRequest
    from sparsegnn.train.link_grid import LinkGridRequest
    from sparsegnn.train.link_sampled import LinkSampledRequest
    from sparsegnn.train.link_task import LinkRequest
    from sparsegnn.train.rgcn_task import RGCNRanks, RGCNRequest
    from sparsegnn.train.train_request import TrainOutcome

log = logging.getLogger(__name__)


def is_task_run(args: argparse.Namespace) -> bool:
    """Whether the options ask for a task other than homogeneous node classification."""
    return args.task != "node" or args.model == "rgcn"


def run_task(args: argparse.Namespace, device: str) -> TrainOutcome | None:
    """The outcome of the task the options ask for (None on a torchrun rank but 0)."""
    from sparsegnn.train.link_grid import run_link_grid_task
    from sparsegnn.train.link_sampled import run_link_sampled_task
    from sparsegnn.train.task_runs import run_graph_task, run_link_task, run_rgcn_task

    if args.task == "link" and args.model == "rgcn":
        from sparsegnn.train.kg_link import run_kg_link_task

        return run_kg_link_task(kg_request(args, device))
    if args.task == "link" and args.mode == "minibatch":
        return run_link_sampled_task(args.dataset, link_sampled_request(args), args.data_dir)
    if args.task == "link" and _on_ranks(args):
        return run_link_grid_task(args.dataset, link_grid_request(args), args.data_dir)
    if args.task == "node":  # --model rgcn
        return run_rgcn_task(rgcn_request(args, device))
    _refuse_node_only(args)
    if args.task == "link":
        return run_link_task(args.dataset, link_request(args), args.data_dir, device)
    return run_graph_task(args.dataset, graph_request(args), args.data_dir, device,
                          args.nprocs, args.backend, args.timeout)


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


def kg_request(args: argparse.Namespace, device: str) -> KGRequest:
    """``--task link --model rgcn``: knowledge-graph link prediction (R-GCN encoder,
    DistMult decoder, filtered ranking) on one process; other link flags are refused."""
    from sparsegnn.errors import InvalidValueError
    from sparsegnn.train.kg_link import KGRequest

    _refuse_node_only(args)
    given = [flag for flag, on in (
        ("--decoder " + str(args.decoder), args.decoder not in (None, "distmult")),
        ("--num-blocks", args.num_blocks is not None),
        ("--negatives", args.negatives is not None),
        ("--neg-ratio (a whole number)", args.neg_ratio is not None
         and args.neg_ratio != int(args.neg_ratio)),
        ("--weight-decay", args.weight_decay is not None),
        ("--val-ratio/--test-ratio", args.val_ratio is not None or args.test_ratio is not None),
        ("--out-channels", args.out_channels is not None),
        ("--split-out", args.split_out is not None)) if on]
    if given:
        raise InvalidValueError("--task link --model rgcn trains a featureless R-GCN with a "
                                "DistMult decoder on a knowledge graph's own split; drop "
                                f"{', '.join(given)}")
    return KGRequest(**_given(
        dataset=args.dataset, hidden=args.hidden, num_layers=args.layers,
        num_bases=args.num_bases, dropout=args.dropout, lr=args.lr, epochs=args.epochs,
        patience=args.patience, seed=args.seed, device=device,
        neg_ratio=None if args.neg_ratio is None else int(args.neg_ratio)), **_loop(args))


def link_grid_request(args: argparse.Namespace) -> LinkGridRequest:
    """``--task link`` on ranks: the one-process request on a grid (full-graph, dense
    communication, no overlap); the flags of other modes are refused in one line."""
    from sparsegnn.errors import InvalidValueError
    from sparsegnn.train.link_grid import LinkGridRequest

    given = [flag for flag, on in (
        ("--algo auto", args.algo == "auto"), ("--mode minibatch", args.mode == "minibatch"),
        ("--comm sparse", args.comm == "sparse"), ("--overlap", args.overlap != "off"),
        ("--restart", args.restart), ("--precision bf16", args.precision != "fp32")) if on]
    if given:
        raise InvalidValueError(f"--task link on ranks trains full-graph on a given grid "
                                f"(--algo 1d, 1.5d, 2d or 3d); drop {', '.join(given)}")
    return LinkGridRequest(link_request(args), algo=args.algo or "1d", nprocs=args.nprocs,
                           replication=args.replication, partition=args.partition,
                           dtype=args.dtype, backend=args.backend, timeout_s=args.timeout)


def link_sampled_request(args: argparse.Namespace) -> LinkSampledRequest:
    """``--task link --mode minibatch``: LinkNeighborLoader-style minibatches of seed edges
    (GraphSAGE encoder, one fan-out per layer: ``--layers`` defaults to their count) on
    ``--nprocs`` ranks over a replicated or partitioned ``--topology``."""
    from dataclasses import replace

    from sparsegnn.errors import InvalidValueError
    from sparsegnn.train.link_sampled import LinkSampledRequest

    given = [flag for flag, on in (
        ("--algo", args.algo is not None), ("--sampler " + args.sampler, args.sampler != "sage"),
        ("--feature-cache-mb", args.feature_cache_mb > 0), ("--restart", args.restart),
        ("--precision bf16", args.precision != "fp32")) if on]
    if given:
        raise InvalidValueError("--task link --mode minibatch samples node-wise (sage) on "
                                f"--nprocs ranks; drop {', '.join(given)}")
    link = link_request(args)
    link = replace(link, model=args.model or "sage",
                   num_layers=args.layers or len(args.fanouts))
    return LinkSampledRequest(link, fanouts=tuple(args.fanouts),
                              batch_size=args.batch_size or 512, bulk=args.bulk,
                              nprocs=args.nprocs, topology=args.topology,
                              replication=args.replication, dtype=args.dtype,
                              backend=args.backend, timeout_s=args.timeout)


def _on_ranks(args: argparse.Namespace) -> bool:
    return args.nprocs > 1 or args.algo is not None


def graph_request(args: argparse.Namespace) -> GraphRequest:
    from sparsegnn.train.graph_task import GraphRequest

    return GraphRequest(**_given(
        model=args.model, hidden=args.hidden, num_layers=args.layers, dropout=args.dropout,
        pool=args.pool, lr=args.lr, lr_step=args.lr_step, weight_decay=args.weight_decay,
        batch_size=args.batch_size, epochs=args.epochs, folds=args.folds,
        fold_seed=args.fold_seed, seed=args.seed), **_loop(args))


def rgcn_request(args: argparse.Namespace, device: str) -> RGCNRequest:
    """R-GCN on one process, full-graph on a given grid of spawned ranks (``--nprocs``,
    ``--algo 1d|1.5d|2d|3d``) or on sampled minibatches (``--mode minibatch``, on
    ``--nprocs`` ranks, ``--topology``); what none supports is refused in one line."""
    from pathlib import Path

    from sparsegnn.train.minibatch import MinibatchConfig
    from sparsegnn.train.rgcn_task import RGCNRanks, RGCNRequest

    _refuse_rgcn(args)
    loop = _loop(args)
    loop.pop("checkpoint_every")
    ranks = minibatch = None
    layers = args.layers
    if args.mode == "minibatch":
        minibatch = MinibatchConfig(args.sampler, tuple(args.fanouts), args.batch_size or 1024,
                                    args.bulk)
        if layers is None and args.sampler != "shadow":
            layers = len(args.fanouts)  # one layer per fan-out
    if _on_ranks(args):
        ranks = RGCNRanks(algo=args.algo or "1d", nprocs=args.nprocs,
                          replication=args.replication, partition=args.partition,
                          backend=args.backend, timeout_s=args.timeout,
                          topology=args.topology, comm=args.comm,
                          overlap=args.overlap == "on")
        if minibatch is None and (args.algo == "auto" or args.max_rank_memory is not None):
            ranks = rgcn_priced_ranks(args, ranks)
    return RGCNRequest(**_given(
        source=args.dataset,
        data_dir=None if args.data_dir is None else Path(args.data_dir),
        hidden=args.hidden, num_layers=layers, num_bases=args.num_bases,
        num_blocks=args.num_blocks, dropout=args.dropout, lr=args.lr,
        weight_decay=args.weight_decay, epochs=args.epochs, patience=args.patience,
        seed=args.seed, device=device, dtype=args.dtype), ranks=ranks, minibatch=minibatch,
        **loop)


def rgcn_priced_ranks(args: argparse.Namespace, ranks: RGCNRanks) -> RGCNRanks:
    """Full-graph R-GCN on ranks, priced (:mod:`sparsegnn.distributed.planning.
    relational_cost`): ``--algo auto`` trains the configuration predicted fastest of those
    predicted to fit ``--max-rank-memory`` (``--partition``'s partitioner); a given grid
    is refused where its busiest rank is predicted above that limit."""
    from dataclasses import replace

    from sparsegnn.cli.plan_cmd import relational_graph
    from sparsegnn.distributed.planning.cost_profile import Profile
    from sparsegnn.distributed.planning.planner import PlanConfig
    from sparsegnn.distributed.planning.rank_memory import process_bytes
    from sparsegnn.distributed.planning.relational_cost import (
        choose_relational,
        relational_plan,
    )
    from sparsegnn.train.memory import check_rank_memory
    from sparsegnn.train.train_grid import profile_or_calibrate

    graph = relational_graph(args.dataset, args.data_dir, args.seed or 0)
    base = PlanConfig(args.nprocs, algo=ranks.algo if args.algo != "auto" else "1d",
                      replication=args.replication, partitioner=args.partition,
                      comm=args.comm, model="rgcn", hidden=args.hidden or 16,
                      num_layers=args.layers or 2, num_bases=args.num_bases,
                      num_blocks=args.num_blocks, dtype=args.dtype, seed=args.seed or 0,
                      overlap=args.overlap == "on")
    if args.algo != "auto":
        process = process_bytes(None if args.profile is None else Profile.load(args.profile))
        planned, _ = relational_plan(graph, base, None, process)
        check_rank_memory(planned["memory_per_rank_by_kind"], args.max_rank_memory)
        return ranks
    profile = profile_or_calibrate(args.profile, args.nprocs, args.calibrate, "--algo auto")
    chosen = choose_relational(graph, args.nprocs, profile, base,
                               partitioners=(args.partition,),
                               max_rank_memory_gib=args.max_rank_memory,
                               process_bytes=process_bytes(profile))[0]
    c = chosen.config
    log.info("--algo auto: %s (c=%d, %s comm, %s partition), predicted %.2f ms per epoch "
             "and %.1f MiB per rank", c.algo, c.replication, c.comm, c.partitioner,
             chosen.cost.total_s * 1e3, chosen.memory_bytes / 2**20)
    return replace(ranks, algo=c.algo, replication=c.replication, comm=c.comm,  # type: ignore[arg-type]
                   partition=c.partitioner, overlap=False)


def _refuse_rgcn(args: argparse.Namespace) -> None:
    """The flags R-GCN does not take, refused rather than ignored: full-graph on ranks it
    trains on a given grid, spawned (``--comm`` and ``--overlap on`` on 1D/1.5D); sampled,
    on spawned ranks with a replicated or partitioned topology, without a feature cache."""
    from sparsegnn.distributed import in_torchrun
    from sparsegnn.errors import InvalidValueError

    sampled = args.mode == "minibatch"
    given = [flag for flag, on in (
        ("--overlap auto", args.overlap == "auto"),
        ("--comm sparse", sampled and args.comm == "sparse"),
        ("--overlap", sampled and args.overlap != "off"),
        ("--max-rank-memory", sampled and args.max_rank_memory is not None),
        ("--auto-trials", args.auto_trials is not None),
        ("--topology partitioned", not sampled and args.topology == "partitioned"),
        ("--feature-cache-mb", args.feature_cache_mb > 0),
        ("--algo", sampled and args.algo is not None),
        ("--restart", args.restart), ("--precision bf16", args.precision != "fp32")) if on]
    if in_torchrun():
        given.append("torchrun (give --nprocs instead)")
    if given:
        raise InvalidValueError(
            "--model rgcn trains on one process, full-graph on a grid of spawned "
            "ranks (--nprocs, --algo 1d, 1.5d, 2d, 3d or auto, the model's choice without "
            "trials; --max-rank-memory) or on sampled minibatches "
            f"(--mode minibatch, --nprocs, --topology); drop {', '.join(given)}")


def _refuse_node_only(args: argparse.Namespace) -> None:
    """These tasks train on one process, full-graph (graph batches: ``--batch-size``;
    graph classification also data-parallel on ``--nprocs`` ranks): the other flags of
    ranks and sampled minibatches are refused rather than ignored."""
    from sparsegnn.errors import InvalidValueError

    given = [flag for flag, on in (
        ("--nprocs", args.nprocs > 1 and args.task != "graph"),
        ("--algo", args.algo is not None),
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
