"""Row-wise softmax over the stored entries of a sparse pattern, per head, with autograd.

``alpha_ij = exp(s_ij - m_i) / sum_k exp(s_ik - m_i)`` with ``m_i = max_k s_ik`` over row
i's entries: subtracting the row max keeps every ``exp`` at most 1 however large the
scores (stable), and a row without entries simply has no values. The reductions run over
the CSR rows' contiguous runs of entries (``segment_reduce`` on the CPU, 1.7x faster at
2^18 vertices than the ``scatter_reduce_('amax')`` and ``index_add_`` over per-entry
row ids that CUDA runs; same sums in the same order), so the cost is O(nnz * heads) and
nothing of size ``rows x cols`` exists. On the CPU the fused kernels of
:mod:`sparsegnn.sparse.native` run both passes, forward and backward, where they built.

The backward ``ds_ij = alpha_ij (g_ij - sum_k alpha_ik g_ik)`` needs only ``alpha``, the
one tensor saved; autograd through the composed ops would keep three ``nnz x heads``
tensors. A distributed rank whose tile splits rows would reduce ``m`` and the row sums
across its process row between the two passes; the local form is
:func:`edge_softmax` on the rank's tile.
"""

from __future__ import annotations

import torch

from sparsegnn.errors import ShapeError
from sparsegnn.sparse import native
from sparsegnn.sparse.csr import CSRMatrix


def row_max(a: CSRMatrix, scores: torch.Tensor) -> torch.Tensor:
    """Per row and head, the largest score among the row's entries (``-inf`` for rows
    without any): ``[rows, heads]`` from ``[nnz, heads]``."""
    if scores.device.type == "cpu":
        return torch.segment_reduce(scores, "max", offsets=a.crow, axis=0, unsafe=True,
                                    initial=float("-inf"))
    rows = a.row_indices().unsqueeze(1).expand_as(scores)
    out = torch.full((a.shape[0], scores.shape[1]), float("-inf"), dtype=scores.dtype,
                     device=scores.device)
    return out.scatter_reduce_(0, rows, scores, reduce="amax", include_self=True)


def row_sum(a: CSRMatrix, values: torch.Tensor) -> torch.Tensor:
    """Per row and head, the sum of the row's entries: ``[rows, heads]`` (0 for an empty
    row)."""
    if values.device.type == "cpu":
        return torch.segment_reduce(values, "sum", offsets=a.crow, axis=0, unsafe=True)
    out = torch.zeros(a.shape[0], values.shape[1], dtype=values.dtype, device=values.device)
    return out.index_add_(0, a.row_indices(), values)


class _EdgeSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores: torch.Tensor, a: CSRMatrix) -> torch.Tensor:  # type: ignore[override]
        if native.usable(scores, width=scores.shape[1]):
            alpha = native.softmax_rows(a, scores)
        else:
            rows = a.row_indices()
            ex = (scores - row_max(a, scores).index_select(0, rows)).exp_()
            alpha = ex.div_(row_sum(a, ex).index_select(0, rows))
        ctx.a = a
        ctx.save_for_backward(alpha)
        return alpha

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        (alpha,) = ctx.saved_tensors
        if native.usable(alpha, grad, width=alpha.shape[1]):
            return native.softmax_backward(ctx.a, alpha, grad), None
        weighted = alpha * grad
        total = row_sum(ctx.a, weighted).index_select(0, ctx.a.row_indices())
        return weighted - alpha * total, None


def edge_softmax(a: CSRMatrix, scores: torch.Tensor) -> torch.Tensor:
    """Softmax of ``scores`` (``[nnz, heads]`` or ``[nnz]``) within each row of A's
    pattern, independently per head; A's own values are ignored.

    Edge multiplicities: to weigh entry ``ij`` ``c_ij`` times (a repeated edge stored
    once with value ``c_ij``), pass ``scores + log(c_ij)``, since ``c exp(s) = exp(s +
    log c)``.
    """
    single = scores.dim() == 1
    if single:
        scores = scores.unsqueeze(1)
    if scores.dim() != 2 or scores.shape[0] != a.nnz:
        raise ShapeError(f"edge_softmax: scores of shape {tuple(scores.shape)} for a "
                         f"pattern of {a.nnz} entries (need [nnz] or [nnz, heads])")
    if scores.device != a.device:
        raise ShapeError(f"edge_softmax: the pattern is on {a.device}, scores on "
                         f"{scores.device}")
    alpha = _EdgeSoftmax.apply(scores.contiguous(), a)
    return alpha.squeeze(1) if single else alpha
