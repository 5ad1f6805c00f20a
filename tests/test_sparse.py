"""The sparse core against dense float64 references, and every documented bad input."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from sparsegnn import (
    DuplicateEntryError,
    IndexOutOfRangeError,
    InvalidValueError,
    ShapeError,
    UnsortedIndicesError,
)
from sparsegnn.sparse import (
    CSRMatrix,
    add_self_loops,
    gcn_norm,
    hstack,
    is_symmetric,
    row_norm,
    spgemm,
    spmm,
)


def random_csr(rows: int, cols: int, nnz: int, seed: int, dtype=torch.float64) -> CSRMatrix:
    g = torch.Generator().manual_seed(seed)
    r = torch.randint(0, rows, (nnz,), generator=g)
    c = torch.randint(0, cols, (nnz,), generator=g)
    v = torch.rand(nnz, generator=g, dtype=dtype) + 0.1
    return CSRMatrix.from_coo(r, c, v, (rows, cols))


def dense_of(rows, cols, vals, shape):
    d = torch.zeros(shape, dtype=torch.float64)
    d.index_put_((rows, cols), vals.double(), accumulate=True)
    return d


@pytest.mark.parametrize("seed", range(3))
def test_from_coo_matches_dense_with_duplicates_summed(seed):
    g = torch.Generator().manual_seed(seed)
    r, c = torch.randint(0, 9, (60,), generator=g), torch.randint(0, 7, (60,), generator=g)
    v = torch.rand(60, generator=g, dtype=torch.float64)
    a = CSRMatrix.from_coo(r, c, v, (9, 7))
    a.validate()
    torch.testing.assert_close(a.to_dense(), dense_of(r, c, v, (9, 7)))


def test_duplicates_max_and_error():
    r, c = torch.tensor([0, 0, 1]), torch.tensor([1, 1, 0])
    v = torch.tensor([2.0, 5.0, 1.0])
    assert CSRMatrix.from_coo(r, c, v, (2, 2), duplicates="max").to_dense()[0, 1] == 5.0
    with pytest.raises(DuplicateEntryError, match=r"\(0, 1\)"):
        CSRMatrix.from_coo(r, c, v, (2, 2), duplicates="error")


def test_edge_index_orientation_aggregates_into_targets():
    # Edge 0 -> 1: node 1 receives node 0's features.
    a = CSRMatrix.from_edge_index(torch.tensor([[0], [1]]), 2)
    x = torch.tensor([[3.0], [0.0]])
    assert spmm(a, x).flatten().tolist() == [0.0, 3.0]
    assert torch.equal(a.to_edge_index(), torch.tensor([[0], [1]]))


def test_scipy_and_pyg_roundtrip():
    m = sp.random(20, 15, density=0.2, random_state=0, format="csr", dtype=np.float64)
    a = CSRMatrix.from_scipy(m)
    np.testing.assert_allclose(a.to_scipy().toarray(), m.toarray())
    pyg_data = pytest.importorskip("torch_geometric.data")
    data = pyg_data.Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=3)
    b = CSRMatrix.from_pyg(data)
    assert b.to_dense()[1, 0] == 1 and b.to_dense()[0, 2] == 1


@pytest.mark.parametrize(
    ("build", "error", "pattern"),
    [
        (
            lambda: CSRMatrix.from_coo(torch.tensor([0, -1]), torch.tensor([0, 0]), None, (2, 2)),
            IndexOutOfRangeError,
            "negative row",
        ),
        (
            lambda: CSRMatrix.from_coo(torch.tensor([0, 1]), torch.tensor([0, 5]), None, (2, 2)),
            IndexOutOfRangeError,
            "column index 5",
        ),
        (
            lambda: CSRMatrix.from_coo(
                torch.tensor([0]), torch.tensor([0]), torch.tensor([float("nan")]), (1, 1)
            ),
            InvalidValueError,
            "finite",
        ),
        (
            lambda: CSRMatrix.from_coo(
                torch.tensor([0]), torch.tensor([0]), torch.tensor([float("inf")]), (1, 1)
            ),
            InvalidValueError,
            "finite",
        ),
        (
            lambda: CSRMatrix.from_coo(torch.tensor([0.0]), torch.tensor([0]), None, (1, 1)),
            InvalidValueError,
            "integer",
        ),
        (
            lambda: CSRMatrix.from_coo(
                torch.tensor([0]), torch.tensor([0]), torch.tensor([1], dtype=torch.int64), (1, 1)
            ),
            InvalidValueError,
            "float32 or float64",
        ),
        (
            lambda: CSRMatrix.from_coo(torch.tensor([0, 1]), torch.tensor([0]), None, (2, 2)),
            ShapeError,
            "differ in length",
        ),
        (
            lambda: CSRMatrix.from_edge_index(torch.zeros(3, 4, dtype=torch.long)),
            ShapeError,
            r"\[2, E\]",
        ),
        (
            lambda: CSRMatrix.from_csr(torch.tensor([0, 2]), torch.tensor([1, 0]), None, (1, 2)),
            UnsortedIndicesError,
            "not sorted",
        ),
        (
            lambda: CSRMatrix.from_csr(torch.tensor([0, 2]), torch.tensor([1, 1]), None, (1, 2)),
            DuplicateEntryError,
            "more than once",
        ),
        (
            lambda: CSRMatrix.from_csr(torch.tensor([0, 1, 3]), torch.tensor([0, 1]), None, (2, 2)),
            ShapeError,
            "end at nnz",
        ),
        (
            lambda: CSRMatrix.from_csr(torch.tensor([0, 1]), torch.tensor([0]), None, (2, 2)),
            ShapeError,
            "crow must have 3",
        ),
    ],
)
def test_bad_input_raises_documented_error(build, error, pattern):
    with pytest.raises(error, match=pattern):
        build()


def test_errors_are_builtin_subclasses():
    assert issubclass(IndexOutOfRangeError, IndexError)
    assert issubclass(ShapeError, ValueError)


@pytest.mark.parametrize("seed", range(3))
def test_spmm_and_gradients_match_dense(seed):
    a = random_csr(13, 11, 40, seed)
    x = torch.randn(11, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(spmm(a, x), a.to_dense() @ x)
    val = a.val.clone().requires_grad_()
    xg = x.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda v, y: spmm(a.with_values(v), y), (val, xg))


def test_spmm_gradient_to_values_only_when_asked():
    a = random_csr(6, 6, 15, 0)
    x = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    spmm(a, x).sum().backward()
    assert a.val.grad is None and x.grad is not None
    torch.testing.assert_close(x.grad, a.to_dense().T @ torch.ones(6, 3, dtype=torch.float64))


def test_spmm_rejects_mismatched_operands():
    a = random_csr(4, 3, 5, 0)
    with pytest.raises(ShapeError, match="needs 3 rows"):
        spmm(a, torch.randn(4, 2, dtype=torch.float64))
    with pytest.raises(ShapeError, match="dtype"):
        spmm(a, torch.randn(3, 2, dtype=torch.float32))


@pytest.mark.parametrize("seed", range(2))
def test_spgemm_and_gradients_match_dense(seed):
    a, b = random_csr(8, 9, 25, seed), random_csr(9, 7, 25, seed + 10)
    torch.testing.assert_close(spgemm(a, b).to_dense(), a.to_dense() @ b.to_dense())
    av, bv = a.val.clone().requires_grad_(), b.val.clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, y: spgemm(a.with_values(x), b.with_values(y)).to_dense(), (av, bv)
    )


def test_transpose_is_cached_and_correct():
    a = random_csr(7, 5, 20, 3)
    t = a.t()
    assert t is a.t()
    torch.testing.assert_close(t.to_dense(), a.to_dense().T)
    torch.testing.assert_close(t.val, a.val[a.transpose_perm()])


def test_unit_valued_matrix_takes_unweighted_path_with_same_result():
    a = random_csr(7, 5, 20, 3)
    unit = CSRMatrix.from_csr(a.crow, a.col, None, a.shape)
    assert unit.unit_values and unit.t().unit_values and unit.to(dtype=torch.float64).unit_values
    assert not unit.with_values(unit.val * 2).unit_values
    x = torch.randn(5, 4, requires_grad=True)
    pattern = (a.to_dense() != 0).float()
    out = spmm(unit, x)
    torch.testing.assert_close(out, pattern @ x.detach())
    out.sum().backward()
    torch.testing.assert_close(x.grad, pattern.sum(0, keepdim=True).T.expand(5, 4))
    doubled = spmm(unit.with_values(unit.val * 2), x.detach())
    torch.testing.assert_close(doubled, 2 * pattern @ x.detach())


def test_gcn_norm_matches_dense_formula():
    ei = torch.tensor([[0, 1, 1, 2, 3, 0], [1, 0, 2, 1, 0, 3]])
    a = CSRMatrix.from_edge_index(ei, 5).to(dtype=torch.float64)
    dense = a.to_dense() + torch.eye(5, dtype=torch.float64)
    dinv = dense.sum(1).rsqrt()
    expected = dinv[:, None] * dense * dinv[None, :]
    n = gcn_norm(a)
    torch.testing.assert_close(n.to_dense(), expected)
    assert n.symmetric


def test_self_loops_keep_existing_weights():
    a = CSRMatrix.from_coo(
        torch.tensor([0, 1]), torch.tensor([0, 0]), torch.tensor([3.0, 1.0]), (2, 2)
    )
    d = add_self_loops(a).to_dense()
    assert d[0, 0] == 3.0 and d[1, 1] == 1.0


def test_row_norm_is_mean_and_keeps_empty_rows_empty():
    a = random_csr(6, 6, 12, 1)
    d = a.to_dense()
    s = d.sum(1, keepdim=True)
    expected = torch.where(
        s > 0, d / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(d)
    )
    torch.testing.assert_close(row_norm(a).to_dense(), expected)


def test_row_and_column_extraction():
    a = random_csr(10, 8, 35, 4)
    d = a.to_dense()
    rows, cols = torch.tensor([7, 2, 2, 0]), torch.tensor([5, 1, 6])
    torch.testing.assert_close(a.select_rows(rows).to_dense(), d[rows])
    torch.testing.assert_close(a.select_cols(cols).to_dense(), d[:, cols])
    torch.testing.assert_close(a.submatrix(rows, cols).to_dense(), d[rows][:, cols])
    with pytest.raises(DuplicateEntryError):
        a.select_cols(torch.tensor([1, 1]))
    with pytest.raises(IndexOutOfRangeError):
        a.select_rows(torch.tensor([10]))


def test_permute_is_p_a_pt():
    a = random_csr(6, 6, 14, 5)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    d = a.to_dense()
    torch.testing.assert_close(a.permute(perm).to_dense(), d[perm][:, perm])


def test_float32_and_empty_matrices():
    a = CSRMatrix.from_coo(
        torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long), None, (3, 4)
    )
    assert a.nnz == 0 and a.dtype == torch.float32
    assert spmm(a, torch.ones(4, 2)).abs().sum() == 0
    assert spgemm(a, CSRMatrix.identity(4)).nnz == 0


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_spmm_on_cuda_matches_cpu():
    a = random_csr(50, 40, 200, 0, torch.float32)
    x = torch.randn(40, 8)
    torch.testing.assert_close(spmm(a.to("cuda"), x.cuda()).cpu(), spmm(a, x))


def test_hstack_puts_tiles_side_by_side():
    """One product with the stacked tiles equals the sum of the tiles' products, and the
    stacked matrix is canonical (sorted, unique columns per row)."""
    rng = np.random.default_rng(3)
    parts = [sp.random(6, w, density=0.4, format="csr", random_state=rng) for w in (4, 0, 3, 5)]
    tiles = [CSRMatrix.from_scipy(m) for m in parts]
    stacked = hstack(tiles)
    stacked.validate()
    np.testing.assert_allclose(stacked.to_dense().numpy(), sp.hstack(parts).toarray())
    hs = [torch.randn(m.shape[1], 3, dtype=torch.float64) for m in parts]
    want = sum(t.matmul(h) for t, h in zip(tiles, hs, strict=True))
    assert torch.allclose(stacked.matmul(torch.cat(hs)), want)
    with pytest.raises(ShapeError, match="one row count"):
        hstack([tiles[0], CSRMatrix.from_scipy(sp.random(5, 2, format="csr"))])


def test_symmetry_check_keeps_no_transpose_of_a_matrix_equal_to_it() -> None:
    """gcn_norm checks an undirected graph's operator for symmetry by transposing it; the
    transpose (indices, values, row ids, permutation: about 30 bytes a nonzero) must not
    stay cached on a matrix that is its own transpose, while a directed one keeps it for
    the backward pass."""
    r = torch.tensor([0, 1, 1, 2, 2, 3])
    c = torch.tensor([1, 0, 2, 1, 3, 2])
    sym = CSRMatrix.from_coo(r, c, torch.ones(6), (4, 4))
    assert is_symmetric(sym) and not sym.has_cached_transpose()
    norm = gcn_norm(sym)
    assert norm.symmetric and not norm.has_cached_transpose()
    directed = CSRMatrix.from_coo(r[::2], c[::2], torch.ones(3), (4, 4))
    assert not is_symmetric(directed) and directed.has_cached_transpose()
    assert torch.equal(directed.t().to_dense(), directed.to_dense().T)
