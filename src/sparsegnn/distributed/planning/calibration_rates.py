"""Measure what this machine costs, for the cost model (``sparsegnn calibrate``; the
job itself, which also fits the overheads on real epochs, is
:func:`sparsegnn.train.calibration_job.calibrate_rank`).

Every rank of a job of the world size one plans for runs the same measurements at the
same time, after a barrier, so the rates are those of the machine *shared by* that many
ranks (on a host with fewer cores than ranks, the ranks' compute slows down together,
which a single-process measurement would miss). Rank 0's numbers become the
:class:`~sparsegnn.distributed.planning.cost_profile.Profile`:

* local SpMM of a uniform random graph (random gathers: the rate of rows that miss
  the caches) at two densities and several widths, solved per width for the time per
  nonzero-column and per output row-column;
* how much longer the ranks take to finish a piece of compute all at once than one
  rank alone (:func:`measure_core_sharing`);
* the attention models' kernels (:func:`measure_attention`): the additive and the
  LeakyReLU SDDMM, the edge softmax, the multi-head SpMM with autograd values, the
  attention dropout and the ELU, forward alone and forward with backward, per value
  (edge x head, edge x head x channel, or node value);
* a dense matmul (time per multiply-add), a dropout (time per value, its random mask
  included: the mask kind the models train with, ``sparsegnn.names.DEFAULT_MASK``) and an
  activation's pass (time per value);
* each collective of :class:`~sparsegnn.distributed.runtime.comm.Communicator` at several sizes,
  fitted as ``latency + bytes * time_per_byte`` against the bytes the busiest rank sends
  or receives in our accounting (the same measure the planner predicts);
* across hosts, also the broadcast as the algorithms use it (:func:`measure_broadcast_rounds`):
  per group size, every member the root in turn, back to back, all groups at once, a
  table of seconds per call by message size. On shaped links one straight line through
  isolated broadcasts of 1 KiB-16 MiB cannot price an epoch's: gloo's broadcast is a
  store-and-forward binomial tree (at 4 ranks the root sends the message twice, one
  receiver forwards it once), and a link's token bucket and the socket buffers let
  messages below about 1 MiB through faster than the link rate, more so when the
  stages' roots rotate and each link idles between its turns. Measured on 4 hosts at
  100 Mbit/s (80 ns/B): 42 ns per accounted byte for back-to-back 256 KiB broadcasts,
  55-67 ns for isolated 1-4 MiB ones, 83 ns at 16 MiB; the line's slope came out at
  23-42 ns/B depending on the run.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist
from scipy.optimize import nnls
from torch.nn import functional as F

from sparsegnn.distributed.planning.cost_profile import LinkCost, Profile
from sparsegnn.distributed.runtime.comm import Communicator, Group, new_group
from sparsegnn.distributed.runtime.session import Session, barrier, ranks_per_host
from sparsegnn.names import DEFAULT_MASK, MaskKind
from sparsegnn.nn.dropout import dropout, dropout_noise
from sparsegnn.sparse import CSRMatrix, edge_softmax, sddmm_add, sddmm_leaky, spmm_values

WIDTHS = (8, 32, 128)
# Heads and channels per head of the attention kernels' timings (GAT's 8 heads of 8).
EDGE_HEADS, EDGE_CHANNELS = 8, 8
DEGREES = (4, 32)
# Message sizes (bytes per member) of the broadcast rounds: the stage messages of the
# graphs one trains across hosts (a 16k-vertex graph's 1D stage at width 16 is 256 KiB).
ROUND_SIZES = (1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22)
QUICK_ROUND_SIZES = (1 << 14, 1 << 18, 1 << 20)


def _timings(fn: Callable[[], object], repeats: int, sync: Callable[[], None],
             settle: Callable[[], None] | None = None) -> list[float]:
    """``repeats`` timed runs (after one warm-up), ranks in step.

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
    return times


def _best(fn: Callable[[], object], repeats: int, sync: Callable[[], None],
          settle: Callable[[], None] | None = None) -> float:
    """The fastest of :func:`_timings` (compute rates: the others' noise filtered out)."""
    return min(_timings(fn, repeats, sync, settle))


def _median(fn: Callable[[], object], repeats: int, sync: Callable[[], None],
            settle: Callable[[], None] | None = None) -> float:
    """The median of :func:`_timings`."""
    return float(np.median(_timings(fn, repeats, sync, settle)))


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


def measure_attention(sizes: tuple[int, ...], repeats: int, sync: Callable[[], None]
                      ) -> dict[str, list[tuple[float, float, float]]]:
    """:func:`attention_rates` at every size of ``sizes`` (vertices): ``(rows, forward,
    forward and backward)`` points per kernel. One size is not enough: at 64k vertices
    (16 MiB of gathered rows) the kernels took 2-3x their time per value at 8k, whose
    rows fit the caches, and priced with it every GAT epoch of an 8k-vertex graph came
    out 1.6-2.8x its measured time (docs/results/autoconfig.md)."""
    out: dict[str, list[tuple[float, float, float]]] = {}
    for n in sorted(set(sizes)):
        for name, (forward, train) in attention_rates(n, repeats, sync).items():
            out.setdefault(name, []).append((float(n), forward, train))
    return out


