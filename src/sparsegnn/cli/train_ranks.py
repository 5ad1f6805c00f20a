"""``sparsegnn train`` on ranks: full-graph training on a grid of processes.

This module owns the distributed full-graph path: it builds the
:class:`~sparsegnn.train.distributed.DistributedJob` from the options (with ``--algo
auto``'s choice and trials, :mod:`sparsegnn.cli.train_auto`, and ``--overlap auto``'s
variants), checks ``--max-rank-memory`` and the checkpoint folder before any rank starts,
runs it, and prints rank 0's summary. Like every CLI module it imports the library only
inside functions.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from sparsegnn.cli.common import finish_run
from sparsegnn.cli.train_auto import auto_report, auto_summary, choose_auto, overlap_summary
from sparsegnn.cli.train_cmd import (
    config_from_args,
    fullgraph_summary,
    predicted_total,
    title,
    training_graph,
    world_size,
)
from sparsegnn.names import PARTITIONERS


def train_on_ranks(args: argparse.Namespace) -> int:
    """Full-graph training on a grid of ranks (``--nprocs``/``--algo``, or torchrun); a
    partitioned folder as ``--dataset`` supplies its own grid when none is given."""
    from sparsegnn.train.distributed import (
        DistributedConfig,
        DistributedJob,
        run_distributed,
        with_overlap_variants,
    )

    auto = choose_auto(args) if args.algo == "auto" else None
    partition = args.partition if args.partition in (None, *PARTITIONERS) else Path(
        args.partition)
    dcfg = DistributedConfig(replication=args.replication, backend=args.backend,
                             timeout_s=args.timeout, partition=partition, comm=args.comm,
                             overlap=args.overlap == "on", dropout_masks=_masks(args, auto))
    if auto is not None:  # the library's choice; the options stay as given
        dcfg = auto.distributed_config(dcfg)
    job = DistributedJob.for_dataset(
        args.dataset, config_from_args(args), dcfg, args.nprocs,
        dcfg.algo if auto is not None else args.algo,
        data_dir=args.data_dir, normalize_features=not args.no_normalize_features)
    if auto is not None:
        candidates = auto.trial_configs(job.dcfg) or [job.dcfg]
    else:
        candidates = [job.dcfg]
        if args.overlap == "auto":
            candidates = with_overlap_variants(candidates)
    if len(candidates) > 1:
        job = replace(job, trials=tuple(candidates))
    predicted = None
    if args.max_rank_memory is not None and auto is None:  # auto's choice is predicted to fit
        predicted = _check_memory(args, job, any(c.overlap for c in candidates))
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
    if predicted is not None:
        out["predicted_memory_per_rank"] = predicted_total(predicted)
    if auto is not None:
        out["auto"] = auto_report(auto, run)
        out["auto"]["measured_epoch_s"] = out["epoch_time_s"]
        text += auto_summary(out["auto"])
    elif run.trials:  # --overlap auto on a given configuration
        text += overlap_summary(run.trials, run.dcfg.overlap)
    return finish_run(args, title(run.graph, job.cfg.model, f", {run.shape.describe()}"),
                      out, text)


def _check_memory(args: argparse.Namespace, job: Any, overlap: bool) -> dict[str, int]:
    """``--max-rank-memory``: the busiest rank's predicted peak by kind, or the refusal."""
    from sparsegnn.cli.train_cmd import process_memory
    from sparsegnn.distributed.layout.shard import is_shard_dir, read_manifest
    from sparsegnn.train.memory import check_graph_rank_memory, check_shards_rank_memory

    d = job.dcfg
    if is_shard_dir(args.dataset):
        return check_shards_rank_memory(read_manifest(args.dataset), job.cfg,
                                        args.max_rank_memory, comm=d.comm, overlap=overlap,
                                        process=process_memory(args))
    nprocs = job.nprocs if job.nprocs > 1 else world_size(args)
    return check_graph_rank_memory(
        training_graph(args), job.cfg, args.max_rank_memory, nprocs, mode="fullgraph",
        algo=d.algo, replication=d.replication, comm=d.comm, overlap=overlap,
        partition=d.partition, process=process_memory(args))


def _masks(args: argparse.Namespace, auto: Any) -> Any:
    """``--dropout-masks``, where not given: per block for ``--algo auto``, whose cost model
    prices a rank's share of the work (a whole-graph mask on every rank would undo the
    distribution it chose), else ``auto``."""
    if args.dropout_masks is not None:
        return args.dropout_masks
    return "block" if auto is not None else "auto"

