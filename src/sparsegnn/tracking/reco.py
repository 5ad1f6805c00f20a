"""Track building from scored edges: connected components, or a junction-resolving walk.

Both keep the edges scored at or above a cut. Connected components then call every
connected group of hits one track, which is right as long as tracks do not touch; one
wrongly kept edge between two tracks merges them. The walkthrough first resolves
junctions: following edges outwards, each hit keeps one way out and one way in, the
highest-scoring ones still free (greedy by score). Every hit then has at most one
neighbour on each side, so the components are simple chains that follow the best path
through each junction.

The cut that keeps fakes out also loses true edges; a particle missing one edge comes out
in two pieces, and a piece holding half its hits or fewer is a fake. Two looser passes
recover them (``extend_cut``): chain ends take free hits through edges down to the looser
cut, one hit per end per round (never joining two chains); then pieces whose outer end and
inner start an edge of at least ``merge_cut`` joins are merged into one track (the
duplicates and fragments of one particle that the walkthrough split at a junction).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

# The default minimum track length, for every caller (library, command line, benchmarks):
# keep every track of two or more hits. Dense events want more (5-7; the rule in
# sparsegnn.tracking.pipeline.tune chooses it on training events).
MIN_TRACK_HITS = 1
# Rounds of extension: a chain grows by at most one hit at each end per round, and
# tracks have fewer hits than this.
_EXTEND_ROUNDS = 30


@dataclass(frozen=True)
class EdgeScores:
    """Per-edge probabilities for one event's graph (``edge_index`` oriented inner -> outer)."""

    name: str
    edge_index: np.ndarray  # [2, E] int64
    scores: np.ndarray  # [E] float in [0, 1]
    num_nodes: int


@dataclass(frozen=True)
class Tracks:
    """``hit_track[i]``: track label of hit ``i`` (0..T-1), or -1 when it is on no track."""

    name: str
    hit_track: np.ndarray  # [N] int64

    @property
    def num_tracks(self) -> int:
        return int(self.hit_track.max()) + 1 if self.hit_track.size else 0

    def sizes(self) -> np.ndarray:
        """Hits per track, ``[T]``."""
        return np.bincount(self.hit_track[self.hit_track >= 0], minlength=self.num_tracks)

    def with_singletons(self) -> Tracks:
        """Every hit on a track: unassigned hits become one-hit tracks (TrackML's convention)."""
        labels = self.hit_track.copy()
        loose = labels < 0
        labels[loose] = labels.max(initial=-1) + 1 + np.arange(int(loose.sum()))
        return Tracks(self.name, labels)


def build_tracks(scores: EdgeScores, cut: float = 0.5, method: str = "components",
                 min_hits: int = MIN_TRACK_HITS, extend_cut: float | None = None,
                 merge_cut: float | None = None) -> Tracks:
    """Tracks from the edges scored >= ``cut``; ``method`` is 'components' or 'walkthrough'.

    Tracks of fewer than ``min_hits`` hits are dropped (their hits go back to no track):
    the length requirement every tracker applies (ACTS's CKF keeps tracks of >= 6
    measurements). On dense events most short pieces are fragments of particles split by
    a missing edge, and the double-majority matching counts a fragment holding less than
    half of its particle's hits as a fake. The walkthrough then extends chains through
    edges >= ``extend_cut`` and merges pieces joined by an edge >= ``merge_cut`` (module
    docstring); both ``None``: neither.
    """
    if min_hits < 1:
        raise ValueError(f"min_hits must be >= 1, got {min_hits}")
    if method not in ("components", "walkthrough"):
        raise ValueError(
            f"unknown track-building method {method!r}; use 'components' or 'walkthrough'"
        )
    if method == "components" and (extend_cut is not None or merge_cut is not None):
        raise ValueError("extend_cut and merge_cut need method='walkthrough'")
    keep = scores.scores >= cut
    if method == "components":
        src, dst = scores.edge_index[:, keep]
        return Tracks(scores.name, _label_components(src, dst, scores.num_nodes, min_hits))
    src, dst = scores.edge_index
    chosen = np.zeros(keep.size, dtype=bool)
    chosen[keep] = _chains(src[keep], dst[keep], scores.scores[keep], scores.num_nodes)
    if extend_cut is not None:
        chosen |= _extension(scores, chosen, extend_cut)
    if merge_cut is not None:
        chosen |= _merges(scores, chosen, merge_cut)
    src, dst = src[chosen], dst[chosen]
    return Tracks(scores.name, _label_components(src, dst, scores.num_nodes, min_hits))