def attention_rates(n: int, repeats: int, sync: Callable[[], None]
                    ) -> dict[str, tuple[float, float]]:
    """Seconds per value of each attention kernel on a uniform random graph of ``n``
    vertices and degree 16 (random gathers), ``(forward, forward and
    backward)``: the additive SDDMM, the edge softmax and the attention dropout (the
    Bernoulli mask a grid's ranks draw, :meth:`~sparsegnn.distributed.ops.edge_exchange.
    EdgeExchange.edge_dropout`; ~20x an activation's pass) per edge and head, the
    LeakyReLU SDDMM and the multi-head SpMM per edge, head and channel, the ELU between
    GAT's layers per value (~30x a ReLU's)."""
    a = _random_graph(n, 16, seed=16)
    h, c = EDGE_HEADS, EDGE_CHANNELS
    u, v = torch.randn(n, h, requires_grad=True), torch.randn(n, h, requires_grad=True)
    x = torch.randn(n, h, c, requires_grad=True)
    att = torch.randn(h, c, requires_grad=True)
    scores = torch.randn(a.nnz, h, requires_grad=True)
    gen = torch.Generator().manual_seed(0)
    kernels: dict[str, tuple[Callable[[], torch.Tensor], int]] = {
        "sddmm_add": (lambda: sddmm_add(a, u, v), a.nnz * h),
        "sddmm_leaky": (lambda: sddmm_leaky(a, x, x, att), a.nnz * h * c),
        "edge_softmax": (lambda: edge_softmax(a, scores), a.nnz * h),
        "heads_spmm": (lambda: spmm_values(a, scores, x), a.nnz * h * c),
        "edge_dropout": (lambda: dropout_noise(scores, 0.5, "bernoulli", gen) * scores,
                         a.nnz * h),
        "elu": (lambda: F.elu(x), x.numel()),
    }
    out = {}
    for name, (fn, values) in kernels.items():
        with torch.no_grad():
            forward = _best(fn, repeats, sync)
        train = _best(lambda fn=fn: fn().sum().backward(), repeats, sync)
        out[name] = (forward / values, max(forward, train) / values)
    return out


def measure_dense(n: int, repeats: int, sync: Callable[[], None],
                  mask: MaskKind = DEFAULT_MASK) -> tuple[float, float, float]:
    """Seconds per multiply-add of a matmul, per value of a dropout (mask drawn and
    applied by the models' own :func:`~sparsegnn.nn.dropout.dropout` with ``mask``,
    default the training default: the kinds' draws differ several-fold in cost) and per
    value of an activation's pass."""
    x, w = torch.randn(n, 128), torch.randn(128, 128)
    gemm = _best(lambda: x @ w, repeats, sync) / (n * 128 * 128)
    drop = _best(lambda: dropout(x, 0.5, True, mask), repeats, sync) / x.numel()
    elem = _best(lambda: F.relu(x), repeats, sync) / x.numel()
    return gemm, drop, elem


def measure_core_sharing(rank: int, repeats: int, sync: Callable[[], None]) -> float:
    """How many times longer the host takes to finish a fixed piece of compute that every
    rank runs at once than rank 0 takes to run it alone (the others blocked in a
    barrier, off the cores): 1 with a core per rank, about the ranks per core where
    they share (measured on a 2-vCPU machine: 1.06 at 2 ranks, 1.95 at 4, 3.85 at 8).
    The cost model needs it because the rates are measured with all ranks at once, and
    a rank with more work than the others (a partition that balances vertices, not
    nonzeros) finishes at its speed alone once they are done. The piece takes ~25 ms
    alone: a few milliseconds fit in one scheduler slice and never overlap."""
    x, w = torch.randn(2048, 128), torch.randn(128, 128)

    def work() -> None:
        for _ in range(64):
            x @ w

    alone = []
    for _ in range(repeats):
        sync()
        if rank == 0:
            start = time.perf_counter()
            work()
            alone.append(time.perf_counter() - start)
        sync()
    together = torch.tensor(_timings(work, repeats, sync), dtype=torch.float64)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(together, op=dist.ReduceOp.MAX)  # done when the last rank is
    if rank != 0:
        return 1.0  # only rank 0's measurements become the profile
    return max(1.0, float(together.median()) / min(alone))


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


