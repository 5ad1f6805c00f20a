"""The multi-head SpMM's two forms agree: one product per head (the CPU's) and one
product by the block-diagonal operator of all heads (CUDA's), in float64."""

from __future__ import annotations

import pytest
import torch

from sparsegnn.sparse import CSRMatrix
from sparsegnn.sparse.multihead import head_blocks, heads_spmm
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
