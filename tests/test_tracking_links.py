"""Geometric linking after the triplets (``Triplets(link_cut=...)``): pieces of one
helix split by a weak edge are joined and free hits on it attached, whatever the edge's
score; hits off the helix are not, whatever theirs."""

from __future__ import annotations

import numpy as np
import pytest

from sparsegnn.tracking.building import Triplets, Walkthrough, rebuilt
from sparsegnn.tracking.reco import build_tracks
from sparsegnn.tracking.settings import RecoConfig
from sparsegnn.tracking.tracks import EdgeScores, HitGeometry
from tracking_toys import groups, scored


def line(phis: list[float], radii: list[float]) -> HitGeometry:
    """Hits at the given azimuths and radii (mm), z = r: straight tracks out of the beam
    line (misfit 0) when their azimuth is constant; one layer per radius."""
    r, phi = np.asarray(radii), np.asarray(phis)
    positions = np.stack([r * np.cos(phi), r * np.sin(phi), r], axis=1)
    return HitGeometry(positions, np.round(r).astype(np.int64))


def six_hits_and_a_stray() -> tuple[EdgeScores, HitGeometry]:
    """A straight track 0-5 (r = 30..180 mm) whose edge 2 -> 3 scored 0.01, and hit 6 at
    r = 120 mm but 0.05 rad away in azimuth, which 2 -> 6 reaches with a high score but
    no way on."""
    geometry = line([0.0] * 6 + [0.05], [30, 60, 90, 120, 150, 180, 120])
    s = scored([(0, 1, 0.9), (1, 2, 0.9), (2, 3, 0.01), (3, 4, 0.9), (4, 5, 0.9),
                (2, 6, 0.4)], 7)
    return s, geometry


def test_linking_joins_the_pieces_a_weak_edge_split() -> None:
    s, geometry = six_hits_and_a_stray()
    plain = build_tracks(s, Triplets(cut=0.5), geometry)
    assert groups(plain.hit_track) == [[0, 1, 2], [3, 4, 5]]
    linked = build_tracks(s, Triplets(cut=0.5, link_cut=0.0), geometry)
    assert groups(linked.hit_track) == [[0, 1, 2, 3, 4, 5]]
    # the weak edge is below a link cut of 0.05: the pieces stay apart, and the stray
    # hit, though better scored, bends away from the helix and is not attached either
    assert groups(build_tracks(s, Triplets(cut=0.5, link_cut=0.05), geometry).hit_track) == \
        [[0, 1, 2], [3, 4, 5]]
    # a layer requirement counts the joined track: only the linked one survives 6 layers
    assert groups(build_tracks(s, Triplets(cut=0.5, min_layers=6, link_cut=0.0),
                               geometry).hit_track) == \
        [[0, 1, 2, 3, 4, 5]]
    assert groups(build_tracks(s, Triplets(cut=0.5, min_layers=6), geometry).hit_track) == []


def test_linking_attaches_free_hits_on_the_helix_over_rounds() -> None:
    # chain 0-1-2 kept; 3 and 4 continue the line through weak edges, one per round;
    # 5 (0.05 rad off) is offered to the chain's end by a better edge and loses to 3
    geometry = line([0.0] * 5 + [0.05], [30, 60, 90, 120, 150, 120])
    s = scored([(0, 1, 0.9), (1, 2, 0.9), (2, 3, 0.2), (3, 4, 0.1), (2, 5, 0.3)], 6)
    assert groups(build_tracks(s, Triplets(cut=0.5, link_cut=0.0), geometry).hit_track) == \
        [[0, 1, 2, 3, 4]]


def test_a_stray_hit_alone_is_refused_unless_the_misfit_limit_allows_it() -> None:
    geometry = line([0.0] * 3 + [0.05], [30, 60, 90, 120])
    s = scored([(0, 1, 0.9), (1, 2, 0.9), (2, 3, 0.3)], 4)
    assert groups(build_tracks(s, Triplets(cut=0.5, link_cut=0.0), geometry).hit_track) == \
        [[0, 1, 2]]
    assert groups(build_tracks(s, Triplets(cut=0.5, link_cut=0.0, max_misfit=1e12),
                               geometry).hit_track) == \
        [[0, 1, 2, 3]]


