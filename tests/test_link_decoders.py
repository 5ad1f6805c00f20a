"""The dot and DistMult decoders score pairs as an SDDMM on the pairs' pattern: the same
logits and gradients as gathering both endpoint rows, whatever the pairs' order,
repeats and dtype."""

from __future__ import annotations

import pytest
import torch

from sparsegnn.errors import ShapeError
from sparsegnn.nn.link_decoders import DistMultDecoder, DotDecoder, pair_dot, pair_pattern


def _pairs(n: int, q: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    pairs = torch.randint(0, n, (2, q), generator=gen)
    return torch.cat([pairs, pairs[:, :5], pairs[[1, 0], :5]], dim=1)  # repeats, reversed


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dot_matches_the_gathered_rows_with_gradients(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(40, 8, generator=gen, dtype=dtype, requires_grad=True)
    pairs, weight = _pairs(40, 300, 1), torch.randn(310, generator=gen, dtype=dtype)
    ours = DotDecoder()(z, pairs)
    (grad,) = torch.autograd.grad((ours * weight).sum(), z)
    expected = (z[pairs[0]] * z[pairs[1]]).sum(-1)
    (expected_grad,) = torch.autograd.grad((expected * weight).sum(), z)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    assert ours.dtype == dtype and ours.shape == (310,)
    torch.testing.assert_close(ours, expected, rtol=tol, atol=tol)
    torch.testing.assert_close(grad, expected_grad, rtol=tol, atol=tol)


def test_untyped_distmult_matches_the_gathered_rows_with_gradients() -> None:
    torch.manual_seed(0)
    decoder = DistMultDecoder(6, num_relations=2)
    z = torch.randn(30, 6, requires_grad=True)
    pairs = _pairs(30, 100, 2)
    ours = decoder(z, pairs)
    ours_grads = torch.autograd.grad(ours.square().sum(), [z, decoder.relations])
    expected = (z[pairs[0]] * decoder.relations[0] * z[pairs[1]]).sum(-1)
    grads = torch.autograd.grad(expected.square().sum(), [z, decoder.relations])
    torch.testing.assert_close(ours, expected)
    for a, b in zip(ours_grads, grads, strict=True):
        torch.testing.assert_close(a, b)
    assert float(ours_grads[1][1].abs().sum()) == 0.0  # relation 1 takes no part


def test_pattern_sorts_pairs_and_keeps_repeats() -> None:
    pairs = torch.tensor([[2, 0, 2, 1, 2], [1, 3, 0, 1, 1]])
    pattern, order = pair_pattern(pairs, 4)
    assert pattern.crow.tolist() == [0, 1, 2, 5, 5]
    assert pattern.col.tolist() == [3, 1, 0, 1, 1]
    assert torch.equal(pairs[:, order], torch.stack([pattern.row_indices(), pattern.col]))


def test_no_pairs_and_pairs_outside_the_rows() -> None:
    z = torch.randn(5, 3, requires_grad=True)
    empty = pair_dot(z, z, torch.zeros(2, 0, dtype=torch.long))
    assert empty.shape == (0,) and empty.requires_grad
    with pytest.raises(ShapeError, match="outside the 5 embedded rows"):
        pair_dot(z, z, torch.tensor([[0], [5]]))
    with pytest.raises(ShapeError, match="outside"):
        pair_dot(z, z, torch.tensor([[-1], [0]]))
