"""Schlichtkrull et al.'s relational GCN: one aggregation operator per edge type.

``out_i = x_i W_0 + sum_r sum_{j in N_r(i)} (1 / c_ir) x_j W_r + b`` is, in matrix form,
``X W_0 + sum_r A_r X W_r``: one SpMM per relation, where ``A_r`` is relation r's
adjacency, row-normalised for PyG's default mean aggregation (``c_ir = |N_r(i)|``,
repeated edges counted). ``W_r`` is a full matrix, a combination of shared bases, or
block-diagonal.

The R products run as one (:func:`stack_relations`): relation r's entry ``(i, j)`` is
column ``j * R + r`` of ``[A_0 ... A_{R-1}]`` (transform first, ``X W`` viewed as ``[n *
R, out]``) or row ``i * R + r`` of ``[A_0; ...; A_{R-1}]`` (aggregate first, then one
``[rows, R * in] @ [R * in, out]`` product): one pass over every edge, one output, and
the relations' weights in one dense product instead of R (docs/results/attention.md).
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Sequence
from typing import Literal

import torch
from torch import nn

from sparsegnn.nn.operator import Operator, normalize
from sparsegnn.sparse import CSRMatrix

RelAggr = Literal["mean", "sum"]


def relation_operators(edge_index: torch.Tensor, edge_type: torch.Tensor,
                       num_relations: int, num_nodes: int, aggr: RelAggr = "mean",
                       dtype: torch.dtype = torch.float32) -> list[CSRMatrix]:
    """``[A_0, ..., A_{R-1}]``: relation r's adjacency (``A_r[dst, src]``, repeated edges
    summed), row-normalised for ``mean``; what :class:`RGCNConv` multiplies by."""
    ops = []
    for r in range(num_relations):
        mat = CSRMatrix.from_edge_index(edge_index[:, edge_type == r], num_nodes)
        ops.append(normalize(mat.to(dtype=dtype), aggr))
    return ops


def stack_relations(ops: Sequence[CSRMatrix], by: Literal["cols", "rows"]) -> CSRMatrix:
    """The R relation operators as one matrix, relations interleaved: ``by="cols"`` puts
    ``A_r[i, j]`` at ``[i, j * R + r]`` (times ``X W`` viewed as ``[n * R, out]``),
    ``by="rows"`` at ``[i * R + r, j]`` (its product viewed as ``[rows, R, in]``).
    Interleaving, not blocks, is what lets both dense sides be views without copies."""
    num, (rows, cols) = len(ops), ops[0].shape
    rel = torch.cat([torch.full((op.nnz,), r, device=op.device) for r, op in enumerate(ops)])
    row = torch.cat([op.row_indices() for op in ops])
    col = torch.cat([op.col for op in ops])
    val = torch.cat([op.val for op in ops])
    if by == "cols":
        return CSRMatrix.from_coo(row, col * num + rel, val, (rows, cols * num))
    return CSRMatrix.from_coo(row * num + rel, col, val, (rows * num, cols))


class RelationIndex:
    """Every relation's edge counts keyed by ``(dst, src)``: what splits a block sampled
    from the union of the relations back into one operator per relation.

    A sampler draws neighbours on the union pattern; the sampled block says which
    ``(dst, src)`` pairs a minibatch keeps, and this index says which relations join each
    pair and how many times (repeated edges count, as in :func:`relation_operators`).
    """

    def __init__(self, edge_index: torch.Tensor, edge_type: torch.Tensor,
                 num_relations: int, num_nodes: int):
        self.num_relations, self.num_nodes = num_relations, num_nodes
        keys = (edge_index[1].long() * num_nodes + edge_index[0].long()) * num_relations
        self.keys, self.counts = torch.unique(keys + edge_type.long(), return_counts=True)

    def union(self, dtype: torch.dtype = torch.float32) -> CSRMatrix:
        """The union pattern ``[dst, src]`` with unit values, what the samplers draw from."""
        pair = torch.unique(self.keys // self.num_relations)
        row, col = pair // self.num_nodes, pair % self.num_nodes
        ones = torch.ones(pair.numel(), dtype=dtype)
        return CSRMatrix.from_coo(row, col, ones, (self.num_nodes, self.num_nodes))

    def rows(self, lo: int, hi: int) -> RelationIndex:
        """The index of destination rows ``lo .. hi`` only (a rank's block)."""
        part = copy.copy(self)
        bounds = torch.tensor([lo, hi]) * self.num_nodes * self.num_relations
        a, b = torch.searchsorted(self.keys, bounds).tolist()
        part.keys, part.counts = self.keys[a:b], self.counts[a:b]
        return part

    def lookup(self, dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        """``[pairs, R]``: how many relation-r edges join each ``(dst, src)`` pair."""
        base = (dst.long() * self.num_nodes + src.long()) * self.num_relations
        wanted = base[:, None] + torch.arange(self.num_relations, device=base.device)
        if not self.keys.numel():
            return torch.zeros_like(wanted)
        pos = torch.searchsorted(self.keys, wanted).clamp_(max=self.keys.numel() - 1)
        return torch.where(self.keys[pos] == wanted, self.counts[pos], 0)

    def split(self, block: CSRMatrix, row_ids: torch.Tensor, col_ids: torch.Tensor,
              aggr: RelAggr = "mean", lookup: Lookup | None = None) -> list[CSRMatrix]:
        """Relation r's operator on ``block``'s pattern (rows are nodes ``row_ids``,
        columns ``col_ids``): each kept pair's relation-r edge count, aggregated by
        ``aggr`` over the pairs the block kept. ``lookup`` replaces :meth:`lookup` (a
        partitioned index asks the owners of the rows)."""
        rows, cols = block.row_indices(), block.col
        counts = (lookup or self.lookup)(row_ids[rows], col_ids[cols])
        out = []
        for r in range(self.num_relations):
            keep = counts[:, r] > 0
            mat = CSRMatrix.from_coo(rows[keep], cols[keep], counts[keep, r].to(block.dtype),
                                     block.shape)
            out.append(normalize(mat, aggr))
        return out


# (dst, src) pairs -> their relation counts ``[pairs, R]``.
Lookup = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


# The stacked operator of the last list of relation operators seen, per direction
# (with the list's identity), kept while the list's first operator lives: training
# multiplies by the same list every epoch, and a model whose layers multiply in both
# directions (transform first in one, aggregate first in another) keeps both, where one
# slot for both rebuilt each operator and its transpose (a sort of every edge) in every
# layer of every epoch (docs/results/attention.md).
_STACKS: weakref.WeakKeyDictionary[CSRMatrix, dict[str, tuple[tuple, CSRMatrix]]] = \
    weakref.WeakKeyDictionary()


def _stacked(ops: Sequence[Operator], by: Literal["cols", "rows"]) -> CSRMatrix | None:
    """:func:`stack_relations` of ``ops``, cached; None where the ops are not all local
    CSR matrices with constant values (a distributed operator multiplies on its own)."""
    if not all(isinstance(op, CSRMatrix) and not op.val.requires_grad for op in ops):
        return None
    mats: list[CSRMatrix] = list(ops)  # type: ignore[arg-type]
    key = (*(id(m) for m in mats), *(m.val._version for m in mats))
    cache = _STACKS.setdefault(mats[0], {})
    if by not in cache or cache[by][0] != key:
        cache[by] = (key, stack_relations(mats, by))
    return cache[by][1]


def _glorot(param: torch.Tensor) -> None:
    """Glorot-uniform over the last two dimensions (PyG's initialisation of these)."""
    bound = (6.0 / (param.size(-2) + param.size(-1))) ** 0.5
    nn.init.uniform_(param, -bound, bound)


class RGCNConv(nn.Module):
    r"""PyG's ``RGCNConv`` on our SpMM.

    Args:
        in_channels, out_channels: feature widths.
        num_relations: number of edge types R.
        num_bases: ``W_r = sum_b comp[r, b] weight[b]`` (basis decomposition).
        num_blocks: ``W_r`` block-diagonal with ``num_blocks`` blocks.
        aggr: ``mean`` (PyG's default) or ``sum`` over each relation's in-edges.
        root_weight: add ``x_i W_0`` (``root``).
        bias: add a learnable bias.

    ``forward(x, edge_index, edge_type)`` as PyG, or ``forward(x, ops)`` with one
    operator per relation (:func:`relation_operators`; they are used as given, already
    aggregated by ``aggr``). Parameter names equal PyG's (``weight``, ``comp``, ``root``,
    ``bias``), so a PyG state dict loads. Not supported: featureless input (node
    indices as ``x``), bipartite input.
    """

    def __init__(self, in_channels: int, out_channels: int, num_relations: int,
                 num_bases: int | None = None, num_blocks: int | None = None,
                 aggr: RelAggr = "mean", root_weight: bool = True, bias: bool = True):
        super().__init__()
        if num_bases is not None and num_blocks is not None:
            raise ValueError("RGCNConv: choose num_bases or num_blocks, not both")
        if num_blocks is not None and (in_channels % num_blocks or out_channels % num_blocks):
            raise ValueError(f"RGCNConv: num_blocks={num_blocks} must divide both widths "
                             f"({in_channels}, {out_channels})")
        if aggr not in ("mean", "sum"):
            raise ValueError(f"RGCNConv: aggr must be 'mean' or 'sum', got {aggr!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.num_relations, self.num_bases, self.num_blocks = num_relations, num_bases, num_blocks
        self.aggr = aggr
        if num_bases is not None:
            self.weight = nn.Parameter(torch.empty(num_bases, in_channels, out_channels))
            self.comp = nn.Parameter(torch.empty(num_relations, num_bases))
        elif num_blocks is not None:
            self.weight = nn.Parameter(torch.empty(
                num_relations, num_blocks, in_channels // num_blocks, out_channels // num_blocks))
            self.register_parameter("comp", None)
        else:
            self.weight = nn.Parameter(torch.empty(num_relations, in_channels, out_channels))
            self.register_parameter("comp", None)
        self.root = nn.Parameter(torch.empty(in_channels, out_channels)) if root_weight else None
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for param in (self.weight, self.comp, self.root):
            if param is not None:
                _glorot(param)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def relation_weights(self) -> torch.Tensor:
        """``[R, in, out]`` full or basis-combined weights (not for block-diagonal)."""
        if self.comp is None:
            return self.weight
        flat = self.comp @ self.weight.reshape(self.num_bases, -1)
        return flat.view(self.num_relations, self.in_channels, self.out_channels)

    def _transform(self, h: torch.Tensor, r: int, weights: torch.Tensor) -> torch.Tensor:
        """``h W_r``; block-diagonal ``W_r`` multiplies each block of columns by its own."""
        if self.num_blocks is None:
            return h @ weights[r]
        blocks = h.reshape(h.shape[0], self.num_blocks, -1)
        return torch.einsum("nbi,bio->nbo", blocks, weights[r]).reshape(h.shape[0], -1)

    def forward(self, x: torch.Tensor, adj: torch.Tensor | Sequence[Operator],
                edge_type: torch.Tensor | None = None) -> torch.Tensor:
        ops = self._operators(x, adj, edge_type)
        # Aggregate first when it is the narrower side (always for block-diagonal W_r).
        narrow_first = self.num_blocks is None and self.out_channels < self.in_channels
        stacked = _stacked(ops, "cols" if narrow_first else "rows") if len(ops) > 1 else None
        if stacked is None:
            out = self._per_relation(x, ops, narrow_first)
        elif narrow_first:
            xw = x @ self.relation_weights().permute(1, 0, 2).reshape(self.in_channels, -1)
            out = stacked.matmul(xw.view(-1, self.out_channels))
        else:
            agg = stacked.matmul(x).view(-1, self.num_relations, self.in_channels)
            out = self._combine(agg)
        if self.root is not None:  # one GEMM adding into out, no [rows, out] temporary
            out = torch.addmm(out, x[: out.shape[0]], self.root)
        return out if self.bias is None else out + self.bias

    def _combine(self, agg: torch.Tensor) -> torch.Tensor:
        """``sum_r agg[:, r] W_r`` for ``agg [rows, R, in]``: one dense product."""
        if self.num_blocks is None:
            flat = self.relation_weights().reshape(-1, self.out_channels)
            return agg.reshape(agg.shape[0], -1) @ flat
        blocks = agg.reshape(agg.shape[0], self.num_relations, self.num_blocks, -1)
        out = torch.einsum("nrbi,rbio->nbo", blocks, self.weight)
        return out.reshape(agg.shape[0], -1)

    def _per_relation(self, x: torch.Tensor, ops: Sequence[Operator],
                      narrow_first: bool) -> torch.Tensor:
        """The sum one relation at a time, for operators that cannot be stacked."""
        weights = self.relation_weights()
        out = torch.zeros(ops[0].shape[0], self.out_channels, dtype=x.dtype, device=x.device)
        for r, op in enumerate(ops):
            if narrow_first:
                out = out + op.matmul(self._transform(x, r, weights))
            else:
                out = out + self._transform(op.matmul(x), r, weights)
        return out

    def _operators(self, x: torch.Tensor, adj: torch.Tensor | Sequence[Operator],
                   edge_type: torch.Tensor | None) -> Sequence[Operator]:
        if isinstance(adj, torch.Tensor):
            if edge_type is None:
                raise ValueError("RGCNConv: an edge_index needs its edge_type")
            return relation_operators(adj.long(), edge_type, self.num_relations, x.shape[0],
                                      self.aggr, x.dtype)
        if len(adj) != self.num_relations:
            raise ValueError(f"RGCNConv: got {len(adj)} operators for "
                             f"{self.num_relations} relations")
        return adj

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.in_channels}, {self.out_channels}, "
                f"num_relations={self.num_relations})")
