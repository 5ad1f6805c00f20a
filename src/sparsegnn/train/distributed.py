"""A distributed full-graph training job: the ranks it starts and what rank 0 returns.

:class:`DistributedJob` says what to train, how (a :class:`DistributedConfig`, or a
shortlist of them to try first, made by :func:`with_plan` and
:func:`with_overlap_variants`) and over how many ranks; :func:`run_distributed` spawns
them locally or runs as this process's torchrun rank. Each rank loads the graph (or reads
its shard), runs the trials if any (:mod:`sparsegnn.train.trials`), trains its share
(:func:`~sparsegnn.train.rank_train.train_rank`) and gathers every rank's report
(:mod:`sparsegnn.train.rank_report`) into a :class:`DistributedRun`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from sparsegnn.data import load_any, row_normalize
from sparsegnn.distributed import (
    GridError,
    GridShape,
    RankFailedError,
    RankResult,
    gather_objects,
    grid_shape,
    in_torchrun,
    lost_peers_named,
    rank_session,
    ranks_for,
    run_on_ranks,
)
from sparsegnn.distributed.layout.partitioned import check_manifest
from sparsegnn.distributed.layout.shard import is_shard_dir, manifest_shape, read_manifest
from sparsegnn.distributed.planning.planner import PlanConfig
from sparsegnn.names import Algorithm, replicates, row_wise
from sparsegnn.train.dist_checkpoint import remove_killed_saves
from sparsegnn.train.fullgraph import TrainConfig, TrainResult
from sparsegnn.train.rank_report import RankReport, comm_summary
from sparsegnn.train.rank_train import DistributedConfig, train_rank
from sparsegnn.train.trials import choose_by_trial


def with_plan(dcfg: DistributedConfig, config: PlanConfig) -> DistributedConfig:
    """``dcfg`` with a planner configuration's algorithm, replication, communication and
    partition."""
    return replace(dcfg, algo=config.algo, replication=config.replication,
                   comm=config.comm,  # type: ignore[arg-type]
                   partition=config.partitioner)


def with_overlap_variants(candidates: Sequence[DistributedConfig],
                          twin_fits: Sequence[bool] | None = None) -> list[DistributedConfig]:
    """``--overlap auto``'s trials: every candidate without overlap (the first stays the
    reference a trial must beat, :func:`~sparsegnn.train.trials.trial_winner`), then each
    1D/1.5D one with it (only those whose ``twin_fits`` is true, where given: a memory
    limit).

    Why measure rather than predict: overlap pays where links are slow and every rank
    has a CPU of its own (1.15-1.9x faster epochs on shaped links, benchmarks/overlap.py),
    and can cost where ranks share CPUs, since the transfers then compete with another
    rank's multiply; the cost model prices neither."""
    plain = [replace(c, overlap=False) for c in candidates]
    fits = [True] * len(plain) if twin_fits is None else list(twin_fits)
    return plain + [replace(c, overlap=True) for c, ok in zip(plain, fits, strict=True)
                    if ok and row_wise(c.algo)]


@dataclass(frozen=True)
class DistributedJob:
    """A whole distributed run: what to train on, how, and over how many ranks.

    ``dataset`` is a dataset name, generator spec or graph file (every rank loads it) or
    a partitioned folder (each rank reads its own file). Picklable for spawned ranks.
    """

    dataset: str
    cfg: TrainConfig
    dcfg: DistributedConfig
    nprocs: int = 1
    data_dir: str | None = None
    normalize_features: bool = True
    # ``--algo auto``'s shortlist: when given, the ranks train each for ``trial_epochs``
    # and then train the fastest measured (``dcfg`` is then only the first of them).
    trials: tuple[DistributedConfig, ...] = ()
    trial_epochs: int = 4

    @classmethod
    def for_dataset(cls, dataset: str, cfg: TrainConfig, dcfg: DistributedConfig,
                    nprocs: int, algo: Algorithm | None = None, **kw: Any) -> DistributedJob:
        """The job, with a partitioned folder's own grid filling what was not given
        (``algo`` None, ``nprocs`` 1, replication 1 for 1.5D); else ``algo`` or 1D."""
        dcfg = replace(dcfg, algo=algo or "1d")
        if is_shard_dir(dataset):
            written = manifest_shape(read_manifest(dataset))
            algo = algo or written.algo
            replication = (written.cols if replicates(algo) and dcfg.replication == 1
                           else dcfg.replication)
            dcfg = replace(dcfg, algo=algo, replication=replication)
            nprocs = written.size if nprocs == 1 else nprocs
        if dcfg.comm == "sparse" and not row_wise(dcfg.algo):
            raise GridError(f"--comm sparse supports --algo 1d and 1.5d, not {dcfg.algo}")
        return cls(dataset, cfg, dcfg, nprocs, **kw)


