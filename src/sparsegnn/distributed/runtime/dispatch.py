"""Running a job's ranks: spawn them here, or be this process's rank of a torchrun job.

Every multi-rank job (full-graph and minibatch training, tracking's data-parallel
training, bulk annotation, calibration) starts through :func:`run_on_ranks`, so the rule
is stated once: under torchrun (:func:`~sparsegnn.distributed.runtime.session.in_torchrun`)
the job's ranks are torchrun's and this process runs one of them, whatever ``nprocs``
says; otherwise ``nprocs`` local ranks are spawned. The rank function opens its own
:func:`~sparsegnn.distributed.runtime.session.rank_session`, which serves both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sparsegnn.distributed.runtime.launch import spawn
from sparsegnn.distributed.runtime.session import in_torchrun, job_rank, job_world_size

T = TypeVar("T")


@dataclass(frozen=True)
class OnRanks(Generic[T]):
    """What :func:`run_on_ranks` hands back: when spawned, every rank's result in rank
    order; under torchrun, this rank's result alone (the others live in other processes;
    callers that need them gather inside the rank function)."""

    results: list[T]
    spawned: bool
    rank: int  # the rank of ``results[0]``: 0 when spawned

    @property
    def lead(self) -> T | None:
        """Rank 0's result; ``None`` on the other ranks of a torchrun job, where rank 0
        writes and reports."""
        return self.results[0] if self.rank == 0 else None


def ranks_for(nprocs: int) -> int:
    """How many ranks :func:`run_on_ranks` with ``nprocs`` runs: torchrun's world under
    torchrun, else ``nprocs`` (for checks that refuse a job before any rank starts)."""
    return job_world_size() if in_torchrun() else nprocs


def run_on_ranks(
    fn: Callable[..., T], nprocs: int, args: tuple[Any, ...] = (), **spawn_options: Any,
) -> OnRanks[T]:
    """``fn(*args)`` on every rank of the job: as this process's rank under torchrun, else
    on ``nprocs`` spawned local ranks (``spawn_options``: :func:`spawn`'s ``threads``,
    ``wall_timeout_s``, ``heartbeat_timeout_s``; torchrun's agent plays their part)."""
    if in_torchrun():
        return OnRanks([fn(*args)], spawned=False, rank=job_rank())
    return OnRanks(spawn(fn, nprocs, args, **spawn_options), spawned=True, rank=0)
