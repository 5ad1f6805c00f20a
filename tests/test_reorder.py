"""Locality reorderings: valid permutations, P A P^T, and results back in the caller's order."""

from __future__ import annotations

import pytest
import torch

from sparsegnn.data.generators import rmat, sbm
from sparsegnn.errors import ShapeError
from sparsegnn.nn import GCN
from sparsegnn.sparse import CSRMatrix, gcn_norm, spmm
from sparsegnn.sparse.reorder import (
    METHODS,
    Reordered,
    Reordering,
    community_order,
    degree_order,
    inverse_permutation,
    is_permutation,
    label_propagation,
    locality_order,
    rcm_order,
)


def sbm_adj(n: int = 600, blocks: int = 6, seed: int = 0) -> CSRMatrix:
    g = sbm(n, blocks, 10.0, mixing=0.05, num_features=0, seed=seed)
    return CSRMatrix.from_edge_index(g.edge_index, g.num_nodes).to(dtype=torch.float64)


def directed_adj(n: int = 50, nnz: int = 200, seed: int = 0) -> CSRMatrix:
    g = torch.Generator().manual_seed(seed)
    r, c = torch.randint(0, n, (nnz,), generator=g), torch.randint(0, n, (nnz,), generator=g)
    v = torch.rand(nnz, generator=g, dtype=torch.float64) + 0.1
    return CSRMatrix.from_coo(r, c, v, (n, n))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("make", [sbm_adj, directed_adj])
def test_every_method_gives_a_permutation(method, make):
    a = make()
    perm = locality_order(a, method)
    assert is_permutation(perm, a.shape[0])


def test_is_permutation_rejects_repeats_and_wrong_length():
    assert not is_permutation(torch.tensor([0, 0, 2]), 3)
    assert not is_permutation(torch.tensor([0, 1]), 3)
    with pytest.raises(ShapeError):
        Reordering.from_perm(torch.tensor([1, 1, 0]))


@pytest.mark.parametrize("method", ["degree", "rcm", "community"])
def test_permuted_matrix_is_p_a_pt(method):
    a = directed_adj(seed=3)
    b, ordering = _reorder(a, method)
    p = torch.eye(a.shape[0], dtype=torch.float64)[ordering.perm]
    torch.testing.assert_close(b.to_dense(), p @ a.to_dense() @ p.T)


def _reorder(a: CSRMatrix, method: str) -> tuple[CSRMatrix, Reordering]:
    ordering = Reordering.from_perm(locality_order(a, method), method)
    return ordering.apply(a), ordering


