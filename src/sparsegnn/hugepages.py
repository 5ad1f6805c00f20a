"""Back torch's large CPU tensors with transparent huge pages (2 MiB) where the kernel offers them.

Why: every large tensor torch allocates on the CPU is a fresh ``mmap``, and every 4 KiB
page of it faults on first touch. For a 2^18 x 128 float32 SpMM output (128 MiB) that is
32,768 faults, measured at ~35 ms, as long as the whole product in community order takes
without them (docs/results/kernels.md, issue 26). torch can instead align allocations of 2 MiB
and more to 2 MiB and ``madvise(MADV_HUGEPAGE)`` them, 512 times fewer faults, but only
when ``THP_MEM_ALLOC_ENABLE`` is set: c10 reads the variable once, at the first
allocation of the process.

So importing sparsegnn sets it, unless the user already chose (any value, ``0`` turns it
off), and only where the kernel's policy is ``madvise``: under ``always`` the kernel
already uses huge pages, under ``never`` (or without THP) torch's ``madvise`` would fail
and log on every allocation. Importing sparsegnn after torch has allocated tensors leaves
the process as it was; ``huge_pages_requested`` says what was asked.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "THP_MEM_ALLOC_ENABLE"
POLICY_FILE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def kernel_policy(policy_file: Path = POLICY_FILE) -> str | None:
    """The kernel's THP policy (``always``, ``madvise``, ``never``), None where it has none."""
    try:
        text = policy_file.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else None


def request_huge_pages(policy_file: Path = POLICY_FILE) -> bool:
    """Ask torch for huge-page-backed large tensors unless the user chose; True if asked."""
    if ENV not in os.environ and kernel_policy(policy_file) == "madvise":
        os.environ[ENV] = "1"
    return huge_pages_requested()


def huge_pages_requested() -> bool:
    """Whether the environment asks torch for huge pages (set by the user or by sparsegnn)."""
    return os.environ.get(ENV, "0") not in ("", "0")