def test_a_free_hit_between_two_pieces_joins_one_side_per_round() -> None:
    # pieces 0-1-2 and 4-5-6 of one line; free hit 3 between them is reached from both
    # sides: one round takes one side, the next joins the rest, all on the helix
    geometry = line([0.0] * 7, [30, 60, 90, 120, 150, 180, 210])
    s = scored([(0, 1, 0.9), (1, 2, 0.9), (2, 3, 0.2), (3, 4, 0.3), (4, 5, 0.9),
                (5, 6, 0.9)], 7)
    assert groups(build_tracks(s, Triplets(cut=0.5), geometry).hit_track) == \
        [[0, 1, 2], [4, 5, 6]]
    assert groups(build_tracks(s, Triplets(cut=0.5, link_cut=0.0), geometry).hit_track) == \
        [[0, 1, 2, 3, 4, 5, 6]]


def test_link_cut_needs_the_triplets() -> None:
    with pytest.raises(ValueError, match="link_cut: only with method='triplets'"):
        rebuilt(Walkthrough(), link_cut=0.0)
    with pytest.raises(ValueError, match="link_cut"):
        Triplets(link_cut=1.5)
    config = RecoConfig(building=Triplets(link_cut=0.0))
    assert RecoConfig.from_dict(config.to_dict()).building.link_cut == 0.0
    assert RecoConfig.from_dict({"method": "triplets"}).building.link_cut is None  # older


def test_max_kink_cuts_a_chain_where_it_turns_onto_another_particle() -> None:
    # hits 0-2 rise at 45 degrees, hits 2-4 at 18 degrees (all at phi 0): the triplets
    # 0-1-2 and 2-3-4 each fit a helix, 1-2-3 turns by 0.46 rad and is never kept; hit 2
    # is the end of both kept triplets, so the chain runs through a bend no triplet
    # checked (a particle turning onto another)
    geometry = line([0.0] * 5, [30, 60, 90, 120, 150])
    z = np.array([30.0, 60.0, 90.0, 180.0, 270.0])
    bent = HitGeometry(np.column_stack([geometry.positions[:, :2], z]), geometry.layer)
    s = scored([(0, 1, 0.9), (1, 2, 0.9), (2, 3, 0.8), (3, 4, 0.8)], 5)
    assert groups(build_tracks(s, Triplets(cut=0.5), bent).hit_track) == \
        [[0, 1, 2, 3, 4]]
    # cut there, dropping the weaker edge 2 -> 3: the pieces 0-1-2 and 3-4
    assert groups(build_tracks(s, Triplets(cut=0.5, max_kink=36.0), bent).hit_track) == \
        [[0, 1, 2], [3, 4]]
    # linking cannot rejoin them through the bend either
    assert groups(build_tracks(s, Triplets(cut=0.5, max_kink=36.0, link_cut=0.0),
                               bent).hit_track) == \
        [[0, 1, 2], [3, 4]]
    # a chain that bends nowhere is left whole
    assert groups(build_tracks(s, Triplets(cut=0.5, max_kink=36.0), geometry).hit_track) == \
        [[0, 1, 2, 3, 4]]
    with pytest.raises(ValueError, match="max_kink"):
        Triplets(max_kink=0.0)


def test_second_pass_builds_from_the_hits_the_first_left() -> None:
    # track A 0-1-2-3-4 (phi 0) passes the first pass; track B 5-9 (phi 0.2) has every
    # edge under the cut, so the first pass leaves its hits on no track
    geometry = line([0.0] * 5 + [0.2] * 5, [30, 60, 90, 120, 150] * 2)
    a = [(0, 1, 0.9), (1, 2, 0.9), (2, 3, 0.9), (3, 4, 0.9)]
    b = [(5, 6, 0.05), (6, 7, 0.05), (7, 8, 0.05), (8, 9, 0.05)]
    # a stray edge from B's hit 7 onto A's hit 3 scores well: the second pass must not
    # take a hit the first pass's track holds
    s = scored(a + b + [(7, 3, 0.5)], 10)
    first = build_tracks(s, Triplets(cut=0.3, min_track_hits=5), geometry)
    assert groups(first.hit_track) == [[0, 1, 2, 3, 4]]
    both = build_tracks(s, Triplets(cut=0.3, second_misfit=36.0, min_track_hits=5), geometry)
    assert groups(both.hit_track) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert both.num_tracks == 2
    # the second pass meets the same length requirement
    short = scored(a + b[:2], 10)
    assert groups(build_tracks(short, Triplets(cut=0.3, second_misfit=36.0, min_track_hits=5),
                               geometry).hit_track) == \
        [[0, 1, 2, 3, 4]]
    with pytest.raises(ValueError, match="second_misfit"):
        rebuilt(Walkthrough(), second_misfit=36.0)


