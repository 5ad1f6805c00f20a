"""What every benchmark shares: timing, machine bandwidths, isolated memory runs, output.

Conventions: ``python benchmarks/NAME.py [--quick] [--json]`` prints a human-readable
table and, with ``--json``, one JSON object as the last stdout line with ``results``
(rows), ``speedups`` (name -> peer time / our time, above 1 means we are faster) and
``metrics`` (name -> value).

Peak memory is measured in a fresh process per configuration (:func:`run_isolated`),
because torch's CPU allocations are invisible to tracemalloc and a process's peak never
goes down: the child resets the kernel's high-water mark of its resident set
(``/proc/self/clear_refs``) once its inputs are loaded and reads ``VmHWM`` afterwards;
where that file is unavailable, a thread samples the resident set every millisecond.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

Row = dict[str, Any]


# ---------------------------------------------------------------------- arguments, output
def parse_args(description: str, extra_flags: dict[str, str] | None = None,
               extra_values: dict[str, str] | None = None) -> argparse.Namespace:
    """The flags every benchmark accepts, plus boolean ``extra_flags`` and string-valued
    ``extra_values`` (name -> help; absent values are None).

    ``--child`` is internal: :func:`run_isolated` passes one configuration through it.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="small graphs, under a minute")
    parser.add_argument("--json", action="store_true", help="print a JSON summary last")
    parser.add_argument("--repeats", type=int, default=None, help="timed repetitions")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    for name, text in (extra_flags or {}).items():
        parser.add_argument(f"--{name}", action="store_true", help=text)
    for name, text in (extra_values or {}).items():
        parser.add_argument(f"--{name}", default=None, help=text)
    return parser.parse_args()


def print_table(rows: Sequence[Row], columns: Sequence[str]) -> None:
    """Left-aligned text table of ``columns`` (floats to 4 significant digits)."""
    cells = [[_fmt(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    print()


def emit(
    results: list[Row], speedups: dict[str, float], metrics: dict[str, Any], as_json: bool
) -> None:
    """Print the speedups and metrics, then, with ``as_json``, the JSON summary line."""
    print("speedups (peer time / our time, > 1 = we are faster):")
    for name, value in speedups.items():
        print(f"  {name}: {value:.2f}")
    print("metrics:")
    for name, value in metrics.items():
        print(f"  {name}: {_fmt(value)}")
    if as_json:
        print(json.dumps({"results": results, "speedups": speedups, "metrics": metrics}))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


# ---------------------------------------------------------------------- timing
@dataclass(frozen=True)
class Timing:
    """Wall-clock seconds of each timed run; min is the headline (least disturbed)."""

    times: list[float]

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def time_it(fn: Callable[[], object], *, repeats: int = 5, warmup: int = 1) -> Timing:
    """Run ``fn`` ``warmup`` times untimed (caches, allocator, lazy setup), then time it."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return Timing(times)


def time_many(
    fns: dict[str, Callable[[], object]], *, repeats: int = 5, warmup: int = 1
) -> dict[str, Timing]:
    """Time several functions round-robin: one run of each per round.

    On a machine shared with other work the load drifts; interleaving exposes every
    contender to the same drift, so their ratios stay meaningful where back-to-back
    blocks of runs would not.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: Timing(t) for name, t in times.items()}


def time_once(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and the seconds it took: for one-time costs such as a reordering."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


# ---------------------------------------------------------------------- bandwidth
def stream_probe(nbytes: int) -> Callable[[], object]:
    """A copy of ``nbytes / 2`` bytes: ``nbytes`` of streaming traffic (read + write)."""
    src = torch.ones(max(1, nbytes // 8))
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def random_gather_probe(rows: int, width: int, gathers: int, bag: int) -> Callable[[], object]:
    """Read ``gathers`` uniformly random rows of a ``rows x width`` float32 table.

    Uses the fastest gather on hand, FBGEMM's software-prefetched embedding-bag sum on
    all threads, summing bags of ``bag`` rows: an SpMM of the same size in which no
    gathered row is ever reused, i.e. the random-access bound. Timed interleaved with
    the SpMMs it bounds, so that both see the same machine load.
    """
    table = torch.randn(rows, width)
    index = torch.randint(0, rows, (gathers,))
    offsets = torch.arange(0, gathers, max(1, bag))
    return lambda: torch.nn.functional.embedding_bag(index, table, offsets, mode="sum")


def spmm_stream_bytes(nnz: int, rows: int, width: int) -> int:
    """Compulsory traffic of a float32 CSR SpMM whose gathers all hit the cache.

    Indices and values (12 bytes per nonzero), row pointers, X read once and the output
    written once.
    """
    return nnz * 12 + (rows + 1) * 8 + 2 * rows * width * 4


# ---------------------------------------------------------------------- isolated runs
def run_isolated(script: Path, config: dict[str, Any], timeout: float = 1800) -> dict[str, Any]:
    """Run ``script --child CONFIG`` in a fresh interpreter; its last stdout line is JSON."""
    cmd = [sys.executable, str(script), "--child", json.dumps(config)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1])


class PeakMemory:
    """Peak resident set of this process since :meth:`reset`, in bytes."""

    def __init__(self) -> None:
        self._sampler: threading.Thread | None = None
        self._stop = threading.Event()
        self._sampled = 0
        self.method = "VmHWM after clear_refs" if _can_reset_hwm() else "1 ms RSS sampling"

    def reset(self) -> None:
        """Start a new measurement from the current resident set."""
        if _can_reset_hwm():
            Path("/proc/self/clear_refs").write_text("5")
            return
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join()
        self._stop = threading.Event()
        self._sampled = rss_bytes()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def peak(self) -> int:
        if _can_reset_hwm():
            return _proc_status_kib("VmHWM") * 1024
        return max(self._sampled, rss_bytes())

    def _sample(self) -> None:
        while not self._stop.wait(0.001):
            self._sampled = max(self._sampled, rss_bytes())


def rss_bytes() -> int:
    """Current resident set of this process."""
    if Path("/proc/self/status").exists():
        return _proc_status_kib("VmRSS") * 1024
    import psutil

    return int(psutil.Process().memory_info().rss)


def _proc_status_kib(key: str) -> int:
    match = re.search(rf"^{key}:\s+(\d+)", Path("/proc/self/status").read_text(), re.M)
    if match is None:
        raise RuntimeError(f"/proc/self/status has no {key}")
    return int(match.group(1))


def _can_reset_hwm() -> bool:
    return os.access("/proc/self/clear_refs", os.W_OK) and Path("/proc/self/status").exists()


# ---------------------------------------------------------------------- misc
def gib(nbytes: float) -> float:
    return nbytes / (1 << 30)
