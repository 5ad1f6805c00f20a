"""Negative sampling as tensor operations: what each kind may and may not return."""

from __future__ import annotations

import pytest
import torch

from sparsegnn.errors import InvalidValueError
from sparsegnn.sampling.negatives import (
    EdgeLookup,
    degree_negatives,
    tail_negatives,
    uniform_negatives,
)

pytestmark = pytest.mark.usefixtures("one_thread")

N = 40


@pytest.fixture(scope="module")
def edges() -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    e = torch.randint(N, (2, 150), generator=gen)
    return torch.cat([e, e.flip(0)], dim=1)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_lookup_answers_membership(edges) -> None:
    lookup = EdgeLookup.of(edges, N)
    probe = torch.randint(N * N, (500,), generator=_gen(1))
    truth = torch.tensor([int(k) in set((edges[0] * N + edges[1]).tolist()) for k in probe])
    assert torch.equal(lookup.contains(probe), truth)


def test_uniform_are_distinct_non_edges_without_self_loops(edges) -> None:
    neg = uniform_negatives(edges, N, 300, _gen())
    keys = neg[0] * N + neg[1]
    assert neg.shape == (2, 300)
    assert keys.unique().numel() == 300
    assert not EdgeLookup.of(edges, N).contains(keys).any()
    assert bool((neg[0] != neg[1]).all())
    assert torch.equal(neg, uniform_negatives(edges, N, 300, _gen()))


def test_uniform_covers_every_non_edge_when_asked_for_all(edges) -> None:
    """Asking for more than exist returns each non-edge once (PyG returns fewer too)."""
    lookup = EdgeLookup.of(edges, N)
    free = N * (N - 1) - int((lookup.keys // N != lookup.keys % N).sum())
    neg = uniform_negatives(lookup, N, N * N, _gen())
    assert neg.shape[1] == free
    assert (neg[0] * N + neg[1]).unique().numel() == free


def test_degree_biased_draws_only_nodes_with_edges_and_favours_hubs() -> None:
    star = torch.tensor([[0] * 9 + list(range(1, 10)), list(range(1, 10)) + [0] * 9])
    star = torch.cat([star, torch.tensor([[10, 11], [11, 10]])], dim=1)
    n = 15  # nodes 12..14 have no edges
    neg = degree_negatives(star, n, 4000, _gen())
    assert int(neg.max()) <= 11
    counts = torch.bincount(neg.reshape(-1), minlength=n)
    assert counts[0] > 5 * counts[1]  # degree 9 against degree 1
    excluded = degree_negatives(star, n, 500, _gen(), exclude=True)
    assert not EdgeLookup.of(star, n).contains(excluded[0] * n + excluded[1]).any()
    assert bool((excluded[0] != excluded[1]).all())


def test_tail_negatives_corrupt_the_tail_only(edges) -> None:
    sources = edges[0, :50]
    tails = tail_negatives(sources, N, 7, _gen(), edge_index=edges)
    assert tails.shape == (50, 7)
    keys = sources[:, None] * N + tails
    assert not EdgeLookup.of(edges, N).contains(keys).any()
    loops = tail_negatives(sources, N, 7, _gen(), edge_index=edges, self_loops=False)
    assert bool((loops != sources[:, None]).all())


def test_refusals() -> None:
    full = torch.tensor([[0, 0, 0], [0, 1, 2]])
    with pytest.raises(InvalidValueError, match="joined to every node"):
        tail_negatives(torch.tensor([0]), 3, 2, _gen(), edge_index=full)
    with pytest.raises(InvalidValueError, match="at least 1"):
        uniform_negatives(full, 3, 0, _gen())
    with pytest.raises(InvalidValueError, match="graph with edges"):
        degree_negatives(torch.empty(2, 0, dtype=torch.int64), 3, 4, _gen())
