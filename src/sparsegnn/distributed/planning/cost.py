"""Predicted epoch time of a distributed configuration, from a profile.

:func:`predict_epoch` prices one training epoch of a
:class:`~sparsegnn.distributed.planning.planner.Layout` at the rates of a
:class:`~sparsegnn.distributed.planning.cost_profile.Profile` (what this machine costs):

* communication per phase: the exact bytes of the planner (for an all-to-all or
  all-reduce the busiest rank's sent or received, whichever is larger; for broadcast
  stages, which run one after the other, all of them, shared among the groups that
  broadcast at once on different hosts) times the collective's time per byte, plus
  the number of collective calls the algorithm makes times its latency (on 2D/3D with
  the first layer's row all-reduces of partial products and the second gradient sum),
  scaled to the size of the group the calls run in (:func:`latency_scale`); the
  replica (1.5D) or fiber (3D) all-reduce inside a dense SpMM phase at the
  all-reduce's own rate (:func:`_phase_seconds`). Where the
  profile holds broadcast rounds for the phase's group size (measured across hosts),
  the stages are instead priced per call at their mean message size from that table
  (:func:`broadcast_rounds_seconds`): on shaped links the time per byte depends on the
  message size, so one straight line mispriced stages 43-48% either way;
* compute at the busiest rank: for every SpMM of the epoch, the nonzeros of the tiles
  the rank multiplies times the width (exact, from the tile nonzero table) and, for
  each tile product it makes (:func:`tile_products`), the output rows times the width
  and their addition; the layers' dense maps on its rows; elementwise work
  (dropout masks on each layer's input, activations, loss) on its rows; for GAT and
  GATv2, whose layers run the edge protocol instead of SpMMs, its kernels on the edges
  the rank holds and their bytes (:mod:`~sparsegnn.distributed.planning.attention_cost`);
* what none of these count (Python and autograd per operation, the optimiser, copies,
  the scheduling of ranks that share a host's cores): a fixed time per epoch, a time
  per collective call and a time per value of the busiest rank's rows (its rows times
  the layers' widths), fitted by the calibration on real epochs of small graphs
  (:mod:`sparsegnn.train.calibration_job`).

Ranks are assumed to wait for each other at every collective, so the epoch costs the
busiest rank's compute plus the communication plus that overhead: no overlap is
credited. A rank's peak memory is predicted apart
(:mod:`sparsegnn.distributed.planning.rank_memory`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from sparsegnn.distributed.layout.block_partition import feature_columns, split_sizes, stage_blocks
from sparsegnn.distributed.layout.grid import GridShape
from sparsegnn.distributed.planning.attention_cost import (
    ATTENTION_PHASES,
    activation_seconds,
    attention_call_counts,
    dense_macs,
    edge_seconds,
    model_widths,
)
from sparsegnn.distributed.planning.attention_model import EdgeCall, model_calls
from sparsegnn.distributed.planning.comm_model import (
    InputSlicing,
    SpmmCall,
    input_slicing,
    spmm_schedule,
)
from sparsegnn.distributed.planning.cost_profile import Profile
from sparsegnn.names import ATTENTION_MODELS
from sparsegnn.nn.model_size import layer_widths, parameter_count


@dataclass
class EpochCost:
    """A predicted epoch: compute, each communication phase and the fitted overhead,
    seconds; what drives the overhead: the epoch's collective calls and the busiest
    rank's row values (rows x the layers' output widths) and an attention model's calls
    of the edge protocol."""

    compute_s: float
    comm_s: dict[str, float]
    overhead_s: float = 0.0
    calls: int = 0
    row_values: int = 0
    edge_calls: int = 0
    relation_calls: int = 0  # R-GCN: the calls of its relations' SpMMs (of ``calls``)

    @property
    def total_s(self) -> float:
        return self.compute_s + sum(self.comm_s.values()) + self.overhead_s

    def to_dict(self) -> dict[str, Any]:
        return {"epoch_s": self.total_s, "compute_s": self.compute_s,
                "comm_s": dict(self.comm_s), "comm_total_s": sum(self.comm_s.values()),
                "overhead_s": self.overhead_s, "collective_calls": self.calls}


def collective_calls(
    shape: GridShape, calls: list[SpmmCall], comm: str, slicing: InputSlicing | None = None,
    edge_calls: list[EdgeCall] | None = None,
) -> dict[str, dict[str, int]]:
    """Collective calls per phase and kind in one epoch, as the algorithms make them
    (``slicing``: the 2D/3D input features are cut by columns; ``edge_calls``: an
    attention model's edge protocol)."""
    out: dict[str, dict[str, int]] = attention_call_counts(shape, edge_calls or [])
    for call in calls:
        into = out.setdefault(call.phase, {})
        for kind, n in _spmm_calls(shape, comm, call.sliced).items():
            into[kind] = into.get(kind, 0) + n
    out["grad_allreduce"] = {"all_reduce": 1}
    if slicing is not None and shape.feature_slices > 1:
        out["input_allreduce"] = {"all_reduce": len(slicing.sums)}
        out["grad_allreduce"]["all_reduce"] += 1  # the sliced maps' gradients, over the row
    out["metrics"] = {"all_reduce": 3}
    return out


def _spmm_calls(shape: GridShape, comm: str, sliced: bool) -> dict[str, int]:
    if shape.row_wise:
        stages = len(stage_blocks(shape, 0))
        calls = {"all_to_all": 1} if comm == "sparse" else {"broadcast": stages}
        if shape.cols > 1:
            calls["all_reduce"] = 1
        return calls
    q = shape.cols
    calls = {"broadcast": 3 * q}  # A index + values + H piece per stage
    if not sliced:  # the column slices are gathered back into full rows
        calls["all_gather"] = 1
    if shape.layers > 1:
        calls["all_reduce"] = 1
    return calls


def _phase_collective(shape: GridShape, phase: str, comm: str) -> str:
    """The collective that carries most of a phase's bytes."""
    if phase in ("grad_allreduce", "metrics", "input_allreduce"):
        return "all_reduce"
    if phase in ATTENTION_PHASES:  # fetches by all-to-all, sums over the split groups
        return "all_to_all"
    if shape.row_wise and comm == "sparse":
        return "all_to_all"
    return "broadcast"


def _group_size(shape: GridShape, phase: str) -> int:
    """How many ranks take part in each collective of ``phase``: the SpMM's broadcasts or
    all-to-all run within a replica's p/c ranks (1D/1.5D) or along a process row of q
    (2D/3D); the gradient and metric sums over the vertex blocks; the 2D/3D input sums
    over a process row; the attention fetches within a grid column (the rows)."""
    if phase in ("grad_allreduce", "metrics"):
        return shape.row_blocks
    if phase in ATTENTION_PHASES:
        return shape.rows
    if phase == "input_allreduce" or not shape.row_wise:
        return shape.cols
    return shape.rows


def latency_scale(shape: GridShape, phase: str, calibrated_world: int) -> float:
    """A collective's latency in ``phase`` relative to the profile's (measured over all
    ``calibrated_world`` ranks): a group of g ranks makes g - 1 steps where the world
    made p - 1 (pairwise all-to-all, a pipelined broadcast), and where ranks share cores
    every step waits for its peers' turn. Not extrapolated beyond the calibrated world:
    a profile for a larger cluster carries that cluster's latencies."""
    if calibrated_world <= 1:
        return 1.0
    return min(1.0, (_group_size(shape, phase) - 1) / (calibrated_world - 1))


def _priced_bytes(shape: GridShape, phase: str, comm: str, volume: dict[str, int],
                  hosts: int) -> float:
    """The bytes a phase's time is proportional to. An all-to-all or all-reduce moves
    every rank's bytes at once: the busiest rank's. Across hosts, broadcast stages run
    one after the other, each limited by its root's link: all the phase's bytes, divided
    among the groups that broadcast at the same time (p / g of them, at most one per
    host). Pricing the busiest rank's bytes there under-predicted 1D dense on 100 Mbit/s
    links 3.2x (benchmarks/autoconfig_cluster.py). On one host, whose ranks copy through
    the same memory, the busiest rank's bytes fit the measured epochs (benchmarks/
    autoconfig.py) and pricing all of them over-predicted 1D dense 1.9x."""
    if _phase_collective(shape, phase, comm) != "broadcast" or shape.size == 1 \
            or hosts == 1:
        return float(volume["max_per_rank"])
    groups = shape.size // max(1, _group_size(shape, phase))
    return volume["total"] / max(1, min(groups, hosts))


def broadcast_rounds_seconds(
    shape: GridShape, part: Any, phase: str, comm: str, volume: dict[str, int],
    counts: dict[str, int], calls: list[SpmmCall], value_bytes: int, profile: Profile,
) -> float | None:
    """A stage-broadcast phase priced from the profile's broadcast rounds of its group
    size g, or None where it holds none (or the phase broadcasts nothing).

    The rounds were measured as the stages run (all p/g groups at once, roots in turn),
    so a group's calls cost the table's seconds at the group's mean bytes per call: the
    phase's bytes less the SpMMs' replica (1.5D) or fiber (3D) all-reduce, shared among
    the p/g groups, over its broadcasts (a 2D/3D all-gather is g of them). That
    all-reduce is priced as the other all-reduces, at the busiest rank's bytes."""
    g = _group_size(shape, phase)
    if shape.size == 1 or _phase_collective(shape, phase, comm) != "broadcast" \
            or phase not in ("forward_spmm", "backward_spmm") \
            or g not in profile.broadcast_rounds:
        return None
    broadcasts = counts.get("broadcast", 0) + g * counts.get("all_gather", 0)
    if broadcasts == 0:
        return None
    reduce_total, reduce_max, reduce_group = _spmm_reduce_bytes(shape, part, calls,
                                                                value_bytes)
    per_group = max(0.0, volume["total"] - reduce_total) / (shape.size // g)
    per_call = profile.broadcast_call_s(g, per_group / broadcasts)
    assert per_call is not None  # g is in the table
    return broadcasts * per_call + _reduce_seconds(counts.get("all_reduce", 0), reduce_max,
                                                   reduce_group, profile)


def _reduce_seconds(calls: int, nbytes: int, group: int, profile: Profile) -> float:
    """The SpMMs' replica (1.5D) or fiber (3D) all-reduce: ``calls`` of them moving the
    busiest rank's ``nbytes``, at the all-reduce's straight line, the latency scaled to
    the ``group`` they run in."""
    if not calls or group <= 1:
        return 0.0
    scale = min(1.0, (group - 1) / max(1, profile.world_size - 1))
    return profile.link("all_reduce").time(calls, nbytes, scale)


def _phase_seconds(
    shape: GridShape, part: Any, phase: str, comm: str, volume: dict[str, int],
    counts: dict[str, int], calls: list[SpmmCall], value_bytes: int, profile: Profile,
) -> float:
    """A phase priced from the profile's straight-line collectives: its calls' latency
    and its priced bytes at the rate of the collective that carries them.

    A stage-broadcast SpMM phase also holds the replica (1.5D) or fiber (3D) all-reduce
    of its output: those bytes are priced as an all-reduce, as
    :func:`broadcast_rounds_seconds` prices them across hosts. Priced at the broadcast's
    rate they cost a fifteenth of what they take on one host (a root's broadcast returns
    once its sends are queued; an all-reduce waits for every part), and 1.5D c = 2
    dense at p = 4 was under-predicted by 8-35% on every case of two seeds of
    benchmarks/autoconfig.py (docs/results/autoconfig.md)."""
    collective = _phase_collective(shape, phase, comm)
    ncalls = sum(counts.values()) if shape.size > 1 else 0
    scale = latency_scale(shape, phase, profile.world_size)
    reduces = counts.get("all_reduce", 0) if collective == "broadcast" else 0
    reduce_total, reduce_max, reduce_group = _spmm_reduce_bytes(
        shape, part, calls, value_bytes) if reduces else (0, 0, 1)
    if reduce_group <= 1:
        priced = _priced_bytes(shape, phase, comm, volume, profile.hosts)
        return profile.link(collective).time(ncalls, priced, scale)
    stages = {"total": max(0, volume["total"] - reduce_total),
              "max_per_rank": max(0, volume["max_per_rank"] - reduce_max)}
    return (profile.link("broadcast").time(
                ncalls - reduces, _priced_bytes(shape, phase, comm, stages, profile.hosts),
                scale)
            + _reduce_seconds(reduces, reduce_max, reduce_group, profile))


def _spmm_reduce_bytes(shape: GridShape, part: Any, calls: list[SpmmCall],
                       value_bytes: int) -> tuple[int, int, int]:
    """The all-reduce inside ``calls``' SpMMs (1.5D: over the c replicas of a row block's
    output; 2D/3D: over the fiber of l layers): bytes sent summed over the ranks, the
    busiest rank's, and the size of the group it runs in (what
    :mod:`~sparsegnn.distributed.planning.comm_model` counts into the phase with the broadcasts)."""
    group = shape.cols if shape.row_wise else shape.layers
    if group <= 1:
        return 0, 0, group
    per_rank = []
    for rank in range(shape.size):
        i, j, _ = shape.coords(rank)
        rows = part.size(i)
        per_rank.append(sum(
            (group - 1) * rows * value_bytes
            * (call.width if shape.row_wise
               else split_sizes(call.width, shape.cols)[j])
            for call in calls))
    return sum(per_rank), max(per_rank), group


def rank_nonzeros(shape: GridShape, part: Any, operator: Any, own: bool = False
                  ) -> np.ndarray:
    """Nonzeros of the tiles each rank multiplies (one entry per rank), vectorised: at
    4096 ranks a 1D grid has 16M tiles. ``own``: of the tiles it holds, whose edges the
    attention kernels run on (2D/3D: its own tile, where SUMMA multiplies the whole
    row's, one broadcast tile per stage).

    ``operator`` is in the original vertex order; the tiles are those of the partition's
    relabelled order. Reading the original ids as relabelled ones priced every
    partition but the block one (METIS, KaHIP, random) as if it were contiguous id
    ranges of the same sizes."""
    layers = shape.layers
    inner = np.array([part.inner(j, m, layers)[0] for j in range(part.blocks)
                      for m in range(layers)][1:], dtype=np.int64)
    ends = np.asarray(part.offsets[1:], dtype=np.int64)
    row_ids, col_ids = operator.row_indices().numpy(), operator.col.numpy()
    if part.order is not None:  # original id -> relabelled id
        new_id = np.empty(part.num_nodes, dtype=np.int64)
        new_id[np.asarray(part.order)] = np.arange(part.num_nodes, dtype=np.int64)
        row_ids, col_ids = new_id[row_ids], new_id[col_ids]
    rows = np.searchsorted(ends, row_ids, side="right")
    sub = np.searchsorted(inner, col_ids, side="right")
    table = np.bincount(rows * (part.blocks * layers) + sub,
                        minlength=part.blocks * part.blocks * layers
                        ).reshape(part.blocks, part.blocks, layers)
    out = np.zeros(shape.size, dtype=np.int64)
    for rank in range(shape.size):
        i, j, m = shape.coords(rank)
        if shape.row_wise:
            out[rank] = table[i, stage_blocks(shape, j), 0].sum()
        else:
            out[rank] = table[i, j, m] if own else table[i, :, m].sum()
    return out


def tile_products(shape: GridShape, comm: str, row: int, col: int) -> int:
    """Tile products in one SpMM of rank ``(row, col)``: one per stage block where each
    block arrives by its own broadcast (dense 1D/1.5D, SUMMA's q stages); sparse 1D/1.5D
    multiplies its own tile and the received rows' stacked tiles, two at most."""
    if not shape.row_wise:
        return shape.cols
    stages = stage_blocks(shape, col)
    if comm != "sparse":
        return len(stages)
    own = row in stages
    return int(own) + int(len(stages) > int(own))


def compute_seconds(
    shape: GridShape, part: Any, operator: Any, calls: list[SpmmCall], widths: list[int],
    profile: Profile, comm: str, model: str = "gcn", edge_calls: list[EdgeCall] | None = None,
) -> float:
    """Compute time of an epoch (:func:`host_compute_seconds` of every rank's): a rank's
    SpMMs (the nonzeros of the tiles it multiplies, exact, and each tile product's
    output rows) or an attention model's ``edge_calls`` on the edges it holds, dense maps
    (:func:`~sparsegnn.distributed.planning.attention_cost.dense_macs` of ``model``) and
    elementwise passes (the first layer's on the rank's feature columns only, on
    2D/3D)."""
    # An attention model runs no SpMM: its kernels on the edges each rank holds.
    nnz = rank_nonzeros(shape, part, operator, own=bool(edge_calls))
    per_rank: list[float] = []
    for rank in range(shape.size):
        i, j, _ = shape.coords(rank)
        rows = part.size(i)
        products = tile_products(shape, comm, i, j)
        seconds = 0.0
        for call in calls:
            width = call.width if shape.row_wise \
                else split_sizes(call.width, shape.cols)[j]
            seconds += profile.spmm_time(float(nnz[rank]), rows, width, products)
        seconds += edge_seconds(edge_calls or [], float(nnz[rank]), profile,
                                source_rows(shape, part, rank))
        mine = [feature_column_count(shape, j, widths[0]), *widths[1:]]
        macs = dense_macs(model, mine)
        seconds += 4 * rows * macs * profile.gemm_s  # train and eval forward, backward x2
        seconds += rows * sum(mine[:-1]) * profile.dropout_s  # a mask on each layer's input
        seconds += rows * elementwise_values(mine) * profile.elementwise_s
        seconds += activation_seconds(model, rows, mine, profile)
        per_rank.append(seconds)
    return host_compute_seconds(per_rank, profile.core_sharing)


def source_rows(shape: GridShape, part: Any, rank: int) -> int:
    """The rows a rank's tiles can gather from: its stage blocks' (1D/1.5D), its column
    sub-range's (2D/3D)."""
    _, j, m = shape.coords(rank)
    if shape.row_wise:
        return sum(part.size(b) for b in stage_blocks(shape, j))
    lo, hi = part.inner(j, m, shape.layers)
    return hi - lo


def host_compute_seconds(per_rank: list[float], sharing: float) -> float:
    """The compute of an epoch whose ranks take ``per_rank`` seconds at the shared speed.

    With a core per rank (``sharing`` 1) that is the busiest rank's. Where ranks share a
    host's cores, a rank with more work than the others runs faster once they are done:
    the epoch is the busiest rank's work at its speed alone (``sharing`` times the
    shared one), or the host's total work at the shared throughput (the ranks' mean),
    whichever is longer. Pricing the busiest rank at the shared speed charged a METIS
    partition of R-MAT, whose busiest block holds 3-5x the mean nonzeros, for work that
    eight ranks on one core absorb."""
    if not per_rank:
        return 0.0
    return max(max(per_rank) / sharing, sum(per_rank) / len(per_rank))


def elementwise_values(widths: list[int]) -> int:
    """Values per row that one epoch's elementwise passes touch: each hidden activation
    in the training and evaluation forward and in backward, with the backward of the
    dropout mask in front of the next layer (the input's needs none), and the loss's
    softmax forward, backward and the evaluation's scores on the output."""
    return 4 * sum(widths[1:-1]) + 3 * widths[-1]


def predict_epoch(
    layout: Any, plan: dict[str, Any], cfg: Any, profile: Profile, comm: str,
) -> EpochCost:
    """The cost of one epoch of ``layout`` (a planner :class:`Layout`) whose exact bytes
    ``plan`` (:func:`~sparsegnn.distributed.planning.planner.plan_epoch`'s result) gives.

    ``cfg``: the model's shape (``model``, ``hidden``, ``num_layers``)."""
    g, shape = layout.graph, layout.shape
    in_dim, out_dim = g.num_features or cfg.hidden, g.num_classes or cfg.hidden
    sliced = shape.feature_slices > 1
    slicing = input_slicing(cfg, in_dim, out_dim) if sliced else None
    calls = spmm_schedule(cfg, in_dim, out_dim, sliced)
    edge_calls = model_calls(cfg.model, layer_widths(in_dim, cfg.hidden, out_dim,
                                                     cfg.num_layers), cfg.heads) \
        if cfg.model in ATTENTION_MODELS else []
    widths = model_widths(cfg, in_dim, out_dim)
    compute = compute_seconds(shape, layout.part, g.operator(), calls, widths, profile, comm,
                              cfg.model, edge_calls)
    counts = collective_calls(shape, calls, comm, slicing, edge_calls)
    vb = plan.get("value_bytes", 4)
    comm_s = comm_seconds(shape, layout.part, plan["phases"], counts, calls, comm, vb,
                          profile)
    params = parameter_count(cfg.model, in_dim, cfg.hidden, out_dim, cfg.num_layers,
                             cfg.heads)
    comm_s.update(reduction_seconds(shape, params, vb, profile))
    if slicing is not None and shape.row_blocks > 1:  # the sliced maps' gradients
        comm_s["grad_allreduce"] += profile.link("all_reduce").time(
            1, (shape.feature_slices - 1) * slicing.params * vb,
            latency_scale(shape, "input_allreduce", profile.world_size))
    values = row_values(shape, layout.part, widths)
    ncalls_epoch = call_total(shape, counts)
    return EpochCost(compute, comm_s, profile.overhead(ncalls_epoch, values, len(edge_calls)),
                     ncalls_epoch, values, len(edge_calls))


def call_total(shape: GridShape, counts: dict[str, dict[str, int]]) -> int:
    """The epoch's collective calls (none on one rank)."""
    return sum(sum(kinds.values()) for kinds in counts.values()) if shape.size > 1 else 0


def comm_seconds(shape: GridShape, part: Any, phases: dict[str, dict[str, int]],
                 counts: dict[str, dict[str, int]], calls: list[SpmmCall], comm: str,
                 value_bytes: int, profile: Profile) -> dict[str, float]:
    """Each communication phase of the planner's ``phases`` priced: from broadcast rounds
    where the profile holds them for its group (:func:`broadcast_rounds_seconds`), else
    from the straight-line collectives (:func:`_phase_seconds`). ``calls``: the epoch's
    SpMMs (R-GCN: each relation's, one after another)."""
    out = {}
    for phase, volume in phases.items():
        mine = [c for c in calls if c.phase == phase]
        rounds = broadcast_rounds_seconds(shape, part, phase, comm, volume,
                                          counts.get(phase, {}), mine, value_bytes, profile)
        out[phase] = rounds if rounds is not None else _phase_seconds(
            shape, part, phase, comm, volume, counts.get(phase, {}), mine, value_bytes,
            profile)
    return out


def reduction_seconds(shape: GridShape, params: int, value_bytes: int, profile: Profile
                      ) -> dict[str, float]:
    """The gradient sum of ``params`` weights and the three metric reductions over the
    vertex blocks (the validation count and loss share one: comm_model.predict's
    val_loss); none on one block."""
    if shape.row_blocks <= 1:
        return {}
    peers = shape.row_blocks - 1
    reduce = profile.link("all_reduce")
    blocks = latency_scale(shape, "grad_allreduce", profile.world_size)
    return {"grad_allreduce": reduce.time(1, peers * params * value_bytes, blocks),
            "metrics": reduce.time(3, peers * (value_bytes + 24), blocks)}


def row_values(shape: GridShape, part: Any, widths: list[int]) -> int:
    """The busiest rank's rows times the widths of the layers' outputs. The input
    features are left out: only the first layer's dropout and linear map read them, and
    the rates price both. Counting them had the overhead fitted on 32 input features
    charge 128 (1.5D at p = 8, whose replicas hold twice 1D's rows, over-predicted ~50%)."""
    return max(part.size(shape.coords(rank)[0]) for rank in range(shape.size)) \
        * sum(widths[1:])


def feature_column_count(shape: GridShape, col: int, num_features: int) -> int:
    """How many input feature columns a rank of grid column ``col`` holds."""
    lo, hi = feature_columns(shape, col, num_features)
    return hi - lo
