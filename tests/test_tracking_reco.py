"""Walkthrough with a looser second cut (chain extension, merging of pieces); triplet
track building by helix geometry; the distinct-layer requirement."""

from __future__ import annotations

import numpy as np
import pytest

from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.tracking.building import Components, Triplets, Walkthrough, rebuilt
from sparsegnn.tracking.reco import build_tracks
from sparsegnn.tracking.settings import RecoConfig
from sparsegnn.tracking.tracks import EdgeScores, HitGeometry
from tracking_toys import groups, scored


def test_merge_joins_the_two_pieces_a_weak_edge_split() -> None:
    # one particle 0-1-2-3-4-5 whose edge 2->3 scored low
    s = scored([(0, 1, 0.9), (1, 2, 0.9), (2, 3, 0.3), (3, 4, 0.9), (4, 5, 0.9)], 6)
    walk = build_tracks(s, Walkthrough(cut=0.5))
    assert groups(walk.hit_track) == [[0, 1, 2], [3, 4, 5]]
    # extension only attaches free hits: it never joins two chains
    assert groups(build_tracks(s, Walkthrough(cut=0.5, extend_cut=0.2)).hit_track) == \
        [[0, 1, 2], [3, 4, 5]]
    assert groups(build_tracks(s, Walkthrough(cut=0.5, merge_cut=0.2)).hit_track) == \
        [[0, 1, 2, 3, 4, 5]]
    assert groups(build_tracks(s, Walkthrough(cut=0.5, merge_cut=0.4)).hit_track) == \
        [[0, 1, 2], [3, 4, 5]]


def test_extension_grows_chain_ends_one_free_hit_per_round() -> None:
    # chain 0-1-2, free hits 3 and 4 beyond its end, 5 before its start; 6 is only
    # reachable from free hit 7 (no chain): it stays off every track
    s = scored([(0, 1, 0.9), (1, 2, 0.9), (2, 3, 0.3), (3, 4, 0.25), (5, 0, 0.35),
                (7, 6, 0.4), (2, 6, 0.1)], 8)
    assert groups(build_tracks(s, Walkthrough(cut=0.5)).hit_track) == [[0, 1, 2]]
    assert groups(build_tracks(s, Walkthrough(cut=0.5, extend_cut=0.2)).hit_track) == \
        [[0, 1, 2, 3, 4, 5]]
    assert groups(build_tracks(s, Walkthrough(cut=0.5, extend_cut=0.28)).hit_track) == \
        [[0, 1, 2, 3, 5]]


def test_a_free_hit_between_two_chain_ends_joins_only_the_better_one() -> None:
    # chains 0-1 and 3-4; free hit 2 is 1's way out (0.3) and 3's way in (0.35)
    s = scored([(0, 1, 0.9), (1, 2, 0.3), (2, 3, 0.35), (3, 4, 0.9)], 5)
    assert groups(build_tracks(s, Walkthrough(cut=0.5, extend_cut=0.2)).hit_track) == \
        [[0, 1], [2, 3, 4]]
    both = build_tracks(s, Walkthrough(cut=0.5, extend_cut=0.2, merge_cut=0.2))
    assert groups(both.hit_track) == [[0, 1, 2, 3, 4]]


def test_extension_and_merging_need_the_walkthrough() -> None:
    with pytest.raises(ValueError, match="extend_cut: only with method='walkthrough'"):
        rebuilt(Components(), extend_cut=0.2)
    with pytest.raises(InvalidValueError, match="extend_cut"):
        RecoConfig().overridden(extend_cut=0.2)
    assert RecoConfig().overridden(method="walkthrough", extend_cut=0.2,
                                   merge_cut=0.3).building == Walkthrough(extend_cut=0.2,
                                                                          merge_cut=0.3)
    with pytest.raises(ValueError, match="merge_cut"):
        Walkthrough(merge_cut=1.5)


