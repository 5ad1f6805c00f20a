"""Measure what this machine costs, for the cost model (``sparsegnn calibrate``; the
job itself, which also fits the overheads on real epochs, is
:func:`sparsegnn.train.calibrate.calibrate_rank`).

Every rank of a job of the world size one plans for runs the same measurements at the
same time, after a barrier, so the rates are those of the machine *shared by* that many
ranks (on a host with fewer cores than ranks, the ranks' compute slows down together,
which a single-process measurement would miss). Rank 0's numbers become the
:class:`~sparsegnn.distributed.cost.Profile`:

* local SpMM of a uniform random graph (random gathers: the rate of rows that miss
  the caches) at two densities and several widths, solved per width for the time per
  nonzero-column and per output row-column;
* a dense matmul (time per multiply-add), a dropout (time per value, its random mask
  included) and an activation's pass (time per value);
* each collective of :class:`~sparsegnn.distributed.comm.Communicator` at several sizes,
  fitted as ``latency + bytes * time_per_byte`` against the bytes the busiest rank sends
  or receives in our accounting (the same measure the planner predicts).
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable

import numpy as np
import torch
from scipy.optimize import nnls
from torch.nn import functional as F

from sparsegnn.distributed.comm import Communicator, Group
from sparsegnn.distributed.cost import LinkCost, Profile
from sparsegnn.distributed.session import Session, barrier
from sparsegnn.sparse import CSRMatrix

WIDTHS = (8, 32, 128)
DEGREES = (4, 32)


def _best(fn: Callable[[], object], repeats: int, sync: Callable[[], None],
          settle: Callable[[], None] | None = None) -> float:
    """The fastest of ``repeats`` timed runs (after one warm-up), ranks in step.

    ``settle`` (a barrier) runs inside the timed region: a collective's root returns
    once its sends are queued, long before a shaped link has delivered them (a 16 MiB
    broadcast "took" 2.6 ms on 100 Mbit/s), so a collective is timed until every rank
    has finished it."""
    fn()
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        if settle is not None:
            settle()
        times.append(time.perf_counter() - start)
    return min(times)


def _random_graph(n: int, degree: int, seed: int) -> CSRMatrix:
    g = torch.Generator().manual_seed(seed)
    rows = torch.arange(n).repeat_interleave(degree)
    cols = torch.randint(0, n, (n * degree,), generator=g)
    return CSRMatrix.from_coo(rows, cols, torch.ones(n * degree), shape=(n, n))


def measure_spmm(n: int, repeats: int, sync: Callable[[], None]) -> tuple[dict[int, float], float]:
    """Seconds per nonzero-column per width, and per output row-column (averaged)."""
    mats = [_random_graph(n, d, seed=d) for d in DEGREES]
    per_nnz, per_row = {}, []
    for width in WIDTHS:
        x = torch.randn(n, width)
        times = [_best(lambda a=a, x=x: a.matmul(x), repeats, sync) for a in mats]
        # t = nnz * w * a + n * w * b, one equation per density.
        lhs = np.array([[a.nnz * width, n * width] for a in mats], dtype=float)
        a_s, b_s = np.linalg.lstsq(lhs, np.array(times), rcond=None)[0]
        per_nnz[width] = max(float(a_s), 0.0)
        per_row.append(max(float(b_s), 0.0))
    return per_nnz, float(np.mean(per_row))


def measure_dense(n: int, repeats: int, sync: Callable[[], None]
                  ) -> tuple[float, float, float]:
    """Seconds per multiply-add of a matmul, per value of a dropout (mask drawn and
    applied, as the models' ``F.dropout``) and per value of an activation's pass."""
    x, w = torch.randn(n, 128), torch.randn(128, 128)
    gemm = _best(lambda: x @ w, repeats, sync) / (n * 128 * 128)
    drop = _best(lambda: F.dropout(x, 0.5, training=True), repeats, sync) / x.numel()
    elem = _best(lambda: F.relu(x), repeats, sync) / x.numel()
    return gemm, drop, elem


def measure_collectives(
    comm: Communicator, group: Group, sizes: list[int], repeats: int, hosts: int = 1,
) -> dict[str, LinkCost]:
    """Latency and time per byte of each collective, from runs at ``sizes`` bytes, on a
    job spread over ``hosts`` hosts."""
    p = group.size
    out = {}
    # Across hosts a collective is timed until every rank has finished it (a barrier
    # included; taking a barrier's own time off under-predicted the shaped-link epochs
    # 2x); on one host, where a root's queued sends are delivered as fast as they are
    # copied, at the caller's return (what the fitted model of benchmarks/autoconfig.py
    # was measured against: timing to completion there doubled the latencies and the
    # predicted epochs rose 20-60% above the measured).
    settle = barrier if hosts > 1 else None
    for name in ("broadcast", "all_reduce", "all_gather", "all_to_all"):
        points = []
        for size in sizes:
            values = max(1, size // 4)
            run, accounted = _collective(comm, group, name, values)
            seconds = _best(run, repeats, barrier, settle=settle)
            points.append((accounted * (p - 1) if name != "all_to_all" else accounted,
                           seconds))
        out[name] = _fit(points)
    return out


def _collective(comm: Communicator, group: Group, name: str, values: int
                ) -> tuple[Callable[[], object], int]:
    """A call of collective ``name`` moving about ``4 * values`` bytes per member, and the
    bytes per peer our accounting charges the busiest rank."""
    x = torch.zeros(values)
    if name == "broadcast":
        return (lambda: comm.broadcast(x, 0, group)), 4 * values
    if name == "all_reduce":
        return (lambda: comm.all_reduce(x, group)), 4 * values
    if name == "all_gather":
        piece = x[: max(1, values // group.size)]
        shapes = [tuple(piece.shape)] * group.size
        return (lambda: comm.all_gather(piece, shapes, group)), 4 * piece.numel()
    from sparsegnn.distributed.sampled import ExchangeCommunicator

    exchange = ExchangeCommunicator()
    counts = [values // group.size] * group.size
    send = torch.zeros(sum(counts))
    return (lambda: exchange.all_to_all(send, counts, group, counts)), \
        4 * (sum(counts) - counts[group.me])


def _fit(points: list[tuple[float, float]]) -> LinkCost:
    """``t = latency + x * per_byte``, both >= 0, fitted on the relative error: sizes
    span four decades, and an absolute fit lets the largest decide everything, leaving
    the latency (what the many small messages of a small graph's epoch pay) at noise."""
    x = np.array([b for b, _ in points], dtype=float)
    t = np.array([s for _, s in points], dtype=float)
    t = np.maximum(t, 1e-9)
    coef = nnls(np.stack([np.ones_like(x), x], axis=1) / t[:, None], np.ones_like(t))[0]
    return LinkCost(float(coef[0]), float(coef[1]))


def measure_profile(session: Session, quick: bool = False) -> Profile:
    """This rank's part of a calibration job's measurements (every rank calls it)."""
    n = 1 << (13 if quick else 16)
    repeats = 2 if quick else 3
    per_nnz, per_row = measure_spmm(n, repeats, barrier)
    gemm, drop, elem = measure_dense(n, repeats, barrier)
    group = Group(tuple(range(session.world_size)), session.rank)
    sizes = [1 << k for k in ((10, 16, 20) if quick else (10, 14, 18, 20, 22, 24))]
    hosts = _hosts(session.world_size)
    links = measure_collectives(Communicator(), group, sizes, repeats, hosts) \
        if session.world_size > 1 else {"broadcast": LinkCost(0.0, 0.0)}
    rusage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return Profile(session.backend, session.world_size, per_nnz, per_row, gemm, elem,
                   links, {"graph_vertices": n, "collective_sizes": sizes},
                   max(0, rusage - session.start_rss_bytes), session.start_rss_bytes,
                   hosts, dropout_s=drop)


def _hosts(world: int) -> int:
    """Hosts of the job: torchrun's ranks per host divide its world; spawned ranks share
    this one."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world) or world)
    return max(1, world // max(1, local))
