"""Refusing sizes the machine cannot hold, before allocating them.

A generator spec such as ``rmat:40`` or a graph with ids near 3e9 asks for arrays of
terabytes. numpy would fail part-way with a MemoryError traceback, or the kernel would
kill the process after minutes of swapping; estimating the bytes first turns both into
one line that says how much was needed and how much there is.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

from sparsegnn.errors import ResourceError

_MEMINFO = Path("/proc/meminfo")


def available_memory() -> int:
    """Bytes a new allocation can use now: available RAM plus free swap on Linux, else the
    physical memory (an upper bound, so a size refused against it cannot fit)."""
    try:
        fields = dict(line.split(":", 1) for line in _MEMINFO.read_text().splitlines())
        kib = int(fields["MemAvailable"].split()[0]) + int(fields["SwapFree"].split()[0])
        return kib * 1024
    except (OSError, KeyError, ValueError, IndexError):
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def require_memory(nbytes: int, what: str) -> None:
    """Raise :class:`ResourceError` if ``what`` needs more than :func:`available_memory`."""
    have = available_memory()
    if nbytes > have:
        raise ResourceError(
            f"{what} needs about {format_bytes(nbytes)} of memory but only "
            f"{format_bytes(have)} is available; choose a smaller size"
        )


# Less than any local rank needs: one forked from the fork server (torch already imported
# there) holds 170-190 MiB of private memory training Cora (measured), so a refusal
# against this floor is certain, never a guess.
RANK_MEMORY_FLOOR = 64 * 2**20
# Descriptors the launcher holds per rank while starting it: the rank's report pipe (both
# ends until it starts) and its sentinel; plus a margin for everything else it has open.
_FDS_PER_RANK, _FDS_MARGIN = 3, 64


def require_ranks(nprocs: int) -> None:
    """Refuse (:class:`ResourceError`) ``nprocs`` local ranks this machine cannot start:
    more than available memory at :data:`RANK_MEMORY_FLOOR` each, or more than the open-
    file limit lets the launcher watch. More ranks than CPU cores is allowed: it is slow,
    not wrong (the tests run four ranks on two cores)."""
    require_memory(nprocs * RANK_MEMORY_FLOOR,
                   f"--nprocs {nprocs} ({format_bytes(RANK_MEMORY_FLOOR)} or more per rank)")
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = _FDS_PER_RANK * nprocs + _FDS_MARGIN
    if soft != resource.RLIM_INFINITY and needed > soft:
        raise ResourceError(
            f"--nprocs {nprocs} needs about {needed} open files in the launcher but the "
            f"limit is {soft} (ulimit -n); use fewer ranks or raise the limit")


def format_bytes(nbytes: float) -> str:
    """``1.5 GiB``-style size for messages."""
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    step = 0
    while abs(nbytes) >= 1024 and step < len(units) - 1:
        nbytes /= 1024
        step += 1
    return f"{nbytes:.0f} B" if step == 0 else f"{nbytes:.1f} {units[step]}"
