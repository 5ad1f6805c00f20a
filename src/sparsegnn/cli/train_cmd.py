"""``sparsegnn train``: full-graph (one process or partitioned ranks) or sampled minibatches.

This module owns the flags and the printed summaries; the work is done by
:mod:`sparsegnn.train`. A run is distributed when ``--nprocs`` > 1, when ``--algo`` is
given, when torchrun launched it (``WORLD_SIZE`` set), when ``--dataset`` is a
partitioned folder or when ``--checkpoint`` is a distributed run's checkpoint folder; it
uses sampled minibatches with ``--mode minibatch``.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparsegnn.cli.common import (
    add_device_flag,
    add_json_flag,
    add_run_flags,
    finish_run,
    float_range,
    int_list,
    int_range,
    output_dir,
    output_file,
    resolve_device,
)
from sparsegnn.names import ALGORITHMS, DEFAULT_MASK, MASK_KINDS, PARTITIONERS

if TYPE_CHECKING:
    from sparsegnn.data import GraphData
    from sparsegnn.train import TrainConfig, TrainResult
    from sparsegnn.train.minibatch import MinibatchConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a GNN on a graph", description=__doc__)
    p.add_argument("--dataset", default="cora", help="dataset name, generator spec or graph file")
    p.add_argument(
        "--data-dir", default=None,
        help="data root (default: $SPARSEGNN_DATA, else the nearest shared/data, else bundled)",
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
    p.add_argument("--dropout-mask", choices=MASK_KINDS, default=DEFAULT_MASK,
                   help="bytes (default): one random byte per element, a mask about 25x "
                   "cheaper to draw; bernoulli: F.dropout's very draws")
    p.add_argument("--lr", type=float_range(0.0, lo_open=True), default=0.01)
    p.add_argument("--weight-decay", type=float_range(0.0), default=5e-4)
    p.add_argument("--epochs", type=int_range(1), default=200)
    p.add_argument("--patience", type=int_range(1), default=100,
                   help="early-stopping patience (epochs)")
    p.add_argument("--seed", type=int_range(0), default=0)
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="feature storage: bf16 keeps features and activations in bfloat16 "
                   "(weights, sums and loss float32); one-process full-graph training only")
    p.add_argument(
        "--no-normalize-features",
        action="store_true",
        help="keep raw features (default: scale each row to sum 1, as for Planetoid)",
    )
    p.add_argument(
        "--checkpoint", type=_checkpoint_path, default=None,
        help="checkpoint file (written atomically); on ranks (full-graph) a folder with one "
        "sub-folder of rank shards and a manifest per saved epoch",
    )
    p.add_argument("--checkpoint-every", type=int_range(1), default=10)
    again = p.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true",
                       help="continue from --checkpoint if it exists (a checkpoint folder: "
                       "from its newest restorable epoch, on any --nprocs/--algo)")
    again.add_argument("--restart", action="store_true",
                       help="train from epoch 0 on a checkpoint folder that holds saved "
                       "epochs; they are deleted once this run's first checkpoint is saved")
    add_device_flag(p)
    add_json_flag(p)
    add_run_flags(p)
    dist = p.add_argument_group("distributed full-graph training")
    dist.add_argument("--nprocs", type=int_range(1), default=1,
                      help="spawn this many local ranks")
    dist.add_argument("--algo", choices=(*ALGORITHMS, "auto"), default=None,
                      help="auto: of the configurations `plan --auto` predicts fastest "
                           "(algorithm, replication, comm and partition), the model's "
                           "first choice unless another ran >10%% faster in a few trial "
                           "epochs (--auto-trials)")
    dist.add_argument("--auto-trials", type=int_range(1), default=None, metavar="K",
                      help="--algo auto: try up to K configurations predicted within 1.5x "
                           "of the fastest for a few epochs each; train the fastest "
                           "measured if it beat the model's first choice by >10%% "
                           "(1: trust the model alone; default 3, or 1 with "
                           "--max-rank-memory: runs one after another in a process keep "
                           "memory the C allocator holds on to, which the per-run memory "
                           "prediction does not bound)")
    dist.add_argument("--profile", default=None,
                      help="--algo auto: machine profile from `sparsegnn calibrate --out` "
                           "(default: calibrate now, quickly)")
    dist.add_argument("--dropout-masks", choices=("auto", "global", "block"), default=None,
                      help="global: every rank draws the whole graph's dropout mask and "
                           "keeps its rows (the same result as one process, at an n x f "
                           "draw per layer on every rank); block: each vertex block draws "
                           "its own (what scales); default: global for a graph loaded whole, "
                           "block for a partitioned folder and for --algo auto")
    dist.add_argument("--overlap", nargs="?", const="on", default="off",
                      choices=("on", "off", "auto"),
                      help="1d/1.5d: overlap communication with computation (dense: the "
                           "next blocks' broadcasts, from up to three roots at once, with "
                           "the SpMM of the current one, for three blocks of H in memory "
                           "instead of one; sparse: the all-to-all with the SpMM of the "
                           "rank's own tile; float32 moves X in column slices, each "
                           "multiplied while the next arrives); results unchanged to the "
                           "bit. auto: a short trial of each 1d/1.5d configuration with and "
                           "without it decides (with --algo auto, of every configuration "
                           "tried; like --auto-trials > 1, runs one after another in a "
                           "process, whose peak the per-run memory prediction does not "
                           "bound); bare --overlap means on")
    dist.add_argument(
        "--max-rank-memory", type=float_range(0.0, lo_open=True), default=None,
        metavar="GIB",
        help="refuse, before any rank starts, when the predicted per-rank footprint "
        "(topology + features + model + optimiser) exceeds this many GiB",
    )
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
    mb.add_argument(
        "--topology", choices=("replicated", "partitioned"), default="replicated",
        help="with several ranks: every rank holds the whole graph (replicated), or its "
        "rows of A and of the features only (partitioned, 1.5D with --replication)",
    )
    mb.add_argument(
        "--feature-cache-mb", type=float_range(0.0), default=0.0,
        help="partitioned topology: MiB per rank of cached remote feature rows, highest "
        "in-degree first (default 0: no cache)",
    )
    p.set_defaults(func=run)


def _checkpoint_path(text: str) -> Path:
    """A checkpoint file, or a folder for a distributed run: which of the two a run may use
    is known only once all flags are parsed (:func:`_check_checkpoint_kind`)."""
    return output_dir(text) if Path(text).is_dir() else output_file(text)


def run(args: argparse.Namespace) -> int:
    resolve_device(args.device)  # a bogus --device is refused before any data is read
    _check_checkpoint_kind(args)
    _check_precision(args)
    if args.mode == "minibatch":
        return _minibatch(args)
    if _is_distributed(args):
        return _distributed(args)
    return _fullgraph(args)


def _is_distributed(args: argparse.Namespace) -> bool:
    """Several ranks asked for, an algorithm named, torchrun's WORLD_SIZE, a sharded graph,
    or a distributed run's checkpoint folder (resumed on one rank with ``--nprocs 1``)."""
    from sparsegnn.distributed.shard import is_shard_dir

    return (args.nprocs > 1 or args.algo is not None
            or int(os.environ.get("WORLD_SIZE", "1")) > 1 or is_shard_dir(args.dataset)
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


def _world(args: argparse.Namespace) -> int:
    """Ranks of the job: ``--nprocs``, or torchrun's ``WORLD_SIZE``."""
    return max(args.nprocs, int(os.environ.get("WORLD_SIZE", "1")))


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


def _graph(args: argparse.Namespace) -> GraphData:
    """The training graph, checked (a refusal names the --dataset given, not the name
    stored in the file, often just 'graph') and with rows normalised unless asked not to."""
    from sparsegnn.data import load_any, row_normalize

    graph = load_any(args.dataset, args.data_dir, seed=args.seed)
    graph.check_trainable(args.dataset)
    if not args.no_normalize_features and graph.x is not None:
        graph.x = row_normalize(graph.x)
    return graph


def _plain_config(cfg: Any) -> dict[str, Any]:
    return {k: v if isinstance(v, int | float | str | bool | None) else str(v)
            for k, v in asdict(cfg).items()}


def _fullgraph(args: argparse.Namespace) -> int:
    from sparsegnn.train import train_single

    graph, cfg = _graph(args), config_from_args(args)
    if graph.x is not None:  # store at the run's precision now: the float32 copy is freed
        graph.x = graph.x.to(cfg.feature_dtype)
    device = resolve_device(args.device)
    _, result = train_single(graph, cfg, device)
    out = {"dataset": graph.name, "model": cfg.model, "device": str(device),
           **result.to_dict(), "config": _plain_config(cfg)}
    ogb = _ogb_metrics(graph, result)
    if ogb is not None:
        out["ogb_evaluator"] = ogb
    return finish_run(args, _title(graph.name, cfg.model), out,
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


def _title(dataset: str, model: str, detail: str = "") -> str:
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

    from sparsegnn.distributed.row_blocks import is_row_block_dir
    from sparsegnn.train.minibatch import MinibatchConfig, MinibatchData, fit_minibatch
    from sparsegnn.train.minibatch_distributed import Handoff, run_minibatch

    if is_row_block_dir(args.dataset):
        return _minibatch_from_blocks(args)
    graph = _graph(args)
    name = graph.name
    cfg = replace(config_from_args(args), model="sage")
    mb = MinibatchConfig(args.sampler, tuple(args.fanouts), args.batch_size, args.bulk)
    device = resolve_device(args.device)
    world, comm = 1, None
    extra: dict[str, Any] = {}
    if args.nprocs > 1 or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        if args.max_rank_memory is not None:
            from sparsegnn.train.memory import check_graph_rank_memory

            check_graph_rank_memory(
                graph, cfg, args.max_rank_memory, _world(args), mode="minibatch",
                replication=args.replication, topology=args.topology)
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
        extra = {"topology": args.topology}
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
    return finish_run(args, _title(name, "sage", f", {mb.sampler} minibatches"), out,
                      _minibatch_summary(name, mb, summary))


def _minibatch_from_blocks(args: argparse.Namespace) -> int:
    """``--mode minibatch --dataset DIR`` with a row-block folder: partitioned topology,
    every rank reading only its block's file; the replication factor is ranks / blocks."""
    from dataclasses import replace

    from sparsegnn.distributed.row_blocks import check_row_blocks
    from sparsegnn.train.minibatch import MinibatchConfig
    from sparsegnn.train.minibatch_distributed import run_minibatch

    manifest = check_row_blocks(args.dataset)
    world, blocks = _world(args), len(manifest["bounds"]) - 1
    replication = world // blocks
    if world % blocks or args.replication not in (1, replication):
        from sparsegnn.errors import InvalidValueError

        raise InvalidValueError(
            f"{args.dataset} has {blocks} row blocks: run it on a multiple of {blocks} ranks "
            f"(replication = ranks / blocks), not {world} with --replication {args.replication}")
    cfg = replace(config_from_args(args), model="sage")
    mb = MinibatchConfig(args.sampler, tuple(args.fanouts), args.batch_size, args.bulk)
    if args.max_rank_memory is not None:
        from sparsegnn.train.memory import check_row_blocks_rank_memory

        check_row_blocks_rank_memory(manifest, cfg, args.max_rank_memory)
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
    return finish_run(args, _title(manifest["name"], "sage", f", {mb.sampler} minibatches"),
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


def _distributed(args: argparse.Namespace) -> int:
    """Full-graph training on a grid of ranks (``--nprocs``/``--algo``, or torchrun); a
    partitioned folder as ``--dataset`` supplies its own grid when none is given."""
    from sparsegnn.train.distributed import (
        DistributedConfig,
        DistributedJob,
        run_distributed,
        with_overlap_variants,
        with_plan,
    )

    auto, trials = _choose(args) if args.algo == "auto" else (None, [])
    partition = args.partition if args.partition in (None, *PARTITIONERS) else Path(
        args.partition)
    dcfg = DistributedConfig(replication=args.replication, backend=args.backend,
                             timeout_s=args.timeout, partition=partition, comm=args.comm,
                             overlap=args.overlap == "on", dropout_masks=_masks(args, auto))
    job = DistributedJob.for_dataset(
        args.dataset, config_from_args(args), dcfg, args.nprocs, args.algo,
        data_dir=args.data_dir, normalize_features=not args.no_normalize_features)
    candidates = [with_plan(job.dcfg, c) for c in trials] or [job.dcfg]
    if args.overlap == "auto":
        twin_fits = [p["overlapped_memory_fits"] for p in auto["predicted"]] if auto else None
        candidates = with_overlap_variants(candidates, twin_fits)
    if len(candidates) > 1:
        job = replace(job, trials=tuple(candidates))
    if args.max_rank_memory is not None:
        from sparsegnn.distributed.shard import is_shard_dir, read_manifest
        from sparsegnn.train.memory import check_graph_rank_memory, check_shards_rank_memory

        if is_shard_dir(args.dataset):
            check_shards_rank_memory(read_manifest(args.dataset), job.cfg,
                                     args.max_rank_memory)
        else:
            nprocs = job.nprocs if job.nprocs > 1 else _world(args)
            check_graph_rank_memory(_graph(args), job.cfg, args.max_rank_memory, nprocs,
                                    mode="fullgraph", algo=job.dcfg.algo,
                                    replication=job.dcfg.replication)
    if job.cfg.checkpoint is not None:
        from sparsegnn.train.dist_checkpoint import check_folder

        check_folder(job.cfg.checkpoint)
    run = run_distributed(job)
    if run is None:  # not rank 0 of a torchrun job: rank 0 reports
        return 0
    for warning in run.reports[0].checkpoint_warnings:
        print(f"sparsegnn train: warning: {warning}", file=sys.stderr)
    out = run.to_dict(job)
    text = fullgraph_summary(run.graph, job.cfg.model, run.result)
    mib = out["comm"]["total_bytes_per_epoch"] / 2**20
    text += f"\n{run.shape.describe()}: {mib:.2f} MiB sent per epoch (all ranks)"
    if run.reports[0].resumed is not None:
        text += f"\n{run.reports[0].resumed.describe()}"
    if auto is not None:
        out["auto"] = _auto_report(auto, run)
        out["auto"]["measured_epoch_s"] = out["epoch_time_s"]
        text += _auto_summary(out["auto"])
    elif run.trials:  # --overlap auto on a given configuration
        text += _overlap_summary(run.trials, run.dcfg.overlap)
    return finish_run(args, _title(run.graph, job.cfg.model, f", {run.shape.describe()}"),
                      out, text)


def _masks(args: argparse.Namespace, auto: dict[str, Any] | None) -> Any:
    """``--dropout-masks``, where not given: per block for ``--algo auto``, whose cost model
    prices a rank's share of the work (a whole-graph mask on every rank would undo the
    distribution it chose), else ``auto``."""
    if args.dropout_masks is not None:
        return args.dropout_masks
    return "block" if auto is not None else "auto"


def _choose(args: argparse.Namespace) -> tuple[dict[str, Any], list[Any]]:
    """``--algo auto``: rank the configurations for this graph and world size, set the
    options of the predicted-fastest one that fits ``--max-rank-memory``, and return the
    predictions and the shortlist (that one first) for the ranks to try."""
    from sparsegnn.cli.plan_cmd import load_profile
    from sparsegnn.distributed.autoplan import auto_plan, shortlist
    from sparsegnn.distributed.planner import PlanConfig, PlanGraph
    from sparsegnn.distributed.shard import is_shard_dir
    from sparsegnn.errors import InvalidValueError

    if is_shard_dir(args.dataset):
        raise InvalidValueError("--algo auto chooses the partition too: give the graph, "
                                "not a partitioned folder")
    world = _world(args)
    cfg = config_from_args(args)
    base = PlanConfig(world, model=cfg.model, hidden=cfg.hidden, num_layers=cfg.num_layers,
                      dtype=cfg.dtype, seed=cfg.seed, overlap=args.overlap == "on")
    partitioners = ("block",) if args.partition is None else (args.partition,)
    if args.profile is None and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise InvalidValueError("--algo auto under torchrun needs --profile (every rank must "
                                "choose the same; write one with `sparsegnn calibrate`)")
    ranked = auto_plan(PlanGraph.of(_graph(args), cfg.model), world,
                       load_profile(args.profile, world), base,
                       partitioners=partitioners, max_rank_memory_gib=args.max_rank_memory,
                       overlap_twins=args.overlap == "auto")
    trials = shortlist(ranked, _auto_trials(args))
    if not trials:
        raise InvalidValueError("--algo auto: no configuration is predicted to fit "
                                f"--max-rank-memory {args.max_rank_memory} GiB on {world} ranks")
    choice = trials[0]
    args.algo, args.replication = choice.config.algo, choice.config.replication
    args.comm = choice.config.comm
    args.partition = None if choice.config.partitioner == "block" else choice.config.partitioner
    predicted = [{**c.to_dict(), "overlapped_memory_fits": c.twin_fits} for c in trials]
    return {"candidates": len(ranked), "predicted": predicted}, [c.config for c in trials]


def _auto_trials(args: argparse.Namespace) -> int:
    """``--auto-trials``, where not given: 3, or 1 (the model's choice alone) under
    ``--max-rank-memory``. Why: six trial runs and the final one in the same processes
    peaked at 611-963 MiB per rank on a 65k-vertex SBM at p = 4, where each one alone
    peaked at 479-519 MiB and was predicted at 605-611 (freed memory the C allocator
    keeps, even with it handed back between runs), so only one run per process stays
    within its prediction."""
    if args.auto_trials is not None:
        return int(args.auto_trials)
    return 1 if args.max_rank_memory is not None else 3


def _auto_report(auto: dict[str, Any], run: Any) -> dict[str, Any]:
    """What ``--algo auto`` chose and why: the configuration trained (the trials' winner,
    as the ranks chose it), its prediction, and each trial's predicted epoch and memory
    and measured epoch (a configuration tried with and without overlap, ``--overlap
    auto``, appears twice with the same prediction: the model prices no overlap)."""
    fields = ("algo", "replication", "comm", "partitioner", "epoch_s", "memory_bytes_per_rank")
    predicted = {_plan_key(p["algo"], p["replication"], p["comm"], p["partitioner"]): p
                 for p in auto["predicted"]}

    def prediction(algo: str, replication: int, comm: str, partition: Any,
                   overlap: bool) -> dict[str, Any]:
        """The planner's entry, with the overlapped run's memory where it overlaps."""
        p = predicted[_plan_key(algo, replication, comm, partition)]
        twin = p.get("overlapped_memory_bytes_per_rank")
        return {**p, "memory_bytes_per_rank": twin} if overlap and twin is not None else p

    d = run.dcfg
    trials = [{**{k: prediction(t["algo"], t["replication"], t["comm"], t["partition"],
                                t["overlap"])[k] for k in fields},
               "overlap": t["overlap"], "trial_epoch_s": t["measured_epoch_s"]}
              for t in run.trials]
    if not trials:  # the model's choice alone was trained
        trials = [{**{k: p[k] for k in fields}, "overlap": d.overlap, "trial_epoch_s": None}
                  for p in auto["predicted"]]
    return {**prediction(d.algo, d.replication, d.comm, d.partition, d.overlap),
            "overlap": d.overlap, "candidates": auto["candidates"], "trials": trials}


def _plan_key(algo: str, replication: int, comm: str, partition: Any) -> tuple[str, int, str, str]:
    """A configuration as the planner names it (training calls the contiguous split no
    partition, the planner ``block``)."""
    return algo, replication, comm, "block" if partition in (None, "block") else str(partition)


def _overlap_summary(trials: list[dict[str, Any]], chosen: bool) -> str:
    """``--overlap auto``'s trial epochs and what they chose."""
    times = ", ".join(f"{'with' if t['overlap'] else 'without'} "
                      f"{t['measured_epoch_s'] * 1e3:.1f} ms" for t in trials)
    return f"\noverlap auto: trial epochs {times}: overlap {'on' if chosen else 'off'}"


def _auto_summary(auto: dict[str, Any]) -> str:
    overlap = " with overlap" if auto["overlap"] else ""
    text = (f"\nauto: {auto['algo']} c={auto['replication']} {auto['comm']} comm{overlap}, "
            f"{auto['partitioner']} partition; epoch predicted "
            f"{auto['epoch_s'] * 1e3:.1f} ms, measured {auto['measured_epoch_s'] * 1e3:.1f} ms")
    for t in auto["trials"]:
        if t["trial_epoch_s"] is not None:
            overlap = ", overlap" if t["overlap"] else ""
            text += (f"\n  trial {t['algo']} c={t['replication']} {t['comm']}{overlap}: "
                     f"predicted {t['epoch_s'] * 1e3:.1f} ms, measured "
                     f"{t['trial_epoch_s'] * 1e3:.1f} ms")
    return text
