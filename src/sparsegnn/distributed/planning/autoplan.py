"""Choose the distribution for the user: every feasible configuration, priced and ranked.

For p ranks, :func:`auto_plan` enumerates the algorithms (1D; 1.5D with every
replication factor the grid admits; 2D; 3D), the communication (sparsity-aware or
oblivious, where the algorithm has both) and the partitioners, computes each one's exact
per-rank bytes (:mod:`sparsegnn.distributed.planning.planner`), prices them with a calibrated
:class:`~sparsegnn.distributed.planning.cost_profile.Profile`, predicts each one's per-rank peak
memory,
and ranks those that fit a memory limit by predicted epoch time. Partitions are computed
once per (vertex blocks, partitioner) and shared by the configurations that use them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from sparsegnn.distributed.layout.grid import GridError, GridShape, grid_shape
from sparsegnn.distributed.planning.cost import EpochCost, predict_epoch
from sparsegnn.distributed.planning.cost_profile import Profile
from sparsegnn.distributed.planning.planner import (
    Layout,
    PlanConfig,
    PlanGraph,
    partitioned,
    plan_epoch,
)
from sparsegnn.distributed.planning.rank_memory import predict_memory, process_bytes
from sparsegnn.names import ALGORITHMS, ATTENTION_MODELS, replicates, row_wise


@dataclass
class Candidate:
    """One configuration with its predicted epoch and per-rank peak memory."""

    config: PlanConfig
    cost: EpochCost
    memory_bytes: int
    fits: bool
    bytes_per_rank: int = 0  # the busiest rank's bytes per epoch (the planner's, exact)
    # The same configuration with overlap (``auto_plan(overlap_twins=True)``): its
    # per-rank peak and whether that fits; None where not asked or overlap is not an
    # option (2D/3D).
    twin_memory_bytes: int | None = None
    twin_fits: bool = False

    def to_dict(self) -> dict[str, Any]:
        c = self.config
        return {"algo": c.algo, "replication": c.replication, "comm": c.comm,
                "partitioner": c.partitioner, **self.cost.to_dict(),
                "memory_bytes_per_rank": self.memory_bytes, "fits": self.fits,
                "bytes_per_rank": self.bytes_per_rank,
                "overlapped_memory_bytes_per_rank": self.twin_memory_bytes}


def configurations(parts: int, partitioners: tuple[str, ...], base: PlanConfig
                   ) -> list[PlanConfig]:
    """Every (algorithm, replication, comm, partitioner) a grid of ``parts`` ranks admits.
    An attention model has one comm per grid: its layers fetch rows by all-to-all
    whatever ``comm`` says (it chooses only how SpMMs communicate, and GAT runs none)."""
    out = []
    for algo in ALGORITHMS:
        factors = [c for c in range(2, parts + 1) if parts % c == 0] if replicates(algo) else [1]
        for c in factors:
            try:
                grid_shape(algo, parts, c)
            except GridError:
                continue
            comms = ("sparse", "dense") if row_wise(algo) else ("dense",)
            if base.model in ATTENTION_MODELS:
                comms = comms[:1]
            for comm in comms:
                for partitioner in partitioners:
                    out.append(replace(base, parts=parts, algo=algo, replication=c,
                                       partitioner=partitioner, comm=comm))
    return out


def configurations_with_cuts(
    graph: PlanGraph, parts: int, partitioners: tuple[str, ...], base: PlanConfig,
) -> Iterator[tuple[PlanConfig, GridShape, Layout]]:
    """Each of :func:`configurations` with its grid shape and its vertex partition (a
    ``graph`` layout on as many 1D blocks as the grid has block rows), each partition
    computed once and shared by the configurations with the same block rows and
    partitioner: METIS on a large graph takes seconds."""
    cuts: dict[tuple[int, str], Layout] = {}
    for cfg in configurations(parts, partitioners, base):
        shape = grid_shape(cfg.algo, parts, cfg.replication)
        key = (shape.row_blocks, cfg.partitioner)
        if key not in cuts:
            cuts[key] = partitioned(graph, grid_shape("1d", shape.row_blocks),
                                    cfg.partitioner, cfg.seed)
        yield cfg, shape, cuts[key]


def auto_plan(
    graph: PlanGraph, parts: int, profile: Profile, base: PlanConfig, *,
    partitioners: tuple[str, ...] = ("block",), max_rank_memory_gib: float | None = None,
    overlap_twins: bool = False,
) -> list[Candidate]:
    """Every feasible configuration, fitting ones first, each group by predicted time.

    Memory is predicted for ranks that each load ``graph`` whole, as ``train --algo
    auto`` runs them (it refuses partitioned folders). ``overlap_twins``: also predict
    each 1D/1.5D configuration's memory with overlap (``train --overlap auto`` tries
    that twin only where it fits)."""
    limit = None if max_rank_memory_gib is None else max_rank_memory_gib * 2**30
    found = []
    for cfg, shape, cut in configurations_with_cuts(graph, parts, partitioners, base):
        lay = Layout(graph, shape, cut.part, cut.partition_seconds)
        volumes = {**plan_epoch(lay, cfg.comm, cfg, cfg.value_bytes),
                   "value_bytes": cfg.value_bytes}
        cost = predict_epoch(lay, volumes, cfg, profile, cfg.comm)
        overhead = process_bytes(profile)
        memory = predict_memory(lay, cfg, cfg.value_bytes, overhead, whole_graph=True)
        moved = int(volumes["bytes_per_epoch"]["max_per_rank"])
        found.append(Candidate(cfg, cost, memory, limit is None or memory <= limit, moved))
        if overlap_twins and row_wise(cfg.algo):
            twin = predict_memory(lay, replace(cfg, overlap=True), cfg.value_bytes, overhead,
                                  whole_graph=True)
            found[-1].twin_memory_bytes = twin
            found[-1].twin_fits = limit is None or twin <= limit
    return sorted(found, key=lambda c: (not c.fits, c.cost.total_s))


def shortlist(ranked: list[Candidate], size: int, band: float = 1.5) -> list[Candidate]:
    """The fitting candidates worth a measured trial: at most ``size``, each predicted
    within ``band`` x the fastest fitting one's time. The model's error is up to ~30% per
    configuration, so a configuration predicted 1.4x slower may measure faster; one
    predicted 2x slower practically never does, and trying it would only cost time."""
    fitting = [c for c in ranked if c.fits]
    if not fitting:
        return []
    limit = band * fitting[0].cost.total_s
    return [c for c in fitting if c.cost.total_s <= limit][:max(1, size)]
