"""This process's place in a multi-rank job, and the few collectives applications need.

One rank session for every multi-rank path (``train --nprocs``, minibatch and tracking
data-parallel training, bulk annotation, calibration): :func:`rank_session` joins the
process group that torchrun or :func:`~sparsegnn.distributed.runtime.launch.spawn`
describes in the environment, with a timeout on every collective, and leaves it however
the rank's work ends. Code outside :mod:`sparsegnn.distributed` calls these helpers and
never ``torch.distributed`` itself (ruff enforces it), so a single process needs no
process group at all.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Generic, TypeVar

import torch
import torch.distributed as dist

from sparsegnn.distributed.runtime import peers
from sparsegnn.distributed.runtime.affinity import bind_torchrun_worker
from sparsegnn.distributed.runtime.comm import ByteCounts, set_group_timeout

T = TypeVar("T")


@dataclass(frozen=True)
class Session:
    """This process's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device
    # Resident set when the rank joined, after its imports and before it loads any data:
    # what its training memory is measured from.
    start_rss_bytes: int = 0


def current_rss_bytes() -> int:
    """This process's resident set now (Linux ``/proc/self/statm``; 0 where absent)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def in_torchrun() -> bool:
    """Whether the environment describes a multi-rank job (torchrun or :func:`spawn`)."""
    return "RANK" in os.environ and job_world_size() > 1


def job_world_size() -> int:
    """Ranks of the job the environment describes (torchrun's ``WORLD_SIZE``; 1 alone).
    This module is the only reader of the launcher's variables."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def job_rank() -> int:
    """This process's rank in the job the environment describes (0 alone)."""
    return int(os.environ.get("RANK", "0"))


def ranks_per_host(world: int) -> int:
    """Ranks on this host: torchrun's ``LOCAL_WORLD_SIZE``, else the whole ``world``
    (spawned ranks share one host)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", world) or world)


def default_backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def init_session(backend: str | None = None, timeout_s: float = 60.0) -> Session:
    """Join the process group the environment describes; every collective times out, in
    the default group and in every group :func:`~sparsegnn.distributed.runtime.comm.new_group`
    makes. The ranks then announce their hosts to each other, so that a collective that
    fails inside :func:`~sparsegnn.distributed.runtime.peers.lost_peers_named` names the host and
    ranks it lost (:mod:`sparsegnn.distributed.runtime.peers`)."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    bind_torchrun_worker(local, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    backend = backend or default_backend()
    if backend == "nccl":
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    set_group_timeout(timeout_s)
    if not dist.is_initialized():
        dist.init_process_group(
            backend, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s),
        )
        peers.publish(rank, os.environ.get("MASTER_ADDR", "127.0.0.1"), gather_objects)
    return Session(rank, world, local, backend, device, current_rss_bytes())


def close_session() -> None:
    peers.forget()
    if dist.is_initialized():
        dist.destroy_process_group()


@contextmanager
def rank_session(backend: str | None = None, timeout_s: float = 60.0) -> Iterator[Session]:
    """This rank's :class:`Session` for the block (:func:`init_session`); the process
    group is left however the block ends, so a failed rank never holds its peers."""
    session = init_session(backend, timeout_s)
    try:
        yield session
    finally:
        close_session()


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj`` on every rank (small reports only: it pickles)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def barrier() -> None:
    """Wait for every rank of the job (e.g. between benchmark cases, to time them apart)."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def rank_and_world() -> tuple[int, int]:
    """This rank and the number of ranks; ``(0, 1)`` outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over the ranks in place (a no-op on one process); returns it."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor)
    return tensor


@dataclass
class RankResult(Generic[T]):
    """What a rank of any multi-rank job hands back: who it is, its own result and the
    bytes it sent and received (``train --nprocs`` minibatch ranks, tracking's
    data-parallel ranks)."""

    rank: int
    world_size: int
    value: T
    comm: ByteCounts
