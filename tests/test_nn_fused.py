"""The models' dropout and fused bias + ReLU + dropout against the unfused torch ops:
same values, same random draws (``mask="bernoulli"``), same gradients; the cheaper
``bytes`` mask's rate and scale; gradcheck in float64."""

import pytest
import torch
from torch.nn import functional as F

from sparsegnn.data.generators import sbm
from sparsegnn.errors import InvalidValueError
from sparsegnn.nn import GCN, GraphSAGE
from sparsegnn.nn import dropout as dropout_module
from sparsegnn.nn.dropout import bias_relu_dropout, dropout
from sparsegnn.sparse import CSRMatrix, gcn_norm, row_norm
from sparsegnn.train.fullgraph import TrainConfig, build_model


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """Chunks of 64 elements, so that small tensors cross many chunk boundaries."""
    monkeypatch.setattr(dropout_module, "_CHUNK_ELEMS", 64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("p", [0.5, 0.3])
def test_dropout_equals_f_dropout_draw_for_draw(dtype, p):
    x = torch.randn(77, 13).to(dtype)
    torch.manual_seed(5)
    want = F.dropout(x, p)
    torch.manual_seed(5)
    got = dropout(x, p)
    assert torch.equal(got, want)
    torch.manual_seed(5)
    F.dropout(x, p)
    after_ref = torch.rand(4)
    torch.manual_seed(5)
    dropout(x, p)
    assert torch.equal(torch.rand(4), after_ref)  # ... by the same number of draws


@pytest.mark.parametrize("p", [0.5, 0.3])
def test_bias_relu_dropout_equals_unfused_values_and_gradients(p):
    z0 = torch.randn(90, 11, dtype=torch.float64)
    b0 = torch.randn(11, dtype=torch.float64)
    g = torch.randn(90, 11, dtype=torch.float64)
    z_ref, b_ref = z0.clone().requires_grad_(), b0.clone().requires_grad_()
    torch.manual_seed(2)
    want = F.dropout(F.relu(z_ref * 1.0 + b_ref), p)
    want.backward(g)
    z, b = z0.clone().requires_grad_(), b0.clone().requires_grad_()
    torch.manual_seed(2)
    got = bias_relu_dropout(z * 1.0, b, p)
    got.backward(g)
    assert torch.equal(got, want)
    assert torch.equal(z.grad, z_ref.grad) and torch.equal(b.grad, b_ref.grad)


def test_bias_relu_dropout_overwrites_its_input_and_eval_is_bias_relu():
    z = torch.randn(20, 4)
    b = torch.randn(4)
    want = F.relu(z + b)
    out = bias_relu_dropout(z, b, 0.5, training=False)
    assert out.data_ptr() == z.data_ptr() and torch.equal(out, want)
    assert torch.equal(bias_relu_dropout(torch.randn(3, 2), None, 1.0), torch.zeros(3, 2))


@pytest.mark.parametrize("mask", ["bernoulli", "bytes"])
def test_gradcheck_float64(mask):
    z = torch.randn(40, 6, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, requires_grad=True)
    x = torch.randn(40, 6, dtype=torch.float64, requires_grad=True)

    def fused(z, b):
        torch.manual_seed(9)  # the same mask at every evaluation
        return bias_relu_dropout(z * 1.0, b, 0.5, mask=mask)

    def plain(x):
        torch.manual_seed(9)
        return dropout(x, 0.5, mask=mask)

    assert torch.autograd.gradcheck(fused, (z, b))
    assert torch.autograd.gradcheck(plain, (x,))


@pytest.mark.parametrize(("p", "kept"), [(0.5, 0.5), (0.1, 230 / 256), (0.8, 51 / 256)])
def test_bytes_mask_rate_and_unbiased_scale(p, kept):
    """The byte mask keeps at the rounded rate and scales by its inverse exactly."""
    torch.manual_seed(0)
    y = dropout(torch.ones(1000, 400), p, mask="bytes")
    se = (kept * (1 - kept) / y.numel()) ** 0.5
    assert abs(float((y != 0).double().mean()) - kept) < 5 * se
    assert torch.equal(y.unique(), torch.tensor([0.0, 1 / kept], dtype=torch.float32))


def _reference_forward(model, x, op):
    """The models' forward before fusion: F.dropout, layer, F.relu between layers."""
    for i, layer in enumerate(model.layers):
        x = F.dropout(x, model.dropout, model.training)
        x = layer(x, op)
        if i < len(model.layers) - 1:
            x = F.relu(x)
    return x


@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_models_equal_the_unfused_forward_and_backward(kind):
    g = sbm(120, 3, 6.0, num_features=10, seed=1)
    a = CSRMatrix.from_edge_index(g.edge_index, g.num_nodes).to(dtype=torch.float64)
    op = gcn_norm(a) if kind == "gcn" else row_norm(a)
    torch.manual_seed(0)
    cls = GCN if kind == "gcn" else GraphSAGE
    model = cls(10, 10, 4, num_layers=3, dropout=0.5, dropout_mask="bernoulli").double()
    x = g.x.double()
    torch.manual_seed(4)
    want = _reference_forward(model, x, op)
    want.square().sum().backward()
    want_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch.manual_seed(4)
    got = model(x, op)
    got.square().sum().backward()
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    for p, w in zip(model.parameters(), want_grads, strict=True):
        assert torch.allclose(p.grad, w, rtol=1e-10, atol=1e-12)


def test_model_rejects_unknown_mask():
    with pytest.raises(ValueError, match="dropout_mask"):
        GCN(4, 4, 2, dropout_mask="bits")  # type: ignore[arg-type]


class _KeepsProduct:
    """An operator that is not a CSRMatrix and holds on to what it returned."""

    def __init__(self, dense: torch.Tensor):
        self.dense, self.shape, self.last = dense, tuple(dense.shape), None

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        self.last = self.dense @ x
        return self.last


@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_fused_epilogue_never_writes_into_another_operators_product(kind):
    torch.manual_seed(0)
    dense = torch.rand(30, 30, dtype=torch.float64)
    op = _KeepsProduct(dense)
    conv = (GCN if kind == "gcn" else GraphSAGE)(8, 4, 2, num_layers=2, dropout=0.5).double()
    layer = conv.layers[0]
    if kind == "sage":
        layer.lin_r = None  # the neighbour product is then the pre-activation itself
    x = torch.randn(30, 8, dtype=torch.float64)
    out = layer(x, op, relu_dropout=0.5)
    assert torch.equal(op.last, dense @ F.linear(x, layer.lin_l.weight) if kind == "sage"
                       else dense @ layer.lin(x))
    assert out.data_ptr() != op.last.data_ptr()


@pytest.mark.parametrize(("fin", "fout", "products"), [(8, 8, 1), (8, 12, 1), (8, 4, 2)])
def test_first_layer_runs_the_backward_spmm_only_when_it_maps_first(monkeypatch, fin, fout,
                                                                    products):
    """Raw features need no gradient: a layer that aggregates first (equal or wider output)
    multiplies by A once per step; one that maps first needs A^T G for W's gradient."""
    from sparsegnn.nn import GCNConv
    from sparsegnn.sparse import ops

    calls = []
    real = ops._mm
    monkeypatch.setattr(ops, "_mm", lambda a, x: calls.append(x.shape[1]) or real(a, x))
    g = sbm(60, 2, 5.0, num_features=fin, seed=3)
    op = gcn_norm(CSRMatrix.from_edge_index(g.edge_index, g.num_nodes))
    conv = GCNConv(fin, fout)
    conv(g.x, op).square().sum().backward()
    assert len(calls) == products
    assert conv.lin.weight.grad is not None


@pytest.mark.parametrize("kind", ["bernoulli", "bytes"])
def test_train_config_mask_reaches_the_model(kind):
    cfg = TrainConfig(model="sage", dropout_mask=kind)
    assert build_model(cfg, 5, 3).dropout_mask == kind


def test_models_and_training_default_to_the_byte_mask():
    assert GCN(4, 4, 2).dropout_mask == "bytes"
    assert TrainConfig().dropout_mask == "bytes"
    with pytest.raises(InvalidValueError, match="dropout_mask"):
        TrainConfig(dropout_mask="bits")  # type: ignore[arg-type]
