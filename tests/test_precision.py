"""Reduced precision (issue 26.3): 16-bit feature storage with float32 accumulation in
SpMM, 16-bit activations around float32 weights in the layers, ``precision="bf16"``
full-graph training and the ``--precision`` flag. No wall time is asserted."""

from __future__ import annotations

import json

import pytest
import torch

from sparsegnn.data import sbm
from sparsegnn.errors import InvalidValueError, ShapeError
from sparsegnn.nn import GCN, GraphSAGE
from sparsegnn.sparse import CSRMatrix, gcn_norm, row_norm, spmm
from sparsegnn.sparse import ops as sparse_ops
from sparsegnn.train import TrainConfig, train_single

pytestmark = pytest.mark.usefixtures("one_thread")

# bfloat16 keeps 8 significant bits: one rounding is at most 2^-9 relative.
_BF16_ULP = 2.0**-8


def _graph(n: int = 400, deg: int = 9, seed: int = 0) -> CSRMatrix:
    g = torch.Generator().manual_seed(seed)
    edges = torch.randint(0, n, (2, n * deg), generator=g)
    return gcn_norm(CSRMatrix.from_edge_index(edges, n))


def _bound(a: CSRMatrix, x: torch.Tensor) -> torch.Tensor:
    """``|A| |X|`` in float64: the scale of each output's rounding error."""
    return a.to(dtype=torch.float64).to_torch().abs() @ x.double().abs()


def _exact(a: CSRMatrix, x: torch.Tensor) -> torch.Tensor:
    return a.to(dtype=torch.float64).to_torch() @ x.double()


