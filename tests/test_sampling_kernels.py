"""sparsegnn.sampling.frontier's extraction kernels equal the paths they replaced.

Each kernel is checked against a plain reference on random inputs: the sort-based
computation the samplers used before (``torch.unique``, a binary search over sorted
keys, ``CSRMatrix.from_coo``, two stable sorts), rewritten here as the specification.
"""

from __future__ import annotations

import pytest
import torch

from sparsegnn.sampling import ShadowSampler, batch_generator, frontier
from sparsegnn.sampling.frontier import (
    Stacked,
    distinct_columns,
    induced_block,
    induced_columns,
    smallest_per_batch,
    smallest_per_segment,
    stacked_block,
)
from sparsegnn.sparse import CSRMatrix


def random_matrix(n: int, nnz: int, seed: int, unit: bool) -> CSRMatrix:
    gen = torch.Generator().manual_seed(seed)
    row, col = torch.randint(0, n, (2, nnz), generator=gen)
    val = torch.ones(nnz) if unit else torch.rand(nnz, generator=gen, dtype=torch.float64) + 0.1
    return CSRMatrix.from_coo(row, col, val, (n, n), duplicates="max")


def random_stack(n: int, sizes: list[int], seed: int) -> Stacked:
    """k lists of distinct vertices in random order (as seeds are), some lists empty."""
    gen = torch.Generator().manual_seed(seed)
    parts = [torch.randperm(n, generator=gen)[:s] for s in sizes]
    return Stacked.from_list(parts, torch.device("cpu"))


def same_csr(a: CSRMatrix, b: CSRMatrix) -> None:
    assert a.shape == b.shape
    assert torch.equal(a.crow, b.crow) and torch.equal(a.col, b.col)
    assert a.val.dtype == b.val.dtype and torch.equal(a.val, b.val)


CASES = [(50, 400, [7, 0, 20, 1]), (300, 5000, [120, 64, 3]), (40, 0, [5, 5])]


@pytest.mark.parametrize("unit", [True, False])
@pytest.mark.parametrize(("n", "nnz", "sizes"), CASES)
def test_select_rows_equals_the_arange_reference(n: int, nnz: int, sizes: list[int],
                                                 unit: bool) -> None:
    """Row extraction by one step cumsum (and ones filled in for a pattern) equals the
    arange + repeat_interleave it replaced."""
    adj = random_matrix(n, nnz, seed=n, unit=unit)
    rows = torch.cat([random_stack(n, sizes, seed=1).ids, torch.tensor([0, 0, n - 1])])
    starts = adj.crow[rows]
    counts = adj.crow[rows + 1] - starts
    crow = frontier.exclusive_cumsum(counts)
    take = torch.arange(int(crow[-1])) + torch.repeat_interleave(starts - crow[:-1], counts)
    reference = CSRMatrix(crow, adj.col[take], adj.val[take], (rows.numel(), n))
    same_csr(adj.select_rows(rows, ones=unit), reference)


@pytest.mark.parametrize(("n", "nnz", "sizes"), CASES)
def test_distinct_columns_equals_unique(n: int, nnz: int, sizes: list[int]) -> None:
    adj = random_matrix(n, nnz, seed=n + 1, unit=True)
    stack = random_stack(n, sizes, seed=2)
    p = adj.select_rows(stack.ids)
    keys, inverse = distinct_columns(p.col, p.crow[stack.ptr], n)
    ref_keys, ref_inverse = torch.unique(
        stack.batch_of[p.row_indices()] * n + p.col, return_inverse=True
    )
    assert torch.equal(keys, ref_keys) and torch.equal(inverse, ref_inverse)


def reference_induced(p: CSRMatrix, visited: Stacked, n: int) -> CSRMatrix:
    """The previous ShaDow extraction: binary search of sorted keys, then from_coo."""
    rows = p.row_indices()
    keys = visited.keys(n)
    local = torch.arange(keys.numel()) - visited.ptr[visited.batch_of]
    sorted_keys, order = torch.sort(keys)
    query = visited.batch_of[rows] * n + p.col
    pos = torch.searchsorted(sorted_keys, query).clamp(max=max(sorted_keys.numel() - 1, 0))
    found = sorted_keys[pos] == query if keys.numel() else torch.zeros_like(query, dtype=torch.bool)
    cols = local[order[pos]] if keys.numel() else query
    width = int(visited.counts.max()) if visited.k else 0
    return stacked_block(rows[found], cols[found], p.val[found], visited.ids.numel(), width)


@pytest.mark.parametrize("int32_keys", [True, False])
@pytest.mark.parametrize("unit", [True, False])
@pytest.mark.parametrize(("n", "nnz", "sizes"), CASES)
def test_induced_block_equals_the_sorted_extraction(
    n: int, nnz: int, sizes: list[int], unit: bool, int32_keys: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not int32_keys:  # every minibatch takes the int64 path of _sort_within_rows
        monkeypatch.setattr(frontier, "_INT32_KEYS", 0)
    adj = random_matrix(n, nnz, seed=n + 2, unit=unit)
    visited = random_stack(n, sizes, seed=3)
    p = adj.select_rows(visited.ids, ones=unit)
    block = induced_block(p, visited, induced_columns(p, visited, n), unit)
    same_csr(block, reference_induced(p, visited, n))
    assert int((induced_columns(p, visited, n) >= 0).sum()) == block.nnz


@pytest.mark.parametrize("ties", [False, True])
def test_smallest_per_batch_equals_the_two_sort_selection(ties: bool) -> None:
    gen = torch.Generator().manual_seed(4)
    counts = torch.tensor([0, 3, 40, 17, 100, 8])
    keys = torch.rand(int(counts.sum()), generator=gen, dtype=torch.float64)
    if ties:  # few distinct values: the limit falls inside runs of equal keys
        keys = (keys * 4).floor()
    keys[5] = float("inf")
    ptr = frontier.exclusive_cumsum(counts)
    segment = torch.repeat_interleave(torch.arange(counts.numel()), counts)
    for limit in (1, 8, 30):
        assert torch.equal(
            smallest_per_batch(keys, ptr, limit), smallest_per_segment(keys, segment, limit)
        )


def test_shadow_on_a_weighted_graph_matches_the_reference_extraction() -> None:
    """End to end, values included: the sampler's subgraphs equal the previous path's."""
    adj = random_matrix(200, 3000, seed=5, unit=False)
    sampler = ShadowSampler(adj, [4, 3])
    seeds = [torch.arange(i * 10, i * 10 + 10) for i in range(3)]
    out = sampler.sample(seeds, [batch_generator(0, 0, i) for i in range(3)])
    for s, batch in zip(seeds, out, strict=True):
        visited = Stacked.from_list([batch.node_ids], adj.device)
        ref = reference_induced(adj.select_rows(batch.node_ids), visited, adj.shape[0])
        same_csr(batch.operators(1)[0], ref)
        assert torch.equal(batch.node_ids[:10], s)


@pytest.mark.parametrize("shape", [(1000,), (300, 7), (0,), (4, 0)])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_sort_values_equals_torch_sort(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    x = torch.randint(-50, 50, shape, generator=torch.Generator().manual_seed(6), dtype=dtype)
    out = frontier.sort_values(x)
    assert out.dtype == dtype and torch.equal(out, torch.sort(x).values)
