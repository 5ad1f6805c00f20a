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

At pileup 200 the edge classifier's best way out of a hit is a true edge only ~87% of the
time, so choosing by score alone at junctions strings hits of several particles together.
The ``triplets`` method chooses by geometry as well: it scores every pair of kept edges
that meet at a hit (a triplet of hits) by how far it bends from a helix out of the beam
line (the triplet's xy curvature against that of the circle through the beam line and
its first two hits; the change of polar angle between its two segments), drops
triplets beyond ``max_misfit``, and keeps triplets greedily by the lower of their two edge
scores minus the misfit, each hit the middle of at most one and every hit keeping one way
in and one way out. Fakes that survive are mostly strings of overlap-module hit pairs of
different particles (two hits per layer): ``min_layers`` drops tracks crossing fewer
distinct layers, the requirement a Kalman filter's hole count makes.

What the cut loses, the triplets method recovers by geometry (``link_cut``): a particle
missing one edge comes out in pieces that each cross too few layers, and are dropped.
Linking rounds then join a chain's outer end to another chain's inner start, or attach a
free hit to a chain end, through any graph edge scored >= ``link_cut`` (0: every edge),
when the triplets the new edge makes with the chain hits on either side fit a helix
(misfit <= ``max_misfit`` per side), best score minus misfit first. Geometry decides
where the score does not: extension by score alone added fakes everywhere.

The greedy keeps a hit's way in and way out from two different triplets when the hit is
the end of both; nothing then checks the triplet they make at that hit. On pileup-200
validation events most fakes crossing >= 7 layers were such chains, one particle turning
onto another at an unchecked hit (median worst misfit along a fake 643, along a matched
track 5). ``max_kink`` cuts every chain where its triplet misfit exceeds that, dropping
the weaker of the two edges, before linking (which checks all it joins) may continue the
pieces along the helix.

A second, looser pass (``second_misfit``) then recovers what the first left: over the hits
on no track after the length requirements (pieces too short, and hits no chain took),
it builds triplet chains again through every edge between them, whatever its score (the
score still ranks), with triplets and links up to ``second_misfit``, and keeps what meets
the same requirements. The first pass's tracks keep their hits, so the second cannot
break them: the iterative tracking of ACTS and CMS (a strict pass, then looser ones on
the hits left over) rather than resolving shared hits afterwards.