@dataclass
class DistributedRun:
    """Rank 0's view of a finished job: its training result and every rank's bytes."""

    graph: str
    shape: GridShape
    backend: str
    device: str
    result: TrainResult
    reports: list[RankReport]
    dcfg: DistributedConfig  # what was trained (the trials' winner where there were trials)
    trials: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self, job: DistributedJob) -> dict[str, Any]:
        """The JSON result of ``sparsegnn train`` on ranks."""
        config = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(job.cfg).items()}
        return {
            "dataset": self.graph, "model": job.cfg.model, "algo": self.dcfg.algo,
            "grid": [self.shape.rows, self.shape.cols, self.shape.layers],
            "world_size": self.shape.size, "backend": self.backend, "device": self.device,
            **self.result.to_dict(), "comm": comm_summary(self.reports),
            "resumed_from": (None if self.reports[0].resumed is None
                             else asdict(self.reports[0].resumed)),
            "memory_per_rank": [
                {"rank": r.rank, **r.memory.to_dict()} for r in self.reports
                if r.memory is not None
            ],
            "overlap": self.dcfg.overlap,
            "trials": self.trials,
            "comm_wait_s_per_epoch": [r.waited_s for r in self.reports],
            "config": config,
        }


def run_distributed(job: DistributedJob) -> DistributedRun | None:
    """Run ``job`` on ``job.nprocs`` spawned local ranks, or as this process's rank under
    torchrun (whose world is the grid); rank 0's :class:`DistributedRun` (``None`` on other
    torchrun ranks). The grid and a partitioned folder are checked before any rank starts."""
    shape = grid_shape(job.dcfg.algo, ranks_for(job.nprocs), job.dcfg.replication)
    if is_shard_dir(job.dataset):
        check_manifest(job.dataset, shape, job.cfg.model)
    threads = max(1, (os.cpu_count() or 1) // shape.size)
    try:
        lead = run_on_ranks(_run_job, shape.size, (job,), threads=threads,
                            heartbeat_timeout_s=job.dcfg.timeout_s).lead
    except RankFailedError:
        if job.cfg.checkpoint is not None and not in_torchrun():  # every rank is gone
            remove_killed_saves(Path(job.cfg.checkpoint))
        raise
    return None if lead is None else lead.value


def _run_job(job: DistributedJob) -> RankResult[DistributedRun]:
    """One rank of a job: load (or read its shard), train, gather every rank's bytes; its
    own bytes are those of its last epoch."""
    with rank_session(job.dcfg.backend, job.dcfg.timeout_s) as session:
        if is_shard_dir(job.dataset):
            source: Any = Path(job.dataset)
            name = read_manifest(source)["name"]
        else:
            source = load_any(job.dataset, job.data_dir, seed=job.cfg.seed)
            name = source.name
            if job.normalize_features and source.x is not None:
                source.x = row_normalize(source.x)
        with lost_peers_named():
            dcfg, trials = job.dcfg, []
            if job.trials:
                won, times = choose_by_trial(session, source, job.cfg, job.trials,
                                             job.trial_epochs)
                dcfg = job.trials[won]
                trials = [{"algo": c.algo, "replication": c.replication, "comm": c.comm,
                           "partition": str(c.partition),
                           "overlap": c.overlap, "measured_epoch_s": t}
                          for c, t in zip(job.trials, times, strict=True)]
            trained = train_rank(source, job.cfg, dcfg, session)
            assert trained is not None  # the grid spans the whole job
            _, result, report = trained
            reports = gather_objects(report)
    shape = grid_shape(dcfg.algo, len(reports), dcfg.replication)
    run = DistributedRun(name, shape, session.backend, str(session.device), result, reports,
                         dcfg, trials)
    return RankResult(session.rank, session.world_size, run, report.epoch_bytes)
