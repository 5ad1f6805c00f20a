"""The ``triplets`` track-building method: chains chosen by helix geometry as well as score.

At pileup 200 the edge classifier's best way out of a hit is a true edge only ~87% of the
time, so choosing by score alone at junctions strings hits of several particles together.
The ``triplets`` method chooses by geometry as well: it scores every pair of kept edges
that meet at a hit (a triplet of hits) by how far it bends from a helix out of the beam
line (the triplet's xy curvature against that of the circle through the beam line and
its first two hits; the change of polar angle between its two segments), drops
triplets beyond ``max_misfit``, and keeps triplets greedily by the lower of their two edge
scores minus :data:`_MISFIT_WEIGHT` times the misfit, each hit the middle of at most one
and every hit keeping one way in and one way out. Fakes that survive are mostly strings
of overlap-module hit pairs of different particles (two hits per layer): ``min_layers``
drops tracks crossing fewer distinct layers, the requirement a Kalman filter's hole count
makes.

What the cut loses, the triplets method recovers by geometry (``link_cut``): a particle
missing one edge comes out in pieces that each cross too few layers, and are dropped.
Linking rounds then join a chain's outer end to another chain's inner start, or attach a
free hit to a chain end, through any graph edge scored >= ``link_cut`` (0: every edge),
when the triplets the new edge makes with the chain hits on either side fit a helix
(misfit <= ``max_misfit`` per side), best score minus weighted misfit first. Geometry decides
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
came out as exactly two such chains (docs/results/tracking.md).

It is apart from :mod:`sparsegnn.tracking.reco`, which picks the method and applies the
length requirements, because the helix geometry and its passes (triplet chains, kink
cuts, links, the second pass, bridges) are this method's own, on constants of its own.
"""

from __future__ import annotations

import numpy as np

from sparsegnn.tracking import chain_kernel
from sparsegnn.tracking.chains import (
    EXTEND_ROUNDS,
    best_per_node,
    greedy_chains,
    label_components,
    with_layers,
)
from sparsegnn.tracking.tracks import EdgeScores, HitGeometry

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
# The curvature of three hits whose xy arms are l1 and l2 mm long moves by about
# 2 d / (l1 l2) when the middle hit moves by d across them, so on short arms (pixel
# endcap disks, 10-20 mm apart in r) hit resolution swamps the spread above: on
# pileup-200 validation events 13.5% of true pT > 1 GeV triplets with 10-15 mm arms had
# a misfit over 36, against 0.04% with 30-50 mm arms. The curvature spread is therefore
# sqrt(_CURVATURE_SPREAD^2 + (_ARM_NOISE_MM / (l1 l2))^2); 0.05 mm (d = 25 um) fits how
# that tail falls as 1 / l^2 (docs/results/tracking.md).
_ARM_NOISE_MM = 0.05
# Triplets and links are taken greedily by edge score minus this times their misfit. With
# weight 1 a score gap of 0.1 outweighed a misfit gap of 0.1 squared spreads, and where
# two particles cross, a well-scored edge onto the other one won (the misfit tells them
# apart, the network's scores, near 1 for both, do not). On the validation events of the
# four conditions (docs/results/tracking.md) weights 1 / 3 / 10 / 30 / 100 gave mean
# efficiencies 0.9910 / 0.9915 / 0.9919 / 0.9921 / 0.9915, every fake rate <= 0.01 from 3
# to 30; pileup 200 over pT > 1 GeV 0.9848 at 1, 0.9897 at 30.
_MISFIT_WEIGHT = 30.0
_MIN_SEGMENT_MM = 15.0
TRIPLET_MISFIT = 16.0  # default max_misfit: squared spreads, summed
# Bridging looks for chain starts within this azimuth (seen from the beam line) of a
# chain's end. Across the longest segments of target particles (1.05 m: 99.9% of pT > 1
# GeV ones at pileup 50 and 200 are shorter) hits of a 1 GeV particle turn by < 0.3 rad
# (like the misfit spreads above, this is for pT > 1 GeV targets).
_BRIDGE_DPHI = 0.3