What graph construction loses, no edge can recover: a segment whose module pair the map
never saw, or that the doublet filter dropped, splits its particle into two chains that
each cross too few layers. Bridging (``bridge_misfit``) joins a chain's outer end to
another chain's inner start with no edge between them, when one of the two would fail the
length requirements alone and the triplets the join makes with the hit before it and the
hit after it both fit a helix (misfit <= ``bridge_misfit``), best fit first, each end and
start once. Of the 8 particles a model missed on pileup-50 held-out events, 6 had lost a
segment in the graph (5 at a module pair absent from its 500-event map), and 4 of those
came out as exactly two such chains (docs/tracking.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from sparsegnn.names import TRACK_METHODS

# The default minimum track length, for every caller (library, command line, benchmarks):
# keep every track of two or more hits. Dense events want more (5-7; the rule in
# sparsegnn.tracking.pipeline.tune chooses it on training events).
MIN_TRACK_HITS = 1
# Rounds of extension: a chain grows by at most one hit at each end per round, and
# tracks have fewer hits than this.
_EXTEND_ROUNDS = 30
# Triplet geometry (``method="triplets"``). True triplets of target particles (pT > 1
# GeV) on pileup-200 validation events: curvature against the beam-line circle's differs
# by < 7e-5 / mm for 90%, polar angle turns < 0.016 rad for 90%. The spreads and the cut
# below are the best of a small grid (spreads 3e-5-1e-4 and 0.007-0.02, cut 4-36) on
# validation events of the four conditions, weighed equally (docs/tracking.md): tight
# spreads rank the candidates at a junction, a loose cut keeps scattered true ones.
# A segment shorter than _MIN_SEGMENT_MM (two overlapping modules of one layer) measures
# no direction: the triplet's other segment is compared with its chord instead.
_CURVATURE_SPREAD = 5e-5  # 1 / mm
_THETA_SPREAD = 0.01  # rad
_MIN_SEGMENT_MM = 15.0
TRIPLET_MISFIT = 16.0  # default max_misfit: squared spreads, summed
# Bridging looks for chain starts within this azimuth (seen from the beam line) of a
# chain's end. Across the longest segments of target particles (1.05 m: 99.9% of pT > 1
# GeV ones at pileup 50 and 200 are shorter) hits of a 1 GeV particle turn by < 0.3 rad
# (like the misfit spreads above, this is for pT > 1 GeV targets).
_BRIDGE_DPHI = 0.3
METHODS = TRACK_METHODS


@dataclass(frozen=True)
class EdgeScores:
    """Per-edge probabilities for one event's graph (``edge_index`` oriented inner -> outer)."""

    name: str
    edge_index: np.ndarray  # [2, E] int64
    scores: np.ndarray  # [E] float in [0, 1]
    num_nodes: int


@dataclass(frozen=True)
class HitGeometry:
    """Where each hit is (``positions`` ``[N, 3]`` x, y, z in mm) and the layer it is on
    (``layer`` ``[N]``, one id per detector layer): what geometric track building and the
    distinct-layer requirement need beside the edge scores."""

    positions: np.ndarray
    layer: np.ndarray

    @classmethod
    def from_event(cls, event: object) -> HitGeometry:
        """An :class:`~sparsegnn.tracking.events.Event`'s hits (layer: volume and layer)."""
        positions = np.stack([event.x, event.y, event.z], axis=1).astype(np.float64)
        return cls(positions, np.asarray(event.volume, np.int64) * 1000 + event.layer)


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
                 merge_cut: float | None = None, geometry: HitGeometry | None = None,
                 min_layers: int = 1, max_misfit: float = TRIPLET_MISFIT,
                 link_cut: float | None = None, max_kink: float | None = None,
                 second_misfit: float | None = None,
                 bridge_misfit: float | None = None) -> Tracks:
    """Tracks from the edges scored >= ``cut``; ``method`` is 'components', 'walkthrough'
    or 'triplets' (the walkthrough choosing by helix geometry too, module docstring).

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
    where the helix geometry agrees (module docstring), before the length requirements;
    ``max_kink`` (triplets only) first cuts chains where they bend more than that;
    ``second_misfit`` (triplets only) adds a second pass over the hits left on no track;
    ``bridge_misfit`` (triplets only) joins chains across a missing segment before it.
    """
    _check_build(method, min_hits, extend_cut, merge_cut, geometry, min_layers)
    if method != "triplets" and not (link_cut is None and max_kink is None
                                     and second_misfit is None and bridge_misfit is None):
        raise ValueError("link_cut, max_kink, second_misfit and bridge_misfit need "
                         "method='triplets'")
    keep = scores.scores >= cut
    if method == "components":
        src, dst = scores.edge_index[:, keep]
        labels = _label_components(src, dst, scores.num_nodes, min_hits)
        return Tracks(scores.name, _with_layers(labels, geometry, min_layers))
    src, dst = scores.edge_index
    chosen = np.zeros(keep.size, dtype=bool)
    if method == "walkthrough":
        chosen[keep] = _chains(src[keep], dst[keep], scores.scores[keep], scores.num_nodes)
    else:
        chosen = _triplet_pass(scores, keep, geometry.positions, max_misfit, max_kink)
    if extend_cut is not None:
        chosen |= _extension(scores, chosen, extend_cut)
    if merge_cut is not None:
        chosen |= _merges(scores, chosen, merge_cut)
    if link_cut is not None:
        chosen |= _links(scores, chosen, geometry.positions, link_cut, max_misfit)
    ends, starts = np.empty((2, 0), dtype=np.int64)
    if bridge_misfit is not None:
        ends, starts = _bridges(scores, chosen, geometry, bridge_misfit, min_hits, min_layers)
    labels = _with_layers(_label_components(np.concatenate([src[chosen], ends]),
                                            np.concatenate([dst[chosen], starts]),
                                            scores.num_nodes, min_hits), geometry, min_layers)
    if second_misfit is not None:
        more = _second_pass(scores, labels < 0, geometry.positions, second_misfit, max_kink,
                            link_cut)
        more = _with_layers(_label_components(src[more], dst[more], scores.num_nodes,
                                              min_hits), geometry, min_layers)
        labels = np.where(labels >= 0, labels,
                          np.where(more >= 0, more + labels.max(initial=-1) + 1, -1))
    return Tracks(scores.name, labels)


