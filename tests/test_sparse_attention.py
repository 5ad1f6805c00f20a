"""The attention primitives (SDDMM, edge softmax, SpMM with learnt values) against dense
references and ``torch.autograd.gradcheck`` in float64, one head and several."""

from __future__ import annotations

import pytest
import torch

import sparsegnn.sparse.edge_kernels as edge_kernels
from sparsegnn.errors import ShapeError
from sparsegnn.sparse import (
    CSRMatrix,
    edge_softmax,
    sddmm_add,
    sddmm_dot,
    sddmm_leaky,
    spmm_values,
)

pytestmark = pytest.mark.usefixtures("one_thread")
F64 = torch.float64


def pattern(rows: int, cols: int, seed: int, empty_row: bool = True,
            symmetric: bool = False) -> CSRMatrix:
    """A random pattern; the last row empty unless told otherwise."""
    gen = torch.Generator().manual_seed(seed)
    dense = torch.rand(rows, cols, generator=gen) < 0.4
    if symmetric:
        dense = dense | dense.T
    if empty_row:
        dense[-1] = False
        if symmetric:
            dense[:, -1] = False
    r, c = dense.nonzero().T
    return CSRMatrix.from_coo(r, c, torch.ones(r.numel(), dtype=F64), (rows, cols),
                              symmetric=symmetric)


def mask(a: CSRMatrix) -> torch.Tensor:
    out = torch.zeros(a.shape, dtype=torch.bool)
    out[a.row_indices(), a.col] = True
    return out


@pytest.mark.parametrize("heads", [None, 3])
def test_sddmm_dot_matches_dense_and_gradcheck(heads: int | None) -> None:
    a = pattern(6, 5, 0)
    shape = (3,) if heads is None else (heads, 4)
    left = torch.randn(6, *shape, dtype=F64, requires_grad=True)
    right = torch.randn(5, *shape, dtype=F64, requires_grad=True)
    out = sddmm_dot(a, left, right)
    full = torch.einsum("i...f,j...f->ij...", left, right)
    torch.testing.assert_close(out, full[a.row_indices(), a.col])
    assert torch.autograd.gradcheck(lambda u, v: sddmm_dot(a, u, v), (left, right))


def test_sddmm_add_and_leaky_match_dense_and_gradcheck() -> None:
    a = pattern(7, 4, 1)
    u = torch.randn(7, 2, dtype=F64, requires_grad=True)
    v = torch.randn(4, 2, dtype=F64, requires_grad=True)
    torch.testing.assert_close(sddmm_add(a, u, v), u[a.row_indices()] + v[a.col])
    assert torch.autograd.gradcheck(lambda p, q: sddmm_add(a, p, q), (u, v))
    u3 = torch.randn(7, 2, 3, dtype=F64, requires_grad=True)
    v3 = torch.randn(4, 2, 3, dtype=F64, requires_grad=True)
    att = torch.randn(2, 3, dtype=F64, requires_grad=True)
    ref = (torch.nn.functional.leaky_relu(u3[a.row_indices()] + v3[a.col], 0.1) * att).sum(-1)
    torch.testing.assert_close(sddmm_leaky(a, u3, v3, att, 0.1), ref)
    assert torch.autograd.gradcheck(lambda p, q, w: sddmm_leaky(a, p, q, w, 0.1), (u3, v3, att))


