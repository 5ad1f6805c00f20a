"""Multi-head SpMM and SDDMM: ``heads`` matrices that share one pattern (no autograd).

On the CPU both run the fused C kernels of :mod:`sparsegnn.sparse.native` where they
built (float32/float64); what follows is the torch path that runs otherwise.

Attention gives each stored edge one value per head, so the products run ``heads``
matrices on one pattern. Both are memory-bound, and on the CPU they are written to
move few bytes beyond their compulsory ones (docs/results/attention.md, 2026-12-06,
"kernels against the streaming bound"):

* :func:`heads_spmm` runs one FBGEMM embedding-bag product per head (float32; other
  dtypes one :func:`~sparsegnn.sparse.ops._mm` per head) on int32 copies of the
  pattern's indices, cached per pattern (half the index bytes, which every head reads
  again), and returns a ``[rows, heads, f]`` view of a head-major result: each head's
  product is one contiguous block, where interleaving the heads cost a strided copy as
  large as the output. A head's values and features are copied out only when they are
  not contiguous already. Elsewhere (CUDA) the block-diagonal operator of all heads
  (:func:`head_blocks`) runs in one product: row ``(h, i)`` holds row i's entries with
  head h's values and columns ``j * H + h``, which index ``x [n, H, f]`` viewed as
  ``[n * H, f]`` without a copy.
* :func:`heads_sddmm` on the CPU gathers both operands' ``[heads * f]`` rows for a chunk
  of entries small enough to stay in cache, multiplies them in place and sums each
  head's ``f`` products by a matrix-vector product with ones (BLAS; ``sum(-1)`` over an
  innermost dimension of 8 took 1.9x as long). Torch's ``sampled_addmm``, which it
  replaces, runs one short dot per entry and head without prefetching (1.3-6x slower
  batched over heads at 2^18 vertices on one thread, depending on the machine's load).
  Elsewhere :func:`~sparsegnn.sparse.ops.sddmm`.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from sparsegnn.sparse import native
from sparsegnn.sparse.csr import CSRMatrix
from sparsegnn.sparse.ops import _has_fbgemm, _mm, sddmm
from sparsegnn.sparse.pattern_cache import Store, per_pattern

_INT32_MAX = 2**31 - 1
# heads_sddmm gathers chunks of edges whose [chunk, f * H] operands hold about this many
# elements on one thread (2 MiB of float32: the chunk stays in L2/L3 between gather and
# sum). With several threads each of a chunk's four ops is a parallel region whose
# synchronisation dominated on a loaded 2-vCPU machine (2 threads, 2^18 vertices: 2.5 s
# at the one-thread size, 0.82 s at this one), so chunks there hold this many per thread.
_SDDMM_CHUNK_ELEMS = 1 << 19
_SDDMM_PARALLEL_CHUNK_ELEMS = 1 << 22
# A pattern's row pointers, columns and per-entry rows in the narrowest index dtype.
_NARROW: Store = {}


def _index_dtype(largest: int) -> torch.dtype:
    """int32 where every index fits (half the bytes to write and read), else int64."""
    return torch.int32 if largest <= _INT32_MAX else torch.int64


def narrow_indices(a: CSRMatrix) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``a``'s row pointers, columns and per-entry rows in the narrowest index dtype,
    cached per pair of index tensors (patterns made by ``with_values`` share them) for as
    long as the columns live: converting them costs a pass over the pattern per call."""
    def narrow() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dtype = _index_dtype(max(a.nnz, *a.shape))
        return a.crow.to(dtype), a.col.to(dtype), a.row_indices().to(dtype)

    return per_pattern(_NARROW, a, narrow)


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


def _head_mm(a: CSRMatrix, values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """One head's ``A_h @ x_h`` on the CPU: FBGEMM's weighted embedding bag on the cached
    int32 indices for float32 (what ``_mm`` runs, without its int64 index reads)."""
    if x.dtype != torch.float32 or not _has_fbgemm() or a.nnz == 0 or x.shape[1] == 0:
        return _mm(a.with_values(values.contiguous()), x.contiguous())
    crow, col, _ = narrow_indices(a)
    return F.embedding_bag(col, x.contiguous(), crow, mode="sum",
                           per_sample_weights=values.contiguous(), include_last_offset=True)


def heads_spmm(a: CSRMatrix, values: torch.Tensor, x: torch.Tensor,
               perm: torch.Tensor | None = None) -> torch.Tensor:
    """``out[:, h] = A_h @ x[:, h]`` for every head: ``values [nnz, H]`` and ``x [n, H,
    f]`` give ``[rows, H, f]`` (module docstring). ``perm`` takes the values from another
    order, ``values[perm]``, which the fused kernel reads without gathering them."""
    heads = values.shape[1]
    if native.usable(values, x, width=heads * x.shape[2]):
        return native.spmm_heads(a, values, x, perm)
    if perm is not None:
        values = values[perm]
    if x.device.type == "cpu":
        out = torch.stack([_head_mm(a, values[:, h], x[:, h]) for h in range(heads)])
        return out.transpose(0, 1)
    out = _mm(head_blocks(a, values), x.contiguous().view(-1, x.shape[2]))
    return out.view(heads, a.shape[0], x.shape[2]).transpose(0, 1)


def heads_sddmm(a: CSRMatrix, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``out[e, h] = <left[row_e, h], right[col_e, h]>``: ``[rows, H, f]`` and ``[cols, H,
    f]`` give ``[nnz, H]`` (module docstring)."""
    heads, f = left.shape[1], left.shape[2]
    if native.usable(left, right):
        return native.sddmm_dot(a, left, right)
    if a.nnz == 0 or f == 0 or left.device.type != "cpu":
        return sddmm(a, left, right)
    lt = left.contiguous().view(left.shape[0], heads * f)
    rt = right.contiguous().view(right.shape[0], heads * f)
    _, col, rows = narrow_indices(a)
    out = torch.empty(a.nnz, heads, dtype=left.dtype)
    ones = torch.ones(f, dtype=left.dtype)
    threads = torch.get_num_threads()
    elems = _SDDMM_CHUNK_ELEMS if threads == 1 else _SDDMM_PARALLEL_CHUNK_ELEMS * threads
    step = max(1, elems // (heads * f))
    for s in range(0, a.nnz, step):
        e = slice(s, s + step)
        p = rt.index_select(0, col[e]).mul_(lt.index_select(0, rows[e]))
        torch.mv(p.view(-1, f), ones, out=out[e].view(-1))
    return out
