"""Starting ranks: joining a torchrun job, or spawning local ranks and watching them.

:func:`init_session` reads the torchrun environment (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``), which :func:`spawn` also sets up, so
one worker function serves both launchers. gloo on the CPU; NCCL (one GPU per local
rank) when CUDA is present.

Faults: :func:`spawn` watches its ranks; the moment one exits with an error or is
killed, or stops beating its heartbeat for ``heartbeat_timeout_s`` (``--timeout``), it
stops the others and raises :class:`RankFailedError` naming that rank, so neither a dead
nor a stalled rank leaves the run hanging. Ranks die with their launcher, and a rank's
user error (a :class:`~sparsegnn.errors.SparseGNNError`) comes back as that error, one
line, without the rank's traceback. Under torchrun, the collectives' ``timeout`` given to
:func:`init_session` and the elastic agent play these parts.
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import io
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as mp
import tqdm

from sparsegnn.data.leftovers import launcher_temp_dir
from sparsegnn.data.limits import require_ranks
from sparsegnn.distributed.runtime.affinity import rank_cpus
from sparsegnn.distributed.runtime.rank_failure import (
    RankChannel,
    RankFailedError,
    rank_failure,
    stalled_error,
)
from sparsegnn.errors import SparseGNNError

# Seconds a stopped rank gets to exit after SIGTERM before it is killed.
_STOP_GRACE_S = 5.0
_POLL_S = 0.05
# Seconds between a rank's heartbeats, and the silence after which a rank reads as
# stalled when another rank has failed (a rank waiting on a failed peer keeps beating).
_BEAT_S = 1.0
_STALLED_S = 3 * _BEAT_S
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


class Terminated(KeyboardInterrupt):
    """SIGTERM reached a launcher: raised in its main thread like Ctrl-C, so the paths
    that stop the ranks on Ctrl-C (and the CLI's one-line exit 130) run for it too."""


def free_port() -> int:
    """A TCP port on localhost that was free a moment ago (for the rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(
    fn: Callable[..., Any], nprocs: int, args: tuple[Any, ...] = (), *,
    threads: int = 1, wall_timeout_s: float | None = None, heartbeat_timeout_s: float = 60.0,
) -> list[Any]:
    """Run ``fn(*args)`` on ``nprocs`` fresh local ranks; return each rank's result.

    ``fn`` must be importable (a module-level function) and should call
    :func:`init_session`. Raises :class:`RankFailedError` naming the first rank that
    died or failed, the rank that beat no heartbeat for ``heartbeat_timeout_s`` (a rank
    waiting in a collective keeps beating, so this names a stopped or stuck rank, not its
    peers), or the ranks still running after ``wall_timeout_s``. A
    :class:`~sparsegnn.errors.SparseGNNError` raised by ``fn`` comes back as the same
    error class, its message prefixed with the rank. Ranks fork from this process's fork
    server, so they see the environment of its first :func:`spawn`.

    Results travel back through a pipe as plain data (dataclasses, numpy values and paths
    are rebuilt here) and load with ``weights_only=True``, so a rank's reply cannot run
    code in the launcher; nothing is written to disk, so no exit path leaves files behind.
    Each rank is bound to its own CPUs (:func:`~sparsegnn.distributed.runtime.affinity.rank_cpus`).
    """
    require_ranks(nprocs)  # --nprocs 100000: one line, not EMFILE mid-start
    launcher_temp_dir()  # named after this pid: removed even after a SIGKILL (leftovers)
    port = free_port()
    cpus = rank_cpus(nprocs) or [None] * nprocs
    # A fork server imports torch and ``fn``'s module once and forks every rank from that
    # clean (thread-free) process: much faster than a fresh interpreter per rank, and
    # safe where forking this possibly multi-threaded process would not be. torch._dynamo
    # too: the first optimiser a process builds imports it (seconds of CPU per rank).
    # torch's C++ warnings (a TCPStore client reset because the failed rank hosting the
    # store exited first) would follow a failed rank's one-line error on stderr; the
    # fork server reads the level when it imports torch, so ranks keep it.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch._dynamo", "sparsegnn.data.leftovers",
                                fn.__module__])
    beats = ctx.Array("Q", nprocs, lock=False)  # shared memory: one counter per rank
    pipes = [ctx.Pipe(duplex=False) for _ in range(nprocs)]
    ranks = [
        RankChannel(rank, ctx.Process(
            target=_child,
            args=(rank, nprocs, port, threads, cpus[rank], fn, args, beats, writer),
        ), reader)
        for rank, (reader, writer) in enumerate(pipes)
    ]
    with _sigterm_raises():
        try:
            for r, (_, writer) in zip(ranks, pipes, strict=True):
                r.proc.start()
                writer.close()  # the rank holds the only write end: its exit reads as EOF
            _watch(ranks, _Heartbeats(beats, heartbeat_timeout_s), wall_timeout_s)
            # Every rank has exited, but a reply written after the watch's last read may
            # still sit in its pipe: read each pipe to its end before closing it.
            return [_load_result(r) for r in ranks]
        except BaseException:
            _stop([r.proc for r in ranks])  # Ctrl-C, SIGTERM or a failed start
            raise
        finally:
            for reader, _ in pipes:
                reader.close()


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While ranks run, SIGTERM raises :class:`Terminated` in the main thread: by default
    it ends a process without running ``finally`` blocks, leaving the ranks running. Only
    where SIGTERM has its default action (an application's handler wins), in the main
    thread (where Python runs handlers)."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Terminated("terminated by SIGTERM")

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


# ---------------------------------------------------------------------- the rank's side
def _child(
    rank: int, world: int, port: int, threads: int, cpus: set[int] | None,
    fn: Callable[..., Any], args: tuple[Any, ...], beats: Any, report: Connection,
) -> None:
    """One rank: beat, run ``fn``, and send its result or its error through ``report``."""
    _die_with_parent()
    # What the fork server imported is never garbage here: a collection (between trials,
    # say) then skips it instead of walking, and copying, every inherited object.
    gc.freeze()
    if cpus is not None:  # before torch starts its threads, which inherit it
        os.sched_setaffinity(0, cpus)
    threading.Thread(
        target=_lifeline, args=(rank, beats, report.fileno()), daemon=True,
        name="sparsegnn-heartbeat",
    ).start()
    # Rank 0 hosts this job's store, also when the launcher is itself a torchrun worker
    # (a one-rank torchrun job, an elastic job shrunk to one rank): torchrun tells its
    # workers to use its agent's store instead, which serves its own job only.
    os.environ.update({
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
        "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world),
        "TORCHELASTIC_USE_AGENT_STORE": "False",
    })
    torch.set_num_threads(threads)
    # tqdm guards its bars with a multiprocessing lock: a named semaphore that a killed rank
    # leaks, and that the resource tracker then reports on the launcher's stderr. One
    # rank's bars need only a thread lock.
    tqdm.tqdm.set_lock(threading.RLock())
    # SIGTERM (the launcher stopping the others after a failure) unwinds: writers remove
    # their temporary files instead of dying wherever the signal finds the rank.
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    try:
        reply = b"R" + _dump_result(fn(*args))
    except BaseException as err:
        _send(report, b"E" + json.dumps(_error_report(err)).encode())
        # Skip interpreter shutdown: the process group's teardown could wait on peers.
        os._exit(1)
    _send(report, reply)


def _die_with_parent() -> None:
    """Have the kernel SIGKILL this rank when its parent exits (Linux).

    A rank's parent is the fork server, not the launcher; the fork server exits as soon
    as the launcher is gone (it reads EOF on a pipe only the launcher holds), so the
    signal follows the launcher's death however it died, even to a stopped rank.
    :func:`_lifeline` also watches the launcher directly, which covers the launcher dying
    before this call and platforms without ``prctl``.
    """
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _lifeline(rank: int, beats: Any, report_fd: int) -> None:
    """Beat every :data:`_BEAT_S`; exit the moment the launcher is gone.

    A thread, so a rank blocked in a collective (which releases the GIL) keeps beating
    while a stopped rank does not. The launcher holds the only read end of the rank's
    report pipe, and a pipe's write end reports an error once no reader is left.
    """
    poller = select.poll()
    poller.register(report_fd, select.POLLERR)
    while True:
        beats[rank] += 1
        if any(event & (select.POLLERR | select.POLLHUP)
               for _, event in poller.poll(_BEAT_S * 1000)):
            os._exit(1)


def _send(report: Connection, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        view = view[os.write(report.fileno(), view):]


def _error_report(err: BaseException) -> dict[str, Any]:
    """What the launcher needs to tell the rank's error as one process would.

    A user error (a :class:`SparseGNNError`, or an ``OSError`` about a named file) and
    Ctrl-C carry no traceback; anything else is a bug and carries it.
    """
    kind = type(err)
    report = {
        "at": time.monotonic(), "class": f"{kind.__module__}.{kind.__qualname__}",
        "kind": "bug", "message": f"{kind.__name__}: {err}", "traceback": "",
    }
    if isinstance(err, SparseGNNError):
        report.update(kind="user", message=str(err))
    elif isinstance(err, OSError) and err.filename is not None:
        report.update(kind="user", message=f"{err.filename}: {err.strerror or err}")
    elif isinstance(err, KeyboardInterrupt):
        report.update(kind="interrupted", message="interrupted")
    else:
        report["traceback"] = traceback.format_exc()
    return report


# ---------------------------------------------------------------------- plain results
_TAG = "__sparsegnn_plain__"


def _dump_result(result: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(_to_plain(result), buffer)
    return buffer.getvalue()


def _to_plain(obj: Any) -> Any:
    """``obj`` as data that ``torch.load(weights_only=True)`` accepts.

    Dataclasses, numpy arrays and paths become tagged dicts that :func:`_from_plain`
    rebuilds; numpy scalars become Python numbers.
    """
    if type(obj) in (type(None), bool, int, float, complex, str, bytes):
        return obj
    if isinstance(obj, (torch.Tensor, torch.dtype, torch.device, torch.Size)):
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    if type(obj) is dict:
        if _TAG in obj:
            raise TypeError(f"a rank result may not use the key {_TAG!r}")
        return {_to_plain(k): _to_plain(v) for k, v in obj.items()}
    if type(obj) in (list, tuple):
        return type(obj)(_to_plain(v) for v in obj)
    if isinstance(obj, np.ndarray):
        return {_TAG: "ndarray", "data": torch.from_numpy(np.ascontiguousarray(obj))}
    if isinstance(obj, Path):
        return {_TAG: "path", "path": str(obj)}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        kind = type(obj)
        fields = {f.name: _to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        return {_TAG: "dataclass", "class": f"{kind.__module__}:{kind.__qualname__}",
                "fields": fields}
    raise TypeError(f"a rank returned a {type(obj).__qualname__}, which cannot travel back "
                    "safely; return plain data, tensors, numpy arrays or dataclasses")


def _from_plain(obj: Any) -> Any:
    if type(obj) is dict:
        plain = {k: _from_plain(v) for k, v in obj.items()}
        if _TAG not in plain:
            return plain
        if plain[_TAG] == "ndarray":
            return plain["data"].numpy()
        if plain[_TAG] == "path":
            return Path(plain["path"])
        return _rebuild(plain["class"], plain["fields"])
    if type(obj) in (list, tuple):
        return type(obj)(_from_plain(v) for v in obj)
    return obj


def _rebuild(name: str, fields: dict[str, Any]) -> Any:
    """A dataclass instance as pickle would restore it (no ``__init__``).

    Only a dataclass of a module this process has already imported qualifies: the reply
    names a class, it never makes this process import or run anything else.
    """
    module, _, qualname = name.partition(":")
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if not (isinstance(found, type) and dataclasses.is_dataclass(found)):
        raise RankFailedError(f"a rank returned a {name}, which is not a dataclass here")
    obj = found.__new__(found)
    for key, value in fields.items():
        object.__setattr__(obj, key, value)
    return obj


# ---------------------------------------------------------------------- the launcher's side
class _Heartbeats:
    """When each rank last beat, by this process's clock (a rank only bumps a counter)."""

    def __init__(self, beats: Any, timeout_s: float) -> None:
        self.beats, self.timeout_s = beats, timeout_s
        now = time.monotonic()
        self.seen = list(beats)
        # A rank that never beats (stuck starting up) counts from when all had started.
        self.last = [now] * len(self.seen)

    def update(self, now: float) -> None:
        for rank, count in enumerate(self.beats):
            if count != self.seen[rank]:
                self.seen[rank], self.last[rank] = count, now

    def silent(self, now: float, ranks: list[int], at_least_s: float) -> list[int]:
        """Those of ``ranks`` that have not beaten for ``at_least_s``, longest silent first."""
        quiet = [r for r in ranks if now - self.last[r] >= at_least_s]
        return sorted(quiet, key=lambda r: self.last[r])


def _watch(ranks: list[RankChannel], heart: _Heartbeats, wall_timeout_s: float | None) -> None:
    deadline = None if wall_timeout_s is None else time.monotonic() + wall_timeout_s
    procs = [r.proc for r in ranks]
    while True:
        wait([r.reader for r in ranks if not r.eof] + [p.sentinel for p in procs], _POLL_S)
        for r in ranks:
            r.drain()
        now = time.monotonic()
        heart.update(now)
        codes = [p.exitcode for p in procs]
        running = [r for r, c in enumerate(codes) if c is None]
        failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            stalled = heart.silent(now, running, _STALLED_S)
            _stop(procs, stalled)
            raise rank_failure(ranks, failed, codes, stalled, now - heart.last[stalled[0]]
                           if stalled else 0.0)
        if not running:
            return
        stalled = heart.silent(now, running, heart.timeout_s)
        if stalled:
            _stop(procs, stalled)
            raise stalled_error(stalled[0], len(ranks), heart.timeout_s)
        if deadline is not None and now > deadline:
            _stop(procs)
            raise RankFailedError(
                f"ranks {running} still running after {wall_timeout_s:.0f} s; stopped them"
            )


def _load_result(rank: RankChannel) -> Any:
    """The reply of a rank that has exited, read to the pipe's end."""
    deadline = time.monotonic() + _STOP_GRACE_S
    rank.drain()
    while not rank.eof and time.monotonic() < deadline:
        wait([rank.reader], _POLL_S)
        rank.drain()
    if rank.received[:1] != b"R":
        raise RankFailedError(f"rank {rank.rank} exited without sending its result")
    plain = torch.load(io.BytesIO(bytes(rank.received[1:])), weights_only=True)
    return _from_plain(plain)


def _stop(procs: list[Any], stalled: list[int] | tuple[int, ...] = ()) -> None:
    """End every rank: SIGKILL to stalled ones (a stopped process cannot act on SIGTERM),
    SIGTERM to the rest, then SIGKILL to any still running after the grace period."""
    started = [p for p in procs if p.pid is not None]
    for rank in stalled:
        if procs[rank].exitcode is None:
            procs[rank].kill()
    for p in started:
        if p.exitcode is None:
            p.terminate()
    end = time.monotonic() + _STOP_GRACE_S
    for p in started:
        p.join(max(0.0, end - time.monotonic()))
        if p.exitcode is None:
            p.kill()
            p.join()