def _extension(scores: EdgeScores, chosen: np.ndarray, extend_cut: float) -> np.ndarray:
    """Edges (>= ``extend_cut``, not ``chosen``) that attach free hits to chain ends.

    Each round takes, greedy by score, edges between a hit on a chain with a free end on
    that side and a hit on no chain; a free hit offered two chains (one on each side)
    takes the better edge only, so extension never joins two chains."""
    src, dst = scores.edge_index
    n = scores.num_nodes
    has_out = np.bincount(src[chosen], minlength=n) > 0
    has_in = np.bincount(dst[chosen], minlength=n) > 0
    on_chain = has_out | has_in
    added = np.zeros(chosen.size, dtype=bool)
    weak = (scores.scores >= extend_cut) & ~chosen
    for _ in range(_EXTEND_ROUNDS):
        idx = np.flatnonzero(weak & ~added & ~has_out[src] & ~has_in[dst]
                             & (on_chain[src] != on_chain[dst]))
        if idx.size == 0:
            break
        take = idx[_chains(src[idx], dst[idx], scores.scores[idx], n)]
        free = np.where(on_chain[src[take]], dst[take], src[take])
        take = take[_best_per_node(free, scores.scores[take], n)[free] == np.arange(take.size)]
        added[take] = True
        has_out[src[take]] = has_in[dst[take]] = True
        on_chain[src[take]] = on_chain[dst[take]] = True
    return added


def _merges(scores: EdgeScores, chosen: np.ndarray, merge_cut: float) -> np.ndarray:
    """Edges (>= ``merge_cut``) from a chain's outer end to another chain's inner start,
    greedy by score, each end and start used once."""
    src, dst = scores.edge_index
    n = scores.num_nodes
    has_out = np.bincount(src[chosen], minlength=n) > 0
    has_in = np.bincount(dst[chosen], minlength=n) > 0
    label = _label_components(src[chosen], dst[chosen], n, 2)
    idx = np.flatnonzero((scores.scores >= merge_cut) & ~chosen & has_in[src] & ~has_out[src]
                         & has_out[dst] & ~has_in[dst] & (label[src] != label[dst]))
    merged = np.zeros(chosen.size, dtype=bool)
    merged[idx[_chains(src[idx], dst[idx], scores.scores[idx], n)]] = True
    return merged


def _chains(src: np.ndarray, dst: np.ndarray, score: np.ndarray, n: int) -> np.ndarray:
    """Mask of edges kept so every hit has at most one edge in and one edge out.

    Greedy by score, computed in rounds: each round keeps the edges that are the best
    remaining way out of their source and the best remaining way into their target,
    then drops the edges whose source already has an outgoing or whose target an
    incoming kept edge. The highest remaining edge always qualifies, so every round
    keeps at least one edge, and a hit whose best continuation was taken by a better
    edge falls back to its next best one.
    """
    kept = np.zeros(score.size, dtype=bool)
    active = np.ones(score.size, dtype=bool)
    has_out = np.zeros(n, dtype=bool)
    has_in = np.zeros(n, dtype=bool)
    idx = np.arange(score.size)
    while active.any():
        live = idx[active]
        best = (_best_per_node(src[live], score[live], n)[src[live]] == np.arange(live.size)) & (
            _best_per_node(dst[live], score[live], n)[dst[live]] == np.arange(live.size)
        )
        kept[live[best]] = True
        has_out[src[live[best]]] = True
        has_in[dst[live[best]]] = True
        active &= ~kept & ~has_out[src] & ~has_in[dst]
    return kept


def _best_per_node(node: np.ndarray, score: np.ndarray, n: int) -> np.ndarray:
    """For each node, the index of its highest-scoring edge in ``node`` (-1 if none)."""
    order = np.lexsort((np.arange(score.size), -score, node))
    first = np.ones(order.size, dtype=bool)
    first[1:] = node[order[1:]] != node[order[:-1]]
    best = np.full(n, -1, dtype=np.int64)
    best[node[order[first]]] = order[first]
    return best


def _label_components(src: np.ndarray, dst: np.ndarray, n: int, min_hits: int = 1
                      ) -> np.ndarray:
    """Component label per hit, numbered 0.. in order of first hit; hits on no component of
    at least ``max(min_hits, 2)`` hits get -1 (an isolated hit is its own 1-hit component)."""
    adj = sp.coo_matrix((np.ones(src.size, dtype=np.int8), (src, dst)), shape=(n, n)).tocsr()
    _, labels = connected_components(adj, directed=False)
    keep = np.bincount(labels)[labels] >= max(min_hits, 2)
    _, relabel = np.unique(labels[keep], return_inverse=True)
    out = np.full(n, -1, dtype=np.int64)
    out[keep] = relabel
    return out
