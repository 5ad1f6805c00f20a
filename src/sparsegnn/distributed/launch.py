"""Starting ranks: joining a torchrun job, or spawning local ranks and watching them.

:func:`init_session` reads the torchrun environment (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``), which :func:`spawn` also sets up, so
one worker function serves both launchers. gloo on the CPU; NCCL (one GPU per local
rank) when CUDA is present.

Faults: :func:`spawn` polls its ranks; the moment one exits with an error or is killed,
it stops the others and raises :class:`RankFailedError` naming that rank, so a dead rank
never leaves the run hanging. Every collective also carries the ``timeout`` given to
:func:`init_session` (``--timeout``, default 60 s), which bounds how long any rank waits
for a peer that stopped answering (under torchrun the elastic agent stops the others).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from sparsegnn.errors import SparseGNNError

# Seconds a stopped rank gets to exit after SIGTERM before it is killed.
_STOP_GRACE_S = 5.0
_POLL_S = 0.05


class RankFailedError(SparseGNNError, RuntimeError):
    """A rank raised or died; the message names it and says how."""


@dataclass(frozen=True)
class Session:
    """This process's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device


def in_torchrun() -> bool:
    """Whether the environment describes a multi-rank job (torchrun or :func:`spawn`)."""
    return "RANK" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1


def default_backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def init_session(backend: str | None = None, timeout_s: float = 60.0) -> Session:
    """Join the process group the environment describes; every collective times out."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    backend = backend or default_backend()
    if backend == "nccl":
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group(
            backend, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s),
        )
    return Session(rank, world, local, backend, device)


def close_session() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


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


def free_port() -> int:
    """A TCP port on localhost that was free a moment ago (for the rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(
    fn: Callable[..., Any], nprocs: int, args: tuple[Any, ...] = (), *,
    threads: int = 1, wall_timeout_s: float | None = None,
) -> list[Any]:
    """Run ``fn(*args)`` on ``nprocs`` fresh local ranks; return each rank's result.

    ``fn`` must be importable (a module-level function) and should call
    :func:`init_session`. Raises :class:`RankFailedError` naming the first rank that
    failed, or the ranks still running after ``wall_timeout_s``. Ranks fork from this
    process's fork server, so they see the environment of its first :func:`spawn`.
    """
    port = free_port()
    # A fork server imports torch and ``fn``'s module once and forks every rank from that
    # clean (thread-free) process: much faster than a fresh interpreter per rank, and
    # safe where forking this possibly multi-threaded process would not be.
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", fn.__module__])
    with tempfile.TemporaryDirectory(prefix="sparsegnn-ranks-") as tmp:
        procs = [
            ctx.Process(target=_child, args=(rank, nprocs, port, threads, fn, args, tmp))
            for rank in range(nprocs)
        ]
        try:
            for p in procs:
                p.start()
            _watch(procs, Path(tmp), wall_timeout_s)
        except BaseException:
            _stop(procs)  # Ctrl-C or a failed start must not leave ranks behind
            raise
        return [torch.load(Path(tmp) / f"rank{r}.pt", weights_only=False) for r in range(nprocs)]


def _child(
    rank: int, world: int, port: int, threads: int,
    fn: Callable[..., Any], args: tuple[Any, ...], outdir: str,
) -> None:
    os.environ.update({
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
        "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
    })
    torch.set_num_threads(threads)
    try:
        result = fn(*args)
        torch.save(result, Path(outdir) / f"rank{rank}.pt")
    except BaseException as err:
        (Path(outdir) / f"rank{rank}.err").write_text(f"{type(err).__name__}: {err}")
        traceback.print_exc()
        sys.stderr.flush()
        # Skip interpreter shutdown: the process group's teardown could wait on peers.
        os._exit(1)


def _watch(procs: list[Any], outdir: Path, wall_timeout_s: float | None) -> None:
    deadline = None if wall_timeout_s is None else time.monotonic() + wall_timeout_s
    while True:
        codes = [p.exitcode for p in procs]
        failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            culprit = _first_failure(failed, codes, outdir)
            _stop(procs)
            how = _describe(culprit, codes[culprit], outdir)
            raise RankFailedError(
                f"rank {culprit} of {len(procs)} failed ({how}); stopped the other ranks"
            )
        if all(c == 0 for c in codes):
            return
        if deadline is not None and time.monotonic() > deadline:
            running = [r for r, c in enumerate(codes) if c is None]
            _stop(procs)
            raise RankFailedError(
                f"ranks {running} still running after {wall_timeout_s:.0f} s; stopped them"
            )
        time.sleep(_POLL_S)


def _first_failure(failed: list[int], codes: list[int | None], outdir: Path) -> int:
    """The rank that failed first: a killed one, else the oldest error report."""
    killed = [r for r in failed if (codes[r] or 0) < 0]
    if killed:
        return killed[0]
    reports = [(outdir / f"rank{r}.err", r) for r in failed]
    dated = [(path.stat().st_mtime, r) for path, r in reports if path.exists()]
    return min(dated)[1] if dated else failed[0]


def _describe(rank: int, code: int | None, outdir: Path) -> str:
    if code is not None and code < 0:
        return f"killed by {signal.Signals(-code).name}"
    report = outdir / f"rank{rank}.err"
    lines = report.read_text().strip().splitlines() if report.exists() else []
    return lines[0] if lines else f"exit code {code}"


def _stop(procs: list[Any]) -> None:
    started = [p for p in procs if p.pid is not None]
    for p in started:
        if p.exitcode is None:
            p.terminate()
    end = time.monotonic() + _STOP_GRACE_S
    for p in started:
        p.join(max(0.0, end - time.monotonic()))
        if p.exitcode is None:
            p.kill()
            p.join()
