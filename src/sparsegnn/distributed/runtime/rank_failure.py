"""What a spawned run's launcher reads from its ranks, and which rank a failure names.

Each rank sends its reply or its error report through its own pipe
(:class:`RankChannel`); when ranks fail, :func:`rank_failure` picks the one at fault, so
the error a user sees is that rank's own, not the consequences its peers saw.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from sparsegnn.errors import SparseGNNError


class RankFailedError(SparseGNNError, RuntimeError):
    """A rank raised, died or stopped responding; the message names it and says how."""


@dataclass
class RankChannel:
    """A started rank and what it has sent so far (its reply or its error report)."""

    rank: int
    proc: Any
    reader: Connection
    received: bytearray = dataclasses.field(default_factory=bytearray)
    eof: bool = False

    def drain(self) -> None:
        """Read what the pipe holds now (the reader is made non-blocking on first use)."""
        if self.eof:
            return
        fd = self.reader.fileno()
        os.set_blocking(fd, False)
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                return
            if not chunk:
                self.eof = True
                return
            self.received += chunk

    def error(self) -> dict[str, Any] | None:
        if self.received[:1] != b"E":
            return None
        return dict(json.loads(self.received[1:].decode()))



def stalled_error(rank: int, world: int, silence_s: float) -> RankFailedError:
    return RankFailedError(
        f"rank {rank} of {world} stopped responding (no heartbeat for {silence_s:.0f} s); "
        "stopped the other ranks"
    )


def rank_failure(
    ranks: list[RankChannel], failed: list[int], codes: list[int | None], stalled: list[int],
    silence_s: float,
) -> BaseException:
    """The error that names the rank at fault, as that rank would have said it.

    A killed rank comes first, then a rank that had stopped beating (the errors of its
    peers, which kept beating while they waited for it, are the consequence), then the
    earliest error report. Only the culprit's traceback is shown, and only for a bug.
    """
    world = len(ranks)
    for r in ranks:
        r.drain()
    killed = [r for r in failed if (codes[r] or 0) < 0]
    if killed:
        name = signal.Signals(-(codes[killed[0]] or 0)).name
        return RankFailedError(
            f"rank {killed[0]} of {world} failed (killed by {name}); stopped the other ranks"
        )
    if stalled:
        return stalled_error(stalled[0], world, silence_s)
    # A closed pipe is an exited rank whose exit code the fork server has not relayed yet:
    # its report counts, or a peer that saw it go would be named instead of it.
    reports = [(report["at"], r, report) for r in range(world)
               if (r in failed or ranks[r].eof) and (report := ranks[r].error())]
    if not reports:
        return RankFailedError(
            f"rank {failed[0]} of {world} failed (exit code {codes[failed[0]]}); "
            "stopped the other ranks"
        )
    _, culprit, report = min(reports, key=lambda item: item[:2])
    if report["kind"] == "user":
        prefix = f"rank {culprit} of {world}: "
        message = report["message"]  # a PeerLostError names its rank already
        return user_error(report["class"],
                           message if message.startswith(prefix) else prefix + message)
    sys.stderr.write(report["traceback"])
    return RankFailedError(
        f"rank {culprit} of {world} failed ({report['message']}); stopped the other ranks"
    )


def user_error(name: str, message: str) -> SparseGNNError:
    """The rank's own error class (when this process knows it) carrying ``message``."""
    pending: list[type[SparseGNNError]] = [SparseGNNError]
    while pending:
        kind = pending.pop()
        if f"{kind.__module__}.{kind.__qualname__}" == name:
            try:
                return kind(message)
            except TypeError:  # a constructor that wants more than a message
                break
        pending.extend(kind.__subclasses__())
    return RankFailedError(message)
