"""A calibration job: the machine's rates, then what they miss, fitted on real epochs.

The rates of :func:`~sparsegnn.distributed.planning.calibration_rates.measure_profile`
(SpMM, matmul, dropout, activations, each collective) price the work an epoch does. An epoch
also costs what none of them count: Python and autograd per operation, the optimiser step,
the bookkeeping of the training loop, and, where ranks share a host's cores, the turns they
take. Measured on this machine before this step, that was most of a small graph's epoch and
the model under-predicted every configuration by 2-3x.

So the job then trains every configuration
:func:`~sparsegnn.distributed.planning.autoplan.auto_plan` admits at its world size, for a
few epochs of two generated graphs (512p and 2048p vertices; each one's epoch the median of
three rounds' epochs), prices the same configurations with the rates alone, and fits what
the rates miss as ``epoch_overhead_s + collective_calls * call_overhead_s + row_values *
row_overhead_s`` (non-negative least squares): a fixed cost per epoch; one per collective
call, because the algorithms that make more calls (1D's broadcast per stage, SUMMA's three
per stage) also run more Python per epoch; and one per value of the busiest rank's rows
(copies, gathers for sending, loss and accuracy passes that the rates do not price). The
three numbers go into the profile. An attention model's epoch runs many more
operations per layer than these models' (the edge protocol's kernels, each an autograd
function, and its fetches' gathers and sums): a GAT of the same graph is then trained
on every configuration too, and what the fitted model still misses of its epochs is
fitted per call of the edge protocol (``edge_call_overhead_s``). An R-GCN layer makes R
SpMMs, one per relation, with one layer's Python around them, so its calls cost less
than a GCN's: an R-GCN of a typed graph is trained on every configuration too, and its
relations' calls get an overhead of their own (``relation_call_overhead_s``).
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import numpy as np
from scipy.optimize import nnls

from sparsegnn.data import GraphData, sbm
from sparsegnn.data.typed_sbm import typed_sbm
from sparsegnn.distributed.layout.grid import grid_shape
from sparsegnn.distributed.planning.autoplan import auto_plan
from sparsegnn.distributed.planning.calibration_rates import measure_profile
from sparsegnn.distributed.planning.cost import EpochCost
from sparsegnn.distributed.planning.cost_profile import Profile
from sparsegnn.distributed.planning.planner import PlanConfig, PlanGraph
from sparsegnn.distributed.planning.relational_cost import (
    RelationalPlanGraph,
    relational_auto_plan,
)
from sparsegnn.distributed.runtime.session import Session, gather_objects, rank_session
from sparsegnn.train.distributed import with_plan
from sparsegnn.train.fullgraph import TrainConfig
from sparsegnn.train.memory import peak_rss_bytes
from sparsegnn.train.rank_train import DistributedConfig
from sparsegnn.train.rgcn_grid import train_rgcn_rank
from sparsegnn.train.rgcn_task import RGCNRanks, RGCNRequest, relational_problem
from sparsegnn.train.trials import median_epoch_over_rounds

HIDDEN = 16
ATTENTION_HEADS = 4  # the calibration GAT's hidden heads (of HIDDEN / ATTENTION_HEADS)
ROUNDS = 3  # each configuration's epoch is the median of this many rounds' epochs


def calibrate_rank(quick: bool = False, backend: str | None = None,
                   timeout_s: float = 120.0) -> Profile:
    """One rank's part of a calibration job (every rank of the job calls it)."""
    with rank_session(backend, timeout_s) as session:
        # Rank 0's rates are the profile's: every rank prices with them, so all train
        # the same configurations in the same order.
        rates = gather_objects(measure_profile(session, quick))[0]
        fitted = fit_edge_overhead(session, fit_overheads(session, rates, quick), quick)
        # Training grows a rank further than the rates' measurements did (autograd,
        # the optimiser, the collectives' buffers): the largest growth of any rank over
        # the GCN and GAT runs, and the largest resident set before any data, are the
        # profile's (the R-GCN runs below build a typed graph's operators besides: with
        # their growth counted, one run's predicted peaks rose 717 -> 790 MiB).
        grown = max(gather_objects(peak_rss_bytes() - session.start_rss_bytes))
        base = max(gather_objects(session.start_rss_bytes))
        fitted = fit_relation_overhead(session, fitted, quick)
        return replace(fitted, rank_base_bytes=base,
                       rank_overhead_bytes=max(fitted.rank_overhead_bytes, grown))


def fit_overheads(session: Session, rates: Profile, quick: bool = False) -> Profile:
    """``rates`` with ``epoch_overhead_s`` and ``call_overhead_s`` fitted on real epochs
    of every configuration the job's world size admits (see the module docstring)."""
    p = session.world_size
    # 512p and 2048p vertices. A smaller graph's epoch is all fixed cost and its noise
    # pulled the per-row coefficient up (81-269 ns at p = 4 over runs; fitted without it,
    # 92-164 ns, and every held-out configuration within 25%).
    sizes = (max(2048, 512 * p), max(8192, 2048 * p))
    points: list[tuple[EpochCost, float]] = []
    for nodes in sizes:
        points += _epochs(session, rates, sbm(nodes, 4, 8, num_features=32, seed=0), quick)
    drivers = np.array([[1.0, cost.calls, cost.row_values] for cost, _ in points])
    missed = np.array([measured - cost.total_s for cost, measured in points])
    scale = drivers.max(axis=0)  # columns of like size, for a well-conditioned solve
    coef = nnls(drivers / scale, missed)[0] / scale
    notes = {**rates.notes, "overhead_fit": {
        "configurations": len(points), "graph_vertices": list(sizes),
        # What the fit saw, to check it or refit it offline: the rates' prediction
        # (compute, communication), the drivers and the measured epoch, seconds.
        "points": [[c.compute_s, sum(c.comm_s.values()), c.calls, c.row_values, m]
                   for c, m in points]}}
    return replace(rates, epoch_overhead_s=float(coef[0]), call_overhead_s=float(coef[1]),
                   row_overhead_s=float(coef[2]), notes=notes)


