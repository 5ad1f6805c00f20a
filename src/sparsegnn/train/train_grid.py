"""Full-graph training on a grid of ranks, for :func:`sparsegnn.train.train_request.run_train`.

This module builds the :class:`~sparsegnn.train.distributed.DistributedJob` of a request
(with ``--algo auto``'s choice and trials, and ``--overlap auto``'s variants), checks the
per-rank memory limit and the checkpoint folder before any rank starts, runs it, and
turns rank 0's run into the outcome. ``--algo auto`` asks
:func:`~sparsegnn.train.auto_choice.choose_distribution`, as ``benchmarks/autoconfig.py``
does, so both choose the same for the same inputs.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from sparsegnn.distributed.layout.shard import is_shard_dir, read_manifest
from sparsegnn.distributed.planning.cost_profile import Profile
from sparsegnn.distributed.runtime.dispatch import run_on_ranks
from sparsegnn.distributed.runtime.session import in_torchrun
from sparsegnn.errors import InvalidValueError
from sparsegnn.names import PARTITIONERS
from sparsegnn.train import auto_choice
from sparsegnn.train.auto_choice import AutoChoice, AutoRequest
from sparsegnn.train.calibration_job import calibrate_rank
from sparsegnn.train.dist_checkpoint import check_folder
from sparsegnn.train.distributed import (
    DistributedConfig,
    DistributedJob,
    DistributedRun,
    run_distributed,
    with_overlap_variants,
)
from sparsegnn.train.memory import check_graph_rank_memory, check_shards_rank_memory
from sparsegnn.train.train_request import (
    TrainOutcome,
    TrainRequest,
    predicted_total,
    process_memory,
    training_graph,
    world_size,
)
from sparsegnn.train.train_summary import auto_summary, fullgraph_summary, overlap_summary, title


def train_on_grid(request: TrainRequest) -> TrainOutcome | None:
    """Full-graph training on a grid of ranks (``nprocs``/``algo``, or torchrun); a
    partitioned folder as dataset supplies its own grid when none is given."""
    r = request.ranks
    auto = choose_auto(request) if r.algo == "auto" else None
    job = _job(request, auto)
    candidates = list(job.trials) or [job.dcfg]
    predicted = None
    if r.max_rank_memory_gib is not None and auto is None:  # auto's choice is predicted to fit
        predicted = _check_memory(request, job, any(c.overlap for c in candidates))
    if job.cfg.checkpoint is not None:
        check_folder(job.cfg.checkpoint)
    run = run_distributed(job)
    if run is None:  # not rank 0 of a torchrun job: rank 0 reports
        return None
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
    return TrainOutcome(title(run.graph, job.cfg.model, f", {run.shape.describe()}"), out,
                        text, tuple(run.reports[0].checkpoint_warnings))


def _job(request: TrainRequest, auto: AutoChoice | None) -> DistributedJob:
    """The job: the request's configuration, or the automatic choice's; with its trials
    (the choice's shortlist, or ``--overlap auto``'s variants) where there are several."""
    r = request.ranks
    partition = r.partition if r.partition in PARTITIONERS else Path(r.partition)
    dcfg = DistributedConfig(replication=r.replication, backend=r.backend,
                             timeout_s=r.timeout_s, partition=partition, comm=r.comm,
                             overlap=r.overlap == "on", dropout_masks=_masks(request, auto))
    if auto is not None:
        dcfg = auto.distributed_config(dcfg)
    job = DistributedJob.for_dataset(
        request.dataset, request.cfg, dcfg, r.nprocs,
        dcfg.algo if auto is not None else r.algo,
        data_dir=request.data_dir, normalize_features=request.normalize_features)
    if auto is not None:
        candidates = auto.trial_configs(job.dcfg) or [job.dcfg]
    else:
        candidates = [job.dcfg]
        if r.overlap == "auto":
            candidates = with_overlap_variants(candidates)
    return replace(job, trials=tuple(candidates)) if len(candidates) > 1 else job


def choose_auto(request: TrainRequest) -> AutoChoice:
    """``--algo auto``: the library's choice
    (:func:`~sparsegnn.train.auto_choice.choose_distribution`) for this graph, world size
    and request."""
    r = request.ranks
    if is_shard_dir(request.dataset):
        raise InvalidValueError("--algo auto chooses the partition too: give the graph, "
                                "not a partitioned folder")
    world = world_size(request)
    if r.profile is None and in_torchrun():
        raise InvalidValueError("--algo auto under torchrun needs --profile (every rank must "
                                "choose the same; write one with `sparsegnn calibrate`)")
    partitioners = (r.partition,)
    return auto_choice.choose_distribution(AutoRequest(
        training_graph(request), world, request.cfg,
        profile_or_calibrate(r.profile, world, r.calibrate, "--algo auto"),
        partitioners=partitioners, max_rank_memory_gib=r.max_rank_memory_gib,
        overlap=r.overlap, trials=auto_trials(request)))


def profile_or_calibrate(path: str | None, parts: int, calibrate: bool, option: str) -> Profile:
    """The profile at ``path``, or, when the user asked for it with ``calibrate``, one
    measured now (quick, ``min(parts, 8)`` ranks): calibrating spawns ranks for up to a
    minute, which a planning command must not do behind the user's back."""
    if path is not None:
        return Profile.load(path)
    if not calibrate:
        raise InvalidValueError(
            f"{option} needs a machine profile: write one with `sparsegnn calibrate "
            f"--nprocs {min(parts, 8)} --out machine.json` and pass --profile machine.json, "
            "or add --calibrate to measure a quick one now")
    # Spawned: rank 0's profile; under torchrun: this rank's (priced with rank 0's rates).
    return run_on_ranks(calibrate_rank, min(parts, 8), (True,), wall_timeout_s=900).results[0]


