"""PyG's adjacency forms turned into our operators, with the meaning PyG gives each one.

Why a module of its own: PyG layers take an ``edge_index`` (``[2, E]``, PyG's
``EdgeIndex`` too) with optional edge weights, a ``torch.sparse`` matrix (COO, CSR or
CSC) or a ``torch_sparse.SparseTensor``, and each form means something slightly
different. The same tensor must give the same layer output here as there, so each rule
is written down once (measured against PyG 2.8 in float64, ``tests/test_pyg_layers.py``):

* ``edge_index``: every listed edge counts (a repeated edge twice). GCN's self-loops are
  PyG's ``add_remaining_self_loops``: existing loops are removed and every node gets one,
  of weight 1 without edge weights (``improved`` then changes nothing, as in PyG), else
  of weight ``fill`` (2 when ``improved``) or, where the node listed loops, the weight of
  the last one listed.
* ``torch.sparse``: the matrix *is* the operator's pattern, ``[n_dst, n_src]`` (PyG's
  ``adj_t``), repeated coordinates summed. GCN adds ``fill`` to the diagonal (PyG's COO
  path; its CSR path differs where the diagonal is already set, see docs/pyg.md). SAGE
  uses the values: ``sum`` is ``A X``, ``mean`` divides that by the row's stored entries,
  ``max`` takes the maximum of ``a_ij x_j``.
* ``SparseTensor``: GCN replaces the diagonal by ``fill`` (``fill_diag``); SAGE ignores
  the values (``set_value(None)``), and its mean counts a repeated entry as often as it is
  stored, as an ``edge_index`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from sparsegnn.sparse import CSRMatrix, gcn_norm

Form = Literal["edge_index", "sparse", "sparse_tensor"]


@dataclass(frozen=True)
class Entries:
    """An adjacency as coordinates of the operator ``[n_dst, n_src]`` (``rows`` are
    targets), ``val`` None where every entry counts once, and the form it came in."""

    rows: torch.Tensor
    cols: torch.Tensor
    val: torch.Tensor | None
    shape: tuple[int, int]
    form: Form


def is_adjacency(adj: object) -> bool:
    """Whether ``adj`` is one of PyG's adjacency forms rather than one of our operators
    (a tensor also has ``shape`` and ``matmul``, so this is asked first)."""
    return isinstance(adj, torch.Tensor) or _is_sparse_tensor(adj)


def _is_sparse_tensor(adj: object) -> bool:
    """A ``torch_sparse.SparseTensor``, recognised without importing ``torch_sparse``."""
    return hasattr(adj, "coo") and hasattr(adj, "sparse_sizes")


def entries(adj: Any, shape: tuple[int | None, int]) -> Entries:
    """The coordinates of ``adj``; ``shape`` (``[n_dst, n_src]``, ``n_dst`` None where
    the input does not say) sizes an ``edge_index`` (``n_dst`` then ``n_src``), and a
    matrix must agree with it."""
    if _is_sparse_tensor(adj):
        row, col, val = adj.coo()
        return _sized(Entries(row, col, val, tuple(adj.sparse_sizes()), "sparse_tensor"), shape)
    if adj.layout != torch.strided:
        coo = adj.to_sparse_coo().coalesce()
        index = coo.indices()
        return _sized(Entries(index[0], index[1], coo.values(), tuple(coo.shape), "sparse"),
                      shape)
    # PyG's EdgeIndex: its plain tensor (its arithmetic would stay an Index).
    edge_index = (adj.as_tensor() if hasattr(adj, "as_tensor") else adj).to(torch.long)
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"an edge_index has shape [2, E], got {tuple(edge_index.shape)}")
    n_dst = shape[1] if shape[0] is None else shape[0]
    return Entries(edge_index[1], edge_index[0], None, (n_dst, shape[1]), "edge_index")


def _sized(found: Entries, shape: tuple[int | None, int]) -> Entries:
    if found.shape[1] != shape[1] or shape[0] not in (None, found.shape[0]):
        need = f"{'n' if shape[0] is None else shape[0]} x {shape[1]}"
        raise ValueError(f"the adjacency is {found.shape[0]} x {found.shape[1]} (targets x "
                         f"sources); the features need {need}")
    return found


def gcn_operator(
    adj: Any, num_nodes: int, edge_weight: torch.Tensor | None, *, fill: float,
    self_loops: bool, normalize: bool, dtype: torch.dtype,
) -> CSRMatrix:
    """PyG's ``GCNConv`` operator: with ``normalize`` ``D^-1/2 Â D^-1/2`` (``Â`` with
    self-loops of weight ``fill`` when ``self_loops``), else the raw weighted adjacency."""
    e = entries(adj, (num_nodes, num_nodes))
    val = e.val
    if edge_weight is not None:
        if e.form != "edge_index":
            raise ValueError("GCNConv: edge_weight goes with an edge_index; a sparse "
                             "adjacency carries its weights as its values")
        val = edge_weight
    rows, cols = e.rows, e.cols
    val = torch.ones(rows.numel(), dtype=dtype) if val is None else val.to(dtype)
    if self_loops:
        rows, cols, val = _with_loops(rows, cols, val, num_nodes, fill, e.form,
                                      weighted=edge_weight is not None)
    mat = CSRMatrix.from_coo(rows, cols, val, e.shape)
    return gcn_norm(mat, self_loops=False) if normalize else mat


def _with_loops(
    rows: torch.Tensor, cols: torch.Tensor, val: torch.Tensor, n: int, fill: float,
    form: Form, weighted: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The entries with PyG's self-loops for ``form`` (see the module doc)."""
    loops = torch.arange(n, device=rows.device)
    loop_val = torch.full((n,), fill, dtype=val.dtype, device=val.device)
    if form == "sparse":  # added onto the diagonal (summed with what is there)
        keep = torch.ones_like(rows, dtype=torch.bool)
    else:
        keep = rows != cols
        if form == "edge_index" and not weighted:
            loop_val.fill_(1.0)
        elif form == "edge_index":
            loop_val[rows[~keep]] = val[~keep]
    return (torch.cat([rows[keep], loops]), torch.cat([cols[keep], loops]),
            torch.cat([val[keep], loop_val]))


