"""Sparse kernels with autograd: SpMM, SpGEMM, SDDMM and the GCN/mean normalisations.

Kernel choice (measured, see docs/kernels.md): float32 SpMM on the CPU runs as a
weighted ``embedding_bag`` sum (FBGEMM's gather kernel), 2-3x faster than torch's CSR
kernels; float64 uses torch's CSR kernels (MKL's or ATen's, by width), CUDA cuSPARSE.
Reduced precision: X in bfloat16 or float16 times a float32 ``A`` runs the same kernels on
16-bit storage with float32 accumulation inside each row, and returns X's dtype
(:data:`REDUCED_DTYPES`, docs/kernels.md).
The backward reuses the *cached* transpose (or ``A`` itself when the matrix is known
symmetric, as a GCN operator of an undirected graph is), where a plain ``torch.sparse``
autograd would rebuild ``A^T`` on every backward pass.
"""

from __future__ import annotations

import functools

import torch

from sparsegnn.errors import ShapeError
from sparsegnn.sparse.csr import CSRMatrix

# SDDMM works on chunks of nonzeros so its temporary stays near this many elements.
_SDDMM_CHUNK_ELEMS = 1 << 24


# Feature dtypes SpMM accepts beside A's own: 16-bit storage, float32 accumulation.
REDUCED_DTYPES = (torch.bfloat16, torch.float16)

# Without FBGEMM (float64), CPU products at least this wide use ATen's reduce kernel.
_REDUCE_KERNEL_MIN_WIDTH = 64


def _mm(a: CSRMatrix, x: torch.Tensor) -> torch.Tensor:
    """Plain (no autograd) ``A @ X`` with the fastest kernel for the device.

    CPU, measured (docs/kernels.md): float32 runs FBGEMM's embedding-bag gather; other
    dtypes run torch's CSR kernels, MKL's for narrow X and ATen's row-parallel
    vectorised reduce kernel (``torch.sparse.mm(A, X, "sum")``) for wide X, where it
    was about 1.5x faster. CUDA: ``torch.sparse.mm`` (cuSPARSE).
    """
    if a.nnz == 0 or x.shape[1] == 0:
        return torch.zeros(a.shape[0], x.shape[1], dtype=x.dtype, device=x.device)
    if x.dtype in REDUCED_DTYPES:
        return _mm_reduced(a, x)
    if x.device.type == "cpu":
        if x.dtype == torch.float32 and _has_fbgemm():
            return _mm_embedding_bag(a, x)
        if x.shape[1] >= _REDUCE_KERNEL_MIN_WIDTH:
            return torch.sparse.mm(a.to_torch(), x, "sum")
    return torch.sparse.mm(a.to_torch(), x)


def _mm_reduced(a: CSRMatrix, x: torch.Tensor) -> torch.Tensor:
    """``A @ X`` for 16-bit X: 16-bit storage in and out, float32 sums inside each row.

    Why 16-bit storage: the product is memory-bound (docs/kernels.md), so halving the
    bytes of every gathered row is what can make it faster, and halving X is what the
    memory limit needs. Why float32 accumulation: a row sum in bfloat16 (8-bit
    mantissa) stops growing once the partial sum is 256 times the next term, so
    high-degree rows would silently lose their neighbours. Every kernel here widens to
    float32 before adding and rounds once per output element: FBGEMM's embedding bag
    on x86 CPUs, ATen's reduce kernel on other CPUs, cuSPARSE (float32 compute type)
    on CUDA. A's float32 values are cast to X's dtype (cached, :meth:`values_as`).
    """
    if x.device.type == "cpu" and _has_fbgemm():
        return _mm_embedding_bag(a, x)
    csr = a.with_values(a.values_as(x.dtype)).to_torch()
    return torch.sparse.mm(csr, x, "sum") if x.device.type == "cpu" else torch.sparse.mm(csr, x)