def crossing_lines() -> tuple[EdgeScores, HitGeometry]:
    """Two straight tracks out of the beam line, A (hits 0-3, phi 0) and B (hits 4-7,
    phi 0.1), at r = 30, 60, 90, 120 mm and z = r; the crossing edges A2 -> B3 and
    B2 -> A3 score higher than the true A2 -> A3 and B2 -> B3."""
    r = 30.0 * np.arange(1, 5)
    phi = np.repeat([0.0, 0.1], 4)
    rr = np.tile(r, 2)
    positions = np.stack([rr * np.cos(phi), rr * np.sin(phi), rr], axis=1)
    edges = [(0, 1, 0.8), (1, 2, 0.6), (2, 3, 0.8), (4, 5, 0.8), (5, 6, 0.6), (6, 7, 0.8),
             (1, 6, 0.9), (5, 2, 0.9)]
    return scored(edges, 8), HitGeometry(positions, np.tile(np.arange(4), 2))


def test_triplets_follow_the_helix_where_the_score_points_elsewhere() -> None:
    s, geometry = crossing_lines()
    # by score alone each track turns onto the other at the crossing
    assert groups(build_tracks(s, Walkthrough(cut=0.5)).hit_track) == [[0, 1, 6, 7], [2, 3, 4, 5]]
    assert groups(build_tracks(s, Triplets(cut=0.5), geometry).hit_track) == \
        [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_min_layers_drops_tracks_of_hit_pairs_on_few_layers() -> None:
    # track 0-5 has two hits on each of 3 layers (overlapping modules), track 6-9 four layers
    s = scored([(0, 1, 0.9), (1, 2, 0.9), (2, 3, 0.9), (3, 4, 0.9), (4, 5, 0.9),
                (6, 7, 0.9), (7, 8, 0.9), (8, 9, 0.9)], 10)
    positions = np.zeros((10, 3))
    geometry = HitGeometry(positions, np.array([0, 0, 1, 1, 2, 2, 0, 1, 2, 3]))
    assert groups(build_tracks(s, Components(cut=0.5, min_layers=3), geometry).hit_track) == \
        [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9]]
    assert groups(build_tracks(s, Components(cut=0.5, min_layers=4), geometry).hit_track) == \
        [[6, 7, 8, 9]]
    with pytest.raises(ValueError, match="needs the hits' geometry"):
        build_tracks(s, Components(cut=0.5, min_layers=4))
    with pytest.raises(ValueError, match="needs the hits' geometry"):
        build_tracks(s, Triplets(cut=0.5))


def test_triplet_settings_are_checked() -> None:
    assert Triplets(extend_cut=0.2, min_layers=6).needs_geometry
    with pytest.raises(ValueError, match="min_layers"):
        Components(min_layers=0)
    with pytest.raises(ValueError, match="max_misfit"):
        Triplets(max_misfit=0.0)
    found = RecoConfig.from_dict({"method": "triplets", "min_layers": 6}).building
    assert found == Triplets(min_layers=6)
    with pytest.raises(DataFormatError, match="unknown track-building method 'magic'"):
        RecoConfig.from_dict({"method": "magic"})


def test_files_with_every_method_field_flat_load_as_their_method() -> None:
    """Files of earlier versions wrote all methods' fields, unused ones None (max_misfit
    at its default): they load as the method they name, and write back only its own."""
    old = {"method": "walkthrough", "cut": 0.3, "min_track_hits": 4, "extend_cut": 0.1,
           "merge_cut": None, "min_layers": 1, "max_misfit": 16.0, "link_cut": None,
           "max_kink": None, "second_misfit": None, "bridge_misfit": None}
    config = RecoConfig.from_dict(old)
    assert config.building == Walkthrough(cut=0.3, min_track_hits=4, extend_cut=0.1)
    assert "link_cut" not in config.to_dict()
    assert RecoConfig.from_dict(config.to_dict()) == config
    with pytest.raises(DataFormatError, match="link_cut"):
        RecoConfig.from_dict({**old, "link_cut": 0.0})
