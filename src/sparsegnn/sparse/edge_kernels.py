"""Per-edge kernels with autograd: SDDMM (dot, additive, GATv2's edge MLP) and the SpMM
whose values are learnt, multi-head.

Attention is three sparse products on one pattern ``A`` (SYSTEM.md section 8): an SDDMM
makes one score per stored edge and head, a row softmax normalises them
(:mod:`sparsegnn.sparse.edge_softmax`), and an SpMM with those values aggregates. SDDMM and
SpMM are each other's gradients (``d out / d values`` of an SpMM is an SDDMM of the output
gradient with X; ``d out / d left`` of an SDDMM is an SpMM with the output gradient as
values), so both backwards here are the other kernel and no ``nnz x heads x f`` message
tensor is ever kept: per-edge tensors stay ``nnz x heads``. Every head runs in the same
product (:mod:`sparsegnn.sparse.multihead`).

Every function takes the pattern as a :class:`CSRMatrix` (its values are ignored) and
plain tensors, so a distributed rank calls them on its local tile, whose columns index
the feature rows it gathered. Shapes: ``heads`` is the second dimension of a 3-D feature
tensor ``[n, heads, f]`` and of 2-D per-edge values ``[nnz, heads]``; without a head
dimension (``[n, f]`` features, ``[nnz]`` values) the kernels run one head.
"""

from __future__ import annotations

import torch

from sparsegnn.errors import ShapeError
from sparsegnn.sparse import native
from sparsegnn.sparse.csr import CSRMatrix
from sparsegnn.sparse.multihead import heads_sddmm, heads_spmm

# GATv2's edge MLP works on chunks of edges so its temporary stays near this many elements.
_EDGE_CHUNK_ELEMS = 1 << 22


def pattern_transpose(a: CSRMatrix) -> tuple[CSRMatrix, torch.Tensor]:
    """``A^T``'s pattern and the permutation ``p`` taking values in A's order to values
    in the transpose's (``A^T.val == A.val[p]``), cached on ``a`` as :meth:`CSRMatrix.t`
    caches them.

    Why not ``a.t()`` alone: a matrix marked ``symmetric`` returns itself with the
    identity permutation, which holds for its own values but not for per-edge values
    such as attention, which are not symmetric; such a matrix gets an unmarked copy's
    transpose (computed on each call: attention operators are not marked symmetric).
    """
    if a.symmetric:
        a = CSRMatrix(a.crow, a.col, a.val, a.shape, _rows=a._rows)
    return a.t(), a.transpose_perm()