def _bridges(scores: EdgeScores, chosen: np.ndarray, geometry: HitGeometry,
             max_misfit: float, min_hits: int, min_layers: int
             ) -> tuple[np.ndarray, np.ndarray]:
    """``(ends, starts)``: chain outer ends joined to other chains' inner starts with no
    edge between them (module docstring), where one of the two chains alone is shorter
    than ``min_hits`` or crosses fewer than ``min_layers`` layers, the start lies farther
    from the origin, and the triplets through the end's way in and the start's way out
    both have misfit <= ``max_misfit``; best summed misfit first, each hit once."""
    way_in, way_out, label = _chain_ways(scores, chosen)
    short = np.bincount(label[label >= 0], minlength=int(label.max(initial=-1)) + 1) < min_hits
    short[label[_with_layers(label, geometry, min_layers) < 0]] = True
    positions = geometry.positions
    end, start = _azimuth_pairs(positions, np.flatnonzero((way_in >= 0) & (way_out < 0)),
                                np.flatnonzero((way_out >= 0) & (way_in < 0)), _BRIDGE_DPHI)
    distance = np.linalg.norm(positions, axis=1)
    keep = ((label[end] != label[start]) & (short[label[end]] | short[label[start]])
            & (distance[start] > distance[end]))
    end, start = end[keep], start[keep]
    before = _triplet_misfit(positions, way_in[end], end, start)
    fits = before <= max_misfit  # the second triplet only for joins the first allows
    end, start, before = end[fits], start[fits], before[fits]
    after = _triplet_misfit(positions, end, start, way_out[start])
    fits = after <= max_misfit
    end, start = end[fits], start[fits]
    take = _chains(end, start, -(before + after)[fits], scores.num_nodes)
    return end[take], start[take]


