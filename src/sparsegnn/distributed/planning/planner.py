"""Exact per-rank communication volume of a distributed epoch, computed without ranks.

The graph is partitioned into the grid's vertex blocks, relabelled, and the volume of
every SpMM of one training epoch (the schedule ``sparsegnn train`` runs,
:func:`~sparsegnn.distributed.planning.comm_model.spmm_schedule`) is computed per rank: rows and
bytes sent and received, for sparsity-aware (``sparse``, 1d/1.5d) or oblivious
(``dense``) communication. The numbers equal what a real run's counters measure
(tested), which is what lets ``sparsegnn plan`` predict traffic for thousands of ranks.

Only the operator's nonzero pattern is kept once the graph is loaded (:class:`PlanGraph`):
at 1e8 edges the edge list, the partitioners' adjacency and a float operator were a GiB
or more each, while the pattern is one int32 per nonzero and serves as the adjacency of
an undirected graph too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from sparsegnn.data.graph import GraphData
from sparsegnn.distributed.layout.block_partition import BlockPartition
from sparsegnn.distributed.layout.grid import GridShape, grid_shape
from sparsegnn.distributed.planning.attention_model import epoch_edge_volume, model_calls
from sparsegnn.distributed.planning.comm_model import ModelShape, input_slicing, spmm_schedule
from sparsegnn.distributed.planning.plan import (
    Pattern,
    RankVolume,
    epoch_volume,
    phase_pairs,
    row_volume,
    rowwise_volume,
)
from sparsegnn.names import ATTENTION_MODELS, Algorithm
from sparsegnn.nn import operator_for
from sparsegnn.nn.model_size import layer_widths
from sparsegnn.optional import pyplot
from sparsegnn.partition import Adjacency, partition
from sparsegnn.sparse import CSRMatrix


@dataclass
class PlanGraph:
    """What the planner keeps of a graph: its sizes and the operator's nonzero pattern.

    The edge list and the operator's values are not kept. 2D/3D, whose volumes count the
    nonzeros of the operator's tiles (GCN's self loops included), get the operator from
    :meth:`operator`.
    """

    num_nodes: int
    num_edges: int
    num_features: int
    num_classes: int
    model: str
    pattern: Pattern
    built: CSRMatrix | None = field(default=None, repr=False)  # operator(), once made

    @classmethod
    def of(cls, graph: GraphData, model: str = "gcn",
           operator: CSRMatrix | None = None) -> PlanGraph:
        """The pattern of ``operator``, or of ``graph``'s adjacency when not given."""
        if operator is None:
            pattern = Pattern.from_edge_index(graph.edge_index, graph.num_nodes)
        else:
            pattern = Pattern.of(operator)
        return cls(graph.num_nodes, graph.num_edges, graph.num_features, graph.num_classes,
                   model, pattern, operator)

    def operator(self) -> CSRMatrix:
        """The model's operator, built from the pattern on first use. Its values are those
        of an unweighted graph without repeated edges; the volumes never read them."""
        if self.built is None:
            by_row = self.pattern.transposed()
            adj = CSRMatrix.from_csr(
                torch.from_numpy(by_row.indptr), torch.from_numpy(by_row.rows), None,
                (self.num_nodes, self.num_nodes), check=False, symmetric=by_row.symmetric,
            )
            self.built = operator_for(self.model, adj)
        return self.built


def adjacency(pattern: Pattern) -> Adjacency:
    """The partitioners' symmetric, loop-free adjacency. An undirected graph's pattern is
    already that (the usual case), and its arrays are used as they are."""
    m = pattern.matrix()
    if not pattern.symmetric:
        m = (m + m.T).tocsr()
    if m.diagonal().any():
        coo = m.tocoo()
        off = coo.row != coo.col
        m = sp.csr_matrix((coo.data[off], (coo.row[off], coo.col[off])), shape=m.shape)
    return Adjacency(m.indptr, m.indices)