def heads_mm(a: CSRMatrix, values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``out[:, h] = A_h @ x[:, h]`` with ``A_h`` A's pattern carrying ``values[:, h]``
    (no autograd), every head (:func:`~sparsegnn.sparse.multihead.heads_spmm`)."""
    return heads_spmm(a, values, x)


def _transposed_mm(a: CSRMatrix, values: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """``A_h^T @ g[:, h]`` per head, on the cached transposed pattern."""
    at, perm = pattern_transpose(a)
    return heads_spmm(at, values, g, perm)


class _SpMMValues(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values: torch.Tensor, x: torch.Tensor, a: CSRMatrix) -> torch.Tensor:  # type: ignore[override]
        ctx.a = a
        ctx.save_for_backward(values, x)
        return heads_mm(a, values, x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        values, x = ctx.saved_tensors
        grad = grad.contiguous()
        grad_values = heads_sddmm(ctx.a, grad, x) if ctx.needs_input_grad[0] else None
        grad_x = _transposed_mm(ctx.a, values, grad) if ctx.needs_input_grad[1] else None
        return grad_values, grad_x, None


class _SDDMMDot(torch.autograd.Function):
    @staticmethod
    def forward(ctx, left: torch.Tensor, right: torch.Tensor, a: CSRMatrix) -> torch.Tensor:  # type: ignore[override]
        ctx.a = a
        ctx.save_for_backward(left, right)
        return heads_sddmm(a, left, right)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        left, right = ctx.saved_tensors
        grad = grad.contiguous()
        grad_left = heads_mm(ctx.a, grad, right) if ctx.needs_input_grad[0] else None
        grad_right = _transposed_mm(ctx.a, grad, left) if ctx.needs_input_grad[1] else None
        return grad_left, grad_right, None


def _check(a: CSRMatrix, left: torch.Tensor, right: torch.Tensor, what: str) -> None:
    if left.shape[0] != a.shape[0] or right.shape[0] != a.shape[1]:
        raise ShapeError(f"{what}: the pattern is {a.shape} but the row-side tensor has "
                         f"{left.shape[0]} rows and the column-side one {right.shape[0]}")
    if left.shape[1:] != right.shape[1:]:
        raise ShapeError(f"{what}: shapes {tuple(left.shape)} and {tuple(right.shape)} "
                         "differ beyond their first dimension")
    if left.device != a.device or right.device != a.device:
        raise ShapeError(f"{what}: the pattern is on {a.device}, the tensors on "
                         f"{left.device} and {right.device}")


def spmm_values(a: CSRMatrix, values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``out_i = sum_j values_ij x_j`` over A's pattern, differentiable in ``values`` and
    ``x``: ``values [nnz, heads]`` with ``x [n, heads, f]`` give ``[rows, heads, f]``;
    ``values [nnz]`` with ``x [n, f]`` give ``[rows, f]``.

    Unlike :func:`~sparsegnn.sparse.spmm` on ``a.with_values(values)``, the backward
    reuses ``a``'s cached transpose pattern (a ``with_values`` copy would sort its own
    on every backward pass), and heads share the pattern.
    """
    single = values.dim() == 1
    if single:
        values, x = values.unsqueeze(1), x.unsqueeze(1)
    if values.shape != (a.nnz, x.shape[1]) or x.dim() != 3:
        raise ShapeError(f"spmm_values: values {tuple(values.shape)} and x {tuple(x.shape)} "
                         f"do not fit a pattern of {a.nnz} entries ([nnz, heads], "
                         "[n, heads, f])")
    _check(a, torch.empty(a.shape[0], *x.shape[1:], device=a.device), x, "spmm_values")
    if values.dtype != x.dtype:
        raise ShapeError(f"spmm_values: values are {values.dtype} but x is {x.dtype}")
    out = _SpMMValues.apply(values, x.contiguous(), a)
    return out.squeeze(1) if single else out


def sddmm_dot(a: CSRMatrix, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``out[e] = <left[row_e], right[col_e]>`` for every stored entry ``e``, with autograd:
    ``[rows, heads, f]`` and ``[cols, heads, f]`` give ``[nnz, heads]``; 2-D inputs
    ``[nnz]``. Cost O(nnz * heads * f), memory O(nnz * heads) plus a bounded chunk."""
    _check(a, left, right, "sddmm_dot")
    if left.dim() == 2:
        return _SDDMMDot.apply(left.unsqueeze(1), right.unsqueeze(1), a).squeeze(1)
    return _SDDMMDot.apply(left.contiguous(), right.contiguous(), a)


class _SDDMMAdd(torch.autograd.Function):
    """The fused kernel forward; backward sums the gradient over each row's entries and,
    on the transposed pattern, over each column's."""

    @staticmethod
    def forward(ctx, u: torch.Tensor, v: torch.Tensor, a: CSRMatrix) -> torch.Tensor:  # type: ignore[override]
        ctx.a = a
        return native.sddmm_add(a, u, v)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        grad = grad.contiguous()
        grad_u = native.segment_sum(ctx.a, grad) if ctx.needs_input_grad[0] else None
        grad_v = None
        if ctx.needs_input_grad[1]:
            at, perm = pattern_transpose(ctx.a)
            grad_v = native.segment_sum(at, grad, perm)
        return grad_u, grad_v, None


def sddmm_add(a: CSRMatrix, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``out[e] = u[row_e] + v[col_e]``: the additive SDDMM of GAT's scores, per head
    (``u [rows, heads]``, ``v [cols, heads]``, or 1-D). The fused kernel where it runs,
    else ``index_select`` gathers, whose backward is an ``index_add`` over the rows and
    columns: no dense intermediate either way."""
    _check(a, u, v, "sddmm_add")
    if native.usable(u, v):
        if u.dim() == 1:
            return _SDDMMAdd.apply(u.unsqueeze(1), v.unsqueeze(1), a).squeeze(1)
        return _SDDMMAdd.apply(u, v, a)
    return u.index_select(0, a.row_indices()) + v.index_select(0, a.col)


def _leaky_grad(z: torch.Tensor, slope: float) -> torch.Tensor:
    return torch.where(z > 0, 1.0, slope).to(z.dtype)


class _SDDMMLeaky(torch.autograd.Function):
    """GATv2's score ``sum_c att[h, c] * leaky_relu(u[i, h, c] + v[j, h, c])``: the fused
    kernels where they run, else chunked over edges, the chunk recomputed in backward
    instead of saved."""

    @staticmethod
    def forward(ctx, u: torch.Tensor, v: torch.Tensor, att: torch.Tensor,  # type: ignore[override]
                a: CSRMatrix, slope: float) -> torch.Tensor:
        ctx.a, ctx.slope = a, slope
        ctx.save_for_backward(u, v, att)
        if native.usable(u, v, att, width=u[:1].numel()):
            return native.sddmm_leaky(a, u, v, att, slope)
        rows, cols = a.row_indices(), a.col
        out = torch.empty(a.nnz, u.shape[1], dtype=u.dtype, device=u.device)
        for e in _chunks(a.nnz, u[:1].numel()):
            z = u[rows[e]] + v[cols[e]]
            out[e] = (torch.nn.functional.leaky_relu(z, slope) * att).sum(-1)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        u, v, att = ctx.saved_tensors
        a, slope = ctx.a, ctx.slope
        if native.usable(u, v, att, grad, width=u[:1].numel()):
            at, perm = pattern_transpose(a)
            return (*native.sddmm_leaky_grads(a, at, perm, u, v, att, grad, slope), None, None)
        rows, cols = a.row_indices(), a.col
        grad_u, grad_v, grad_att = torch.zeros_like(u), torch.zeros_like(v), torch.zeros_like(att)
        for e in _chunks(a.nnz, u[:1].numel()):
            z = u[rows[e]] + v[cols[e]]
            g = grad[e].unsqueeze(-1)
            grad_att += (g * torch.nn.functional.leaky_relu(z, slope)).sum(0)
            dz = g * att * _leaky_grad(z, slope)
            grad_u.index_add_(0, rows[e], dz)
            grad_v.index_add_(0, cols[e], dz)
        return grad_u, grad_v, grad_att, None, None


def _chunks(nnz: int, per_edge: int) -> list[slice]:
    step = max(1, _EDGE_CHUNK_ELEMS // max(1, per_edge))
    return [slice(s, s + step) for s in range(0, nnz, step)]


def sddmm_leaky(a: CSRMatrix, u: torch.Tensor, v: torch.Tensor, att: torch.Tensor,
                negative_slope: float = 0.2) -> torch.Tensor:
    """GATv2's score, an SDDMM through a nonlinearity: ``out[e, h] = sum_c att[h, c] *
    leaky_relu(u[row_e, h, c] + v[col_e, h, c])`` (``u [rows, heads, c]``, ``v [cols,
    heads, c]``, ``att [heads, c]`` -> ``[nnz, heads]``).

    The nonlinearity sits before the dot, so the per-edge ``heads x c`` sum cannot be
    split into per-node scalars as GAT's can: it costs O(nnz * heads * c) work, but
    only a chunk of edges at a time is ever materialised, forward and backward.
    """
    _check(a, u, v, "sddmm_leaky")
    if u.dim() != 3 or att.shape != u.shape[1:]:
        raise ShapeError(f"sddmm_leaky: u {tuple(u.shape)} must be [rows, heads, c] and "
                         f"att {tuple(att.shape)} [heads, c]")
    return _SDDMMLeaky.apply(u.contiguous(), v.contiguous(), att, a, negative_slope)