def test_another_method_over_a_triplets_model_drops_the_triplets_refinements() -> None:
    tuned = RecoConfig(building=Triplets(min_layers=5, link_cut=0.0, max_kink=36.0,
                                         second_misfit=64.0))
    walk = tuned.overridden(method="walkthrough", cut=0.3)
    assert walk.building == Walkthrough(cut=0.3, min_layers=5)
    kept = tuned.overridden(cut=0.3, method=None)
    assert kept.building == Triplets(cut=0.3, min_layers=5, link_cut=0.0, max_kink=36.0,
                                     second_misfit=64.0)


def helix(phi0: float, radii: list[float], radius_of_curvature: float = 1000.0
          ) -> HitGeometry:
    """Hits of one particle out of the beam line (azimuth phi0 + asin(r / 2R), z = r), one
    layer per radius: every triplet of them has misfit ~0."""
    r = np.asarray(radii, dtype=np.float64)
    phi = phi0 + np.arcsin(r / (2 * radius_of_curvature))
    positions = np.stack([r * np.cos(phi), r * np.sin(phi), r], axis=1)
    return HitGeometry(positions, np.round(r).astype(np.int64))


def two_pieces() -> tuple[EdgeScores, HitGeometry]:
    """One curved particle, hits 0-7 (r = 30..240 mm), as two kept chains 0-3 and 4-7 with
    no edge 3 -> 4 (the module pair the map never saw). Its azimuth crosses +-pi between
    the pieces. Hits 8-10 are a chain of another particle farther out, 0.3 rad away."""
    ours = helix(np.pi - 0.07, [30, 60, 90, 120, 150, 180, 210, 240])
    other = helix(np.pi - 0.37, [150, 180, 210], -1000.0)
    geometry = HitGeometry(np.concatenate([ours.positions, other.positions]),
                           np.concatenate([ours.layer, other.layer]))
    edges = [(0, 1), (1, 2), (2, 3), (4, 5), (5, 6), (6, 7), (8, 9), (9, 10)]
    return scored([(a, b, 0.9) for a, b in edges], 11), geometry


def test_bridging_joins_the_pieces_of_a_missing_segment() -> None:
    s, geometry = two_pieces()
    assert np.sign(geometry.positions[3, 1]) != np.sign(geometry.positions[4, 1])  # wraps
    plain = build_tracks(s, Triplets(cut=0.5, min_layers=6), geometry)
    assert groups(plain.hit_track) == []  # each piece crosses 4 layers
    bridged = build_tracks(s, Triplets(cut=0.5, min_layers=6, bridge_misfit=16.0), geometry)
    # the other particle's chain starts nearer to hit 3 but bends away: not joined
    assert groups(bridged.hit_track) == [[0, 1, 2, 3, 4, 5, 6, 7]]
    # pieces long enough alone are left as they are (a join could only merge particles)
    assert groups(build_tracks(s, Triplets(cut=0.5, min_layers=3, bridge_misfit=16.0),
                               geometry).hit_track) == \
        [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]
    # a misfit limit below the other particle's bend still joins ours (misfit ~0) ...
    assert groups(build_tracks(s, Triplets(cut=0.5, min_layers=6, bridge_misfit=1e-3),
                               geometry).hit_track) == \
        [[0, 1, 2, 3, 4, 5, 6, 7]]
    # ... and one above it lets the other particle's chain compete: the better fit wins
    assert groups(build_tracks(s, Triplets(cut=0.5, min_layers=6, bridge_misfit=1e12),
                               geometry).hit_track) == \
        [[0, 1, 2, 3, 4, 5, 6, 7]]


