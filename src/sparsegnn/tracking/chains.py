"""Chains of hits from scored edges: the greedy and the labelling every builder shares.

:func:`greedy_chains` keeps, greedy by score, edges so that every hit has at most one
way in and one way out; :func:`label_components` numbers the connected pieces as tracks
and drops those too short; :func:`with_layers` drops tracks crossing too few distinct
layers. The walkthrough (:mod:`sparsegnn.tracking.reco`) and the triplets method
(:mod:`sparsegnn.tracking.triplets`) both build on them, so they sit below both.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from sparsegnn.tracking import chain_kernel
from sparsegnn.tracking.tracks import HitGeometry

# Rounds of extension: a chain grows by at most one hit at each end per round, and
# tracks have fewer hits than this.
EXTEND_ROUNDS = 30


def greedy_chains(src: np.ndarray, dst: np.ndarray, score: np.ndarray, n: int) -> np.ndarray:
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
        best = (best_per_node(src[live], score[live], n)[src[live]] == np.arange(live.size)) & (
            best_per_node(dst[live], score[live], n)[dst[live]] == np.arange(live.size)
        )
        kept[live[best]] = True
        has_out[src[live[best]]] = True
        has_in[dst[live[best]]] = True
        active &= ~kept & ~has_out[src] & ~has_in[dst]
    return kept


def best_per_node(node: np.ndarray, score: np.ndarray, n: int) -> np.ndarray:
    """For each node, the index of its highest-scoring edge in ``node`` (-1 if none)."""
    order = np.lexsort((np.arange(score.size), -score, node))
    first = np.ones(order.size, dtype=bool)
    first[1:] = node[order[1:]] != node[order[:-1]]
    best = np.full(n, -1, dtype=np.int64)
    best[node[order[first]]] = order[first]
    return best


def label_components(src: np.ndarray, dst: np.ndarray, n: int, min_hits: int = 1
                      ) -> np.ndarray:
    """Component label per hit, numbered 0.. in order of first hit; hits on no component of
    at least ``max(min_hits, 2)`` hits get -1 (an isolated hit is its own 1-hit component)."""
    fast = chain_kernel.label_components(src, dst, n, max(min_hits, 2))
    if fast is not None:
        return fast
    adj = sp.coo_matrix((np.ones(src.size, dtype=np.int8), (src, dst)), shape=(n, n)).tocsr()
    _, labels = connected_components(adj, directed=False)
    keep = np.bincount(labels)[labels] >= max(min_hits, 2)
    _, relabel = np.unique(labels[keep], return_inverse=True)
    out = np.full(n, -1, dtype=np.int64)
    out[keep] = relabel
    return out


def with_layers(labels: np.ndarray, geometry: HitGeometry | None, min_layers: int
                 ) -> np.ndarray:
    """``labels`` without the tracks crossing fewer than ``min_layers`` distinct layers
    (their hits go back to no track), renumbered 0.. in order of first hit."""
    if min_layers <= 1 or geometry is None:
        return labels
    fast = chain_kernel.with_layers(labels, geometry.layer, min_layers)
    if fast is not None:
        return fast
    on = np.flatnonzero(labels >= 0)
    _, layer = np.unique(geometry.layer[on], return_inverse=True)
    pairs = np.unique(labels[on] * (int(layer.max(initial=0)) + 1) + layer)
    crossed = np.bincount(pairs // (int(layer.max(initial=0)) + 1),
                          minlength=int(labels.max(initial=-1)) + 1)
    out = np.full(labels.size, -1, dtype=np.int64)
    keep = on[crossed[labels[on]] >= min_layers]
    out[keep] = np.unique(labels[keep], return_inverse=True)[1]
    return out
