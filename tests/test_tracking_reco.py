"""Walkthrough with a looser second cut: chain extension and the merging of pieces."""

from __future__ import annotations

import numpy as np
import pytest

from sparsegnn.tracking.reco import EdgeScores, build_tracks
from sparsegnn.tracking.settings import RecoConfig


def scored(edges: list[tuple[int, int, float]], n: int) -> EdgeScores:
    src, dst, score = zip(*edges, strict=True)
    return EdgeScores("toy", np.array([src, dst], dtype=np.int64), np.array(score), n)


def groups(hit_track: np.ndarray) -> list[list[int]]:
    """Tracks as sorted hit lists (labels are arbitrary)."""
    out: dict[int, list[int]] = {}
    for hit, label in enumerate(hit_track.tolist()):
        if label >= 0:
            out.setdefault(label, []).append(hit)
    return sorted(out.values())


def test_merge_joins_the_two_pieces_a_weak_edge_split() -> None:
    # one particle 0-1-2-3-4-5 whose edge 2->3 scored low
    s = scored([(0, 1, 0.9), (1, 2, 0.9), (2, 3, 0.3), (3, 4, 0.9), (4, 5, 0.9)], 6)
    walk = build_tracks(s, 0.5, "walkthrough")
    assert groups(walk.hit_track) == [[0, 1, 2], [3, 4, 5]]
    # extension only attaches free hits: it never joins two chains
    assert groups(build_tracks(s, 0.5, "walkthrough", extend_cut=0.2).hit_track) == \
        [[0, 1, 2], [3, 4, 5]]
    assert groups(build_tracks(s, 0.5, "walkthrough", merge_cut=0.2).hit_track) == \
        [[0, 1, 2, 3, 4, 5]]
    assert groups(build_tracks(s, 0.5, "walkthrough", merge_cut=0.4).hit_track) == \
        [[0, 1, 2], [3, 4, 5]]


def test_extension_grows_chain_ends_one_free_hit_per_round() -> None:
    # chain 0-1-2, free hits 3 and 4 beyond its end, 5 before its start; 6 is only
    # reachable from free hit 7 (no chain): it stays off every track
    s = scored([(0, 1, 0.9), (1, 2, 0.9), (2, 3, 0.3), (3, 4, 0.25), (5, 0, 0.35),
                (7, 6, 0.4), (2, 6, 0.1)], 8)
    assert groups(build_tracks(s, 0.5, "walkthrough").hit_track) == [[0, 1, 2]]
    assert groups(build_tracks(s, 0.5, "walkthrough", extend_cut=0.2).hit_track) == \
        [[0, 1, 2, 3, 4, 5]]
    assert groups(build_tracks(s, 0.5, "walkthrough", extend_cut=0.28).hit_track) == \
        [[0, 1, 2, 3, 5]]


def test_a_free_hit_between_two_chain_ends_joins_only_the_better_one() -> None:
    # chains 0-1 and 3-4; free hit 2 is 1's way out (0.3) and 3's way in (0.35)
    s = scored([(0, 1, 0.9), (1, 2, 0.3), (2, 3, 0.35), (3, 4, 0.9)], 5)
    assert groups(build_tracks(s, 0.5, "walkthrough", extend_cut=0.2).hit_track) == \
        [[0, 1], [2, 3, 4]]
    both = build_tracks(s, 0.5, "walkthrough", extend_cut=0.2, merge_cut=0.2)
    assert groups(both.hit_track) == [[0, 1, 2, 3, 4]]


def test_extension_and_merging_need_the_walkthrough() -> None:
    s = scored([(0, 1, 0.9)], 2)
    with pytest.raises(ValueError, match="need method='walkthrough'"):
        build_tracks(s, 0.5, "components", extend_cut=0.2)
    with pytest.raises(ValueError, match="needs the walkthrough"):
        RecoConfig(extend_cut=0.2).checked()
    assert RecoConfig(method="walkthrough", extend_cut=0.2, merge_cut=0.3).checked()
