"""``sparsegnn train``: full-graph (one process or partitioned ranks) or sampled minibatches.

This module owns the choice of mode, what the options become (configuration, graph,
world size), the one-process and minibatch runs and their printed summaries; the flags
are :mod:`sparsegnn.cli.train_flags`'s, training on ranks
:mod:`sparsegnn.cli.train_ranks`'s, and the work is done by :mod:`sparsegnn.train`. A
run is distributed when ``--nprocs`` > 1, when ``--algo`` is given, when torchrun
launched it (``WORLD_SIZE`` set), when ``--dataset`` is a partitioned folder or when
``--checkpoint`` is a distributed run's checkpoint folder; it uses sampled minibatches
with ``--mode minibatch``.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparsegnn.cli.common import finish_run, resolve_device
from sparsegnn.cli.train_flags import add_train_flags

if TYPE_CHECKING:
    from sparsegnn.data import GraphData
    from sparsegnn.train import TrainConfig, TrainResult
    from sparsegnn.train.minibatch import MinibatchConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a GNN on a graph", description=__doc__)
    add_train_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    resolve_device(args.device)  # a bogus --device is refused before any data is read
    _check_checkpoint_kind(args)
    _check_precision(args)
    if args.mode == "minibatch":
        return _minibatch(args)
    if _is_distributed(args):
        from sparsegnn.cli.train_ranks import train_on_ranks  # it imports this module

        return train_on_ranks(args)
    return _fullgraph(args)


def _is_distributed(args: argparse.Namespace) -> bool:
    """Several ranks asked for, an algorithm named, torchrun's WORLD_SIZE, a sharded graph,
    or a distributed run's checkpoint folder (resumed on one rank with ``--nprocs 1``)."""
    from sparsegnn.distributed.layout.shard import is_shard_dir
    from sparsegnn.distributed.runtime.session import job_world_size

    return (args.nprocs > 1 or args.algo is not None
            or job_world_size() > 1 or is_shard_dir(args.dataset)
            or _checkpoint_folder(args))


def _checkpoint_folder(args: argparse.Namespace) -> bool:
    """Whether ``--checkpoint`` names a folder of a distributed run's checkpoints."""
    if args.checkpoint is None or not args.checkpoint.is_dir():
        return False
    from sparsegnn.train.dist_checkpoint import is_checkpoint_folder

    return is_checkpoint_folder(args.checkpoint)


def _check_checkpoint_kind(args: argparse.Namespace) -> None:
    """A folder as ``--checkpoint`` only for full-graph training on ranks, which keeps one
    sub-folder per saved epoch; every other mode writes one file (per rank)."""
    path = args.checkpoint
    if path is None or not path.is_dir():
        return
    if args.mode == "minibatch" or not _is_distributed(args):
        from sparsegnn.errors import InvalidValueError

        raise InvalidValueError(
            f"--checkpoint {path} is a directory; name a file inside it (a folder holds "
            "the checkpoints of full-graph training on ranks: --nprocs, --algo)")


def _check_precision(args: argparse.Namespace) -> None:
    """``--precision bf16`` only where it is implemented: one-process full-graph training
    (the distributed and minibatch trainers build float32 features of their own)."""
    if args.precision == "fp32" or (args.mode != "minibatch" and not _is_distributed(args)):
        return
    from sparsegnn.errors import InvalidValueError

    raise InvalidValueError(
        f"--precision {args.precision} is for one-process full-graph training; drop it "
        "for --mode minibatch and for distributed runs (--nprocs, --algo)")


def world_size(args: argparse.Namespace) -> int:
    """Ranks of the job: ``--nprocs``, or torchrun's ``WORLD_SIZE``."""
    from sparsegnn.distributed.runtime.session import job_world_size

    return max(args.nprocs, job_world_size())


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The :class:`~sparsegnn.train.TrainConfig` of parsed ``sparsegnn train`` options."""
    from sparsegnn.train import TrainConfig

    minibatch = args.mode == "minibatch"
    return TrainConfig(
        model=args.model or ("sage" if minibatch else "gcn"), hidden=args.hidden,
        num_layers=args.layers if args.layers is not None else (3 if minibatch else 2),
        dropout=args.dropout, dropout_mask=args.dropout_mask, lr=args.lr,
        weight_decay=args.weight_decay, epochs=args.epochs,
        patience=args.patience, seed=args.seed, dtype=args.dtype, precision=args.precision,
        checkpoint=args.checkpoint,
        checkpoint_every=args.checkpoint_every, resume=args.resume, restart=args.restart,
        progress=args.progress, logdir=args.logdir,
    )


def training_graph(args: argparse.Namespace) -> GraphData:
    """The training graph, checked (a refusal names the --dataset given, not the name
    stored in the file, often just 'graph') and with rows normalised unless asked not to."""
    from sparsegnn.data import load_any, row_normalize

    graph = load_any(args.dataset, args.data_dir, seed=args.seed)
    graph.check_trainable(args.dataset)
    if not args.no_normalize_features and graph.x is not None:
        graph.x = row_normalize(graph.x)
    return graph


def process_memory(args: argparse.Namespace) -> int:
    """``--max-rank-memory``'s part for the process itself: ``--profile``'s measured base
    and growth, else the predictor's default."""
    from sparsegnn.distributed.planning.rank_memory import process_bytes

    if args.profile is None:
        return process_bytes(None)
    from sparsegnn.distributed.planning.cost_profile import Profile

    return process_bytes(Profile.load(args.profile))


