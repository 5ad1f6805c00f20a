"""R-GCN priced like the SpMM models: bytes, epoch time and memory of every configuration.

A relational layer ``X W_0 + sum_r A_r X W_r`` on a grid multiplies by each relation's
distributed operator in turn (:mod:`sparsegnn.train.rgcn_grid`), so an epoch is the
SpMM models' epoch with R operators instead of one, and each piece of their pricing
carries over with the relations summed:

* bytes: each relation's SpMM phases from the planner's exact volumes of its operator
  (:func:`~sparsegnn.distributed.planning.plan.epoch_volume`: its block pairs with
  sparsity-aware 1D/1.5D, its tiles on 2D/3D) for the widths
  :func:`~sparsegnn.distributed.planning.relational_model.rgcn_schedule` multiplies,
  summed over the relations (what a run's counters measure, tested); the gradient sum
  of all weights (a featureless first layer holds ``R x n x hidden``) once;
* compute: each relation's SpMMs on the nonzeros of the tiles a rank multiplies, at the
  profile's SpMM rate; the dense maps (the root's and one ``W_r`` per relation, a
  block-diagonal ``W_r`` a ``1 / blocks`` of it; a featureless first layer gathers rows
  of ``W_r`` instead), the basis combination of the weights, the R additions of the
  relations' outputs and the elementwise passes of the SpMM models;
* collective calls: R times each SpMM's, each charged the profile's fitted
  ``relation_call_overhead_s`` (the per-relation Python and autograd of the R products,
  fitted by ``calibrate`` on R-GCN epochs; GCN's ``call_overhead_s`` where a profile
  predates it), the other calls as the SpMM models';
* memory: the tiles of every relation (and their transposes, the mean-normalised
  operators are not symmetric), the R-GCN weights, and each relation's product per row.

No kernel beyond the SpMM's is new: the products are the SpMM models' (one operator a
call), so ``calibrate``'s SpMM rate prices them; what is new is how much Python an epoch
runs per product, hence the fitted per-call overhead of its own.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from sparsegnn.data.hetero import RelationalGraph
from sparsegnn.distributed.layout.block_partition import split_sizes
from sparsegnn.distributed.layout.grid import grid_shape
from sparsegnn.distributed.planning.autoplan import Candidate, configurations_with_cuts
from sparsegnn.distributed.planning.comm_model import SpmmCall
from sparsegnn.distributed.planning.cost import (
    EpochCost,
    call_total,
    collective_calls,
    comm_seconds,
    elementwise_values,
    host_compute_seconds,
    rank_nonzeros,
    reduction_seconds,
    tile_products,
)
from sparsegnn.distributed.planning.cost_profile import Profile
from sparsegnn.distributed.planning.plan import SPMM_PHASES, Pattern, RankVolume, epoch_volume
from sparsegnn.distributed.planning.planner import Layout, PlanConfig, PlanGraph, partitioned
from sparsegnn.distributed.planning.rank_memory import (
    OPERATOR_BUILD_BYTES_PER_NONZERO,
    activation_width,
    busiest,
    in_flight_bytes,
    layout_holdings,
    operator_tile_tables,
    rank_bytes,
)
from sparsegnn.distributed.planning.relational_model import rgcn_schedule
from sparsegnn.errors import InvalidValueError
from sparsegnn.nn.rgcn import relation_operators
from sparsegnn.sparse import CSRMatrix


@dataclass
class RelationalPlanGraph:
    """What the planner keeps of a typed graph: its sizes, one mean-normalised operator
    per relation (original vertex order, as the ranks build them) and ``union``, the
    pattern of all relations, which the partitioners cut (as the ranks' partition)."""

    union: PlanGraph
    relations: list[CSRMatrix]
    featureless: bool

    @classmethod
    def of(cls, rel: RelationalGraph, num_classes: int, *, featureless: bool = False
           ) -> RelationalPlanGraph:
        """The plan graph of ``rel`` (its relations' operators built once here)."""
        no_features = featureless or rel.x is None
        union = PlanGraph(rel.num_nodes, int(rel.edge_index.shape[1]),
                          0 if no_features else int(rel.x.shape[1]),  # type: ignore[union-attr]
                          num_classes, "rgcn",
                          Pattern.from_edge_index(rel.edge_index, rel.num_nodes))
        ops = relation_operators(rel.edge_index, rel.edge_type, rel.num_relations,
                                 rel.num_nodes, "mean", torch.float32)
        return cls(union, ops, no_features)

    @property
    def num_relations(self) -> int:
        return len(self.relations)

    def widths(self, cfg: PlanConfig) -> list[int]:
        """Each layer's input and output width (a featureless first layer's input: one
        column per node)."""
        g = self.union
        first = g.num_nodes if self.featureless else g.num_features
        return [first, *([cfg.hidden] * (cfg.num_layers - 1)), g.num_classes]

    def schedule(self, cfg: PlanConfig) -> list[SpmmCall]:
        """One relation's distributed SpMMs in an epoch."""
        return rgcn_schedule(self.widths(cfg), featureless=self.featureless,
                             block_diagonal=cfg.num_blocks is not None)


def parameter_count(graph: RelationalPlanGraph, cfg: PlanConfig) -> int:
    """Weights of the model, as :class:`~sparsegnn.nn.rgcn.RGCNConv` holds them: per layer
    the root and bias, and R relation weights (full, ``num_bases`` bases and R x B
    coefficients, or block-diagonal; a featureless first layer's are never blocks)."""
    r, total = graph.num_relations, 0
    for layer, (a, b) in enumerate(itertools.pairwise(graph.widths(cfg))):
        total += a * b + b
        if cfg.num_bases is not None:
            total += cfg.num_bases * a * b + r * cfg.num_bases
        elif cfg.num_blocks is not None and not (layer == 0 and graph.featureless):
            total += r * a * b // cfg.num_blocks
        else:
            total += r * a * b
    return total


def relational_volumes(lay: Layout, graph: RelationalPlanGraph, cfg: PlanConfig
                       ) -> dict[str, RankVolume]:
    """Per-rank bytes of the epoch's SpMM phases: each relation's operator's, summed."""
    calls = graph.schedule(cfg)
    out: dict[str, RankVolume] = {}
    for op in graph.relations:
        phases = epoch_volume(lay.shape, lay.part, op, calls, value_bytes=cfg.value_bytes,
                              comm=cfg.comm)  # type: ignore[arg-type]
        for phase, vol in phases.items():
            out[phase] = out[phase] + vol if phase in out else vol
    return out


def dense_seconds(graph: RelationalPlanGraph, cfg: PlanConfig, rows: int,
                  profile: Profile) -> float:
    """A rank's dense work on its ``rows`` (training forward and backward, evaluation
    forward): the maps, the basis combination (once per forward, not per row), a
    featureless layer's gather of its rows of ``W_r`` and the relations' sums."""
    r, macs, weight_macs, values = graph.num_relations, 0, 0, 0
    for layer, (a, b) in enumerate(itertools.pairwise(graph.widths(cfg))):
        featureless = layer == 0 and graph.featureless
        if cfg.num_bases is not None:
            weight_macs += r * cfg.num_bases * a * b
        if featureless:
            values += r * b  # rows of W_r gathered
        else:
            blocks = cfg.num_blocks or 1
            macs += a * b + r * a * b // blocks
        values += r * b  # each relation's output added
    return (4 * (rows * macs + weight_macs) * profile.gemm_s
            + 3 * rows * values * profile.elementwise_s)


# Passes over every weight per epoch beyond the forward and backward: Adam's step with
# weight decay (the decay's add, the two moments' updates, the square root, the division
# and the weights' update read or write each value ~8 times).
OPTIMISER_PASSES = 8


def weight_seconds(graph: RelationalPlanGraph, cfg: PlanConfig, profile: Profile) -> float:
    """Work on the whole weights, the same on every rank of every grid: the optimiser's
    passes, and a featureless first layer's gradient of its gathered rows of ``W_r``
    (zeroed and scattered into at the size of ``R x n x hidden``). Negligible for a model
    with features; a featureless one holds ``R x n x hidden`` weights (1.2M at 8,192
    vertices and 8 relations), and without this every featureless configuration was
    under-predicted (by 4-39%, docs/results/autoconfig.md)."""
    values = OPTIMISER_PASSES * parameter_count(graph, cfg)
    if graph.featureless:
        values += 2 * graph.num_relations * graph.union.num_nodes * graph.widths(cfg)[1]
    return values * profile.elementwise_s


def compute_seconds(lay: Layout, graph: RelationalPlanGraph, cfg: PlanConfig,
                    profile: Profile) -> float:
    """Compute time of an epoch: every relation's SpMMs on the tiles each rank
    multiplies, its dense work and the elementwise passes (every rank holds its rows'
    whole feature width, on 2D/3D too)."""
    shape, part = lay.shape, lay.part
    calls = graph.schedule(cfg)
    nnz = [rank_nonzeros(shape, part, op) for op in graph.relations]
    widths = graph.widths(cfg)
    per_rank = []
    for rank in range(shape.size):
        i, j, _ = shape.coords(rank)
        rows, products = part.size(i), tile_products(shape, cfg.comm, i, j)
        seconds = 0.0
        for call in calls:
            width = call.width if shape.row_wise else split_sizes(call.width, shape.cols)[j]
            seconds += sum(profile.spmm_time(float(n[rank]), rows, width, products)
                           for n in nnz)
        seconds += dense_seconds(graph, cfg, rows, profile)
        seconds += weight_seconds(graph, cfg, profile)
        seconds += rows * sum(widths[1:-1]) * profile.dropout_s
        seconds += rows * elementwise_values(widths) * profile.elementwise_s
        per_rank.append(seconds)
    return host_compute_seconds(per_rank, profile.core_sharing)


def predict_relational_epoch(lay: Layout, graph: RelationalPlanGraph, cfg: PlanConfig,
                             phases: dict[str, dict[str, int]], profile: Profile
                             ) -> EpochCost:
    """The cost of one R-GCN epoch of ``cfg`` on ``lay``, whose SpMM bytes ``phases``
    (:func:`relational_volumes`, as totals) give."""
    shape = lay.shape
    calls = graph.schedule(cfg) * graph.num_relations
    counts = collective_calls(shape, calls, cfg.comm)
    comm_s = comm_seconds(shape, lay.part, phases, counts, calls, cfg.comm,
                          cfg.value_bytes, profile)
    comm_s.update(reduction_seconds(shape, parameter_count(graph, cfg), cfg.value_bytes,
                                    profile))
    ncalls = call_total(shape, counts)
    spmm = call_total(shape, {k: v for k, v in counts.items() if k in SPMM_PHASES})
    busiest_rows = max(lay.part.size(shape.coords(r)[0]) for r in range(shape.size))
    values = busiest_rows * graph.num_relations * sum(graph.widths(cfg)[1:])
    per_call = profile.call_overhead_s if profile.relation_call_overhead_s is None \
        else profile.relation_call_overhead_s
    overhead = profile.overhead(ncalls - spmm, values) + spmm * per_call
    return EpochCost(compute_seconds(lay, graph, cfg, profile), comm_s, overhead, ncalls,
                     values, relation_calls=spmm)


def relational_memory(lay: Layout, graph: RelationalPlanGraph, cfg: PlanConfig,
                      process_bytes: int = 0, whole_graph: bool = True) -> dict[str, int]:
    """The busiest rank's predicted peak by kind (:func:`~sparsegnn.distributed.planning.
    rank_memory.rank_bytes`): every relation's tiles, its rows' features, the weights,
    and for training three values per row of each layer's input and output
    (:func:`~sparsegnn.distributed.planning.rank_memory.activation_width`) plus each
    relation's product; ``whole_graph``: every rank loads the typed graph and builds
    every relation's whole operator before cutting its tiles."""
    shape, part, g = lay.shape, lay.part, graph.union
    vb = cfg.value_bytes
    tables = [t for op in graph.relations for t in operator_tile_tables(shape, part, op)]
    widths = graph.widths(cfg)
    per_relation = sum(c.width for c in graph.schedule(cfg) if c.phase == "forward_spmm") \
        // 2  # the schedule lists the training and the evaluation forward
    block_values = max(part.size(b) for b in range(shape.row_blocks)) * max(widths[1:])
    nnz = sum(op.nnz for op in graph.relations)
    loaded = g.num_nodes * (g.num_features * vb + 8 + 3) + g.num_edges * 24
    whole = loaded + max(loaded, OPERATOR_BUILD_BYTES_PER_NONZERO * nnz) if whole_graph else 0
    params = parameter_count(graph, cfg)

    def stage_tile(rank: int) -> tuple[int, int]:
        if shape.row_wise:
            return 0, 0
        i, _, m = shape.coords(rank)
        return part.size(i) + 1, max(int(t[i, k, m]) for t in tables
                                     for k in range(shape.cols))

    holdings = layout_holdings(lay, g.num_features, tables)
    return busiest(
        rank_bytes(replace(h, feature_cols=g.num_features), params, vb, graph_bytes=whole,
                   process_bytes=process_bytes,
                   activation_width=activation_width(shape.algo, g.num_features, widths)
                   + graph.num_relations * per_relation,
                   in_flight_bytes=in_flight_bytes(shape, rank, cfg, block_values,
                                                   stage_tile(rank), vb))
        for rank, h in enumerate(holdings))


def relational_plan(graph: RelationalPlanGraph, cfg: PlanConfig, profile: Profile | None,
                    process_bytes: int = 0, lay: Layout | None = None
                    ) -> tuple[dict[str, Any], Layout]:
    """One configuration of R-GCN planned: its per-rank bytes per phase, its busiest
    rank's peak memory by kind and, given a ``profile``, its predicted epoch (JSON-ready),
    and the layout (``lay``: one already cut for the configuration's blocks)."""
    shape = grid_shape(cfg.algo, cfg.parts, cfg.replication)
    if lay is None:
        lay = partitioned(graph.union, shape, cfg.partitioner, cfg.seed)
    else:
        lay = Layout(lay.graph, shape, lay.part, lay.partition_seconds)
    volumes = relational_volumes(lay, graph, cfg)
    total = RankVolume(np.zeros(shape.size, np.int64), np.zeros(shape.size, np.int64))
    for vol in volumes.values():
        total = total + vol
    phases = {p: {"total": v.total, "max_per_rank": v.max_per_rank} for p, v in volumes.items()}
    kinds = relational_memory(lay, graph, cfg, process_bytes)
    out: dict[str, Any] = {
        "num_nodes": graph.union.num_nodes, "num_edges": graph.union.num_edges,
        "num_relations": graph.num_relations, "featureless": graph.featureless,
        "algo": cfg.algo, "grid": [shape.rows, shape.cols, shape.layers],
        "ranks": shape.size, "partitioner": cfg.partitioner, "comm": cfg.comm,
        "value_bytes": cfg.value_bytes, "partition_seconds": round(lay.partition_seconds, 3),
        "bytes_per_epoch": {"total": total.total, "max_per_rank": total.max_per_rank,
                            "sent": total.sent.tolist(), "recv": total.recv.tolist()},
        "phases": phases, "num_params": parameter_count(graph, cfg),
        "memory_bytes_per_rank": sum(kinds.values()), "memory_per_rank_by_kind": kinds}
    if profile is not None:
        out["cost"] = predict_relational_epoch(lay, graph, cfg, phases, profile).to_dict()
    return out, lay


def relational_auto_plan(graph: RelationalPlanGraph, parts: int, profile: Profile,
                         base: PlanConfig, *, partitioners: tuple[str, ...] = ("block",),
                         max_rank_memory_gib: float | None = None,
                         process_bytes: int = 0) -> list[Candidate]:
    """Every feasible R-GCN configuration on ``parts`` ranks (as
    :func:`~sparsegnn.distributed.planning.autoplan.auto_plan` admits them), fitting ones
    first, each group by predicted epoch; memory for ranks that load the graph whole."""
    limit = None if max_rank_memory_gib is None else max_rank_memory_gib * 2**30
    found = []
    for cfg, _, cut in configurations_with_cuts(graph.union, parts, partitioners, base):
        planned, lay = relational_plan(graph, cfg, None, process_bytes, cut)
        cost = predict_relational_epoch(lay, graph, cfg, planned["phases"], profile)
        memory = planned["memory_bytes_per_rank"]
        found.append(Candidate(cfg, cost, memory, limit is None or memory <= limit,
                               planned["bytes_per_epoch"]["max_per_rank"]))
    return sorted(found, key=lambda c: (not c.fits, c.cost.total_s))


def choose_relational(graph: RelationalPlanGraph, parts: int, profile: Profile,
                      base: PlanConfig, *, partitioners: tuple[str, ...] = ("block",),
                      max_rank_memory_gib: float | None = None, process_bytes: int = 0
                      ) -> list[Candidate]:
    """``train --model rgcn --algo auto``: :func:`relational_auto_plan`'s ranking, whose
    first entry is the choice; refuses where no configuration is predicted to fit."""
    ranked = relational_auto_plan(graph, parts, profile, base, partitioners=partitioners,
                                  max_rank_memory_gib=max_rank_memory_gib,
                                  process_bytes=process_bytes)
    if not ranked or not ranked[0].fits:
        least = min((c.memory_bytes for c in ranked), default=0)
        raise InvalidValueError(
            f"--algo auto: no R-GCN configuration is predicted to fit --max-rank-memory "
            f"{max_rank_memory_gib:g} GiB on {parts} ranks (the least needs "
            f"{least / 2**30:.3f} GiB per rank); use more ranks")
    return ranked