@pytest.mark.parametrize("fbgemm", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_spmm_within_rounding_of_the_float64_product(
    fbgemm: bool, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against the float64 product of the same (rounded) inputs the only errors left are
    the weights' rounding and one rounding per output; a 16-bit accumulation would be
    far outside this on rows of degree ~20."""
    if not fbgemm:  # the non-x86 CPU path: ATen's reduce kernel
        monkeypatch.setattr(sparse_ops, "_has_fbgemm", lambda: False)
    a = _graph()
    x = torch.randn(400, 24).to(dtype)
    out = spmm(a, x)
    assert out.dtype == dtype and out.shape == (400, 24)
    err = (out.double() - _exact(a, x)).abs()
    assert bool((err <= 2 * _BF16_ULP * _bound(a, x) + 1e-30).all())


def test_reduced_spmm_close_to_float32() -> None:
    a = _graph(seed=1)
    x = torch.randn(400, 16)
    ref = spmm(a, x)
    out = spmm(a, x.bfloat16()).float()
    assert torch.allclose(out, ref, rtol=2e-2, atol=2e-2 * float(ref.abs().max()))


@pytest.mark.parametrize("unit", [True, False])
def test_row_sums_accumulate_in_float32(unit: bool) -> None:
    """4096 ones: a bfloat16 running sum stops at 256 (256 + 1 rounds to 256)."""
    n = 4096
    crow, col = torch.tensor([0, n]), torch.arange(n)
    a = CSRMatrix.from_csr(crow, col, None if unit else torch.ones(n), (1, n))
    out = spmm(a, torch.ones(n, 8, dtype=torch.bfloat16))
    assert torch.equal(out, torch.full((1, 8), 4096.0, dtype=torch.bfloat16))


def test_gradients_flow_to_16bit_features_and_float32_values() -> None:
    a = _graph(seed=2)
    a.val.requires_grad_()
    x = torch.randn(400, 8, dtype=torch.bfloat16, requires_grad=True)
    grad_out = torch.randn(400, 8)
    spmm(a, x).float().backward(grad_out)
    assert x.grad is not None and x.grad.dtype == torch.bfloat16
    assert a.val.grad is not None and a.val.grad.dtype == torch.float32
    ref_x = _exact(a.t(), grad_out.bfloat16())  # A^T G
    err = (x.grad.double() - ref_x).abs()
    assert bool((err <= 2 * _BF16_ULP * _bound(a.t(), grad_out) + 1e-30).all())
    rows = a.row_indices()
    ref_val = (grad_out.double()[rows] * x.detach().double()[a.col]).sum(1)
    assert torch.allclose(a.val.grad.double(), ref_val, rtol=3e-2, atol=3e-2)


def test_only_a_float32_operator_takes_16bit_features() -> None:
    a = _graph().to(dtype=torch.float64)
    with pytest.raises(ShapeError, match="float32 A"):
        spmm(a, torch.ones(400, 2, dtype=torch.bfloat16))


def test_cast_values_follow_in_place_updates() -> None:
    a = _graph(seed=3)
    first = a.values_as(torch.bfloat16)
    assert a.values_as(torch.bfloat16) is first  # cached
    with torch.no_grad():
        a.val.mul_(2.0)
    assert torch.equal(a.values_as(torch.bfloat16), (a.val * 1).bfloat16())
    assert a.values_as(torch.float32) is not None


@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_models_keep_16bit_activations_and_float32_weights(kind: str) -> None:
    torch.manual_seed(0)
    a = _graph(seed=4)
    op = a if kind == "gcn" else row_norm(a)
    model = (GCN(32, 16, 5) if kind == "gcn" else GraphSAGE(32, 16, 5)).eval()
    x = torch.randn(400, 32)
    ref = model(x, op).detach()
    out = model(x.bfloat16(), op)
    assert out.dtype == torch.float32  # logits leave the model in float32 for the loss
    assert torch.allclose(out.detach(), ref, rtol=0, atol=0.05 * float(ref.abs().max()))
    out.sum().backward()  # through the 16-bit activations to the float32 weights
    for p in model.parameters():
        assert p.dtype == torch.float32 and p.grad is not None and p.grad.dtype == torch.float32


def test_layers_take_an_edge_index_with_16bit_features() -> None:
    """PyG interop: the operator built from an ``edge_index`` is float32 whatever the
    features' storage."""
    from sparsegnn.nn import GCNConv, SAGEConv

    torch.manual_seed(0)
    edges = torch.randint(0, 50, (2, 300))
    x = torch.randn(50, 8)
    for layer in (GCNConv(8, 4), SAGEConv(8, 4)):
        ref = layer(x, edges).detach()
        out = layer(x.bfloat16(), edges)
        assert out.dtype == torch.bfloat16
        assert torch.allclose(out.float(), ref, rtol=0, atol=0.05 * float(ref.abs().max()))


def test_bf16_training_halves_feature_bytes_and_learns() -> None:
    graph = sbm(300, 4, 8, seed=1, num_features=16)
    runs = {}
    for precision in ("fp32", "bf16"):
        cfg = TrainConfig(epochs=60, patience=60, progress=False, seed=0, precision=precision)
        runs[precision] = train_single(graph, cfg)[1]
    fp32, bf16 = runs["fp32"], runs["bf16"]
    assert (fp32.precision, bf16.precision) == ("fp32", "bf16")
    assert fp32.feature_bytes == graph.x.numel() * 4
    assert bf16.feature_bytes * 2 == fp32.feature_bytes
    assert all(h.loss == h.loss for h in bf16.history)  # finite
    assert bf16.history[-1].loss < bf16.history[0].loss
    assert bf16.test_accuracy >= fp32.test_accuracy - 0.1


def test_bf16_needs_float32_weights() -> None:
    with pytest.raises(InvalidValueError, match="float32"):
        TrainConfig(precision="bf16", dtype="float64")
    with pytest.raises(InvalidValueError, match="precision"):
        TrainConfig(precision="fp8")  # type: ignore[arg-type]


def test_cli_reports_precision_and_refuses_minibatch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from sparsegnn.cli.main import main

    spec = "sbm:nodes=120,blocks=2,degree=6"
    assert main(["train", "--dataset", spec, "--epochs", "3", "--precision", "bf16",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["precision"] == "bf16" and out["config"]["precision"] == "bf16"
    assert out["feature_bytes"] > 0 and out["peak_memory_bytes"] > 0
    assert out["epoch_time_s"] > 0
    assert main(["train", "--dataset", spec, "--mode", "minibatch", "--precision",
                 "bf16"]) != 0
