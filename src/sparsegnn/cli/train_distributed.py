"""``sparsegnn train`` on several ranks (``--nprocs``, ``--algo``, or under torchrun).

The command-line glue of :mod:`sparsegnn.train.distributed`: a picklable job built from
the arguments, the rank body that runs it, and rank 0's report with every rank's bytes.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sparsegnn.cli.common import emit
from sparsegnn.data import load_any
from sparsegnn.distributed import (
    GridError,
    close_session,
    gather_objects,
    grid_shape,
    in_torchrun,
    init_session,
    spawn,
)
from sparsegnn.distributed.shard import is_shard_dir, manifest_shape, read_manifest
from sparsegnn.partition import PARTITIONERS
from sparsegnn.train.distributed import (
    DistributedConfig,
    RankReport,
    check_manifest,
    comm_summary,
    train_rank,
)
from sparsegnn.train.fullgraph import (
    TrainConfig,
    TrainResult,
    config_from_args,
    human_summary,
    row_normalize,
)


@dataclass(frozen=True)
class _Job:
    """Everything a rank needs to run the CLI's job (picklable for spawned ranks)."""

    dataset: str
    data_dir: str | None
    normalize_features: bool
    cfg: TrainConfig
    dcfg: DistributedConfig


def _run_job(job: _Job) -> dict[str, Any]:
    """One rank of ``sparsegnn train`` in distributed mode."""
    session = init_session(job.dcfg.backend, job.dcfg.timeout_s)
    try:
        if is_shard_dir(job.dataset):
            source: Any = Path(job.dataset)
            name = read_manifest(source)["name"]
        else:
            source = load_any(job.dataset, job.data_dir, seed=job.cfg.seed)
            name = source.name
            if job.normalize_features and source.x is not None:
                source.x = row_normalize(source.x)
        trained = train_rank(source, job.cfg, job.dcfg, session)
        assert trained is not None  # the grid spans the whole job
        _, result, report = trained
        reports = gather_objects(report)
    finally:
        close_session()
    return {"graph": name, "backend": session.backend, "device": str(session.device),
            "result": result, "reports": reports}


def run_from_args(args: argparse.Namespace) -> int:
    """``sparsegnn train`` with ``--nprocs``/``--algo`` or under torchrun.

    A partitioned directory as ``--dataset`` supplies the algorithm and the number of
    ranks it was written for when ``--algo`` / ``--nprocs`` are not given.
    """
    if args.comm == "sparse" and (args.algo or "1d") not in ("1d", "1.5d"):
        raise GridError(f"--comm sparse supports --algo 1d and 1.5d, not {args.algo}")
    algo, replication, nprocs = args.algo or "1d", args.replication, args.nprocs
    if is_shard_dir(args.dataset):
        written = manifest_shape(read_manifest(args.dataset))
        algo = args.algo or written.algo
        replication = written.cols if algo == "1.5d" and replication == 1 else replication
        nprocs = written.size if nprocs == 1 else nprocs
    job = _Job(
        args.dataset, args.data_dir, not args.no_normalize_features, config_from_args(args),
        DistributedConfig(
            algo=algo, replication=replication, backend=args.backend,
            timeout_s=args.timeout, partition=_partition_arg(args.partition), comm=args.comm,
        ),
    )
    if in_torchrun():
        out = _run_job(job)
        return _emit(args, job, out) if int(os.environ["RANK"]) == 0 else 0
    shape = grid_shape(job.dcfg.algo, nprocs, job.dcfg.replication)
    if is_shard_dir(args.dataset):
        check_manifest(args.dataset, shape, job.cfg.model)
    threads = max(1, (os.cpu_count() or 1) // shape.size)
    return _emit(args, job, spawn(_run_job, shape.size, (job,), threads=threads,
                                   heartbeat_timeout_s=job.dcfg.timeout_s)[0])


def _partition_arg(value: str | None) -> Path | str | None:
    """A partitioner name stays a name; anything else is a partition vector file."""
    if value is None or value in PARTITIONERS:
        return value
    return Path(value)


def _emit(args: argparse.Namespace, job: _Job, first: dict[str, Any]) -> int:
    """Rank 0's result plus every rank's byte counts as the command's output."""
    result: TrainResult = first["result"]
    reports: list[RankReport] = first["reports"]
    shape = grid_shape(job.dcfg.algo, len(reports), job.dcfg.replication)
    out = {
        "dataset": first["graph"], "model": job.cfg.model, "algo": job.dcfg.algo,
        "grid": [shape.rows, shape.cols, shape.layers], "world_size": shape.size,
        "backend": first["backend"], "device": first["device"], **result.summary(),
        "comm": comm_summary(reports),
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(job.cfg).items()},
    }
    text = human_summary(first["graph"], job.cfg.model, result)
    mib = out["comm"]["total_bytes_per_epoch"] / 2**20
    text += f"\n{shape.describe()}: {mib:.2f} MiB sent per epoch (all ranks)"
    return emit(args, out, text)