def _mm_embedding_bag(a: CSRMatrix, x: torch.Tensor) -> torch.Tensor:
    """CSR SpMM as a weighted embedding-bag sum: row i is bag i, a gather-and-reduce.

    ``embedding_bag`` with per-sample weights computes ``out[i] = sum_k val[k] *
    X[col[k]]`` over the nonzeros ``k`` of row ``i``, which is exactly CSR ``A @ X``
    (empty rows give zeros). On x86 torch runs it with FBGEMM's JIT-compiled,
    prefetching gather kernel, measured 2-3x faster than both of torch's CSR kernels
    (MKL's and ATen's) on float32 at every width (docs/kernels.md). FBGEMM covers
    float32 and 16-bit X (the weights must then be 16-bit too), not float64.
    """
    # Detached inputs select torch's forward-only variant, which skips building the
    # per-nonzero bookkeeping (offset2bag) its own backward would need; ours is _SpMM.
    # All-ones values (a pattern whose values are not being learnt) need no weights.
    unweighted = a.unit_values and not a.val.requires_grad
    return torch.nn.functional.embedding_bag(
        a.col,
        x.detach(),
        a.crow,
        mode="sum",
        per_sample_weights=None if unweighted else a.values_as(x.dtype),
        include_last_offset=True,
    )


def column_slices_exact(x: torch.Tensor) -> bool:
    """Whether ``A @ X[:, s]`` equals ``(A @ X)[:, s]`` to the bit for every column slice
    ``s`` of this X, so a product may be computed slice by slice (to overlap each slice's
    transfer with the previous slice's multiply) without changing any result.

    True where one kernel serves every width and sums each output element over the row's
    nonzeros in order: FBGEMM's embedding bag (float32 and 16-bit X on x86 CPUs). Not for
    float64, whose kernel depends on the width (MKL below
    ``_REDUCE_KERNEL_MIN_WIDTH`` columns, ATen's above; measured to differ in the last
    bit), nor for CUDA, where cuSPARSE picks its algorithm by shape."""
    return (x.device.type == "cpu" and _has_fbgemm()
            and x.dtype in (torch.float32, *REDUCED_DTYPES))


@functools.cache
def _has_fbgemm() -> bool:
    """Whether this torch build has FBGEMM (x86 builds do), which ``embedding_bag`` uses."""
    return "fbgemm" in torch.backends.quantized.supported_engines