def round_turns(size: int) -> int:
    """Turns of every member's broadcast timed together for messages of ``size`` bytes:
    about 1 MiB per member in all (at least one turn, at most six), so that a timing
    spans many calls, yet the largest sizes take seconds, not minutes, on 100 Mbit/s."""
    return max(1, min(6, (1 << 20) // max(1, size)))


def round_groups(world: int) -> list[int]:
    """Group sizes the algorithms broadcast in at ``world`` ranks (1D/1.5D replicas of
    p/c ranks, 2D/3D process rows of q): every divisor of the world from 2."""
    return [g for g in range(2, world + 1) if world % g == 0]


def measure_broadcast_rounds(
    comm: Communicator, rank: int, world: int, sizes: list[int], repeats: int,
) -> dict[int, list[tuple[float, float]]]:
    """Per group size g: ``(bytes a call's root sends, seconds per call)`` at each message
    size of ``sizes``, the way an epoch's stages run: the world cut into p/g groups of
    consecutive ranks broadcasting at the same time, each member the root in turn, back
    to back for several turns (:func:`round_turns`: an epoch makes 24 such calls at
    p = 4), timed until every rank has finished (a barrier included), per call; the
    median of ``repeats`` timings.

    Why not isolated broadcasts: a stage's cost depends on what the calls around it do.
    A root returns once its sends are queued and goes on to the next stage while the
    tree still forwards; a shaped link's token bucket refills while the link idles
    between its turns. 24 back-to-back 256 KiB broadcasts at 4 ranks over 100 Mbit/s
    took 31-36 ms each; one after a pause 27 ms, one right after another from the same
    root 43 ms, a single turn of the 4 roots 30-42 ms. Why the median: across hosts the
    spread is the network's (TCP, the token buckets), which the epochs see too, not
    other processes' noise that the fastest run filters out."""
    table: dict[int, list[tuple[float, float]]] = {}
    for g in round_groups(world):
        members = [tuple(range(start, start + g)) for start in range(0, world, g)]
        # Every rank creates every group, in the same order (torch requires it).
        handles = [None if g == world else new_group(list(m)) for m in members]
        mine = rank // g
        group = Group(members[mine], rank - mine * g, handles[mine])
        points = []
        for size in sizes:
            x = torch.zeros(max(1, size // 4))

            turns = round_turns(size)

            def rounds(x: torch.Tensor = x, group: Group = group, turns: int = turns
                       ) -> None:
                for _ in range(turns):
                    for root in range(group.size):
                        comm.broadcast(x, root, group)

            seconds = _median(rounds, repeats, barrier, settle=barrier) / (g * turns)
            points.append((float(x.numel() * x.element_size() * (g - 1)), seconds))
        table[g] = points
    return table


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
    from sparsegnn.distributed.ops.sampled import ExchangeCommunicator

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


def measure_profile(session: Session, quick: bool = False,
                    mask: MaskKind = DEFAULT_MASK) -> Profile:
    """This rank's part of a calibration job's measurements (every rank calls it);
    ``mask``: the dropout mask to time (default: the models' training default)."""
    n = 1 << (13 if quick else 16)
    repeats = 2 if quick else 3
    per_nnz, per_row = measure_spmm(n, repeats, barrier)
    gemm, drop, elem = measure_dense(n, repeats, barrier, mask)
    # The fastest of five: a kernel takes milliseconds, and two runs on a shared host
    # let another process's burst set the rate (3x apart between quick calibrations).
    kernels = measure_attention((1 << 13, n), max(repeats, 5), barrier)
    sharing = measure_core_sharing(session.rank, repeats, barrier)
    group = Group(tuple(range(session.world_size)), session.rank)
    sizes = [1 << k for k in ((10, 16, 20) if quick else (10, 14, 18, 20, 22, 24))]
    hosts = _hosts(session.world_size)
    comm = Communicator()
    links = measure_collectives(comm, group, sizes, repeats, hosts) \
        if session.world_size > 1 else {"broadcast": LinkCost(0.0, 0.0)}
    # On one host the straight-line fit prices the measured epochs (benchmarks/
    # autoconfig.py); the rounds are for links between hosts.
    rounds = measure_broadcast_rounds(
        comm, session.rank, session.world_size,
        list(QUICK_ROUND_SIZES if quick else ROUND_SIZES), repeats) if hosts > 1 else {}
    rusage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return Profile(session.backend, session.world_size, per_nnz, per_row, gemm, elem,
                   links, {"graph_vertices": n, "collective_sizes": sizes,
                           "dropout_mask": mask},
                   max(0, rusage - session.start_rss_bytes), session.start_rss_bytes,
                   hosts, dropout_s=drop, broadcast_rounds=rounds, core_sharing=sharing,
                   attention_s=kernels)


def _hosts(world: int) -> int:
    """Hosts of the job: torchrun's ranks per host divide its world; spawned ranks share
    this one."""
    return max(1, world // max(1, ranks_per_host(world)))