# float32 runs the embedding-bag kernel on x86 CPUs; float64 MKL's kernel below width
# 64 and ATen's reduce kernel from 64 on.
DTYPES = [torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", [1, 64])
def test_spmm_in_new_order_equals_original_after_unpermuting(width, dtype):
    a = gcn_norm(sbm_adj(seed=1)).to(dtype=dtype)
    b, ordering = _reorder(a, "community")
    x = torch.randn(a.shape[0], width, dtype=dtype)
    out = ordering.to_old(spmm(b, ordering.to_new(x)))
    torch.testing.assert_close(out, a.to_dense() @ x)
    assert b.symmetric == a.symmetric


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", [3, 64])
def test_reordered_operator_keeps_caller_order_and_gradients(width, dtype):
    a = directed_adj(seed=4).to(dtype=dtype)  # has empty rows and columns
    op = Reordered(a, "rcm")
    assert op.shape == a.shape
    x = torch.randn(a.shape[0], width, dtype=dtype, requires_grad=True)
    w = torch.randn(a.shape[0], width, dtype=dtype)
    out = op.matmul(x)
    torch.testing.assert_close(out, a.to_dense() @ x)
    (grad,) = torch.autograd.grad((out * w).sum(), x)
    torch.testing.assert_close(grad, a.to_dense().T @ w)


@pytest.mark.parametrize("dtype", DTYPES)
def test_spmm_rectangular_with_empty_rows_and_value_gradients(dtype):
    r, c = torch.tensor([1, 1, 4, 4, 4]), torch.tensor([0, 6, 2, 3, 6])
    # Rows 0, 2, 3, 5 and 6 are empty, and so are the trailing ones.
    a = CSRMatrix.from_coo(r, c, torch.rand(5, dtype=dtype) + 0.5, (7, 8))
    val = a.val.clone().requires_grad_()
    x = torch.randn(8, 70, dtype=dtype, requires_grad=True)
    out = spmm(a.with_values(val), x)
    torch.testing.assert_close(out, a.to_dense() @ x)
    w = torch.randn(7, 70, dtype=dtype)
    grad_val, grad_x = torch.autograd.grad((out * w).sum(), (val, x))
    torch.testing.assert_close(grad_x, a.to_dense().T @ w)
    torch.testing.assert_close(grad_val, (w[r] * x.detach()[c]).sum(1))


def test_reordered_operator_passes_gradcheck():
    op = Reordered(directed_adj(n=12, nnz=40, seed=5), "community")
    x = torch.randn(12, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(op.matmul, (x,))


def test_gcn_trained_in_new_order_gives_same_logits_in_caller_order():
    a = gcn_norm(sbm_adj(seed=2))
    b, ordering = _reorder(a, "community")
    x = torch.randn(a.shape[0], 8, dtype=torch.float64)
    torch.manual_seed(0)
    model = GCN(8, 16, 3, dropout=0.0).double().eval()
    torch.testing.assert_close(ordering.to_old(model(ordering.to_new(x), b)), model(x, a))


def test_inverse_and_edge_index_relabelling():
    perm = torch.tensor([2, 0, 3, 1])
    ordering = Reordering.from_perm(perm)
    assert torch.equal(inverse_permutation(perm)[perm], torch.arange(4))
    edge_index = torch.tensor([[2, 3], [0, 1]])
    assert torch.equal(ordering.edge_index_to_new(edge_index), torch.tensor([[0, 2], [1, 3]]))


def test_degree_order_puts_hubs_first():
    a = CSRMatrix.from_edge_index(rmat(8, 8, seed=0).edge_index, 256)
    deg = a.row_degrees()[degree_order(a)]
    assert bool((deg[:-1] >= deg[1:]).all())


def test_label_propagation_recovers_planted_blocks():
    g = sbm(400, 4, 20.0, mixing=0.02, num_features=0, seed=5)
    labels = torch.from_numpy(label_propagation(CSRMatrix.from_edge_index(g.edge_index, 400)))
    # Each planted block is (almost) one community: its most common label covers it.
    for k in range(4):
        members = labels[g.y == k]
        assert torch.mode(members).values.eq(members).float().mean() > 0.9


def test_community_order_makes_blocks_contiguous():
    g = sbm(400, 4, 20.0, mixing=0.02, num_features=0, seed=6)
    perm = community_order(CSRMatrix.from_edge_index(g.edge_index, 400))
    blocks = g.y[perm]
    assert int((blocks[1:] != blocks[:-1]).sum()) < 20  # 3 boundaries plus a few strays


def test_rcm_reduces_bandwidth_of_a_shuffled_path():
    n = 200
    shuffle = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    path = torch.stack([shuffle[:-1], shuffle[1:]])
    a = CSRMatrix.from_edge_index(torch.cat([path, path.flip(0)], 1), n)
    b = a.permute(rcm_order(a))
    assert int((b.row_indices() - b.col).abs().max()) == 1


def test_errors():
    rect = CSRMatrix.from_coo(torch.tensor([0]), torch.tensor([1]), None, (2, 3))
    with pytest.raises(ShapeError, match="square"):
        degree_order(rect)
    with pytest.raises(ValueError, match="unknown reordering"):
        locality_order(sbm_adj(), "metis")  # type: ignore[arg-type]