@dataclass
class Layout:
    """A graph cut into a grid's vertex blocks."""

    graph: PlanGraph
    shape: GridShape
    part: BlockPartition
    partition_seconds: float
    pairs: dict[str, np.ndarray] = field(default_factory=dict)  # phase_pairs, on demand

    def phase_pairs(self) -> dict[str, np.ndarray]:
        """Block-to-block rows of both SpMM directions, computed once per layout."""
        if not self.pairs:
            self.pairs.update(phase_pairs(self.graph.pattern, self.part))
        return self.pairs

    def dense_pairs(self) -> np.ndarray:
        """Block-to-block rows of oblivious (dense) 1D: every block goes to every other."""
        sizes = np.diff(np.asarray(self.part.offsets, dtype=np.int64))
        return np.broadcast_to(sizes[None, :], (len(sizes), len(sizes))) - np.diag(sizes)


def layout(
    graph: GraphData, shape: GridShape, partitioner: str, model: str = "gcn", seed: int = 0,
    *, adj: Adjacency | None = None, operator: CSRMatrix | None = None,
) -> Layout:
    """Partition ``graph`` into ``shape.row_blocks`` blocks. ``adj`` and ``operator``
    (derived from ``graph`` when not given) can be shared by many layouts of one graph."""
    return partitioned(PlanGraph.of(graph, model, operator), shape, partitioner, seed, adj=adj)


def partitioned(
    graph: PlanGraph, shape: GridShape, partitioner: str, seed: int = 0,
    *, adj: Adjacency | None = None,
) -> Layout:
    """:func:`layout` of a graph already reduced to its pattern."""
    start = time.perf_counter()
    parts = partition(adj or adjacency(graph.pattern), partitioner, shape.row_blocks,
                      seed=seed)
    part = BlockPartition.from_parts(torch.from_numpy(parts), shape.row_blocks)
    return Layout(graph, shape, part, time.perf_counter() - start)


def plan_epoch(
    lay: Layout, comm: str, cfg: ModelShape, value_bytes: int
) -> dict[str, Any]:
    """Per-rank bytes of one epoch (all SpMMs, and on 2d/3d the first layer's row
    all-reduces of partial products; for GAT and GATv2 the edge protocol's phases
    ``forward_attention`` and ``backward_attention``) and, for 1d/1.5d, rows of one SpMM.

    A graph without features or labels (R-MAT) is planned with ``cfg.hidden`` as its
    input and output widths, so its bytes are those of a model of that width."""
    g = lay.graph
    in_dim, out_dim = g.num_features or cfg.hidden, g.num_classes or cfg.hidden
    sliced = lay.shape.feature_slices > 1
    calls = spmm_schedule(cfg, in_dim, out_dim, sliced)
    start = time.perf_counter()
    rowwise = lay.shape.row_wise
    pairs = lay.phase_pairs() if rowwise and comm == "sparse" else None
    if rowwise:
        phases = rowwise_volume(lay.shape, lay.part, calls, value_bytes, pairs)
    else:
        phases = epoch_volume(
            lay.shape, lay.part, g.operator(), calls, value_bytes=value_bytes,
            comm=comm,  # type: ignore[arg-type]
            slicing=input_slicing(cfg, in_dim, out_dim) if sliced else None)
    if cfg.model in ATTENTION_MODELS and lay.shape.size > 1:
        calls_e = model_calls(cfg.model, layer_widths(in_dim, cfg.hidden, out_dim,
                                                      cfg.num_layers), cfg.heads)
        phases.update(epoch_edge_volume(lay.shape, lay.part, g.operator(), calls_e,
                                        value_bytes))
    total = RankVolume(np.zeros(lay.shape.size, np.int64), np.zeros(lay.shape.size, np.int64))
    for vol in phases.values():
        total = total + vol
    out: dict[str, Any] = {
        "bytes_per_epoch": {"total": total.total, "max_per_rank": total.max_per_rank,
                            "sent": total.sent.tolist(), "recv": total.recv.tolist()},
        "phases": {p: {"total": v.total, "max_per_rank": v.max_per_rank}
                   for p, v in phases.items()},
    }
    if rowwise:
        rows = row_volume(lay.shape, lay.part, pairs["forward_spmm"] if pairs else None)
        out["rows_per_spmm"] = {"total": rows.total, "max_per_rank": rows.max_per_rank,
                                "sent": rows.sent.tolist(), "recv": rows.recv.tolist()}
    out["plan_seconds"] = round(time.perf_counter() - start, 3)
    return out