def triplet_pass(scores: EdgeScores, usable: np.ndarray, positions: np.ndarray,
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


def _triplet_chains(src: np.ndarray, dst: np.ndarray, score: np.ndarray,
                    positions: np.ndarray, n: int, max_misfit: float) -> np.ndarray:
    """Mask of edges kept by greedy triplet selection (module docstring): a triplet a-b-c
    is taken when b is the middle of no taken triplet and it leaves every hit at most one
    way in and one way out. Sequential (a triplet's admission depends on every better
    one), in C where it builds (:mod:`sparsegnn.tracking.chain_kernel`)."""
    first, second = _edge_pairs(src, dst, n)
    a, b, c = src[first], dst[first], dst[second]
    misfit = _triplet_misfit(positions, a, b, c)
    ok = misfit <= max_misfit
    rank = np.minimum(score[first], score[second])[ok] - _MISFIT_WEIGHT * misfit[ok]
    order = np.argsort(-rank, kind="stable")
    a, b, c = a[ok][order], b[ok][order], c[ok][order]
    out_of = chain_kernel.triplet_greedy(a, b, c, n)
    if out_of is None:
        out_of = _greedy(a, b, c, n)
    return out_of[src] == dst


def _greedy(a: np.ndarray, b: np.ndarray, c: np.ndarray, n: int) -> np.ndarray:
    """Python's form of :func:`sparsegnn.tracking.chain_kernel.triplet_greedy`."""
    out_of, in_of = [-1] * n, [-1] * n
    middle = [False] * n
    for i, j, k in zip(a.tolist(), b.tolist(), c.tolist(), strict=True):
        if (middle[j] or out_of[i] not in (-1, j) or in_of[j] not in (-1, i)
                or out_of[j] not in (-1, k) or in_of[k] not in (-1, j)):
            continue
        middle[j] = True
        out_of[i], in_of[j], out_of[j], in_of[k] = j, i, k, j
    return np.asarray(out_of, dtype=np.int64)


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
    (a-b against a-c, or a-c against b-c); both short: misfit 0. All but the arctangents
    in C where it builds (:func:`sparsegnn.tracking.chain_kernel.triplet_parts`)."""
    parts = chain_kernel.triplet_parts(positions, a, b, c, _MIN_SEGMENT_MM,
                                       _CURVATURE_SPREAD ** 2, _ARM_NOISE_MM)
    if parts is None:
        return _misfit(positions, a, b, c)
    bent, y1, x1, y2, x2 = parts
    return bent + ((np.arctan2(y1, x1) - np.arctan2(y2, x2)) / _THETA_SPREAD) ** 2


def _misfit(positions: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray
            ) -> np.ndarray:
    """numpy's form of :func:`_triplet_misfit`."""
    pa, pb, pc = positions[a], positions[b], positions[c]
    beam = np.zeros_like(pa)
    r_a, r_b, r_c = (np.hypot(p[:, 0], p[:, 1]) for p in (pa, pb, pc))
    t_ab = np.arctan2(r_b - r_a, pb[:, 2] - pa[:, 2])
    t_bc = np.arctan2(r_c - r_b, pc[:, 2] - pb[:, 2])
    first = np.linalg.norm(pb - pa, axis=1) > _MIN_SEGMENT_MM
    second = np.linalg.norm(pc - pb, axis=1) > _MIN_SEGMENT_MM
    bend = _curvature(pa, pb, pc) - _curvature(beam, pa, pb)
    turn = t_ab - t_bc
    arms = _arm(pa, pb) * _arm(pb, pc)
    # The chord a-c only where a segment is short (overlapping modules: a few percent).
    short = np.flatnonzero(~(first & second))
    if short.size:
        pa, pb, pc, beam = pa[short], pb[short], pc[short], beam[short]
        k_ab, k_ac, k_bc = (_curvature(beam, p, q) for p, q in ((pa, pb), (pa, pc), (pb, pc)))
        t_ac = np.arctan2(r_c[short] - r_a[short], pc[:, 2] - pa[:, 2])
        one, two = first[short], second[short]
        bend[short] = np.select([one, two], [k_ab - k_ac, k_ac - k_bc])
        turn[short] = np.select([one, two], [t_ab[short] - t_ac, t_ac - t_bc[short]])
        arms[short] = np.select([one, two], [_arm(pa, pb) * _arm(pa, pc),
                                             _arm(pa, pc) * _arm(pb, pc)], 1.0)
    spread_sq = _CURVATURE_SPREAD ** 2 + (_ARM_NOISE_MM / np.maximum(arms, 1e-9)) ** 2
    return bend ** 2 / spread_sq + (turn / _THETA_SPREAD) ** 2


def _arm(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """xy distance (mm) from each p to each q."""
    return np.hypot(q[:, 0] - p[:, 0], q[:, 1] - p[:, 1])


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


def links(scores: EdgeScores, chosen: np.ndarray, positions: np.ndarray, link_cut: float,
           max_misfit: float) -> np.ndarray:
    """Edges (>= ``link_cut``, not ``chosen``) that join chain pieces or attach free hits
    to chain ends where the helix geometry agrees (module docstring), in rounds until
    none is left: a piece grows or joins once per end per round, so a later round
    checks the triplets against the hits the earlier ones added."""
    added = np.zeros(chosen.size, dtype=bool)
    for _ in range(EXTEND_ROUNDS):
        found = _link_round(scores, chosen | added, positions, link_cut, max_misfit)
        if not found.any():
            break
        added |= found
    return added


def _link_round(scores: EdgeScores, chosen: np.ndarray, positions: np.ndarray,
                link_cut: float, max_misfit: float) -> np.ndarray:
    """One round of :func:`links`: every candidate edge from a hit with no way out to a
    hit with no way in, at least one of them on a chain and not both on the same one,
    whose triplets with the chain hits before and after it each have misfit <=
    ``max_misfit``; greedy by score minus weighted misfit, each hit once on each side, and a free
    hit joined on one side only (its triplet with both neighbours is never checked)."""
    src, dst = scores.edge_index
    n = scores.num_nodes
    in_of, out_of, label = _chain_ways(scores, chosen)
    idx = chain_kernel.link_candidates(src, dst, scores.scores, link_cut, chosen, out_of,
                                       in_of, label)
    if idx is None:
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
    rank = scores.scores[idx] - _MISFIT_WEIGHT * misfit
    take = np.flatnonzero(greedy_chains(src[idx], dst[idx], rank, n))
    rank, take = rank[take], idx[take]
    free = np.where(label[src[take]] >= 0, dst[take], src[take])
    free_side = label[free] < 0
    best = best_per_node(free[free_side], rank[free_side], n)
    keep = np.ones(take.size, dtype=bool)
    keep[np.flatnonzero(free_side)] = best[free[free_side]] == np.arange(int(free_side.sum()))
    out = np.zeros(chosen.size, dtype=bool)
    out[take[keep]] = True
    return out


def second_pass(scores: EdgeScores, free: np.ndarray, positions: np.ndarray,
                 max_misfit: float, max_kink: float | None, link_cut: float | None
                 ) -> np.ndarray:
    """Mask of the edges the second pass chains (module docstring): triplets through every
    edge between two ``free`` hits up to ``max_misfit``, cut at kinks and linked (through
    edges between free hits only) as the first pass was."""
    src, dst = scores.edge_index
    usable = free[src] & free[dst]
    chosen = triplet_pass(scores, usable, positions, max_misfit, max_kink)
    if link_cut is not None:
        rest = EdgeScores(scores.name, scores.edge_index,
                          np.where(usable, scores.scores, -1.0), scores.num_nodes)
        chosen |= links(rest, chosen, positions, link_cut, max_misfit)
    return chosen


def bridges(scores: EdgeScores, chosen: np.ndarray, geometry: HitGeometry,
             max_misfit: float, min_hits: int, min_layers: int
             ) -> tuple[np.ndarray, np.ndarray]:
    """``(ends, starts)``: chain outer ends joined to other chains' inner starts with no
    edge between them (module docstring), where one of the two chains alone is shorter
    than ``min_hits`` or crosses fewer than ``min_layers`` layers, the start lies farther
    from the origin, and the triplets through the end's way in and the start's way out
    both have misfit <= ``max_misfit``; best summed misfit first, each hit once."""
    way_in, way_out, label = _chain_ways(scores, chosen)
    short = np.bincount(label[label >= 0], minlength=int(label.max(initial=-1)) + 1) < min_hits
    short[label[with_layers(label, geometry, min_layers) < 0]] = True
    positions = geometry.positions
    end, start = _bridge_candidates(positions, np.flatnonzero((way_in >= 0) & (way_out < 0)),
                                    np.flatnonzero((way_out >= 0) & (way_in < 0)), label, short)
    before = _triplet_misfit(positions, way_in[end], end, start)
    fits = before <= max_misfit  # the second triplet only for joins the first allows
    end, start, before = end[fits], start[fits], before[fits]
    after = _triplet_misfit(positions, end, start, way_out[start])
    fits = after <= max_misfit
    end, start = end[fits], start[fits]
    take = greedy_chains(end, start, -(before + after)[fits], scores.num_nodes)
    return end[take], start[take]


def _chain_ways(scores: EdgeScores, chosen: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(way_in, way_out, label)`` per hit along the ``chosen`` edges (chains: at most one
    each way): the hit before and after it (-1: none), and its chain's label (-1: on none)."""
    src, dst = scores.edge_index
    n = scores.num_nodes
    way_in = np.full(n, -1, dtype=np.int64)
    way_out = np.full(n, -1, dtype=np.int64)
    edge = np.flatnonzero(chosen)
    a, b = src[edge], dst[edge]
    way_in[b], way_out[a] = a, b
    return way_in, way_out, label_components(a, b, n, 2)


def _bridge_candidates(positions: np.ndarray, ends: np.ndarray, starts: np.ndarray,
                       label: np.ndarray, short: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``(end, start)`` pairs within :data:`_BRIDGE_DPHI` in azimuth on different
    chains, one of them ``short``, the start farther from the origin (in one C pass where
    it builds: :func:`sparsegnn.tracking.chain_kernel.bridge_candidates`)."""
    phi = np.arctan2(positions[:, 1], positions[:, 0])
    by_phi = starts[np.argsort(phi[starts], kind="stable")]
    distance = np.linalg.norm(positions, axis=1)
    fast = chain_kernel.bridge_candidates(ends, by_phi, phi, _BRIDGE_DPHI, label, short,
                                          distance)
    if fast is not None:
        return fast
    end, start = _azimuth_pairs(phi, ends, by_phi, _BRIDGE_DPHI)
    keep = ((label[end] != label[start]) & (short[label[end]] | short[label[start]])
            & (distance[start] > distance[end]))
    return end[keep], start[keep]


def _azimuth_pairs(phi: np.ndarray, ends: np.ndarray, by_phi: np.ndarray, dphi: float
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Every ``(end, start)`` of the two hit lists whose azimuths ``phi`` differ by <=
    ``dphi`` (wrapping at +-pi): ``by_phi`` the starts sorted by azimuth, a binary search
    per end."""
    ring = np.concatenate([by_phi] * 3)
    ring_phi = np.concatenate([phi[by_phi] + shift for shift in (-2 * np.pi, 0.0, 2 * np.pi)])
    lo = np.searchsorted(ring_phi, phi[ends] - dphi)
    count = np.searchsorted(ring_phi, phi[ends] + dphi, side="right") - lo
    offset = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    return np.repeat(ends, count), ring[np.repeat(lo, count) + offset]