def sddmm(a: CSRMatrix, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """Sampled dense-dense product: ``out[e] = <left[row_e], right[col_e]>`` for A's nonzeros.

    This is the gradient of SpMM with respect to A's values; chunked so its temporary
    never holds more than about 16M elements whatever nnz is. Multi-head: ``left``
    ``[rows, heads, f]`` and ``right`` ``[cols, heads, f]`` give ``[nnz, heads]`` (the dot
    runs over the last dimension). No autograd: :func:`sparsegnn.sparse.edge_kernels.sddmm_dot`.
    """
    rows, cols = a.row_indices(), a.col
    out = torch.empty(a.nnz, *left.shape[1:-1], dtype=left.dtype, device=left.device)
    step = max(1, _SDDMM_CHUNK_ELEMS // max(1, left[:1].numel()))
    for s in range(0, a.nnz, step):
        e = slice(s, s + step)
        out[e] = (left[rows[e]] * right[cols[e]]).sum(-1)
    return out


class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, val: torch.Tensor, x: torch.Tensor, a: CSRMatrix) -> torch.Tensor:  # type: ignore[override]
        ctx.a = a
        ctx.save_for_backward(x if val.requires_grad else None)
        return _mm(a, x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        a: CSRMatrix = ctx.a
        (x,) = ctx.saved_tensors
        grad = grad.contiguous()
        grad_val = grad_x = None
        if ctx.needs_input_grad[1]:
            grad_x = _mm(a.t(), grad)
        if ctx.needs_input_grad[0]:
            grad_val = sddmm(a, grad, x).to(a.val.dtype)
        return grad_val, grad_x, None


def spmm(a: CSRMatrix, x: torch.Tensor) -> torch.Tensor:
    """``A @ X`` with gradients to ``X`` and, when ``a.val.requires_grad``, to A's values.

    X has A's dtype, or is bfloat16/float16 with a float32 A: the result then has X's
    dtype, summed in float32 (:func:`_mm_reduced`), and A's value gradient is float32.
    """
    if x.dim() != 2 or x.shape[0] != a.shape[1]:
        raise ShapeError(
            f"spmm: A is {a.shape} but X has shape {tuple(x.shape)}; X needs {a.shape[1]} rows"
        )
    if x.dtype != a.dtype and not (x.dtype in REDUCED_DTYPES and a.dtype == torch.float32):
        raise ShapeError(
            f"spmm: A has dtype {a.dtype} but X has {x.dtype}; cast one of them (16-bit X "
            "needs a float32 A)"
        )
    if x.device != a.device:
        raise ShapeError(f"spmm: A is on {a.device} but X on {x.device}; move one with .to()")
    if not (a.val.requires_grad or x.requires_grad) or not torch.is_grad_enabled():
        return _mm(a, x.contiguous())
    return _SpMM.apply(a.val, x.contiguous(), a)


def _spgemm_plain(a: CSRMatrix, b: CSRMatrix) -> CSRMatrix:
    """``A @ B`` for two sparse matrices, result in canonical CSR (no autograd)."""
    if a.nnz == 0 or b.nnz == 0:
        return CSRMatrix(
            torch.zeros(a.shape[0] + 1, dtype=torch.long, device=a.device),
            torch.zeros(0, dtype=torch.long, device=a.device),
            torch.zeros(0, dtype=a.dtype, device=a.device),
            (a.shape[0], b.shape[1]),
        )
    if a.device.type == "cpu":
        c = (a.to_scipy() @ b.to_scipy()).tocsr()
        c.sum_duplicates()
        c.sort_indices()
        return CSRMatrix(
            torch.from_numpy(c.indptr.astype("int64")),
            torch.from_numpy(c.indices.astype("int64")),
            torch.from_numpy(c.data).to(a.dtype),
            c.shape,
        )
    c = torch.sparse.mm(a.to_torch(), b.to_torch()).to_sparse_coo().coalesce()
    idx = c.indices()
    return CSRMatrix.from_coo(idx[0], idx[1], c.values(), (a.shape[0], b.shape[1]))


def _sample_at(pattern: CSRMatrix, left: CSRMatrix, right: CSRMatrix) -> torch.Tensor:
    """Values of the sparse product ``left @ right`` at the nonzeros of ``pattern``."""
    full = _spgemm_plain(left, right)
    out = torch.zeros(pattern.nnz, dtype=left.dtype, device=left.device)
    if full.nnz == 0 or pattern.nnz == 0:
        return out
    width = full.shape[1]
    key_full = full.row_indices() * width + full.col
    key_pat = pattern.row_indices() * width + pattern.col
    pos = torch.searchsorted(key_full, key_pat).clamp(max=full.nnz - 1)
    found = key_full[pos] == key_pat
    out[found] = full.val[pos[found]]
    return out


class _SpGEMMValues(torch.autograd.Function):
    """Values of ``C = A @ B`` as a function of A's and B's values (C's pattern fixed)."""

    @staticmethod
    def forward(ctx, a_val, b_val, a: CSRMatrix, b: CSRMatrix, c: CSRMatrix):  # type: ignore[override]
        ctx.a, ctx.b, ctx.c = a, b, c
        return c.val.clone()

    @staticmethod
    def backward(ctx, grad_c_val: torch.Tensor):  # type: ignore[override]
        a, b, c = ctx.a, ctx.b, ctx.c
        g = c.with_values(grad_c_val.contiguous())
        a_d, b_d = a.with_values(a.val.detach()), b.with_values(b.val.detach())
        grad_a = _sample_at(a, g, b_d.t()) if ctx.needs_input_grad[0] else None  # G B^T on A
        grad_b = _sample_at(b, a_d.t(), g) if ctx.needs_input_grad[1] else None  # A^T G on B
        return grad_a, grad_b, None, None, None


def spgemm(a: CSRMatrix, b: CSRMatrix) -> CSRMatrix:
    """Sparse ``A @ B``; differentiable in both operands' values when they require grad."""
    if a.shape[1] != b.shape[0]:
        raise ShapeError(f"spgemm: A is {a.shape} and B is {b.shape}; inner dimensions differ")
    if a.dtype != b.dtype:
        raise ShapeError(f"spgemm: dtypes differ ({a.dtype} vs {b.dtype})")
    c = _spgemm_plain(a.with_values(a.val.detach()), b.with_values(b.val.detach()))
    if not (a.val.requires_grad or b.val.requires_grad) or not torch.is_grad_enabled():
        return c
    return c.with_values(_SpGEMMValues.apply(a.val, b.val, a, b, c))


def add_self_loops(a: CSRMatrix, fill: float = 1.0) -> CSRMatrix:
    """``A + fill * I`` on the diagonal entries that are missing; existing ones are kept."""
    n = min(a.shape)
    rows = a.row_indices()
    has_diag = torch.zeros(n, dtype=torch.bool, device=a.device)
    diag_mask = rows == a.col
    has_diag[rows[diag_mask]] = True
    missing = (~has_diag).nonzero().flatten()
    fill_val = torch.full((missing.numel(),), fill, dtype=a.dtype, device=a.device)
    out = CSRMatrix.from_coo(
        torch.cat([rows, missing]),
        torch.cat([a.col, missing]),
        torch.cat([a.val, fill_val]),
        a.shape,
    )
    out.symmetric = a.symmetric
    return out


def gcn_norm(a: CSRMatrix, *, self_loops: bool = True, symmetric: bool | None = None) -> CSRMatrix:
    """Kipf & Welling's operator ``D^-1/2 (A + I) D^-1/2`` with D the row sums of A + I.

    ``symmetric`` marks the result as equal to its transpose (true for an undirected
    graph), which lets SpMM's backward skip the transpose; by default it is checked.
    """
    if a.shape[0] != a.shape[1]:
        raise ShapeError(f"gcn_norm needs a square adjacency, got {a.shape}")
    m = add_self_loops(a) if self_loops else a
    deg = m.row_sums()
    dinv = torch.where(
        deg > 0, deg.clamp(min=torch.finfo(deg.dtype).tiny).rsqrt(), torch.zeros_like(deg)
    )
    val = dinv[m.row_indices()] * m.val * dinv[m.col]
    out = CSRMatrix(m.crow, m.col, val, m.shape, _rows=m._rows)
    out.symmetric = is_symmetric(out) if symmetric is None else symmetric
    return out


def row_norm(a: CSRMatrix) -> CSRMatrix:
    """Mean aggregation operator ``D^-1 A`` (rows with no entries stay empty)."""
    deg = a.row_sums()
    inv = torch.where(
        deg != 0, 1.0 / torch.where(deg != 0, deg, torch.ones_like(deg)), torch.zeros_like(deg)
    )
    return CSRMatrix(a.crow, a.col, a.val * inv[a.row_indices()], a.shape, _rows=a._rows)


def is_symmetric(a: CSRMatrix, tol: float = 0.0) -> bool:
    """Whether ``A == A^T`` in pattern and (within ``tol``) values."""
    if a.shape[0] != a.shape[1]:
        return False
    had_transpose = a.has_cached_transpose()
    t = a.t() if not a.symmetric else a
    if t is a:
        return True
    same = torch.equal(t.crow, a.crow) and torch.equal(t.col, a.col) and (
        bool(torch.allclose(t.val, a.val, rtol=0, atol=tol))
        if tol
        else bool(torch.equal(t.val, a.val))
    )
    if same and not had_transpose:
        a.forget_transpose()  # A is its own transpose: the copy made to check it is dead
    return same