def _chain_ways(scores: EdgeScores, chosen: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(way_in, way_out, label)`` per hit along the ``chosen`` edges (chains: at most one
    each way): the hit before and after it (-1: none), and its chain's label (-1: on none)."""
    src, dst = scores.edge_index
    n = scores.num_nodes
    way_in = np.full(n, -1, dtype=np.int64)
    way_out = np.full(n, -1, dtype=np.int64)
    way_in[dst[chosen]], way_out[src[chosen]] = src[chosen], dst[chosen]
    return way_in, way_out, _label_components(src[chosen], dst[chosen], n, 2)


def _azimuth_pairs(positions: np.ndarray, ends: np.ndarray, starts: np.ndarray,
                   dphi: float) -> tuple[np.ndarray, np.ndarray]:
    """Every ``(end, start)`` of the two hit lists whose azimuths differ by <= ``dphi``
    (wrapping at +-pi): the starts sorted by azimuth, a binary search per end."""
    phi = np.arctan2(positions[:, 1], positions[:, 0])
    by_phi = starts[np.argsort(phi[starts], kind="stable")]
    ring = np.concatenate([by_phi] * 3)
    ring_phi = np.concatenate([phi[by_phi] + shift for shift in (-2 * np.pi, 0.0, 2 * np.pi)])
    lo = np.searchsorted(ring_phi, phi[ends] - dphi)
    count = np.searchsorted(ring_phi, phi[ends] + dphi, side="right") - lo
    offset = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    return np.repeat(ends, count), ring[np.repeat(lo, count) + offset]


def _second_pass(scores: EdgeScores, free: np.ndarray, positions: np.ndarray,
                 max_misfit: float, max_kink: float | None, link_cut: float | None
                 ) -> np.ndarray:
    """Mask of the edges the second pass chains (module docstring): triplets through every
    edge between two ``free`` hits up to ``max_misfit``, cut at kinks and linked (through
    edges between free hits only) as the first pass was."""
    src, dst = scores.edge_index
    usable = free[src] & free[dst]
    chosen = _triplet_pass(scores, usable, positions, max_misfit, max_kink)
    if link_cut is not None:
        rest = EdgeScores(scores.name, scores.edge_index,
                          np.where(usable, scores.scores, -1.0), scores.num_nodes)
        chosen |= _links(rest, chosen, positions, link_cut, max_misfit)
    return chosen


def _triplet_pass(scores: EdgeScores, usable: np.ndarray, positions: np.ndarray,
                  max_misfit: float, max_kink: float | None) -> np.ndarray:
    """Mask of the edges the triplet greedy chains among the ``usable`` ones, cut at
    bends above ``max_kink`` (``None``: not cut); both passes of :func:`build_tracks`."""
    src, dst = scores.edge_index
    chosen = np.zeros(usable.size, dtype=bool)
    chosen[usable] = _triplet_chains(src[usable], dst[usable], scores.scores[usable],
                                     positions, scores.num_nodes, max_misfit)
    if max_kink is not None:
        chosen &= ~_kinks(scores, chosen, positions, max_kink)
    return chosen


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


def _with_layers(labels: np.ndarray, geometry: HitGeometry | None, min_layers: int
                 ) -> np.ndarray:
    """``labels`` without the tracks crossing fewer than ``min_layers`` distinct layers
    (their hits go back to no track), renumbered 0.. in order of first hit."""
    if min_layers <= 1 or geometry is None:
        return labels
    on = np.flatnonzero(labels >= 0)
    _, layer = np.unique(geometry.layer[on], return_inverse=True)
    pairs = np.unique(labels[on] * (int(layer.max(initial=0)) + 1) + layer)
    crossed = np.bincount(pairs // (int(layer.max(initial=0)) + 1),
                          minlength=int(labels.max(initial=-1)) + 1)
    out = np.full(labels.size, -1, dtype=np.int64)
    keep = on[crossed[labels[on]] >= min_layers]
    out[keep] = np.unique(labels[keep], return_inverse=True)[1]
    return out


def _triplet_chains(src: np.ndarray, dst: np.ndarray, score: np.ndarray,
                    positions: np.ndarray, n: int, max_misfit: float) -> np.ndarray:
    """Mask of edges kept by greedy triplet selection (module docstring): a triplet a-b-c
    is taken when b is the middle of no taken triplet and it leaves every hit at most one
    way in and one way out. Sequential (a triplet's admission depends on every better
    one), in plain Python over the candidates: ~0.1 s for a pileup-200 event."""
    first, second = _edge_pairs(src, dst, n)
    a, b, c = src[first], dst[first], dst[second]
    misfit = _triplet_misfit(positions, a, b, c)
    ok = misfit <= max_misfit
    rank = np.minimum(score[first], score[second])[ok] - misfit[ok]
    order = np.argsort(-rank, kind="stable")
    out_of, in_of = [-1] * n, [-1] * n
    middle = [False] * n
    for i, j, k in zip(a[ok][order].tolist(), b[ok][order].tolist(), c[ok][order].tolist(),
                       strict=True):
        if (middle[j] or out_of[i] not in (-1, j) or in_of[j] not in (-1, i)
                or out_of[j] not in (-1, k) or in_of[k] not in (-1, j)):
            continue
        middle[j] = True
        out_of[i], in_of[j], out_of[j], in_of[k] = j, i, k, j
    return np.asarray(out_of, dtype=np.int64)[src] == dst


def _edge_pairs(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of edges ``(e1, e2)`` with ``dst[e1] == src[e2]`` (a path of two edges)."""
    into = np.argsort(dst, kind="stable")
    out = np.argsort(src, kind="stable")
    n_in = np.bincount(dst, minlength=n)
    n_out = np.bincount(src, minlength=n)
    hits = np.flatnonzero((n_in > 0) & (n_out > 0))
    per_hit = n_in[hits] * n_out[hits]
    hit = np.repeat(hits, per_hit)
    k = np.arange(int(per_hit.sum())) - np.repeat(np.cumsum(per_hit) - per_hit, per_hit)
    width = n_out[hit]
    in_start = np.cumsum(n_in) - n_in
    out_start = np.cumsum(n_out) - n_out
    return into[in_start[hit] + k // width], out[out_start[hit] + k % width]


def _triplet_misfit(positions: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray
                    ) -> np.ndarray:
    """Squared, spread-normalised departure of triplets a-b-c from a helix out of the beam
    line: xy curvature of a-b-c against the circle through (0, 0), a and b; polar angle
    of a-b against b-c. A segment under _MIN_SEGMENT_MM is replaced by the chord a-c
    (a-b against a-c, or a-c against b-c); both short: misfit 0."""
    pa, pb, pc = positions[a], positions[b], positions[c]
    beam = np.zeros_like(pa)
    r_a, r_b, r_c = (np.hypot(p[:, 0], p[:, 1]) for p in (pa, pb, pc))
    t_ab = np.arctan2(r_b - r_a, pb[:, 2] - pa[:, 2])
    t_bc = np.arctan2(r_c - r_b, pc[:, 2] - pb[:, 2])
    first = np.linalg.norm(pb - pa, axis=1) > _MIN_SEGMENT_MM
    second = np.linalg.norm(pc - pb, axis=1) > _MIN_SEGMENT_MM
    bend = _curvature(pa, pb, pc) - _curvature(beam, pa, pb)
    turn = t_ab - t_bc
    # The chord a-c only where a segment is short (overlapping modules: a few percent).
    short = np.flatnonzero(~(first & second))
    if short.size:
        pa, pb, pc, beam = pa[short], pb[short], pc[short], beam[short]
        k_ab, k_ac, k_bc = (_curvature(beam, p, q) for p, q in ((pa, pb), (pa, pc), (pb, pc)))
        t_ac = np.arctan2(r_c[short] - r_a[short], pc[:, 2] - pa[:, 2])
        one, two = first[short], second[short]
        bend[short] = np.select([one, two], [k_ab - k_ac, k_ac - k_bc])
        turn[short] = np.select([one, two], [t_ab[short] - t_ac, t_ac - t_bc[short]])
    return (bend / _CURVATURE_SPREAD) ** 2 + (turn / _THETA_SPREAD) ** 2


def _curvature(p: np.ndarray, q: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Signed xy curvature (1 / mm) of the circle through p, q, w (0 for a straight line)."""
    u, v, t = q - p, w - q, w - p
    cross = u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0]
    lengths = np.sqrt((u[:, 0] ** 2 + u[:, 1] ** 2) * (v[:, 0] ** 2 + v[:, 1] ** 2)
                      * (t[:, 0] ** 2 + t[:, 1] ** 2))
    return np.divide(2 * cross, lengths, out=np.zeros_like(cross), where=lengths > 0)


def _kinks(scores: EdgeScores, chosen: np.ndarray, positions: np.ndarray, max_kink: float
           ) -> np.ndarray:
    """Edges to drop so that no chain of ``chosen`` edges bends at a hit by more than
    ``max_kink`` (the triplet misfit of its way in, the hit and its way out): at each
    such hit the weaker of its two edges."""
    src, dst = scores.edge_index
    n = scores.num_nodes
    edge = np.flatnonzero(chosen)
    into = np.full(n, -1, dtype=np.int64)
    out = np.full(n, -1, dtype=np.int64)
    into[dst[edge]], out[src[edge]] = edge, edge
    hits = np.flatnonzero((into >= 0) & (out >= 0))
    e_in, e_out = into[hits], out[hits]
    bent = _triplet_misfit(positions, src[e_in], hits, dst[e_out]) > max_kink
    e_in, e_out = e_in[bent], e_out[bent]
    dropped = np.zeros(chosen.size, dtype=bool)
    dropped[np.where(scores.scores[e_in] < scores.scores[e_out], e_in, e_out)] = True
    return dropped


def _links(scores: EdgeScores, chosen: np.ndarray, positions: np.ndarray, link_cut: float,
           max_misfit: float) -> np.ndarray:
    """Edges (>= ``link_cut``, not ``chosen``) that join chain pieces or attach free hits
    to chain ends where the helix geometry agrees (module docstring), in rounds until
    none is left: a piece grows or joins once per end per round, so a later round
    checks the triplets against the hits the earlier ones added."""
    added = np.zeros(chosen.size, dtype=bool)
    for _ in range(_EXTEND_ROUNDS):
        found = _link_round(scores, chosen | added, positions, link_cut, max_misfit)
        if not found.any():
            break
        added |= found
    return added


def _link_round(scores: EdgeScores, chosen: np.ndarray, positions: np.ndarray,
                link_cut: float, max_misfit: float) -> np.ndarray:
    """One round of :func:`_links`: every candidate edge from a hit with no way out to a
    hit with no way in, at least one of them on a chain and not both on the same one,
    whose triplets with the chain hits before and after it each have misfit <=
    ``max_misfit``; greedy by score minus misfit, each hit once on each side, and a free
    hit joined on one side only (its triplet with both neighbours is never checked)."""
    src, dst = scores.edge_index
    n = scores.num_nodes
    in_of, out_of, label = _chain_ways(scores, chosen)
    idx = np.flatnonzero((scores.scores >= link_cut) & ~chosen & (out_of[src] < 0)
                         & (in_of[dst] < 0) & ((label[src] >= 0) | (label[dst] >= 0))
                         & (label[src] != label[dst]))
    a, b = src[idx], dst[idx]
    before, after = in_of[a], out_of[b]
    misfit = np.zeros(idx.size)
    fits = np.ones(idx.size, dtype=bool)
    for side, (p, q, w) in ((before >= 0, (before, a, b)), (after >= 0, (a, b, after))):
        m = _triplet_misfit(positions, p[side], q[side], w[side])
        misfit[side] += m
        fits[np.flatnonzero(side)[m > max_misfit]] = False
    idx, misfit = idx[fits], misfit[fits]
    take = idx[_chains(src[idx], dst[idx], scores.scores[idx] - misfit, n)]
    rank = scores.scores[take] - misfit[np.searchsorted(idx, take)]
    free = np.where(label[src[take]] >= 0, dst[take], src[take])
    free_side = label[free] < 0
    best = _best_per_node(free[free_side], rank[free_side], n)
    keep = np.ones(take.size, dtype=bool)
    keep[np.flatnonzero(free_side)] = best[free[free_side]] == np.arange(int(free_side.sum()))
    out = np.zeros(chosen.size, dtype=bool)
    out[take[keep]] = True
    return out


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