def predicted_total(predicted: dict[str, int]) -> dict[str, int]:
    """A ``--max-rank-memory`` prediction by kind with its total, for the JSON output."""
    return {**predicted, "total": sum(predicted.values())}


def _plain_config(cfg: Any) -> dict[str, Any]:
    return {k: v if isinstance(v, int | float | str | bool | None) else str(v)
            for k, v in asdict(cfg).items()}


def _fullgraph(args: argparse.Namespace) -> int:
    from sparsegnn.train import train_single

    graph, cfg = training_graph(args), config_from_args(args)
    if graph.x is not None:  # store at the run's precision now: the float32 copy is freed
        graph.x = graph.x.to(cfg.feature_dtype)
    device = resolve_device(args.device)
    _, result = train_single(graph, cfg, device)
    out = {"dataset": graph.name, "model": cfg.model, "device": str(device),
           **result.to_dict(), "config": _plain_config(cfg)}
    ogb = _ogb_metrics(graph, result)
    if ogb is not None:
        out["ogb_evaluator"] = ogb
    return finish_run(args, title(graph.name, cfg.model), out,
                      fullgraph_summary(graph.name, cfg.model, result) + _ogb_line(out))


def _ogb_metrics(graph: GraphData, result: TrainResult) -> dict[str, dict[str, float]] | None:
    """OGB's own Evaluator on the test predictions of the best-on-validation weights, for
    an OGB dataset where ``ogb`` is installed (None otherwise): the leaderboard's metric."""
    from sparsegnn.data.ogb import ogb_evaluate_pairs

    name = graph.meta.get("ogb_name")
    if name is None or result.test_confusion is None:
        return None
    metrics = ogb_evaluate_pairs(str(name), result.test_confusion)
    return None if metrics is None else {"test": metrics}


def _ogb_line(out: dict[str, Any]) -> str:
    ogb = out.get("ogb_evaluator")
    if ogb is None:
        return ""
    shown = ", ".join(f"{split} {k} {v:.4f}" for split, m in ogb.items() for k, v in m.items())
    return f"\nOGB Evaluator ({out['dataset']}): {shown}"


def title(dataset: str, model: str, detail: str = "") -> str:
    """The report's heading."""
    return f"sparsegnn train: {model} on {dataset}{detail}"


def fullgraph_summary(dataset: str, model: str, r: TrainResult) -> str:
    """The two lines a person reads after a full-graph run (also ``sparsegnn demo``'s)."""
    return (
        f"{model} on {dataset}: test accuracy {r.test_accuracy:.4f} "
        f"(best validation {r.best_val_accuracy:.4f} at epoch {r.best_epoch}, "
        f"{r.epochs_run} epochs{', stopped early' if r.stopped_early else ''})\n"
        f"median epoch time {r.epoch_time_s * 1e3:.1f} ms, "
        f"peak memory {r.peak_memory_bytes / 2**20:.0f} MiB"
    )