def test_bridging_does_not_depend_on_the_order_of_hits_or_edges() -> None:
    s, geometry = two_pieces()
    # the same hits with the second piece numbered first and the edge list reversed
    order = np.array([4, 5, 6, 7, 0, 1, 2, 3, 8, 9, 10])
    moved = HitGeometry(geometry.positions[order], geometry.layer[order])
    where = np.argsort(order)
    s2 = EdgeScores("toy", where[s.edge_index[:, ::-1]], s.scores[::-1], 11)
    assert groups(build_tracks(s2, Triplets(cut=0.5, min_layers=6, bridge_misfit=16.0),
                               moved).hit_track) == \
        [[0, 1, 2, 3, 4, 5, 6, 7]]


def test_bridge_misfit_needs_the_triplets() -> None:
    with pytest.raises(ValueError, match="bridge_misfit"):
        rebuilt(Walkthrough(), bridge_misfit=16.0)
    with pytest.raises(ValueError, match="bridge_misfit"):
        Triplets(bridge_misfit=0.0)
    tuned = RecoConfig(building=Triplets(bridge_misfit=16.0))
    assert RecoConfig.from_dict(tuned.to_dict()) == tuned
    assert RecoConfig.from_dict({"method": "triplets"}).building.bridge_misfit is None  # older
    assert tuned.overridden(method="walkthrough").building == Walkthrough()


def endcap_particle(jitter_mm: float) -> tuple[EdgeScores, HitGeometry]:
    """A 1 GeV particle through eight pixel-endcap-like disks (eta ~ -2.9: 10-20 mm apart
    in r, 90-200 mm in z), the third hit moved ``jitter_mm`` across its path in xy (hit
    resolution), every segment an edge scored 0.9."""
    r = np.array([65.5, 75.8, 88.1, 102.0, 116.9, 137.4, 157.9, 180.0])
    phi = -2.28 + np.arcsin(r / (2 * 1667.0))
    positions = np.stack([r * np.cos(phi), r * np.sin(phi), -9.1 * r], axis=1)
    positions[2, :2] += jitter_mm * np.array([-np.sin(phi[2]), np.cos(phi[2])])
    geometry = HitGeometry(positions, np.arange(8, dtype=np.int64))
    return scored([(i, i + 1, 0.9) for i in range(7)], 8), geometry


def test_short_xy_arms_widen_the_curvature_spread(monkeypatch) -> None:
    """Hits 10 mm apart in xy give a curvature that 25 um of resolution moves by ~4e-4 / mm,
    eight times the spread: that one triplet's kink used to cut the particle into pieces
    the layer requirement dropped, as in the pixel endcaps at pileup 200."""
    s, geometry = endcap_particle(0.025)
    chains = Triplets(cut=0.5, min_layers=7, max_kink=36.0)  # kinks cut, as tuned
    built = build_tracks(s, chains, geometry)
    assert groups(built.hit_track) == [list(range(8))]
    monkeypatch.setattr("sparsegnn.tracking.triplets._ARM_NOISE_MM", 0.0)  # the old spread
    assert groups(build_tracks(s, chains, geometry).hit_track) == []


def test_geometry_outranks_a_better_scored_edge_onto_another_particle(monkeypatch) -> None:
    """Where two particles cross, the network scores both continuations near 1: the
    triplet that fits the helix wins even against an edge scored 0.35 higher whose
    triplet bends by a fraction of a spread (hit 8, 0.3 mm off ours in z)."""
    ours = helix(0.0, [30, 60, 90, 120, 150, 180, 210, 240])
    stray = ours.positions[4] + np.array([0.0, 0.0, 0.3])
    geometry = HitGeometry(np.concatenate([ours.positions, stray[None]]),
                           np.append(ours.layer, ours.layer[4]))
    edges = [(0, 1, 0.9), (1, 2, 0.9), (2, 3, 0.9), (3, 4, 0.55), (4, 5, 0.9), (5, 6, 0.9),
             (6, 7, 0.9), (3, 8, 0.9)]
    s = scored(edges, 9)
    assert groups(build_tracks(s, Triplets(cut=0.5, min_layers=6), geometry).hit_track) == \
        [list(range(8))]
    monkeypatch.setattr("sparsegnn.tracking.triplets._MISFIT_WEIGHT", 1.0)  # the old ranking
    assert groups(build_tracks(s, Triplets(cut=0.5, min_layers=6), geometry).hit_track) == []