def auto_trials(request: TrainRequest) -> int:
    """``--auto-trials``, where not given: 3, or 1 (the model's choice alone) under a
    per-rank memory limit. Why: six trial runs and the final one in the same processes
    peaked at 611-963 MiB per rank on a 65k-vertex SBM at p = 4, where each one alone
    peaked at 479-519 MiB and was predicted at 605-611 (freed memory the C allocator
    keeps, even with it handed back between runs), so only one run per process stays
    within its prediction."""
    r = request.ranks
    if r.auto_trials is not None:
        return r.auto_trials
    return 1 if r.max_rank_memory_gib is not None else 3


def auto_report(choice: AutoChoice, run: DistributedRun) -> dict[str, Any]:
    """What ``--algo auto`` chose and why (:meth:`AutoChoice.report
    <sparsegnn.train.auto_choice.AutoChoice.report>`), with the trials the ranks ran."""
    return choice.after_training(run.dcfg, [t["measured_epoch_s"] for t in run.trials]
                                 ).report()


def _check_memory(request: TrainRequest, job: DistributedJob,
                  overlap: bool) -> dict[str, int]:
    """The per-rank memory limit: the busiest rank's predicted peak by kind, or the
    refusal."""
    d, limit = job.dcfg, request.ranks.max_rank_memory_gib
    assert limit is not None
    if is_shard_dir(request.dataset):
        return check_shards_rank_memory(read_manifest(request.dataset), job.cfg, limit,
                                        comm=d.comm, overlap=overlap,
                                        process=process_memory(request))
    nprocs = job.nprocs if job.nprocs > 1 else world_size(request)
    return check_graph_rank_memory(
        training_graph(request), job.cfg, limit, nprocs, mode="fullgraph",
        algo=d.algo, replication=d.replication, comm=d.comm, overlap=overlap,
        partition=d.partition, process=process_memory(request))


def _masks(request: TrainRequest, auto: AutoChoice | None) -> str:
    """The dropout masks, where not given: per block for ``--algo auto``, whose cost model
    prices a rank's share of the work (a whole-graph mask on every rank would undo the
    distribution it chose), else ``auto``."""
    if request.ranks.dropout_masks is not None:
        return request.ranks.dropout_masks
    return "block" if auto is not None else "auto"
