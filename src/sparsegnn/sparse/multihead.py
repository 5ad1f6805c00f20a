"""Multi-head SpMM and SDDMM: ``heads`` matrices that share one pattern (no autograd).

Attention gives each stored edge one value per head, so the products run ``heads``
matrices on one pattern.

* :func:`heads_spmm` on the CPU runs one product per head on that head's contiguous
  values and features. Measured against one product by the block-diagonal operator
  of all heads (:func:`head_blocks`) on SBM graphs of 2^13-2^18 vertices with 8 heads
  of 8 (docs/results/attention.md): as fast at 2^13, 1.7-2.1x faster at 2^16 and
  2^18, 2.5-3x counting the copy of the block form's head-major result that a
  concatenating layer makes.
  Why: each head's gather reads an ``[n, f]`` table that stays in cache, where the
  block form gathers from all ``[n * H, f]`` rows and first writes ``heads x nnz``
  indices. Elsewhere (CUDA) the block operator runs in one product: row ``(h, i)``
  holds row i's entries with head h's values and columns ``j * H + h``, which index
  ``x [n, H, f]`` viewed as ``[n * H, f]`` without a copy, on
  :func:`sparsegnn.sparse.ops._mm`'s kernel for the device.
* :func:`heads_sddmm` is torch's batched ``sampled_addmm`` on the pattern repeated per
  head; on the CPU it computes each entry's dot product in place, where the generic
  form gathers both ``nnz x heads x f`` operands first (2.7-7x slower, same page).
"""

from __future__ import annotations

import warnings

import torch

from sparsegnn.sparse.csr import CSRMatrix
from sparsegnn.sparse.ops import _mm, sddmm

_INT32_MAX = 2**31 - 1


def _index_dtype(largest: int) -> torch.dtype:
    """int32 where every index fits (half the bytes to write and read), else int64."""
    return torch.int32 if largest <= _INT32_MAX else torch.int64


def head_blocks(a: CSRMatrix, values: torch.Tensor) -> CSRMatrix:
    """``diag(A_0, ..., A_{H-1})`` with rows ordered ``(h, i)`` and columns ``(j, h)``:
    A's pattern carrying ``values[:, h]`` in block h. Its product with ``x [n, H, f]``
    viewed as ``[n * H, f]`` is ``[H * rows, f]``, head-major."""
    heads, nnz = values.shape[1], a.nnz
    shift = torch.arange(heads, device=a.device)
    crow = (a.crow[:-1].unsqueeze(0) + (shift * nnz).unsqueeze(1)).flatten()
    crow = torch.cat([crow, crow.new_full((1,), heads * nnz)])
    col = (a.col * heads).unsqueeze(0) + shift.unsqueeze(1)
    val = values.t().contiguous().flatten()
    return CSRMatrix(crow, col.flatten(), val, (heads * a.shape[0], heads * a.shape[1]))


def heads_spmm(a: CSRMatrix, values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``out[:, h] = A_h @ x[:, h]`` for every head: ``values [nnz, H]`` and ``x [n, H,
    f]`` give ``[rows, H, f]`` (contiguous on the CPU, a view of a head-major result
    elsewhere)."""
    heads = values.shape[1]
    if heads == 1 or x.device.type == "cpu":  # one product per head (module docstring)
        outs = [_mm(a.with_values(values[:, h].contiguous()), x[:, h].contiguous())
                for h in range(heads)]
        return outs[0].unsqueeze(1) if heads == 1 else torch.stack(outs, dim=1)
    out = _mm(head_blocks(a, values), x.contiguous().view(-1, x.shape[2]))
    return out.view(heads, a.shape[0], x.shape[2]).transpose(0, 1)


def heads_sddmm(a: CSRMatrix, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``out[e, h] = <left[row_e, h], right[col_e, h]>``: ``[rows, H, f]`` and ``[cols, H,
    f]`` give ``[nnz, H]`` (a view of a head-major result)."""
    heads = left.shape[1]
    if a.nnz == 0 or left.device.type != "cpu":
        return sddmm(a, left, right)
    dtype = _index_dtype(max(a.nnz, a.shape[1]))
    crow = a.crow.to(dtype).unsqueeze(0).expand(heads, -1).contiguous()
    col = a.col.to(dtype).unsqueeze(0).expand(heads, -1).contiguous()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support is in beta.*")
        pattern = torch.sparse_csr_tensor(crow, col, left.new_zeros(heads, a.nnz),
                                          (heads, *a.shape), check_invariants=False)
    out = torch.sparse.sampled_addmm(pattern, left.transpose(0, 1),
                                     right.transpose(0, 1).transpose(1, 2), beta=0.0)
    return out.values().t()