def _minibatch(args: argparse.Namespace) -> int:
    """``--mode minibatch``: one process, or ranks (``--nprocs``, torchrun) that each
    sample their share of every minibatch, from the whole topology (replicated) or from
    their rows of it (``--topology partitioned``)."""
    from dataclasses import replace

    from sparsegnn.distributed.layout.row_blocks import is_row_block_dir
    from sparsegnn.train.minibatch import MinibatchConfig, MinibatchData, fit_minibatch
    from sparsegnn.train.minibatch_distributed import Handoff, run_minibatch

    if is_row_block_dir(args.dataset):
        return _minibatch_from_blocks(args)
    graph = training_graph(args)
    name = graph.name
    cfg = replace(config_from_args(args), model="sage")
    mb = MinibatchConfig(args.sampler, tuple(args.fanouts), args.batch_size, args.bulk)
    device = resolve_device(args.device)
    world, comm = 1, None
    extra: dict[str, Any] = {}
    if world_size(args) > 1:
        if args.max_rank_memory is not None:
            from sparsegnn.train.memory import check_graph_rank_memory

            extra["predicted_memory_per_rank"] = predicted_total(check_graph_rank_memory(
                graph, cfg, args.max_rank_memory, world_size(args), mode="minibatch",
                replication=args.replication, topology=args.topology,
                process=process_memory(args)))
        # Handed over so that a partitioned torchrun rank keeps only its rows.
        handoff = Handoff(MinibatchData.from_graph(graph, cfg.torch_dtype))
        del graph
        outcome = run_minibatch(handoff, cfg, mb, args.nprocs, topology=args.topology,
                                replication=args.replication, backend=args.backend,
                                timeout_s=args.timeout,
                                feature_cache_mb=args.feature_cache_mb)
        if outcome is None:  # not rank 0 of a torchrun job: rank 0 reports
            return 0
        summary, world = outcome.value.summary, outcome.world_size
        comm = outcome.comm.to_dict()
        extra.update(topology=args.topology)
        if args.topology == "partitioned":
            extra["replication"] = args.replication
    else:
        data = MinibatchData.from_graph(graph, cfg.torch_dtype)
        summary = fit_minibatch(data, cfg, mb, device)[1].to_dict()
    out = {"dataset": name, "model": "sage", "mode": "minibatch", "device": str(device),
           "world_size": world, **extra, **summary, "minibatch": asdict(mb),
           "config": _plain_config(cfg)}
    if comm is not None:
        out["comm_bytes"] = comm
    return finish_run(args, title(name, "sage", f", {mb.sampler} minibatches"), out,
                      _minibatch_summary(name, mb, summary))


def _minibatch_from_blocks(args: argparse.Namespace) -> int:
    """``--mode minibatch --dataset DIR`` with a row-block folder: partitioned topology,
    every rank reading only its block's file; the replication factor is ranks / blocks."""
    from dataclasses import replace

    from sparsegnn.distributed.layout.row_blocks import check_row_blocks
    from sparsegnn.train.minibatch import MinibatchConfig
    from sparsegnn.train.minibatch_distributed import run_minibatch

    manifest = check_row_blocks(args.dataset)
    world, blocks = world_size(args), len(manifest["bounds"]) - 1
    replication = world // blocks
    if world % blocks or args.replication not in (1, replication):
        from sparsegnn.errors import InvalidValueError

        raise InvalidValueError(
            f"{args.dataset} has {blocks} row blocks: run it on a multiple of {blocks} ranks "
            f"(replication = ranks / blocks), not {world} with --replication {args.replication}")
    cfg = replace(config_from_args(args), model="sage")
    mb = MinibatchConfig(args.sampler, tuple(args.fanouts), args.batch_size, args.bulk)
    predicted = None
    if args.max_rank_memory is not None:
        from sparsegnn.train.memory import check_row_blocks_rank_memory

        predicted = predicted_total(check_row_blocks_rank_memory(
            manifest, cfg, args.max_rank_memory, process_memory(args)))
    outcome = run_minibatch(Path(args.dataset), cfg, mb, args.nprocs, topology="partitioned",
                            replication=replication, backend=args.backend,
                            timeout_s=args.timeout, feature_cache_mb=args.feature_cache_mb)
    if outcome is None:
        return 0
    summary = outcome.value.summary
    out = {"dataset": manifest["name"], "model": "sage", "mode": "minibatch",
           "device": str(resolve_device(args.device)), "world_size": outcome.world_size,
           "topology": "partitioned", "replication": replication, "row_blocks": blocks,
           **summary, "minibatch": asdict(mb), "config": _plain_config(cfg),
           "comm_bytes": outcome.comm.to_dict()}
    if predicted is not None:
        out["predicted_memory_per_rank"] = predicted
    return finish_run(args, title(manifest["name"], "sage", f", {mb.sampler} minibatches"),
                      out, _minibatch_summary(manifest["name"], mb, summary))


def _minibatch_summary(dataset: str, mb: MinibatchConfig, r: dict[str, Any]) -> str:
    fanouts = ",".join(map(str, mb.fanouts))
    stopped = ", stopped early" if r["stopped_early"] else ""
    return (
        f"GraphSAGE on {dataset}, {mb.sampler} sampling (fan-outs {fanouts}, "
        f"batch {mb.batch_size}, bulk {mb.bulk}): test accuracy {r['test_accuracy']:.4f} "
        f"(best validation {r['best_val_accuracy']:.4f} at epoch {r['best_epoch']}, "
        f"{r['epochs_run']} epochs{stopped})\n"
        f"{r['seeds_per_second']:.0f} training seeds/s per rank, "
        f"{r['minibatches_per_epoch']} minibatches/epoch, "
        f"peak memory {r['peak_memory_bytes'] / 2**20:.0f} MiB"
    )

