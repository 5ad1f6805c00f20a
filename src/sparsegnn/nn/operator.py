"""What a layer multiplies by: any object with ``shape`` and ``matmul(x)``.

A local :class:`~sparsegnn.sparse.CSRMatrix` is one; the distributed package supplies
others (partitioned operators whose ``matmul`` communicates). Layers only ever call
``adj.matmul(h)``, which is why the same model runs unchanged on one process or many.
"""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

import torch

from sparsegnn.nn.pyg_adjacency import gcn_operator, is_adjacency, sage_operator
from sparsegnn.sparse import REDUCED_DTYPES, CSRMatrix, add_self_loops, gcn_norm, row_norm

Norm = Literal["gcn", "mean", "sum", "attention"]

# The operator each model kind multiplies by (operator_for): attention layers take the
# pattern with one self-loop per node, GIN the raw sum.
MODEL_NORMS: dict[str, Norm] = {"gcn": "gcn", "sage": "mean", "gat": "attention",
                                "gatv2": "attention", "gin": "sum"}


@runtime_checkable
class Operator(Protocol):
    """A linear operator on node features."""

    @property
    def shape(self) -> tuple[int, int]: ...

    def matmul(self, x: torch.Tensor) -> torch.Tensor: ...


def normalize(adj: CSRMatrix, norm: Norm) -> CSRMatrix:
    """The aggregation operator of a layer kind from a raw adjacency."""
    if norm == "gcn":
        return gcn_norm(adj)
    if norm == "mean":
        return row_norm(adj)
    if norm == "attention":
        return unit_self_loops(adj)
    return adj


def unit_self_loops(adj: CSRMatrix) -> CSRMatrix:
    """``adj`` without its diagonal entries, then with one entry of value 1 per node: the
    pattern PyG's attention layers attend over (``remove_self_loops`` then
    ``add_self_loops``). The other values are kept: an attention layer reads them as
    edge multiplicities (a repeated edge stored once with its count)."""
    rows = adj.row_indices()
    off = rows != adj.col
    bare = CSRMatrix.from_coo(rows[off], adj.col[off], adj.val[off], adj.shape)
    return add_self_loops(bare)


def operator_for(model: str, adj: CSRMatrix) -> CSRMatrix:
    """The operator a model kind multiplies by (:data:`MODEL_NORMS`): ``gcn_norm`` for
    GCN, the row-normalised mean for GraphSAGE, the pattern with unit self-loops for GAT
    and GATv2, the raw sum for GIN. Every path from a graph to a model's operator goes
    through here."""
    return normalize(adj, MODEL_NORMS.get(model, "mean"))


def block_operator(model: str, block: CSRMatrix) -> CSRMatrix:
    """What a model kind multiplies a sampled block by (``[n_out, n_in]``, the targets
    the first inputs, row-normalised by the sampler): the block for the mean (GraphSAGE),
    the sampled edges with unit values for GIN's sum, and those with one unit self-loop
    per target for attention (a loop of 1 beside edges of ``1 / degree`` would weigh
    ``degree`` times in the softmax)."""
    norm = MODEL_NORMS.get(model, "mean")
    if norm not in ("sum", "attention"):
        return block
    ones = CSRMatrix(block.crow, block.col, torch.ones_like(block.val), block.shape)
    return unit_self_loops(ones) if norm == "attention" else ones


def graph_operator(edge_index: torch.Tensor, num_nodes: int, model: str) -> CSRMatrix:
    """:func:`operator_for` of the graph an ``edge_index`` describes."""
    return operator_for(model, CSRMatrix.from_edge_index(edge_index, num_nodes))


def as_operator(
    adj: Operator | torch.Tensor, num_nodes: int, norm: Norm, dtype: torch.dtype
) -> Operator:
    """Accept our operators as they are; turn PyG's adjacency forms (an ``edge_index``, a
    ``torch.sparse`` matrix) into the normalised CSR a PyG layer would aggregate with.

    The same tensor gives the same layer output as in PyG
    (:mod:`sparsegnn.nn.pyg_adjacency` has each rule): repeated edges each count, and
    for ``gcn`` every node ends with exactly one self-loop of weight 1 however many it
    had, as PyG's ``add_remaining_self_loops`` leaves an unweighted graph. For 16-bit
    features the operator is float32, the type :func:`sparsegnn.sparse.spmm` pairs with
    them.
    """
    if not is_adjacency(adj):
        return adj
    if dtype in REDUCED_DTYPES:
        dtype = torch.float32
    if norm == "gcn":
        return gcn_operator(adj, num_nodes, None, fill=1.0, self_loops=True, normalize=True,
                            dtype=dtype)
    if norm in ("mean", "sum"):
        return sage_operator(adj, (num_nodes, num_nodes), norm, dtype)  # type: ignore[arg-type]
    mat = CSRMatrix.from_edge_index(adj.to(torch.long), num_nodes).to(dtype=dtype)
    return normalize(mat, norm)
