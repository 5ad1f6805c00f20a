"""The byte dropout mask (the models' default): gradient, repeatability, edge
probabilities, odd shapes, and independence of the eight bytes of each 64-bit draw."""

import pytest
import torch

from sparsegnn.nn.dropout import dropout


def _bytes(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    return dropout(x, p, training, mask="bytes")


def test_gradient_is_the_same_mask_scaled() -> None:
    torch.manual_seed(1)
    x = torch.rand(300, 7, dtype=torch.float64) + 1.0  # no exact zeros
    x.requires_grad_()
    y = _bytes(x, 0.5)
    y.backward(torch.ones_like(y))
    keep = y != 0
    assert torch.equal(x.grad, keep.double() * 2.0)
    assert torch.equal(y[keep], x.detach()[keep] * 2.0)


def test_repeatable_under_seed_and_varies_between_draws() -> None:
    x = torch.randn(50, 33)
    torch.manual_seed(3)
    a, b = _bytes(x, 0.5), _bytes(x, 0.5)
    torch.manual_seed(3)
    assert torch.equal(_bytes(x, 0.5), a)
    assert not torch.equal(a, b)


def test_edge_probabilities_and_eval() -> None:
    x = torch.randn(5, 3)
    assert _bytes(x, 0.0) is x
    assert _bytes(x, 0.7, training=False) is x
    assert torch.equal(_bytes(x, 1.0), torch.zeros_like(x))
    assert _bytes(x, 0.001) is x  # rounds to a keep rate of 1: nothing is ever dropped
    with pytest.raises(ValueError):
        _bytes(x, 1.5)


def test_odd_sizes() -> None:
    for shape in [(1,), (3, 1), (7, 5), (0, 4), (2, 3, 5)]:
        y = _bytes(torch.ones(shape), 0.5)
        assert y.shape == torch.Size(shape)
        assert bool(((y == 0) | (y == 2)).all())


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_bytes_are_unbiased_and_uncorrelated_across_words(p: float) -> None:
    """Each byte of a 64-bit draw drops at the rounded rate, independently of the other
    seven and of the next word's: a bias or correlation would show as columns of a
    ``[n, 8]`` tensor (one word per row) dropped together, beyond 5 standard errors."""
    torch.manual_seed(11)
    n = 1 << 19
    keep = (_bytes(torch.ones(n, 8), p) != 0).double()
    q = (256 - round(p * 256)) / 256
    se = (q * (1 - q) / n) ** 0.5
    assert bool(((keep.mean(0) - q).abs() < 5 * se).all())
    centred = (keep - q) / (q * (1 - q)) ** 0.5
    pairs = [(centred[:, i], centred[:, j]) for i in range(8) for j in range(i + 1, 8)]
    pairs.append((centred[:-1, 7], centred[1:, 0]))  # last byte of a word, first of the next
    for a, b in pairs:
        assert abs(float((a * b).mean())) < 5 / n**0.5
