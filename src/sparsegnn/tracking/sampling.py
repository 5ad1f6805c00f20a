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

Which seeds share a minibatch matters as much as the bound. With ``seed_order="random"``
(ShaDow's default) a minibatch is a scatter of small sampled trees, so most of its hits
see only their fan-out of neighbours, and an Interaction Network's sums over neighbours
are far smaller than over a whole event: a whole-event model scored in such minibatches
keeps a third fewer target edges, and a model trained in them scores whole events
differently from how it trained. ``seed_order="phi"`` visits the seeds in order of
azimuth, from a random angle each epoch, so a minibatch's seeds fill a wedge of the
detector; the subgraph induced on the wedge and its sampled rim holds every edge between
the wedge's hits, so most seeds train with the whole-event neighbourhood, still within
the bound and with each hit a seed once per epoch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from sparsegnn.errors import InvalidValueError
from sparsegnn.names import SEED_ORDERS
from sparsegnn.sampling import ShadowSampler, batch_generator, epoch_permutation
from sparsegnn.sparse import CSRMatrix
from sparsegnn.tracking.hit_graph import HitGraph


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




def seed_order(graph: HitGraph, order: str, seed: int, epoch: int,
               pool: np.ndarray | None = None) -> torch.Tensor:
    """The order ``epoch`` visits the seeds in (every hit, or ``pool``): shuffled, or by
    azimuth from a random starting hit, so consecutive seeds are neighbours in the detector."""
    if order not in SEED_ORDERS:
        raise InvalidValueError(f"seed order {order!r} is not one of {list(SEED_ORDERS)}")
    ids = (torch.arange(graph.num_nodes) if pool is None
           else torch.from_numpy(np.asarray(pool, dtype=np.int64)))
    shuffled = ids[epoch_permutation(int(ids.numel()), seed, epoch)]
    if order == "random" or ids.numel() == 0:
        return shuffled
    phi = torch.from_numpy(graph.node_features[:, 1])
    by_phi = ids[torch.argsort(phi[ids], stable=True)]
    start = int(torch.nonzero(by_phi == shuffled[0])[0])
    return torch.roll(by_phi, -start)


def shadow_subgraphs(graph: HitGraph, max_nodes: int, fanouts: Sequence[int], seed: int,
                     epoch: int, seeds: np.ndarray | None = None,
                     order: str = "random") -> Iterator[EdgeSubgraph]:
    """ShaDow minibatches covering every hit of ``graph`` (or only ``seeds``) once as a seed,
    each <= max_nodes hits, the seeds taken in ``order`` (see :func:`seed_order`)."""
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
    visit = seed_order(graph, order, seed, epoch, seeds)
    start = index = 0
    size = max(1, max_nodes // per_seed)
    while start < visit.numel():
        size = min(size, int(visit.numel()) - start)
        while True:
            seeds = visit[start:start + size]
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
