"""Bounded ShaDow subgraphs of a hit graph, so every event trains within a node budget.

The pipelines that train on whole events skip the events whose graph is too large for
memory. ShaDow instead visits every hit of every event as a seed: each minibatch is the
subgraph induced by the seeds' sampled k-hop neighbourhood (sparsegnn's
:class:`~sparsegnn.sampling.ShadowSampler`), so the model sees every event while one
step never holds more than ``max_nodes`` hits.

The bound is a guarantee, not an average. A minibatch's seed count adapts to the sizes
seen so far; a sample over the budget is redrawn with half the seeds, and one seed
always fits because it visits at most 1 + f1 + f1*f2 + ... hits with fan-outs
(f1, f2, ...), which must not exceed the budget.
The loss of a minibatch covers the edges leaving its seeds whose target hit was sampled;
every hit is a seed once per epoch, so an edge is trained once per epoch unless its
target fell outside the first-hop fan-out (``coverage`` reports how often that happens).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from sparsegnn.errors import InvalidValueError
from sparsegnn.sampling import ShadowSampler, batch_generator, epoch_permutation
from sparsegnn.sparse import CSRMatrix
from sparsegnn.tracking.graph import HitGraph


@dataclass(frozen=True)
class EdgeSubgraph:
    """A sampled piece of one hit graph, with local ids."""

    nodes: np.ndarray  # [n] global hit ids
    edges: np.ndarray  # [m] global edge ids of the induced subgraph
    edge_index: np.ndarray  # [2, m] local node ids
    loss_mask: np.ndarray  # [m] bool: edges leaving a seed of this minibatch


def max_nodes_per_seed(fanouts: Sequence[int]) -> int:
    """Worst-case hits visited from one seed: 1 + f1 + f1*f2 + ..."""
    total, width = 1, 1
    for f in fanouts:
        width *= int(f)
        total += width
    return total


def shadow_subgraphs(graph: HitGraph, max_nodes: int, fanouts: Sequence[int], seed: int,
                     epoch: int, seeds: np.ndarray | None = None) -> Iterator[EdgeSubgraph]:
    """ShaDow minibatches covering every hit of ``graph`` (or only ``seeds``) once as a seed,
    each <= max_nodes hits."""
    per_seed = max_nodes_per_seed(fanouts)
    if max_nodes < per_seed:
        raise InvalidValueError(
            f"max_nodes={max_nodes} is below the {per_seed} hits one seed may visit with "
            f"fan-outs {list(fanouts)}; raise it or lower the fan-outs"
        )
    n = graph.num_nodes
    src, dst = (torch.from_numpy(a) for a in graph.edge_index)
    both = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
    sampler = ShadowSampler(CSRMatrix.from_edge_index(both, n, duplicates="max"), fanouts)
    order = epoch_permutation(n, seed, epoch)
    if seeds is not None:
        pool = torch.from_numpy(np.asarray(seeds, dtype=np.int64))
        order = pool[epoch_permutation(int(pool.numel()), seed, epoch)]
    start = index = 0
    size = max(1, max_nodes // per_seed)
    while start < order.numel():
        size = min(size, int(order.numel()) - start)
        while True:
            seeds = order[start:start + size]
            nodes = sampler.sample_one(seeds, batch_generator(seed, epoch, index)).node_ids
            if nodes.numel() <= max_nodes:
                break
            size = max(1, size // 2)  # one seed always fits: per_seed <= max_nodes
        yield _induced(graph, nodes.numpy(), seeds.numpy())
        start, index = start + size, index + 1
        size = max(1, size * max_nodes // max(int(nodes.numel()), 1))


def _induced(graph: HitGraph, nodes: np.ndarray, seeds: np.ndarray) -> EdgeSubgraph:
    local = np.full(graph.num_nodes, -1, dtype=np.int64)
    local[nodes] = np.arange(nodes.size)
    src, dst = graph.edge_index
    edges = np.flatnonzero((local[src] >= 0) & (local[dst] >= 0))
    is_seed = np.zeros(graph.num_nodes, dtype=bool)
    is_seed[seeds] = True
    return EdgeSubgraph(nodes, edges, np.stack([local[src[edges]], local[dst[edges]]]),
                        is_seed[src[edges]])
