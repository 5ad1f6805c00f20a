"""Negative edges for link prediction, drawn with tensor operations only.

Every pair ``(s, t)`` of an ``n``-node graph is the key ``s * n + t``; the existing edges
are the sorted unique keys of the graph (the row-major pattern of its adjacency), so
"is this pair an edge?" is one ``searchsorted`` over a whole batch of candidates instead
of a Python set. Three kinds, each with PyG's defaults on what is excluded:

* :func:`uniform_negatives`: distinct pairs, uniform over all non-edges without
  self-loops (PyG's ``negative_sampling``);
* :func:`degree_negatives`: both endpoints drawn with probability proportional to
  ``degree ** power``, existing edges kept unless asked (PyG's ``NegativeSampling``
  with node weights does not reject them);
* :func:`tail_negatives`: ``k`` corrupted tails per positive ``(s, t)``, redrawn where
  ``(s, t')`` is an edge (PyG's ``structured_negative_sampling``; ``ogbl-citation2``'s
  evaluation shape).

All take a ``torch.Generator`` so a run's negatives are a function of its seed alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sparsegnn.errors import InvalidValueError

# Candidates drawn per round above the number still missing: PyG oversamples by 10%;
# a little more makes the common case one round.
_OVERSAMPLE = 1.3
_MAX_ROUNDS = 32


@dataclass(frozen=True)
class EdgeLookup:
    """The sorted unique pair keys of a graph's edges: membership by binary search."""

    keys: torch.Tensor
    num_nodes: int

    @classmethod
    def of(cls, edges: torch.Tensor | EdgeLookup, num_nodes: int) -> EdgeLookup:
        """The lookup of an ``edge_index`` (or ``edges`` itself when already one: a
        trainer drawing negatives every epoch builds it once)."""
        if isinstance(edges, EdgeLookup):
            return edges
        edge_index = edges
        keys = edge_index[0].to(torch.int64) * num_nodes + edge_index[1].to(torch.int64)
        return cls(torch.unique(keys), num_nodes)

    def contains(self, keys: torch.Tensor) -> torch.Tensor:
        """Which of ``keys`` are edges (a bool tensor of their shape)."""
        if self.keys.numel() == 0:
            return torch.zeros_like(keys, dtype=torch.bool)
        pos = torch.searchsorted(self.keys, keys).clamp_(max=self.keys.numel() - 1)
        return self.keys[pos] == keys

    def out_degrees(self) -> torch.Tensor:
        return torch.bincount(self.keys // self.num_nodes, minlength=self.num_nodes)

    def degrees(self) -> torch.Tensor:
        """In- plus out-degree (twice the degree of a graph stored in both directions)."""
        ends = torch.cat([self.keys // self.num_nodes, self.keys % self.num_nodes])
        return torch.bincount(ends, minlength=self.num_nodes)


def uniform_negatives(edge_index: torch.Tensor | EdgeLookup, num_nodes: int, count: int,
                      generator: torch.Generator, *, exclude: bool = True) -> torch.Tensor:
    """``[2, m]`` distinct non-self-loop pairs, uniform over the non-edges (``m <= count``,
    fewer only when the graph has fewer non-edges, as in PyG).

    Pairs are drawn as keys of the ``n (n - 1)`` off-diagonal cells, so no draw is wasted
    on a self-loop; rounds of oversampled draws reject edges and repeats until ``count``
    remain, then a random permutation keeps the kept order unbiased. Where a quarter or
    more of all non-edges are wanted, they are enumerated and permuted instead (rejection
    would need ever more rounds for the last few).
    """
    _check_count(count)
    lookup = EdgeLookup.of(edge_index, num_nodes) if exclude else EdgeLookup(
        torch.empty(0, dtype=torch.int64), num_nodes)
    cells = num_nodes * (num_nodes - 1)
    free = cells - int((lookup.keys // num_nodes != lookup.keys % num_nodes).sum())
    count = min(count, max(free, 0))
    if 4 * count >= free:  # most non-edges wanted: enumerate them instead of collecting
        keys = _off_diagonal(torch.arange(cells), num_nodes)
        keys = keys[~lookup.contains(keys)]
        found = keys[torch.randperm(keys.numel(), generator=generator)[:count]]
        return torch.stack([found // num_nodes, found % num_nodes])
    found = torch.empty(0, dtype=torch.int64)
    for _ in range(_MAX_ROUNDS):
        if found.numel() >= count:
            break
        want = int((count - found.numel()) * _OVERSAMPLE * cells / max(free, 1)) + 16
        cand = _off_diagonal(torch.randint(cells, (want,), generator=generator), num_nodes)
        cand = cand[~lookup.contains(cand)]
        found = _distinct_in_order(torch.cat([found, cand]), generator)
    found = found[:count]
    return torch.stack([found // num_nodes, found % num_nodes])


def degree_negatives(edge_index: torch.Tensor | EdgeLookup, num_nodes: int, count: int,
                     generator: torch.Generator, *, power: float = 1.0,
                     exclude: bool = False) -> torch.Tensor:
    """``[2, count]`` pairs whose endpoints are drawn with probability proportional to
    ``degree ** power`` (popular nodes make hard negatives); with ``exclude``, pairs that
    are edges or self-loops are redrawn (for a bounded number of rounds: in a graph
    dense among its hubs a few may remain)."""
    _check_count(count)
    lookup = EdgeLookup.of(edge_index, num_nodes)
    weight = lookup.degrees().double() ** power
    if float(weight.sum()) <= 0:
        raise InvalidValueError("degree-biased negatives need a graph with edges")
    src = torch.multinomial(weight, count, replacement=True, generator=generator)
    dst = torch.multinomial(weight, count, replacement=True, generator=generator)
    for _ in range(_MAX_ROUNDS if exclude else 0):
        bad = (src == dst) | lookup.contains(src * num_nodes + dst)
        if not bool(bad.any()):
            break
        nbad = int(bad.sum())
        src[bad] = torch.multinomial(weight, nbad, replacement=True, generator=generator)
        dst[bad] = torch.multinomial(weight, nbad, replacement=True, generator=generator)
    return torch.stack([src, dst])


def tail_negatives(sources: torch.Tensor, num_nodes: int, k: int, generator: torch.Generator,
                   *, edge_index: torch.Tensor | EdgeLookup | None = None,
                   self_loops: bool = True) -> torch.Tensor:
    """``[P, k]`` tails ``t'`` for each source ``s``, uniform over the nodes, redrawn where
    ``(s, t')`` is an edge of ``edge_index`` (or a self-loop, without ``self_loops``).

    A source joined to every allowed node has no negative tail: refused up front rather
    than redrawn for ever.
    """
    _check_count(k)
    sources = sources.to(torch.int64)
    lookup = EdgeLookup.of(edge_index, num_nodes) if edge_index is not None else None
    if lookup is not None:
        room = num_nodes - lookup.out_degrees() - (0 if self_loops else 1)
        full = sources[room[sources] <= 0]
        if full.numel():
            raise InvalidValueError(f"node {int(full[0])} is joined to every node; it has "
                                    "no negative tail to draw")
    tails = torch.randint(num_nodes, (sources.numel(), k), generator=generator)
    src = sources.unsqueeze(1).expand_as(tails)
    while True:
        bad = _bad_tails(src, tails, lookup, self_loops, num_nodes)
        if not bool(bad.any()):
            return tails
        tails[bad] = torch.randint(num_nodes, (int(bad.sum()),), generator=generator)


def _bad_tails(src: torch.Tensor, tails: torch.Tensor, lookup: EdgeLookup | None,
               self_loops: bool, n: int) -> torch.Tensor:
    bad = torch.zeros_like(tails, dtype=torch.bool) if self_loops else src == tails
    if lookup is not None:
        bad |= lookup.contains(src * n + tails)
    return bad


def _off_diagonal(cell: torch.Tensor, n: int) -> torch.Tensor:
    """Key of the ``cell``-th off-diagonal position (row-major, diagonal skipped)."""
    row, col = cell // (n - 1), cell % (n - 1)
    return row * n + col + (col >= row).to(torch.int64)


def _distinct_in_order(keys: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The distinct ``keys`` in a random order (a uniform random subset, then shuffled)."""
    keys = torch.unique(keys)
    return keys[torch.randperm(keys.numel(), generator=generator)]


def _check_count(count: int) -> None:
    if count < 1:
        raise InvalidValueError(f"the number of negatives must be at least 1, got {count} "
                                "(a negative ratio of zero leaves nothing to contrast with)")
