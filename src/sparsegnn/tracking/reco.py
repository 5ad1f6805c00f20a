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

Which method and its parameters are a :mod:`sparsegnn.tracking.building` object. The
``triplets`` method, which chooses by helix geometry as well and recovers by it what
the cut and graph construction lose, is :mod:`sparsegnn.tracking.triplets`; the records
track building takes and gives are :mod:`sparsegnn.tracking.tracks`, the greedy and
labelling every method shares :mod:`sparsegnn.tracking.chains`.
"""

from __future__ import annotations

import numpy as np

from sparsegnn.tracking.building import Components, TrackBuilding, Triplets, Walkthrough
from sparsegnn.tracking.chains import (
    EXTEND_ROUNDS,
    best_per_node,
    greedy_chains,
    label_components,
    with_layers,
)
from sparsegnn.tracking.tracks import EdgeScores, HitGeometry, Tracks
from sparsegnn.tracking.triplets import bridges, links, second_pass, triplet_pass


def build_tracks(scores: EdgeScores, building: TrackBuilding,
                 geometry: HitGeometry | None = None) -> Tracks:
    """Tracks from the edges scored >= ``building.cut``, the way ``building`` says
    (:mod:`sparsegnn.tracking.building`).

    Tracks of fewer than ``min_track_hits`` hits are dropped (their hits go back to no
    track): the length requirement every tracker applies (ACTS's CKF keeps tracks of >= 6
    measurements). On dense events most short pieces are fragments of particles split by
    a missing edge, and the double-majority matching counts a fragment holding less than
    half of its particle's hits as a fake. Tracks crossing fewer than ``min_layers``
    distinct layers are dropped too; the triplets and ``min_layers`` > 1 need the hits'
    ``geometry``.
    """
    if geometry is None and building.needs_geometry:
        raise ValueError(f"{building.method} with min_layers {building.min_layers} needs "
                         "the hits' geometry")
    keep = scores.scores >= building.cut
    if isinstance(building, Components):
        src, dst = scores.edge_index[:, keep]
        labels = label_components(src, dst, scores.num_nodes, building.min_track_hits)
        return Tracks(scores.name, with_layers(labels, geometry, building.min_layers))
    assert isinstance(building, Walkthrough)
    chosen = _chains(scores, keep, building, geometry)
    if isinstance(building, Triplets):
        return Tracks(scores.name, _triplet_labels(scores, chosen, building, geometry))
    return Tracks(scores.name, _labels(scores, chosen, building, geometry))


def _chains(scores: EdgeScores, keep: np.ndarray, building: Walkthrough,
            geometry: HitGeometry | None) -> np.ndarray:
    """The edges the walk (or the triplet pass) chooses among the ``keep`` ones, then
    extended and merged through the looser cuts (module docstring)."""
    if isinstance(building, Triplets):
        chosen = triplet_pass(scores, keep, geometry.positions, building.max_misfit,
                              building.max_kink)
    else:
        src, dst = scores.edge_index
        chosen = np.zeros(keep.size, dtype=bool)
        chosen[keep] = greedy_chains(src[keep], dst[keep], scores.scores[keep],
                                     scores.num_nodes)
    if building.extend_cut is not None:
        chosen |= _extension(scores, chosen, building.extend_cut)
    if building.merge_cut is not None:
        chosen |= _merges(scores, chosen, building.merge_cut)
    return chosen


def _labels(scores: EdgeScores, chosen: np.ndarray, building: TrackBuilding,
            geometry: HitGeometry | None, extra: np.ndarray | None = None) -> np.ndarray:
    """Track of each hit from the ``chosen`` edges (and ``extra`` ``[2, K]`` joins),
    tracks too short or on too few layers dropped."""
    src, dst = scores.edge_index
    ends, starts = np.empty((2, 0), dtype=np.int64) if extra is None else extra
    labels = label_components(np.concatenate([src[chosen], ends]),
                              np.concatenate([dst[chosen], starts]), scores.num_nodes,
                              building.min_track_hits)
    return with_layers(labels, geometry, building.min_layers)


def _triplet_labels(scores: EdgeScores, chosen: np.ndarray, building: Triplets,
                    geometry: HitGeometry) -> np.ndarray:
    """The triplets' refinements after the chains: links, bridges, the second pass."""
    b = building
    if b.link_cut is not None:
        chosen = chosen | links(scores, chosen, geometry.positions, b.link_cut, b.max_misfit)
    joins = None
    if b.bridge_misfit is not None:
        joins = bridges(scores, chosen, geometry, b.bridge_misfit, b.min_track_hits,
                        b.min_layers)
    labels = _labels(scores, chosen, b, geometry, joins)
    if b.second_misfit is None:
        return labels
    more = second_pass(scores, labels < 0, geometry.positions, b.second_misfit, b.max_kink,
                       b.link_cut)
    more = _labels(scores, more, b, geometry)
    return np.where(labels >= 0, labels,
                    np.where(more >= 0, more + labels.max(initial=-1) + 1, -1))


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
