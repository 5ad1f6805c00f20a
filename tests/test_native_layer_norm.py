"""The fused LayerNorm (+ ReLU) row kernel (sparsegnn.sparse.native.layer_norm_) and the
inference path that uses it (tracking.model.forward_layers): equal to torch's
layer_norm (+ relu) in float32 and to its bfloat16 rounding, for widths on and off the
64-wide fast path and row counts off the 8-row blocks; autograd keeps torch's path."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from sparsegnn.errors import ShapeError
from sparsegnn.sparse import native
from sparsegnn.tracking.model import INConfig, InteractionNetwork, forward_layers, mlp

needs_kernels = pytest.mark.skipif(native.library() is None,
                                   reason="the fused kernels did not build on this machine")


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, relu: bool) -> torch.Tensor:
    y = F.layer_norm(x.float(), (x.shape[1],), w.float(), b.float(), 1e-5)
    return (F.relu(y) if relu else y).to(x.dtype)


@needs_kernels
@pytest.mark.parametrize("width", [1, 10, 64, 100])
@pytest.mark.parametrize("rows", [1, 13, 64])
@pytest.mark.parametrize("relu", [False, True])
def test_float32_rows_equal_torch(width: int, rows: int, relu: bool) -> None:
    torch.manual_seed(rows * width)
    x = torch.randn(rows, width) * 4 + 2
    w, b = torch.randn(width), torch.randn(width)
    got = native.layer_norm_(x.clone(), w, b, 1e-5, relu)
    torch.testing.assert_close(got, reference(x, w, b, relu), atol=2e-5, rtol=1e-5)


@needs_kernels
@pytest.mark.parametrize("width", [10, 64])
def test_bfloat16_rows_round_as_torch_rounds(width: int) -> None:
    """Statistics in float, one rounding to bfloat16 at the end: torch's result, or the
    neighbouring bfloat16 where the float result lies on a rounding boundary."""
    torch.manual_seed(width)
    x = (torch.randn(1003, width) * 3).bfloat16()
    w, b = torch.randn(width).bfloat16(), torch.randn(width).bfloat16()
    got = native.layer_norm_(x.clone(), w, b, 1e-5, relu=True).float()
    want = F.relu(F.layer_norm(x, (width,), w, b, 1e-5)).float()
    ulp = want.abs().clamp_min(2.0 ** -126) * 2.0 ** -7
    assert bool(((got - want).abs() <= ulp).all())
    assert float((got != want).float().mean()) < 1e-3


@needs_kernels
def test_nan_stays_nan_and_a_constant_row_is_beta() -> None:
    x = torch.tensor([[1.0, float("nan"), 2.0], [5.0, 5.0, 5.0]])
    w, b = torch.ones(3), torch.tensor([0.5, -1.0, 2.0])
    for row in (x.clone(), x.clone().bfloat16()):
        got = native.layer_norm_(row, w, b, 1e-5, relu=True).float()
        assert bool(got[0].isnan().all())
        assert torch.equal(got[1], torch.tensor([0.5, 0.0, 2.0]))


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_64_wide_path_keeps_nan_and_equals_the_portable_loops(dtype: torch.dtype) -> None:
    """Eight 64-wide rows take the vector path (AVX-512 where the CPU has it); one row
    with a NaN stays NaN, the others equal torch's, negatives cut by the ReLU."""
    torch.manual_seed(3)
    x = (torch.randn(16, 64) * 2).to(dtype)
    x[5, 17] = float("nan")
    w, b = torch.randn(64).to(dtype), torch.randn(64).to(dtype)
    got = native.layer_norm_(x.clone(), w, b, 1e-5, relu=True).float()
    assert bool(got[5].isnan().all()) and not bool(got[torch.arange(16) != 5].isnan().any())
    want = reference(x, w, b, relu=True).float()
    ok = torch.arange(16) != 5
    torch.testing.assert_close(got[ok], want[ok], atol=2e-5, rtol=8e-3)
    assert bool((got[ok] >= 0).all())


@needs_kernels
def test_bad_shapes_are_refused_and_other_tensors_are_not_usable() -> None:
    x = torch.randn(4, 8)
    with pytest.raises(ShapeError):
        native.layer_norm_(x, torch.ones(7), torch.zeros(8), 1e-5)
    assert native.norm_usable(x) and native.norm_usable(x.bfloat16())
    assert not native.norm_usable(x.double()) and not native.norm_usable(x.t())
    assert not native.norm_usable(torch.randn(2, native.MAX_WIDTH + 1))
    with native.disabled():
        assert not native.norm_usable(x)


def test_forward_layers_equals_the_modules_and_keeps_autograd() -> None:
    torch.manual_seed(0)
    seq = mlp(12, 64, 64, 3)
    x = torch.randn(50, 12)
    want = seq(x)
    with torch.no_grad():
        torch.testing.assert_close(forward_layers(seq, x), want.detach(), atol=3e-5, rtol=1e-5)
    got = forward_layers(seq, x)  # autograd on: torch's modules, gradients flow
    got.sum().backward()
    assert seq[1].weight.grad is not None and got.grad_fn is not None


def test_the_network_scores_alike_with_the_kernels_and_without() -> None:
    from sparsegnn.tracking.model import EdgeOperators

    torch.manual_seed(1)
    net = InteractionNetwork(INConfig(hidden=64, iterations=2)).eval()
    x, edges = torch.randn(40, 3), torch.randint(0, 40, (2, 300))
    attr = torch.randn(300, 4)
    ops = EdgeOperators(edges, 40)
    with torch.no_grad():
        fused = net(x, attr, ops)
        with native.disabled():
            plain = net(x, attr, ops)
    torch.testing.assert_close(fused, plain, atol=1e-4, rtol=1e-4)
