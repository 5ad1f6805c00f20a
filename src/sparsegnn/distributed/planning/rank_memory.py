"""The per-rank memory predictor: one rank's peak resident set, by kind, before any rank runs.

One function, :func:`rank_bytes`, turns what a rank holds (a :class:`Holding`: the row
pointers and nonzeros of its tiles, its feature rows and columns) and the model's
weight count into predicted bytes by kind. Everything that predicts a rank's memory
calls it: ``plan`` and ``plan --auto``, ``train --algo auto`` and ``--max-rank-memory``
(:mod:`sparsegnn.train.memory` builds the holdings from the graph, a partitioned folder's
manifest or a row-block folder's). :func:`predict_rank_bytes` is its form for a planner
:class:`~sparsegnn.distributed.planning.planner.Layout`: the busiest rank of the grid.

Memory is a limit, not a price: ``--max-rank-memory`` and the automatic choice rule
configurations out with it before any time is compared, so it is apart from the epoch
time model (:mod:`sparsegnn.distributed.planning.cost`) and reads no rates. Its measured error is
in docs/distributed.md ("Memory accounting"), the measurements in
docs/results/2026-12-06-memory-predictor.md.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from sparsegnn.distributed.layout.block_partition import stage_blocks
from sparsegnn.distributed.layout.grid import GridShape
from sparsegnn.distributed.ops.spmm import col_lanes
from sparsegnn.distributed.planning.attention_cost import model_widths
from sparsegnn.distributed.planning.cost import feature_column_count
from sparsegnn.names import ATTENTION_MODELS, row_wise
from sparsegnn.nn.model_size import parameter_count
from sparsegnn.sparse import native

# What a rank holds, as its RankMemory measures it (``held_bytes``), and what the
# prediction adds: ``training`` (gradients, activations, blocks in flight), ``graph``
# (the whole graph a rank loads before cutting its share) and ``process`` (the process
# itself: interpreter, torch, communication buffers, allocator slack).
MEMORY_KINDS = ("topology", "features", "model", "optimiser")
PREDICTED_KINDS = (*MEMORY_KINDS, "training", "graph", "process")
INDEX_BYTES = 8  # CSR row pointers and column indices are int64

# The process's own part of a rank's peak where no machine profile says (a profile's
# ``rank_base_bytes + rank_overhead_bytes``, from `sparsegnn calibrate`): a CPU rank here
# (torch 2.13 CPU wheel, gloo) started at 240-243 MiB after its imports and grew 80-170
# MiB beyond its data; the quick calibration at p = 4 measured 259 + 131 MiB.
DEFAULT_PROCESS_BYTES = 384 * 2**20
# Per-edge tensors of ``nnz x heads`` an attention layer keeps for its backward pass,
# as autograd saves them (tests/test_attention_pricing.py counts them): the softmax
# weights, the attention dropout's mask and the dropped-out weights the SpMM multiplies;
# GAT also the additive SDDMM's output (its LeakyReLU's input; GATv2's fused SDDMM keeps
# none) and, where the torch path's index_select runs (no fused CPU kernel:
# sparsegnn.sparse.native), an int64 row index per edge for its backward.
EDGE_TENSORS = {"gat": 4, "gatv2": 3}
EDGE_INDICES = {"gat": 1, "gatv2": 0}


def process_bytes(profile: Any = None) -> int:
    """The process's own part of a rank's peak: a machine profile's base and growth
    (:class:`~sparsegnn.distributed.planning.cost_profile.Profile`, ``sparsegnn calibrate``), else
    :data:`DEFAULT_PROCESS_BYTES`."""
    if profile is None:
        return DEFAULT_PROCESS_BYTES
    return int(profile.rank_base_bytes) + int(profile.rank_overhead_bytes)


@dataclass(frozen=True)
class Holding:
    """What one rank holds: ``row_pointers`` and ``nonzeros`` of its tiles of A (and of
    A^T where it is stored apart), ``feature_rows`` rows of ``feature_cols`` input
    feature columns."""

    row_pointers: int
    nonzeros: int
    feature_rows: int
    feature_cols: int


def rank_bytes(
    holding: Holding, num_params: int, value_bytes: int, *, activation_width: int = 0,
    in_flight_bytes: int = 0, graph_bytes: int = 0, process_bytes: int = 0,
    edge_bytes: int = 0,
) -> dict[str, int]:
    """The predicted peak of a rank holding ``holding``, by kind (:data:`PREDICTED_KINDS`).

    Held: its tiles (crow + col + val), its feature rows, the model's ``num_params``
    weights and Adam's two moments. Training adds the weights' gradients,
    ``activation_width`` values per row of its block (:func:`activation_width`; 0 in
    minibatch training, whose sampled batches are not modelled) and ``in_flight_bytes``
    (:func:`in_flight_bytes`). ``graph_bytes``: the whole graph where the rank loads it
    (:func:`whole_graph_bytes`); ``process_bytes``: the process before and beyond its
    data (:func:`process_bytes`); ``edge_bytes``: bytes kept per stored nonzero
    (attention's per-edge tensors, :func:`edge_bytes`)."""
    model = num_params * value_bytes
    return {
        "topology": tile_bytes(holding.row_pointers, holding.nonzeros, value_bytes),
        "features": holding.feature_rows * holding.feature_cols * value_bytes,
        "model": model, "optimiser": 2 * model,
        "training": model + holding.feature_rows * activation_width * value_bytes
        + holding.nonzeros * edge_bytes + in_flight_bytes,
        "graph": graph_bytes, "process": process_bytes,
    }


def activation_width(algo: str, feature_cols: int, widths: list[int]) -> int:
    """Values per row of its block that a full-graph rank holds for training at its peak,
    per input column it holds and per value of each layer's output: three on 1D/1.5D
    (dropout's output, the rows it receives, the layer's output and its ReLU-dropout
    output and mask) and five on 2D/3D (also the row's partial sums and the all-gather of
    whole rows). Fitted on partitioned folders of a 65k-vertex SBM with 128 features and
    hidden 16, 128 and 256 (32,768-row blocks, three runs each): 3.1 per input column and
    per output value on 1D (p = 2), 4.8-5.6 on 2D (p = 4); 2D with hidden 128 grew 0.6x
    more than that (blocks of 16 MiB that glibc keeps once its mmap threshold has risen;
    32 MiB ones it hands back). docs/results/2026-12-06-memory-predictor.md."""
    per_value = 3 if row_wise(algo) else 5
    return per_value * (feature_cols + sum(widths[1:]))


def edge_bytes(cfg: Any, value_bytes: int) -> int:
    """Bytes per stored nonzero that training keeps: none for the SpMM models; for
    GAT/GATv2 :data:`EDGE_TENSORS` tensors of ``nnz x heads`` values and, without the
    fused CPU kernels, :data:`EDGE_INDICES` int64 indices per layer (one head in the
    last), alive together through the backward pass."""
    if cfg.model not in ATTENTION_MODELS:
        return 0
    heads = cfg.heads * (cfg.num_layers - 1) + 1
    indices = 0 if native.library() is not None else EDGE_INDICES[cfg.model]
    return (EDGE_TENSORS[cfg.model] * heads * value_bytes
            + indices * cfg.num_layers * INDEX_BYTES)


def tile_bytes(row_pointers: int, nonzeros: int, value_bytes: int) -> int:
    """CSR bytes: int64 row pointers, and an int64 column and a value per nonzero."""
    return row_pointers * INDEX_BYTES + nonzeros * (INDEX_BYTES + value_bytes)


def in_flight_bytes(shape: GridShape, rank: int, cfg: Any, block_values: int,
                    stage_tile: tuple[int, int], value_bytes: int) -> int:
    """What a rank's products hold beyond its own tiles and rows for a moment: on 1D/1.5D
    the further blocks of H (``block_values`` values each) an overlapped dense product
    keeps in flight (:func:`blocks_in_flight`); on 2D/3D the largest tile of A (or A^T)
    a SUMMA stage broadcasts to it, ``stage_tile`` (row pointers, nonzeros)."""
    if shape.row_wise:
        return blocks_in_flight(shape, shape.coords(rank)[1], cfg) * block_values * value_bytes
    return tile_bytes(*stage_tile, value_bytes)


def busiest(predicted: Iterable[dict[str, int]]) -> dict[str, int]:
    """The rank whose predicted total is largest."""
    return max(predicted, key=lambda kinds: sum(kinds.values()))


def layout_holdings(layout: Any, num_features: int,
                    tables: list[np.ndarray] | None = None) -> list[Holding]:
    """Every rank's :class:`Holding` on a planner layout: its row block's tiles (on 1D/1.5D
    one per block column it multiplies, on 2D/3D the one of its grid column and layer),
    and those of A^T where the operator is not symmetric (stored apart), and its block's
    rows of ``num_features`` features (on 2D/3D only its column slice). Equal to a
    partitioned folder's ``rank_holdings`` (tested)."""
    shape, part = layout.shape, layout.part
    tables = _tile_tables(layout) if tables is None else tables
    out = []
    for rank in range(shape.size):
        keys = _own_tiles(shape, rank)
        rows = part.size(keys[0][0])
        out.append(Holding(len(tables) * len(keys) * (rows + 1),
                           sum(int(t[k]) for t in tables for k in keys), rows,
                           feature_column_count(shape, shape.coords(rank)[1], num_features)))
    return out


def _own_tiles(shape: GridShape, rank: int) -> list[tuple[int, int, int]]:
    """``(row block, column block, layer)`` of the tiles a rank holds
    (:func:`~sparsegnn.distributed.layout.block_partition.tile_ranges`)."""
    i, j, m = shape.coords(rank)
    if shape.row_wise:
        return [(i, b, 0) for b in stage_blocks(shape, j)]
    return [(i, j, m)]


def operator_tile_tables(shape: GridShape, part: Any, op: Any) -> list[np.ndarray]:
    """The tile nonzero tables of a built CSR operator (original vertex order) and of
    its transpose where that is stored apart (not symmetric): R-GCN's relations, one
    operator each."""
    nonzeros = _Nonzeros(op.crow.numpy(), op.col.numpy(), True, np.empty(0, np.int64),
                         bool(op.symmetric))
    return [_tile_table(shape, part, nonzeros.chunks(transpose))
            for transpose in ((False,) if nonzeros.symmetric else (False, True))]


def _tile_tables(layout: Any) -> list[np.ndarray]:
    """Nonzeros of every tile ``[row block, column block, layer]`` of the operator in the
    partition's order, and of its transpose where that is stored apart."""
    op = _Nonzeros.of(layout.graph)
    return [_tile_table(layout.shape, layout.part, op.chunks(transpose))
            for transpose in ((False,) if op.symmetric else (False, True))]


def _tile_table(shape: GridShape, part: Any,
                chunks: Iterable[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Vectorised (a 1D grid of 4096 ranks has 16M tiles) and read in chunks of
    nonzeros (a plan of 1e8 edges keeps only the pattern), as
    :func:`~sparsegnn.distributed.planning.cost.rank_nonzeros` counts them."""
    layers = shape.layers
    inner = np.array([part.inner(j, m, layers)[0] for j in range(part.blocks)
                      for m in range(layers)][1:], dtype=np.int64)
    ends = np.asarray(part.offsets[1:], dtype=np.int64)
    new_id = None
    if part.order is not None:  # original id -> relabelled id
        new_id = np.empty(part.num_nodes, dtype=np.int64)
        new_id[np.asarray(part.order)] = np.arange(part.num_nodes, dtype=np.int64)
    size = part.blocks * part.blocks * layers
    table = np.zeros(size, dtype=np.int64)
    for row_ids, col_ids in chunks:
        if new_id is not None:
            row_ids, col_ids = new_id[row_ids], new_id[col_ids]
        key = np.searchsorted(ends, row_ids, side="right") * (part.blocks * layers)
        key += np.searchsorted(inner, col_ids, side="right")
        table += np.bincount(key, minlength=size)
    return table.reshape(part.blocks, part.blocks, layers)


def predict_rank_bytes(layout: Any, cfg: Any, value_bytes: int, process_bytes: int = 0,
                       whole_graph: bool = False) -> dict[str, int]:
    """The busiest rank's predicted peak by kind for training ``cfg`` (``model``,
    ``hidden``, ``num_layers``, ``comm``, ``overlap``) on ``layout``. ``whole_graph``: every
    rank also loads the graph whole (a dataset or generator given by name; ranks that read
    a partitioned folder load only their share). A graph without features or labels
    (R-MAT) is predicted with ``cfg.hidden`` as its input and output widths."""
    g, shape, part = layout.graph, layout.shape, layout.part
    f, classes = g.num_features or cfg.hidden, g.num_classes or cfg.hidden
    params = parameter_count(cfg.model, f, cfg.hidden, classes, cfg.num_layers, cfg.heads)
    widths = model_widths(cfg, f, classes)
    block_values = max(part.size(b) for b in range(shape.row_blocks)) * max(widths)
    graph = whole_graph_bytes(g, value_bytes) if whole_graph else 0
    tables = _tile_tables(layout)
    summa = not shape.row_wise

    def stage_tile(rank: int) -> tuple[int, int]:
        if not summa:
            return 0, 0
        i, _, m = shape.coords(rank)
        return part.size(i) + 1, max(int(t[i, k, m]) for t in tables for k in range(shape.cols))

    return busiest(
        rank_bytes(h, params, value_bytes, graph_bytes=graph, process_bytes=process_bytes,
                   activation_width=activation_width(shape.algo, h.feature_cols, widths),
                   edge_bytes=edge_bytes(cfg, value_bytes),
                   in_flight_bytes=in_flight_bytes(shape, rank, cfg, block_values,
                                                   stage_tile(rank), value_bytes))
        for rank, h in enumerate(layout_holdings(layout, f, tables)))


def predict_memory(layout: Any, cfg: Any, value_bytes: int, overhead: int = 0,
                   whole_graph: bool = False) -> int:
    """The busiest rank's predicted peak in bytes (:func:`predict_rank_bytes`, summed);
    ``overhead``: the process's own part (a profile's base and growth)."""
    return sum(predict_rank_bytes(layout, cfg, value_bytes, overhead, whole_graph).values())


# What building the whole graph's operator takes at its peak beyond the loaded graph, per
# nonzero of the operator: the CSR, its self loops and normalised values, row ids, and
# the symmetry check's transpose (sort key, permutation, gathered copies). Measured 90
# bytes on a 262k-vertex SBM of 8.6M nonzeros (session 11; /tmp script, not kept); the
# ranks of one job peak up to 15% apart (754-868 MiB on a 131k-vertex SBM at p = 4),
# which the rest of the prediction does not cover at that size, hence 112.
OPERATOR_BUILD_BYTES_PER_NONZERO = 112


def whole_graph_bytes(graph: Any, value_bytes: int) -> int:
    """What a rank that loads ``graph`` whole adds to its peak: the loaded graph, plus the
    larger of a transient copy of it (loading passes through one) and the building of
    the whole operator it cuts its share from. Counting the loaded graph only twice left
    the prediction 8-85 MiB short of the measured peak on 131k- and 262k-vertex SBM
    graphs at p = 2, where building the operator is the peak."""
    loaded = loaded_graph_bytes(graph, value_bytes)
    nnz = _Nonzeros.of(graph).nnz
    return loaded + max(loaded, OPERATOR_BUILD_BYTES_PER_NONZERO * nnz)


@dataclass(frozen=True)
class _Nonzeros:
    """Where a planner graph's operator has nonzeros, read in chunks: compressed
    ``indptr`` and ``index`` (by row, a CSR, where the operator is built already; else
    the planner's pattern, by column), plus ``loops``, the self loops GCN's operator adds
    where the diagonal is missing. A 1D plan keeps only the pattern (1e8 edges), and
    building the operator to predict memory would take more than the plan itself
    (:data:`OPERATOR_BUILD_BYTES_PER_NONZERO`)."""

    indptr: np.ndarray
    index: np.ndarray
    by_row: bool
    loops: np.ndarray
    symmetric: bool

    @classmethod
    def of(cls, graph: Any) -> _Nonzeros:
        built = getattr(graph, "built", None)
        if built is not None:
            return cls(built.crow.numpy(), built.col.numpy(), True, np.empty(0, np.int64),
                       bool(built.symmetric))
        pattern = graph.pattern
        no_loops = cls(pattern.indptr, pattern.rows, False, np.empty(0, np.int64), False)
        gcn = graph.model == "gcn"
        loops = np.empty(0, np.int64)
        if gcn or graph.model in ATTENTION_MODELS:  # gcn_norm, attention: a loop per node
            looped = np.zeros(graph.num_nodes, dtype=bool)
            for rows, cols in no_loops.chunks():
                looped[rows[rows == cols]] = True
            loops = np.flatnonzero(~looped)
        # GCN's operator is symmetric where its pattern is; the row-normalised mean is not
        # (A^T is stored apart), as operator_for makes them.
        return cls(pattern.indptr, pattern.rows, False, loops, gcn and bool(pattern.symmetric))

    @property
    def nnz(self) -> int:
        return len(self.index) + len(self.loops)

    def chunks(self, transpose: bool = False,
               size: int = 1 << 21) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(row ids, column ids)`` of about ``size`` nonzeros at a time (of the
        transpose: swapped)."""
        indptr = np.asarray(self.indptr, dtype=np.int64)
        bounds = np.unique(np.searchsorted(indptr, np.arange(0, indptr[-1], size),
                                           side="right") - 1)
        for lo, hi in itertools.pairwise([*bounds.tolist(), len(indptr) - 1]):
            outer = np.repeat(np.arange(lo, hi, dtype=np.int64), np.diff(indptr[lo:hi + 1]))
            inner = np.asarray(self.index[indptr[lo]:indptr[hi]], dtype=np.int64)
            rows, cols = (outer, inner) if self.by_row else (inner, outer)
            yield (cols, rows) if transpose else (rows, cols)
        if len(self.loops):
            yield self.loops, self.loops


def blocks_in_flight(shape: GridShape, col: int, cfg: Any) -> int:
    """Blocks of H an overlapped dense 1D/1.5D product holds beyond the one the plain
    loop receives into: one per further lane its stages use (distributed.spmm)."""
    lanes = col_lanes(shape.algo, cfg.comm, cfg.overlap)
    return min(lanes, len(stage_blocks(shape, col))) - 1 if lanes > 1 else 0


def loaded_graph_bytes(graph: Any, value_bytes: int) -> int:
    """A loaded graph's bytes: its features, its edge list (two int64 per edge), its
    labels (int64) and three split masks."""
    n = graph.num_nodes
    return n * (graph.num_features * value_bytes + 8 + 3) + graph.num_edges * 16