def _per_call(calls: list[int], points: list[tuple[EpochCost, float]]) -> float:
    """Seconds per call that the priced epochs miss of the measured ones: least squares
    through the origin over ``(cost, measured)`` points, never negative."""
    n = np.array(calls, dtype=float)
    missed = np.array([measured - cost.total_s for cost, measured in points])
    return max(0.0, float(n @ missed / max(float(n @ n), 1.0)))


def fit_edge_overhead(session: Session, fitted: Profile, quick: bool = False) -> Profile:
    """``fitted`` with ``edge_call_overhead_s``: what it misses of a GAT's epochs on every
    configuration (512p vertices), per call of the edge protocol (least squares through
    the origin, >= 0)."""
    graph = sbm(max(2048, 512 * session.world_size), 4, 8, num_features=32, seed=0)
    points = _epochs(session, fitted, graph, quick, "gat")
    coef = _per_call([cost.edge_calls for cost, _ in points], points)
    notes = {**fitted.notes, "edge_overhead_fit": [[c.total_s, c.edge_calls, m]
                                                   for c, m in points]}
    return replace(fitted, edge_call_overhead_s=coef, notes=notes)


def fit_relation_overhead(session: Session, fitted: Profile, quick: bool = False) -> Profile:
    """``fitted`` with ``relation_call_overhead_s``: an R-GCN epoch's time on every
    configuration (a typed SBM of 512p vertices, 8 relations, 32 features) less what the
    profile prices without it, per collective call of its relations' SpMMs (least
    squares through the origin, >= 0; each epoch the slowest rank's, the median of a
    run's epochs after its first)."""
    typed = typed_sbm(max(2048, 512 * session.world_size), num_features=32, seed=0)
    request = RGCNRequest(hidden=HIDDEN, epochs=(3 if quick else 8) + 1, progress=False)
    _, rel = relational_problem(request, typed)
    graph = RelationalPlanGraph.of(rel, typed.num_classes)
    base = PlanConfig(session.world_size, model="rgcn", hidden=HIDDEN)
    ranked = relational_auto_plan(graph, session.world_size,
                                  replace(fitted, relation_call_overhead_s=0.0), base)
    points = []
    for cand in ranked:
        c = cand.config
        ranks = RGCNRanks(algo=c.algo, nprocs=c.parts, replication=c.replication,  # type: ignore[arg-type]
                          partition=c.partitioner, comm=c.comm)  # type: ignore[arg-type]
        epochs: list[float] = []
        for _ in range(1 if quick else ROUNDS):
            run = train_rgcn_rank(replace(request, ranks=ranks),
                                  grid_shape(c.algo, c.parts, c.replication), typed)
            assert run is not None  # the grid spans the job
            every = gather_objects([h.seconds for h in run.outcome.history])
            epochs += [max(e) for e in zip(*every, strict=True)][1:]
        points.append((cand.cost, statistics.median(epochs)))
    coef = _per_call([cost.relation_calls for cost, _ in points], points)
    notes = {**fitted.notes, "relation_overhead_fit": [[c.total_s, c.relation_calls, m]
                                                       for c, m in points]}
    return replace(fitted, relation_call_overhead_s=coef, notes=notes)


def _epochs(session: Session, rates: Profile, graph: GraphData, quick: bool,
            model: str = "gcn") -> list[tuple[EpochCost, float]]:
    """Every configuration's prediction at ``rates`` and measured epoch on ``graph``."""
    hidden = HIDDEN // ATTENTION_HEADS if model == "gat" else HIDDEN
    base = PlanConfig(session.world_size, model=model, hidden=hidden, num_layers=2,
                      heads=ATTENTION_HEADS)
    ranked = auto_plan(PlanGraph.of(graph, model), session.world_size, rates, base)
    # 7 counted epochs per round, 21 per configuration: with 4 (12 in all), runs of one
    # calibration fitted per-row overheads 2-5x apart (8 and 19 ns at p = 4; 13 and 73 ns
    # on graphs of 4096p) and priced 1.5D, which holds twice 1D's rows, up to 35% off
    # on the benchmark (docs/results/autoconfig.md).
    cfg = TrainConfig(model=model, hidden=hidden, heads=ATTENTION_HEADS, num_layers=2,
                      dropout=0.5, epochs=3 if quick else 8, patience=100, progress=False)
    measured = median_epoch_over_rounds(session, graph, cfg,
                                        [distributed_config(c.config, session.backend)
                                         for c in ranked], 1 if quick else ROUNDS)
    return [(cand.cost, m) for cand, m in zip(ranked, measured, strict=True)]


def distributed_config(config: PlanConfig, backend: str) -> DistributedConfig:
    """The training options of a planner configuration, with per-block dropout masks."""
    return with_plan(DistributedConfig(backend=backend, dropout_masks="block"), config)
