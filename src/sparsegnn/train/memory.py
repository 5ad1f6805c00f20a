"""Peak memory of the current process, as users read it (resident set or CUDA allocator)."""

from __future__ import annotations

import resource
import sys

import torch


def peak_memory_bytes(device: torch.device | None = None) -> int:
    """Peak CUDA allocation on a GPU; otherwise the process's peak resident set size.

    On the CPU torch's allocations are invisible to tracemalloc, so the honest number is
    the operating system's high-water mark (``ru_maxrss``: KiB on Linux, bytes on macOS).
    """
    if device is not None and device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)
