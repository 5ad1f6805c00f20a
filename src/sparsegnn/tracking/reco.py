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

The ``triplets`` method, which chooses by helix geometry as well and recovers by it what
the cut and graph construction lose, is :mod:`sparsegnn.tracking.triplets`; the records
track building takes and gives are :mod:`sparsegnn.tracking.tracks`, the greedy and
labelling every method shares :mod:`sparsegnn.tracking.chains`.
"""

from __future__ import annotations

import numpy as np

from sparsegnn.names import TRACK_METHODS
from sparsegnn.tracking.chains import (
    EXTEND_ROUNDS,
    best_per_node,
    greedy_chains,
    label_components,
    with_layers,
)
from sparsegnn.tracking.tracks import EdgeScores, HitGeometry, Tracks
from sparsegnn.tracking.triplets import TRIPLET_MISFIT, bridges, links, second_pass, triplet_pass

# The default minimum track length, for every caller (library, command line, benchmarks):
# keep every track of two or more hits. Dense events want more (5-7; the rule in
# sparsegnn.tracking.pipeline.tune chooses it on training events).
MIN_TRACK_HITS = 1
METHODS = TRACK_METHODS


def build_tracks(scores: EdgeScores, cut: float = 0.5, method: str = "components",
                 min_hits: int = MIN_TRACK_HITS, extend_cut: float | None = None,
                 merge_cut: float | None = None, geometry: HitGeometry | None = None,
                 min_layers: int = 1, max_misfit: float = TRIPLET_MISFIT,
                 link_cut: float | None = None, max_kink: float | None = None,
                 second_misfit: float | None = None,
                 bridge_misfit: float | None = None) -> Tracks:
    """Tracks from the edges scored >= ``cut``; ``method`` is 'components', 'walkthrough'
    or 'triplets' (the walkthrough choosing by helix geometry too,
    :mod:`sparsegnn.tracking.triplets`).

    Tracks of fewer than ``min_hits`` hits are dropped (their hits go back to no track):
    the length requirement every tracker applies (ACTS's CKF keeps tracks of >= 6
    measurements). On dense events most short pieces are fragments of particles split by
    a missing edge, and the double-majority matching counts a fragment holding less than
    half of its particle's hits as a fake. The walkthrough then extends chains through
    edges >= ``extend_cut`` and merges pieces joined by an edge >= ``merge_cut`` (module
    docstring); both ``None``: neither (the triplets method extends and merges alike).
    Tracks crossing fewer than ``min_layers`` distinct layers are dropped too; the
    triplets method and ``min_layers`` > 1 need the hits' ``geometry``. ``link_cut``
    (triplets only) joins pieces and attaches free hits through edges down to that score
    where the helix geometry agrees (:mod:`sparsegnn.tracking.triplets`), before the
    length requirements; ``max_kink`` (triplets only) first cuts chains where they bend
    more than that; ``second_misfit`` (triplets only) adds a second pass over the hits
    left on no track; ``bridge_misfit`` (triplets only) joins chains across a missing
    segment before it.
    """
    _check_build(method, min_hits, extend_cut, merge_cut, geometry, min_layers)
    if method != "triplets" and not (link_cut is None and max_kink is None
                                     and second_misfit is None and bridge_misfit is None):
        raise ValueError("link_cut, max_kink, second_misfit and bridge_misfit need "
                         "method='triplets'")
    keep = scores.scores >= cut
    if method == "components":
        src, dst = scores.edge_index[:, keep]
        labels = label_components(src, dst, scores.num_nodes, min_hits)
        return Tracks(scores.name, with_layers(labels, geometry, min_layers))
    src, dst = scores.edge_index
    chosen = np.zeros(keep.size, dtype=bool)
    if method == "walkthrough":
        chosen[keep] = greedy_chains(src[keep], dst[keep], scores.scores[keep], scores.num_nodes)
    else:
        chosen = triplet_pass(scores, keep, geometry.positions, max_misfit, max_kink)
    if extend_cut is not None:
        chosen |= _extension(scores, chosen, extend_cut)
    if merge_cut is not None:
        chosen |= _merges(scores, chosen, merge_cut)
    if link_cut is not None:
        chosen |= links(scores, chosen, geometry.positions, link_cut, max_misfit)
    ends, starts = np.empty((2, 0), dtype=np.int64)
    if bridge_misfit is not None:
        ends, starts = bridges(scores, chosen, geometry, bridge_misfit, min_hits, min_layers)
    labels = with_layers(label_components(np.concatenate([src[chosen], ends]),
                                            np.concatenate([dst[chosen], starts]),
                                            scores.num_nodes, min_hits), geometry, min_layers)
    if second_misfit is not None:
        more = second_pass(scores, labels < 0, geometry.positions, second_misfit, max_kink,
                            link_cut)
        more = with_layers(label_components(src[more], dst[more], scores.num_nodes,
                                              min_hits), geometry, min_layers)
        labels = np.where(labels >= 0, labels,
                          np.where(more >= 0, more + labels.max(initial=-1) + 1, -1))
    return Tracks(scores.name, labels)


def _check_build(method: str, min_hits: int, extend_cut: float | None,
                 merge_cut: float | None, geometry: HitGeometry | None,
                 min_layers: int) -> None:
    """Refuse a combination of :func:`build_tracks` options that cannot be honoured."""
    if min_hits < 1 or min_layers < 1:
        raise ValueError(f"min_hits and min_layers must be >= 1, got {min_hits}, {min_layers}")
    if method not in METHODS:
        raise ValueError(f"unknown track-building method {method!r}; use one of {METHODS}")
    if method == "components" and (extend_cut is not None or merge_cut is not None):
        raise ValueError("extend_cut and merge_cut need method='walkthrough' or 'triplets'")
    if geometry is None and (method == "triplets" or min_layers > 1):
        raise ValueError("method='triplets' and min_layers > 1 need the hits' geometry")


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
    for _ in range(EXTEND_ROUNDS):
        idx = np.flatnonzero(weak & ~added & ~has_out[src] & ~has_in[dst]
                             & (on_chain[src] != on_chain[dst]))
        if idx.size == 0:
            break
        take = idx[greedy_chains(src[idx], dst[idx], scores.scores[idx], n)]
        free = np.where(on_chain[src[take]], dst[take], src[take])
        take = take[best_per_node(free, scores.scores[take], n)[free] == np.arange(take.size)]
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
    label = label_components(src[chosen], dst[chosen], n, 2)
    idx = np.flatnonzero((scores.scores >= merge_cut) & ~chosen & has_in[src] & ~has_out[src]
                         & has_out[dst] & ~has_in[dst] & (label[src] != label[dst]))
    merged = np.zeros(chosen.size, dtype=bool)
    merged[idx[greedy_chains(src[idx], dst[idx], scores.scores[idx], n)]] = True
    return merged