Aggr = Literal["mean", "sum", "max"]


def weighs_max(adj: object) -> bool:
    """Whether PyG's ``max`` over ``adj`` takes ``a_ij x_j`` (a ``torch.sparse``
    matrix's values) rather than ``x_j``."""
    return isinstance(adj, torch.Tensor) and adj.layout != torch.strided


def sage_operator(adj: Any, shape: tuple[int | None, int], aggr: Aggr,
                  dtype: torch.dtype) -> CSRMatrix:
    """PyG's ``SAGEConv`` aggregation of ``adj`` (``shape`` as :func:`entries`); for
    ``max`` the pattern, with the values :func:`weighs_max` multiplies by (else ones)."""
    e = entries(adj, shape)
    val = None if e.form == "sparse_tensor" else e.val
    ones = torch.ones(e.rows.numel(), dtype=dtype, device=e.rows.device)
    weights = ones if val is None else val.to(dtype)
    if aggr == "max":
        return CSRMatrix.from_coo(e.rows, e.cols, weights, e.shape,
                                  duplicates="max" if val is None else "sum")
    mat = CSRMatrix.from_coo(e.rows, e.cols, weights, e.shape)
    if aggr == "sum":
        return mat
    # mean: over listed edges (unit weights, summed: an edge_index, or a SparseTensor,
    # which keeps a repeated entry twice) or a torch.sparse matrix's coalesced entries.
    count = mat.row_sums() if val is None else mat.row_degrees().to(dtype)
    inv = torch.where(count > 0, 1.0 / count.clamp(min=1.0), torch.zeros_like(count))
    return mat.with_values(mat.val * inv[mat.row_indices()])
