"""The multi-head kernels: the SpMM's two forms agree (one product per head, the CPU's,
and one product by the block-diagonal operator of all heads, CUDA's), the CPU SDDMM
equals the gathered dot, and the cached int32 indices are exact."""

from __future__ import annotations

import pytest
import torch

import sparsegnn.sparse.multihead as multihead
from sparsegnn.sparse import CSRMatrix
from sparsegnn.sparse.multihead import head_blocks, heads_sddmm, heads_spmm, narrow_indices
from sparsegnn.sparse.ops import _mm


@pytest.mark.parametrize("heads", [1, 3])
def test_per_head_products_equal_the_block_operator(heads: int) -> None:
    gen = torch.Generator().manual_seed(0)
    edges = torch.randint(0, 40, (2, 300), generator=gen)
    edges[:, edges[1] == 7] = 0  # row 7 empty
    a = CSRMatrix.from_edge_index(edges, 40).to(dtype=torch.float64)
    values = torch.randn(a.nnz, heads, dtype=torch.float64, generator=gen)
    x = torch.randn(40, heads, 5, dtype=torch.float64, generator=gen)
    out = heads_spmm(a, values, x)
    block = _mm(head_blocks(a, values), x.view(-1, 5)).view(heads, 40, 5).transpose(0, 1)
    assert out.shape == (40, heads, 5)
    torch.testing.assert_close(out, block)
    dense = a.to_dense()
    for h in range(heads):
        torch.testing.assert_close(out[:, h], a.with_values(values[:, h]).to_dense() @ x[:, h])
    assert not out[7].any() and dense[7].sum() == 0


def test_heads_sddmm_equals_the_gathered_dot_across_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU SDDMM (chunks of gathered rows, summed per head) equals the dot of the
    gathered operands for any chunk size, in float64 and float32, and reads inputs of
    any layout (a head-major view here)."""
    gen = torch.Generator().manual_seed(1)
    a = CSRMatrix.from_edge_index(torch.randint(0, 30, (2, 200), generator=gen), 30)
    rows = a.row_indices()
    for dtype in (torch.float64, torch.float32):
        left = torch.randn(3, 30, 5, dtype=dtype, generator=gen).transpose(0, 1)
        right = torch.randn(30, 3, 5, dtype=dtype, generator=gen)
        want = (left[rows] * right[a.col]).sum(-1)
        for chunk in (1 << 19, 7, 1):
            monkeypatch.setattr(multihead, "_SDDMM_CHUNK_ELEMS", chunk)
            monkeypatch.setattr(multihead, "_SDDMM_PARALLEL_CHUNK_ELEMS", chunk)
            torch.testing.assert_close(heads_sddmm(a, left, right), want)


def test_narrow_indices_are_cached_per_pattern_and_exact() -> None:
    """The int32 copies equal the pattern's indices, are reused by patterns sharing the
    column tensor (``with_values``) and never served to another pattern."""
    gen = torch.Generator().manual_seed(2)
    a = CSRMatrix.from_edge_index(torch.randint(0, 20, (2, 90), generator=gen), 20)
    b = CSRMatrix.from_edge_index(torch.randint(0, 25, (2, 60), generator=gen), 25)
    crow, col, rows = narrow_indices(a)
    assert col.dtype == torch.int32
    assert torch.equal(crow.long(), a.crow) and torch.equal(col.long(), a.col)
    assert torch.equal(rows.long(), a.row_indices())
    assert narrow_indices(a.with_values(torch.rand(a.nnz)))[1] is col
    assert torch.equal(narrow_indices(b)[1].long(), b.col)
    values = torch.rand(3, a.nnz, dtype=torch.float64, generator=gen).t()  # head-major
    x = torch.randn(20, 3, 4, dtype=torch.float64, generator=gen)
    torch.testing.assert_close(heads_spmm(a, values, x), heads_spmm(a, values.contiguous(), x))
