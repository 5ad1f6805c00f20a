"""The edge side of the operator protocol: what attention layers call besides ``matmul``.

An attention layer scores every edge (an SDDMM), normalises the scores within each row
(a row softmax) and aggregates with them (an SpMM whose values carry gradients). Written
against :class:`EdgeOperator` alone, such a layer runs unchanged on one process (a local
:class:`~sparsegnn.sparse.CSRMatrix`, wrapped by :func:`edge_operator`), on sampled
rectangular blocks, and on every distributed grid, whose operators implement the same
methods by exchanging exactly the rows their edges need.

Conventions (row i is a destination, column j a source, as ``A[t, s]`` for edge s -> t):

* node-side tensors are the operator's rows: ``*_dst`` has ``shape[0]`` rows and
  ``*_src`` ``shape[1]`` (on a grid both are the rank's local rows: the operator moves
  what the rank's edges need);
* per-edge tensors (``[nnz, heads]``, or ``[nnz]`` for one head) are in the operator's
  own edge order and belong to it: on a grid each rank holds its own share of the
  edges, so apply parameters to node-side tensors (or through :meth:`sddmm_leaky`),
  never directly to per-edge ones, and pass per-edge tensors only back to the same
  operator;
* features for multi-head products are ``[n, heads, f]``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch.nn import functional as F

from sparsegnn.nn.operator import Operator
from sparsegnn.sparse import (
    CSRMatrix,
    edge_softmax,
    sddmm_add,
    sddmm_dot,
    sddmm_leaky,
    spmm_values,
)


@runtime_checkable
class EdgeOperator(Operator, Protocol):
    """An operator whose edges a layer can score, normalise and aggregate with."""

    def edge_values(self) -> torch.Tensor:
        """The operator's own value per edge (``[nnz]``; multiplicities, weights)."""
        ...

    def sddmm_add(self, u_dst: torch.Tensor, v_src: torch.Tensor) -> torch.Tensor:
        """``u_dst[i] + v_src[j]`` per edge ``(i, j)``: GAT's additive score."""
        ...

    def sddmm_dot(self, a_dst: torch.Tensor, b_src: torch.Tensor) -> torch.Tensor:
        """``<a_dst[i], b_src[j]>`` per edge and head (dot-product attention)."""
        ...

    def sddmm_leaky(self, u_dst: torch.Tensor, v_src: torch.Tensor, att: torch.Tensor,
                    negative_slope: float = 0.2) -> torch.Tensor:
        """``sum_c att[h, c] leaky_relu(u_dst[i, h, c] + v_src[j, h, c])``: GATv2's score,
        with the parameter ``att`` inside so that a grid can sum its gradient."""
        ...

    def edge_softmax(self, scores: torch.Tensor) -> torch.Tensor:
        """Softmax of per-edge scores within each row, per head."""
        ...

    def edge_matmul(self, values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``out_i = sum_j values_ij x_j`` (``[nnz, heads]`` with ``[n, heads, f]``, or
        ``[nnz]`` with ``[n, f]``), differentiable in both."""
        ...

    def edge_dropout(self, values: torch.Tensor, p: float, training: bool) -> torch.Tensor:
        """Per-edge ``values`` with each dropped with probability ``p`` (the rest scaled by
        ``1 / (1 - p)``) in training: the operator draws the mask, since on a grid each
        rank holds only its share of the edges."""
        ...


class CSREdges:
    """A local :class:`CSRMatrix` as an :class:`EdgeOperator`: the sparse primitives on
    its pattern."""

    def __init__(self, adj: CSRMatrix) -> None:
        self.adj = adj

    @property
    def shape(self) -> tuple[int, int]:
        return self.adj.shape

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        return self.adj.matmul(x)

    def edge_values(self) -> torch.Tensor:
        return self.adj.val

    def sddmm_add(self, u_dst: torch.Tensor, v_src: torch.Tensor) -> torch.Tensor:
        return sddmm_add(self.adj, u_dst, v_src)

    def sddmm_dot(self, a_dst: torch.Tensor, b_src: torch.Tensor) -> torch.Tensor:
        return sddmm_dot(self.adj, a_dst, b_src)

    def sddmm_leaky(self, u_dst: torch.Tensor, v_src: torch.Tensor, att: torch.Tensor,
                    negative_slope: float = 0.2) -> torch.Tensor:
        return sddmm_leaky(self.adj, u_dst, v_src, att, negative_slope)

    def edge_softmax(self, scores: torch.Tensor) -> torch.Tensor:
        return edge_softmax(self.adj, scores)

    def edge_matmul(self, values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return spmm_values(self.adj, values, x)

    def edge_dropout(self, values: torch.Tensor, p: float, training: bool) -> torch.Tensor:
        return F.dropout(values, p=p, training=training)


def edge_operator(adj: Operator) -> EdgeOperator:
    """``adj`` as an :class:`EdgeOperator`: distributed operators already are one, a local
    :class:`CSRMatrix` is wrapped. Anything else (an operator with ``matmul`` only) is
    refused, naming what is missing."""
    if isinstance(adj, CSRMatrix):
        return CSREdges(adj)
    if isinstance(adj, EdgeOperator):
        return adj
    raise TypeError(f"{type(adj).__name__} has no edge protocol (edge_values, sddmm_add, "
                    "edge_softmax, edge_matmul, edge_dropout, ...); attention layers need "
                    "one")
