"""One run per checkpoint path: a lock file that names the run holding it.

Two trainings writing one checkpoint would delete each other's temp files and interleave
epochs. The lock is an ``flock`` held on ``.lock`` for the run's whole life: the kernel
drops it when the process ends however it ends (SIGKILL included), so a lock is never
left stale on the machine that took it. ``flock`` is not always shared between machines
on a network file system, so the file also names its holder (pid, host, start) and a
thread refreshes its mtime every :data:`BEAT_S`; a lock from another host refreshed
within :data:`STALE_S` is honoured even when the ``flock`` could be taken.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from sparsegnn.errors import InvalidValueError, SparseGNNError

BEAT_S = 5.0
STALE_S = 60.0


class CheckpointInUseError(SparseGNNError, RuntimeError):
    """Another live run holds the checkpoint path; the message names its pid and host."""


def lock_path(checkpoint: Path, folder: bool) -> Path:
    """``CKPT/.lock`` for a checkpoint folder, ``.NAME.lock`` beside a checkpoint file."""
    return checkpoint / ".lock" if folder else checkpoint.with_name(f".{checkpoint.name}.lock")


class RunLock:
    """The lock of one checkpoint path, held from :meth:`acquire` to :meth:`release`."""

    def __init__(self, checkpoint: Path, folder: bool) -> None:
        self.checkpoint = checkpoint
        self.path = lock_path(checkpoint, folder)
        self._fd: int | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def acquire(self) -> None:
        """Take the lock, or raise :class:`CheckpointInUseError` naming its holder."""
        for _ in range(3):  # the holder may unlink the file between our open and flock
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read(fd)
                os.close(fd)
                raise CheckpointInUseError(self._refusal(holder)) from None
            if _same_file(fd, self.path):
                break
            os.close(fd)
        else:
            raise CheckpointInUseError(f"{self.path}: could not take the lock (it kept "
                                       "being replaced); is another run starting?")
        holder = _read(fd)
        if _live_elsewhere(holder, self.path):
            os.close(fd)
            raise CheckpointInUseError(self._refusal(holder))
        _write(fd, {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()})
        self._fd = fd
        self._beat = threading.Thread(target=self._refresh, name="checkpoint-lock",
                                      daemon=True)
        self._beat.start()

    def _open(self) -> int:
        """The lock file, opened; a place where it cannot be made is named as the user
        named it (the checkpoint), with the reason."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise InvalidValueError(f"checkpoint {self.checkpoint}: cannot create its lock "
                                    f"file {self.path.name} ({err.strerror or err})") from err

    def release(self) -> None:
        """Remove the lock file and drop the lock (the kernel drops it at exit anyway)."""
        if self._fd is None:
            return
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self._fd)
        self._fd = None

    def _refresh(self) -> None:
        while not self._stop.wait(BEAT_S):
            with contextlib.suppress(OSError):
                os.utime(self.path)

    def _refusal(self, holder: dict[str, Any]) -> str:
        who = (f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}"
               if holder else "another process")
        since = holder.get("started")
        when = (f" since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}"
                if isinstance(since, int | float) else "")
        return (f"checkpoint {self.checkpoint} is in use by another run ({who}{when}; lock "
                f"file {self.path}): wait for it to end or use another --checkpoint; if "
                "that run is gone, delete the lock file")


def _read(fd: int) -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError):
        os.lseek(fd, 0, os.SEEK_SET)
        found = json.loads(os.read(fd, 4096) or b"{}")
        if isinstance(found, dict):
            return found
    return {}


def _write(fd: int, holder: dict[str, Any]) -> None:
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, json.dumps(holder).encode())
    os.fsync(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == path.stat().st_ino
    except FileNotFoundError:
        return False


def _live_elsewhere(holder: dict[str, Any], path: Path) -> bool:
    """A holder on another host whose lock was refreshed recently: flock may not cross
    hosts, so the heartbeat decides there. On this host the flock already said no one."""
    if not holder or holder.get("host") == socket.gethostname():
        return False
    try:
        return time.time() - path.stat().st_mtime < STALE_S
    except FileNotFoundError:
        return False
