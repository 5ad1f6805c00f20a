"""sparsegnn.sampling: structural and statistical tests of the three samplers.

The statistical tests draw thousands of one-seed minibatches in one bulk call (each with
its own stream), count what was drawn and run a chi-square test against the exact
distribution. Each also shows that a plausible wrong sampler fails the same test, so
the tolerance has teeth.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy.stats import chisquare

from sparsegnn.data import rmat
from sparsegnn.errors import DuplicateEntryError, ShapeError
from sparsegnn.sampling import (
    LadiesSampler,
    NodeWiseSampler,
    SampledBatch,
    SampledSubgraph,
    ShadowSampler,
    batch_generator,
    epoch_permutation,
    ladies_probabilities,
)
from sparsegnn.sparse import CSRMatrix

ALPHA = 1e-3  # reject at this p-value; every test uses a fixed seed


@pytest.fixture(scope="module")
def graph() -> CSRMatrix:
    """A skewed graph: a few hubs above every fan-out, many vertices below."""
    g = rmat(9, 8, seed=3)
    return CSRMatrix.from_edge_index(g.edge_index, g.num_nodes)


def seed_lists(n: int, k: int, b: int) -> list[torch.Tensor]:
    perm = epoch_permutation(n, seed=1, epoch=0)
    return [perm[i * b : (i + 1) * b] for i in range(k)]


def generators(k: int, seed: int = 0) -> list[torch.Generator]:
    return [batch_generator(seed, 0, i) for i in range(k)]


def star(weights: list[float]) -> CSRMatrix:
    """Vertex 0 joined to 1..d with the given edge weights (both directions)."""
    d = len(weights)
    leaves = torch.arange(1, d + 1)
    row = torch.cat([torch.zeros(d, dtype=torch.long), leaves])
    col = torch.cat([leaves, torch.zeros(d, dtype=torch.long)])
    val = torch.tensor(weights * 2, dtype=torch.float64)
    return CSRMatrix.from_coo(row, col, val, (d + 1, d + 1))


def hub_draws(sampler: NodeWiseSampler | ShadowSampler, trials: int) -> list[tuple[int, ...]]:
    """The set of hub-0 neighbours drawn by ``trials`` independent one-seed minibatches."""
    out = sampler.sample([torch.tensor([0])] * trials, generators(trials, seed=7))
    return [tuple(sorted(b.node_ids[1:].tolist())) for b in out]


def subset_pvalue(draws: list[tuple[int, ...]], expected: dict[tuple[int, ...], float]) -> float:
    counts = Counter(draws)
    assert set(counts) <= set(expected), "a drawn subset has probability zero"
    keys = sorted(expected)
    f_obs = np.array([counts.get(s, 0) for s in keys], dtype=float)
    f_exp = np.array([expected[s] for s in keys]) * len(draws)
    return float(chisquare(f_obs, f_exp).pvalue)


# ---------------------------------------------------------------------- node-wise
def test_nodewise_blocks_are_true_neighbours_with_exact_counts(graph: CSRMatrix) -> None:
    dense = graph.to_dense()
    degree = graph.row_degrees()
    fanouts = [6, 4, 3]
    batches = NodeWiseSampler(graph, fanouts).sample(
        seed_lists(graph.shape[0], 3, 40), generators(3)
    )
    for batch in batches:
        assert isinstance(batch, SampledBatch)
        assert torch.equal(batch.node_ids[:40], batch.seeds)
        assert batch.node_ids.unique().numel() == batch.node_ids.numel()
        # Walk from the seeds outwards: block -1 has the seeds as targets.
        targets = batch.seeds
        for fanout, block in zip(fanouts, reversed(batch.layers), strict=True):
            block.validate()  # sorted, distinct columns per row
            n_out = block.shape[0]
            assert n_out == targets.numel()
            frontier = _frontier_of(batch, block)
            assert torch.equal(frontier[:n_out], targets), "targets must come first"
            rows, cols = targets[block.row_indices()], frontier[block.col]
            assert bool((dense[rows, cols] > 0).all()), "sampled a non-neighbour"
            assert torch.equal(block.row_degrees(), degree[targets].clamp(max=fanout))
            sums = block.row_sums()[block.row_degrees() > 0]
            assert torch.allclose(sums, torch.ones_like(sums))
            targets = frontier


@pytest.mark.parametrize("unit", [True, False])
def test_nodewise_block_values_are_the_mean_of_the_drawn_entries(graph: CSRMatrix,
                                                                   unit: bool) -> None:
    """A block row holds A's drawn entries divided by their sum: 1 / count each for a
    pattern matrix (whose values are never read), the weighted mean otherwise."""
    g = torch.Generator().manual_seed(3)
    values = torch.ones(graph.nnz) if unit else torch.rand(graph.nnz, generator=g) + 0.5
    adj = CSRMatrix(graph.crow, graph.col, values, graph.shape)
    dense = adj.to_dense()
    batch = NodeWiseSampler(adj, [5]).sample(seed_lists(adj.shape[0], 1, 30), generators(1))[0]
    block = batch.layers[0]
    rows = batch.seeds[block.row_indices()]
    cols = _frontier_of(batch, block)[block.col]
    drawn = dense[rows, cols]
    sums = torch.zeros(block.shape[0]).index_add_(0, block.row_indices(), drawn)
    torch.testing.assert_close(block.val, drawn / sums[block.row_indices()])


def _frontier_of(batch: SampledBatch, block: CSRMatrix) -> torch.Tensor:
    """Input vertex ids of ``block``: a prefix of node_ids, as every frontier is."""
    return batch.node_ids[: block.shape[1]]


def test_nodewise_uniform_subsets_pass_chisquare_and_a_wrong_sampler_fails() -> None:
    adj = star([1.0] * 6)
    draws = hub_draws(NodeWiseSampler(adj, [3]), 1500)
    subsets = list(itertools.combinations(range(1, 7), 3))
    uniform = {s: 1 / len(subsets) for s in subsets}
    assert subset_pvalue(draws, uniform) > ALPHA
    # A sampler with uniform marginals but not uniform subsets: three cyclic neighbours.
    rng = np.random.default_rng(0)
    wrong = [tuple(sorted((s + i) % 6 + 1 for i in range(3))) for s in rng.integers(0, 6, 1500)]
    assert subset_pvalue(wrong, uniform) < ALPHA


def successive_sampling(weights: list[float], size: int) -> dict[tuple[int, ...], float]:
    """Exact set probabilities of drawing ``size`` items one by one, each ∝ weight."""
    out: dict[tuple[int, ...], float] = {}
    for order in itertools.permutations(range(len(weights)), size):
        p, left = 1.0, sum(weights)
        for i in order:
            p *= weights[i] / left
            left -= weights[i]
        key = tuple(sorted(i + 1 for i in order))
        out[key] = out.get(key, 0.0) + p
    return out


def test_weighted_nodewise_matches_successive_sampling() -> None:
    weights = [1.0, 2.0, 3.0, 6.0]
    adj = star(weights)
    exact = successive_sampling(weights, 2)
    draws = hub_draws(NodeWiseSampler(adj, [2], weighted=True), 1500)
    assert subset_pvalue(draws, exact) > ALPHA
    unweighted = hub_draws(NodeWiseSampler(adj, [2]), 1500)
    assert subset_pvalue(unweighted, exact) < ALPHA


def test_low_degree_rows_keep_every_neighbour() -> None:
    adj = star([1.0] * 4)
    (batch,) = NodeWiseSampler(adj, [10]).sample([torch.tensor([0])], generators(1))
    assert sorted(batch.node_ids[1:].tolist()) == [1, 2, 3, 4]


# ---------------------------------------------------------------------- LADIES
def test_ladies_probabilities_are_squared_column_norms(graph: CSRMatrix) -> None:
    weighted = graph.with_values(
        torch.rand(graph.nnz, generator=torch.Generator().manual_seed(0)) + 0.5
    )
    targets = torch.tensor([3, 17, 40, 41, 100])
    vertices, prob = ladies_probabilities(weighted, targets)
    rows = weighted.to_dense().double()[targets]
    norms = (rows**2).sum(0)
    assert torch.equal(vertices, norms.nonzero().flatten())
    assert torch.allclose(prob, norms[vertices] / norms.sum())


def test_ladies_draws_follow_the_squared_norm_distribution() -> None:
    # Targets 0 and 1 share neighbour 2; edge values make the squared norms unequal.
    row = torch.tensor([0, 0, 0, 1, 1])
    col = torch.tensor([2, 3, 4, 2, 5])
    val = torch.tensor([1.0, 2.0, 1.0, 1.0, 3.0])
    adj = CSRMatrix.from_coo(row, col, val, (6, 6))
    vertices, prob = ladies_probabilities(adj, torch.tensor([0, 1]))
    trials = 1500
    out = LadiesSampler(adj, [1]).sample([torch.tensor([0, 1])] * trials, generators(trials, 5))
    drawn = Counter(int(b.node_ids[2]) for b in out)
    f_obs = np.array([drawn.get(int(v), 0) for v in vertices], dtype=float)
    assert chisquare(f_obs, prob.numpy() * trials).pvalue > ALPHA
    uniform = np.full(len(vertices), trials / len(vertices))
    assert chisquare(f_obs, uniform).pvalue < ALPHA


def test_ladies_blocks_hold_edges_into_drawn_vertices(graph: CSRMatrix) -> None:
    dense = graph.to_dense()
    sizes = [30, 20]
    for batch in LadiesSampler(graph, sizes).sample(
        seed_lists(graph.shape[0], 2, 16), generators(2)
    ):
        assert isinstance(batch, SampledBatch)
        targets = batch.seeds
        for size, block in zip(sizes, reversed(batch.layers), strict=True):
            block.validate()
            frontier = batch.node_ids[: block.shape[1]]
            assert torch.equal(frontier[: targets.numel()], targets)
            assert frontier.numel() - targets.numel() <= size
            assert bool((dense[targets[block.row_indices()], frontier[block.col]] > 0).all())
            targets = frontier


# ---------------------------------------------------------------------- ShaDow
def test_shadow_is_the_subgraph_induced_by_the_visited_vertices(graph: CSRMatrix) -> None:
    ref = graph.to_scipy()
    for batch in ShadowSampler(graph, [4, 3]).sample(
        seed_lists(graph.shape[0], 3, 10), generators(3)
    ):
        assert isinstance(batch, SampledSubgraph)
        ids = batch.node_ids.numpy()
        assert np.array_equal(ids[:10], batch.seeds.numpy())
        assert len(set(ids.tolist())) == len(ids)
        sub = ref[ids][:, ids]
        deg = np.asarray(sub.sum(1)).ravel()
        expected = sp.diags(np.where(deg > 0, 1 / np.where(deg > 0, deg, 1), 0)) @ sub
        assert np.allclose(batch.adj.to_dense().numpy(), expected.toarray())


def test_shadow_visits_a_node_wise_sample() -> None:
    adj = star([1.0] * 8)
    (batch,) = ShadowSampler(adj, [3]).sample([torch.tensor([0])], generators(1))
    assert batch.node_ids.numel() == 4
    assert batch.adj.nnz == 6  # the star's three sampled spokes, both directions


# ---------------------------------------------------------------------- bulk
@pytest.mark.parametrize("kind", ["sage", "weighted", "ladies", "shadow"])
def test_bulk_equals_single_calls(graph: CSRMatrix, kind: str) -> None:
    weighted = graph.with_values(
        torch.rand(graph.nnz, generator=torch.Generator().manual_seed(1)) + 0.1
    )
    sampler = {
        "sage": NodeWiseSampler(graph, [5, 3]),
        "weighted": NodeWiseSampler(weighted, [5, 3], weighted=True),
        "ladies": LadiesSampler(graph, [40, 40]),
        "shadow": ShadowSampler(graph, [5, 3]),
    }[kind]
    seeds = seed_lists(graph.shape[0], 4, 25)
    bulk = sampler.sample(seeds, generators(4))
    for i, s in enumerate(seeds):
        one = sampler.sample_one(s, batch_generator(0, 0, i))
        assert torch.equal(one.node_ids, bulk[i].node_ids)
        for a, b in zip(one.operators(2), bulk[i].operators(2), strict=True):
            assert a.shape == b.shape
            assert torch.equal(a.crow, b.crow) and torch.equal(a.col, b.col)
            assert torch.equal(a.val, b.val)


def test_streams_are_reproducible_and_distinct() -> None:
    a = torch.rand(4, generator=batch_generator(1, 2, 3))
    assert torch.equal(a, torch.rand(4, generator=batch_generator(1, 2, 3)))
    assert not torch.equal(a, torch.rand(4, generator=batch_generator(1, 2, 4)))
    assert not torch.equal(a, torch.rand(4, generator=batch_generator(1, 3, 3)))
    assert torch.equal(epoch_permutation(10, 0, 1), epoch_permutation(10, 0, 1))


def test_rejects_bad_input(graph: CSRMatrix) -> None:
    sampler = NodeWiseSampler(graph, [2])
    with pytest.raises(DuplicateEntryError):
        sampler.sample([torch.tensor([1, 1])], generators(1))
    with pytest.raises(ShapeError):
        sampler.sample([torch.tensor([1]), torch.tensor([2])], generators(1))
    with pytest.raises(ValueError, match="fan-outs"):
        NodeWiseSampler(graph, [0])