def test_chunked_kernels_equal_one_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunk boundaries change nothing: a chunk of one edge gives the same values and
    gradients as the whole pattern at once."""
    a = pattern(9, 9, 2)
    u = torch.randn(9, 2, 3, dtype=F64, requires_grad=True)
    v = torch.randn(9, 2, 3, dtype=F64, requires_grad=True)
    att = torch.randn(2, 3, dtype=F64, requires_grad=True)

    def run() -> list[torch.Tensor]:
        out = sddmm_leaky(a, u, v, att) + sddmm_dot(a, u, v)
        return [out, *torch.autograd.grad(out.square().sum(), (u, v, att))]

    whole = run()
    monkeypatch.setattr(edge_kernels, "_EDGE_CHUNK_ELEMS", 1)
    monkeypatch.setattr("sparsegnn.sparse.ops._SDDMM_CHUNK_ELEMS", 1)
    monkeypatch.setattr("sparsegnn.sparse.multihead._SDDMM_CHUNK_ELEMS", 1)
    monkeypatch.setattr("sparsegnn.sparse.multihead._SDDMM_PARALLEL_CHUNK_ELEMS", 1)
    for got, want in zip(run(), whole, strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("heads", [None, 2])
def test_edge_softmax_is_a_row_softmax(heads: int | None) -> None:
    a = pattern(6, 6, 3)
    shape = (a.nnz,) if heads is None else (a.nnz, heads)
    scores = torch.randn(*shape, dtype=F64, requires_grad=True)
    alpha = edge_softmax(a, scores)
    dense = torch.full((6, 6, *shape[1:]), float("-inf"), dtype=F64)
    dense[a.row_indices(), a.col] = scores
    ref = torch.softmax(dense, dim=1).nan_to_num()  # the empty row: no entries at all
    torch.testing.assert_close(alpha, ref[a.row_indices(), a.col])
    assert torch.autograd.gradcheck(lambda s: edge_softmax(a, s), (scores,))


def test_edge_softmax_is_stable_and_handles_empty_patterns() -> None:
    """Scores near float64's limit would overflow a plain exp; the row max keeps them
    finite. A pattern without entries gives no values and no error."""
    a = pattern(5, 5, 4)
    scores = torch.randn(a.nnz, 2, dtype=F64) + 700.0
    alpha = edge_softmax(a, scores)
    assert torch.isfinite(alpha).all()
    sums = torch.zeros(5, 2, dtype=F64).index_add_(0, a.row_indices(), alpha)
    torch.testing.assert_close(sums[:-1], torch.ones(4, 2, dtype=F64))
    empty = CSRMatrix.from_coo(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long),
                               torch.zeros(0, dtype=F64), (3, 3))
    assert edge_softmax(empty, torch.zeros(0, 4, dtype=F64)).shape == (0, 4)


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("heads", [None, 1, 3])
def test_spmm_values_matches_dense_and_gradcheck(heads: int | None, symmetric: bool) -> None:
    """Gradients flow to the per-edge values and to x; a pattern marked symmetric
    still transposes non-symmetric per-edge values correctly."""
    rows, cols = (6, 6) if symmetric else (6, 4)
    a = pattern(rows, cols, 5, symmetric=symmetric)
    vshape = (a.nnz,) if heads is None else (a.nnz, heads)
    xshape = (cols, 3) if heads is None else (cols, heads, 3)
    values = torch.randn(*vshape, dtype=F64, requires_grad=True)
    x = torch.randn(*xshape, dtype=F64, requires_grad=True)
    dense = torch.zeros(rows, cols, *vshape[1:], dtype=F64)
    dense[a.row_indices(), a.col] = values.detach()
    torch.testing.assert_close(spmm_values(a, values, x),
                               torch.einsum("ij...,j...f->i...f", dense, x.detach()))
    assert torch.autograd.gradcheck(lambda w, h: spmm_values(a, w, h), (values, x))


def test_float32_products_use_the_fast_kernel_and_agree() -> None:
    a = pattern(8, 8, 6)
    values = torch.rand(a.nnz, 2)
    x = torch.randn(8, 2, 5)
    want = spmm_values(a, values.double(), x.double())
    torch.testing.assert_close(spmm_values(a, values, x).double(), want, rtol=1e-5, atol=1e-5)


def test_shape_errors_name_the_problem() -> None:
    a = pattern(4, 3, 7)
    with pytest.raises(ShapeError, match="sddmm_dot"):
        sddmm_dot(a, torch.randn(3, 2), torch.randn(3, 2))
    with pytest.raises(ShapeError, match="spmm_values"):
        spmm_values(a, torch.randn(a.nnz + 1, 2), torch.randn(3, 2, 4))
    with pytest.raises(ShapeError, match="edge_softmax"):
        edge_softmax(a, torch.randn(a.nnz + 1))
    with pytest.raises(ShapeError, match="sddmm_leaky"):
        sddmm_leaky(a, torch.randn(4, 2, 3), torch.randn(3, 2, 3), torch.randn(3, 2))


def test_attention_composes_end_to_end() -> None:
    """SDDMM -> softmax -> SpMM, gradchecked as one function of the node features."""
    a = pattern(5, 5, 8)
    q = torch.randn(5, 2, 3, dtype=F64, requires_grad=True)
    k = torch.randn(5, 2, 3, dtype=F64, requires_grad=True)

    def layer(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return spmm_values(a, edge_softmax(a, sddmm_dot(a, q, k)), k)

    assert torch.autograd.gradcheck(layer, (q, k))
    assert mask(a)[-1].sum() == 0 and layer(q, k)[-1].abs().sum() == 0
