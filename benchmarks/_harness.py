"""What every benchmark shares: arguments, output, timing, and isolated memory runs.

Conventions: ``python benchmarks/NAME.py [--quick] [--json]`` (:func:`make_parser`,
:func:`parse_args`) prints a human-readable table and, with ``--json``, one JSON object
as the last stdout line (:func:`emit`) with ``results`` (rows: what was measured, ours
and the peer, times, sizes), ``speedups`` (name -> peer time / our time, above 1 means
sparsegnn is faster) and ``metrics`` (name -> value). ``--quick`` is a small run of
every code path, under a minute. No benchmark imports another: what two of them share
lives in ``benchmarks/_*.py`` (this module; the SpMM and GCN workloads in
``_workloads.py``; the tracking datasets and report in ``_tracking.py``).

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

Row = dict[str, Any]


# ---------------------------------------------------------------------- arguments, output
def make_parser(description: str, quick_help: str = "a small run, under a minute"
                ) -> argparse.ArgumentParser:
    """An argument parser with the flags every benchmark accepts (``--quick``, ``--json``,
    ``--repeats``), for benchmarks that add typed options of their own.

    ``--child`` is internal: :func:`run_isolated` passes one configuration through it.
    """
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--json", action="store_true", help="print a JSON summary last")
    parser.add_argument("--repeats", type=int, default=None, help="timed repetitions")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return parser


def parse_args(description: str, extra_flags: dict[str, str] | None = None,
               extra_values: dict[str, str] | None = None,
               argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The flags every benchmark accepts, plus boolean ``extra_flags`` and string-valued
    ``extra_values`` (name -> help; absent values are None)."""
    parser = make_parser(description)
    for name, text in (extra_flags or {}).items():
        parser.add_argument(f"--{name}", action="store_true", help=text)
    for name, text in (extra_values or {}).items():
        parser.add_argument(f"--{name}", default=None, help=text)
    return parser.parse_args(argv)


def print_table(rows: Sequence[Row], columns: Sequence[str]) -> None:
    """Left-aligned text table of ``columns`` (floats to 4 significant digits)."""
    cells = [[_fmt(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    print()


def skipped(ok: bool, why: str, as_json: bool) -> bool:
    """Whether a benchmark that needs network namespaces must skip (``ok``/``why`` from
    ``testbed.netns.available``); when it must, say why and emit the skip JSON."""
    if ok:
        return False
    print(f"skipped: needs network namespaces here ({why})")
    emit([], {}, {"skipped": why}, as_json)
    return True


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


class Stopwatch:
    """Wall-clock seconds of consecutive stages: ``lap()`` returns the time since the
    previous lap (or since creation)."""

    def __init__(self) -> None:
        self._last = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        seconds, self._last = now - self._last, now
        return seconds


@dataclass(frozen=True)
class Rate:
    """Items per second of one measurement, by wall clock and by process CPU time.

    On one thread, CPU time is the fairer figure on a machine shared with other jobs (it
    does not count the time the process waited for a core)."""

    wall: float
    cpu: float


def rate_of(fn: Callable[[], int]) -> Rate:
    """The rate of ``fn``, which returns how many items it produced."""
    start, cpu_start = time.perf_counter(), time.process_time()
    count = fn()
    return Rate(count / (time.perf_counter() - start), count / (time.process_time() - cpu_start))


# ---------------------------------------------------------------------- isolated runs
def run_isolated(script: Path, config: dict[str, Any], timeout: float = 1800,
                 env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``script --child CONFIG`` in a fresh interpreter; its last stdout line is JSON.

    ``env`` adds to (or overrides) this process's environment in the child: settings such
    as ``THP_MEM_ALLOC_ENABLE`` are read once per process, so an A/B needs a process each.
    """
    cmd = [sys.executable, str(script), "--child", json.dumps(config)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                          env={**os.environ, **(env or {})})
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
