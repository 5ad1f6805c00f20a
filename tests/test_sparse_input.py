"""Mostly-zero input features through the first layer as an SpMM (nn.sparse_input): the
same outputs and gradients as the dense product, the same state dict, and the dense
product for any other input."""

from __future__ import annotations

import pytest
import torch

from sparsegnn.nn import GCN, GraphSAGE, graph_operator
from sparsegnn.nn.sparse_input import SparseInputLinear, sparsify_input

pytestmark = pytest.mark.usefixtures("one_thread")


def _inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, int]:
    gen = torch.Generator().manual_seed(0)
    n, f = 60, 40
    x = torch.rand(n, f, generator=gen, dtype=dtype)
    x[torch.rand(n, f, generator=gen) > 0.05] = 0.0  # ~5% nonzero, as bag-of-words
    edges = torch.randint(0, n, (2, 300), generator=gen)
    return x, edges, n


@pytest.mark.parametrize("kind", ["gcn", "sage"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_same_outputs_gradients_and_state_dict(kind, dtype):
    x, edges, n = _inputs(dtype)
    op = graph_operator(edges, n, kind).to(dtype=dtype)
    torch.manual_seed(1)
    model_cls = GCN if kind == "gcn" else GraphSAGE
    dense = model_cls(x.shape[1], 16, 8, 2, dropout=0.0).to(dtype)
    sparse = model_cls(x.shape[1], 16, 8, 2, dropout=0.0).to(dtype)
    sparse.load_state_dict(dense.state_dict())
    swapped = sparsify_input(sparse, x)
    assert swapped == (1 if kind == "gcn" else 2)  # SAGE: the neighbour and root maps
    assert list(sparse.state_dict()) == list(dense.state_dict())
    out_d, out_s = dense(x, op), sparse(x, op)
    tol = {"rtol": 1e-12, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-5,
                                                                          "atol": 1e-6}
    torch.testing.assert_close(out_s, out_d, **tol)
    out_d.square().sum().backward()
    out_s.square().sum().backward()
    for (name, p_d), p_s in zip(dense.named_parameters(), sparse.parameters(), strict=True):
        torch.testing.assert_close(p_s.grad, p_d.grad, **tol, msg=name)


def test_other_inputs_take_the_dense_product():
    x, _, _ = _inputs(torch.float64)
    lin = torch.nn.Linear(x.shape[1], 5, dtype=torch.float64)
    stand_in = SparseInputLinear(lin, x)
    other = x.clone()
    other[0, 0] = 3.0  # the stand-in must not answer with its own features' product
    torch.testing.assert_close(stand_in(other), lin(other), rtol=0, atol=0)
    torch.testing.assert_close(stand_in(x[:10]), lin(x[:10]), rtol=0, atol=0)
    torch.testing.assert_close(stand_in(x), lin(x), rtol=1e-12, atol=1e-12)


def test_dense_features_are_left_alone():
    x, _, _ = _inputs(torch.float32)
    model = GCN(x.shape[1], 16, 8, 2)
    assert sparsify_input(model, x + 1.0) == 0
    assert isinstance(model.layers[0].lin, torch.nn.Linear)
