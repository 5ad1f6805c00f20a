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


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_lanes_are_unbiased_and_uncorrelated(p: float) -> None:
    """The four 16-bit lanes of each 64-bit draw drop at rate p each and independently
    of one another (also across words): a bias or correlation in the lanes would show
    as columns of a ``[n, 4k]`` tensor dropped together, beyond 5 standard errors."""
    torch.manual_seed(11)
    n = 1 << 20
    keep = (fast_dropout(torch.ones(n, 4), p) != 0).double()
    q = 1.0 - p
    se = (p * q / n) ** 0.5
    assert bool(((keep.mean(0) - q).abs() < 5 * se).all())
    centred = (keep - q) / (p * q) ** 0.5
    pairs = [(centred[:, i], centred[:, j]) for i in range(4) for j in range(i + 1, 4)]
    pairs.append((centred[:-1, 3], centred[1:, 0]))  # last lane of a word, first of the next
    for a, b in pairs:
        assert abs(float((a * b).mean())) < 5 / n**0.5