@dataclass(frozen=True)
class PlanConfig:
    """A distributed run to plan: the grid, the partition, the communication and the model."""

    parts: int
    algo: Algorithm = "1d"
    replication: int = 1
    partitioner: str = "block"
    comm: str = "sparse"
    model: str = "gcn"
    hidden: int = 16
    num_layers: int = 2
    heads: int = 8  # GAT's and GATv2's hidden heads
    num_bases: int | None = None  # R-GCN's relation weights: basis decomposition
    num_blocks: int | None = None  # R-GCN's relation weights: block-diagonal
    dtype: str = "float32"
    seed: int = 0
    # ``train --overlap``: a dense 1D/1.5D product then holds more blocks of H at once
    # (:func:`~sparsegnn.distributed.planning.rank_memory.predict_memory` counts them).
    overlap: bool = False

    @property
    def value_bytes(self) -> int:
        return 4 if self.dtype == "float32" else 8


def plan(graph: PlanGraph, cfg: PlanConfig) -> tuple[dict[str, Any], Layout]:
    """The per-rank volume of one epoch of ``cfg`` on ``graph`` (JSON-ready), and the layout
    it was computed on (for :func:`plot`)."""
    shape = grid_shape(cfg.algo, cfg.parts, cfg.replication)
    lay = partitioned(graph, shape, cfg.partitioner, cfg.seed)
    result = {
        "num_nodes": graph.num_nodes, "num_edges": graph.num_edges, "algo": cfg.algo,
        "grid": [shape.rows, shape.cols, shape.layers], "ranks": shape.size,
        "partitioner": cfg.partitioner, "comm": cfg.comm, "value_bytes": cfg.value_bytes,
        "partition_seconds": round(lay.partition_seconds, 3),
        **plan_epoch(lay, cfg.comm, cfg, cfg.value_bytes),
    }
    return result, lay


def plot(result: dict[str, Any], lay: Layout, comm: str, path: str) -> None:
    """Draw :func:`plan_epoch`'s per-rank sent/received bytes and, for 1d/1.5d, the
    block-to-block row counts, to ``path`` (needs matplotlib)."""
    plt = pyplot("for --plot")
    rowwise = lay.shape.row_wise
    fig, axes = plt.subplots(1, 2 if rowwise else 1, figsize=(12 if rowwise else 6, 4.5),
                             squeeze=False)
    vol = result["bytes_per_epoch"]
    ranks = np.arange(len(vol["sent"]))
    ax = axes[0, 0]
    ax.plot(ranks, np.asarray(vol["sent"]) / 2**20, label="sent", drawstyle="steps-mid")
    ax.plot(ranks, np.asarray(vol["recv"]) / 2**20, label="received", drawstyle="steps-mid")
    ax.set(xlabel="rank", ylabel="MiB per epoch",
           title=f"{lay.shape.describe()}, {result['partitioner']}, {comm}")
    ax.legend()
    if rowwise:
        pair = lay.phase_pairs()["forward_spmm"] if comm == "sparse" else lay.dense_pairs()
        im = axes[0, 1].imshow(pair, cmap="viridis", interpolation="nearest")
        axes[0, 1].set(xlabel="sending block j", ylabel="receiving block i",
                       title="rows of H per SpMM")
        fig.colorbar(im, ax=axes[0, 1])
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
