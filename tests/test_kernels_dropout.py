"""fast_dropout: drop rate, unbiasedness, gradient, repeatability, edge probabilities."""

import pytest
import torch

from sparsegnn.nn.dropout import fast_dropout


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_drop_rate_and_mean(p: float) -> None:
    torch.manual_seed(0)
    x = torch.ones(400, 500)
    y = fast_dropout(x, p)
    assert abs(float((y == 0).float().mean()) - p) < 0.01
    assert abs(float(y.mean()) - 1.0) < 0.02  # inverted dropout keeps the expectation


def test_gradient_is_the_same_mask_scaled() -> None:
    torch.manual_seed(1)
    x = torch.rand(300, 7, dtype=torch.float64) + 1.0  # no exact zeros
    x.requires_grad_()
    y = fast_dropout(x, 0.5)
    y.backward(torch.ones_like(y))
    keep = y != 0
    assert torch.equal(x.grad, keep.double() * 2.0)
    assert torch.allclose(y[keep], x.detach()[keep] * 2.0, rtol=0, atol=0)


def test_repeatable_under_seed_and_varies_between_draws() -> None:
    x = torch.randn(50, 33)
    torch.manual_seed(3)
    a, b = fast_dropout(x, 0.5), fast_dropout(x, 0.5)
    torch.manual_seed(3)
    assert torch.equal(fast_dropout(x, 0.5), a)
    assert not torch.equal(a, b)


def test_edge_probabilities_and_eval() -> None:
    x = torch.randn(5, 3)
    assert fast_dropout(x, 0.0) is x
    assert fast_dropout(x, 0.7, training=False) is x
    assert torch.equal(fast_dropout(x, 1.0), torch.zeros_like(x))
    with pytest.raises(ValueError):
        fast_dropout(x, 1.5)


def test_odd_sizes() -> None:
    for shape in [(1,), (3, 1), (7, 5)]:
        y = fast_dropout(torch.ones(shape), 0.5)
        assert y.shape == torch.Size(shape)
