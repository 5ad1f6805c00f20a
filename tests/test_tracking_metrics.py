"""Track building and metrics on hand-made events whose answers are known."""

from __future__ import annotations

import numpy as np
import pytest

from sparsegnn.tracking.building import Components, Walkthrough
from sparsegnn.tracking.events import Event, Particles
from sparsegnn.tracking.hit_graph import HitGraph
from sparsegnn.tracking.metrics import (
    MissedParticles,
    combine,
    edge_metrics,
    missed_particles,
    roc_auc,
    track_metrics,
    trackml_score,
)
from sparsegnn.tracking.reco import build_tracks
from sparsegnn.tracking.tracks import EdgeScores, Tracks
from sparsegnn.tracking.truth import TargetConfig


def toy_event(hit_particle: list[int], pt: list[float], weight: list[float] | None = None,
              eta: list[float] | None = None) -> Event:
    """Hits at increasing radius; ``hit_particle[i]`` indexes ``pt`` (-1 = noise)."""
    n, p = len(hit_particle), len(pt)
    pidx = np.array(hit_particle, dtype=np.int64)
    eta_arr = np.zeros(p) if eta is None else np.array(eta, dtype=float)
    pts = np.array(pt, dtype=float)
    momentum = np.stack([pts, np.zeros(p), pts * np.sinh(eta_arr)], axis=1)
    particles = Particles(
        particle_id=np.arange(1, p + 1, dtype=np.int64), vertex=np.zeros((p, 3)),
        momentum=momentum, charge=np.ones(p, dtype=np.int64),
        nhits=np.bincount(pidx[pidx >= 0], minlength=p).astype(np.int64),
    )
    position = np.stack([np.arange(1, n + 1) * 10.0, np.zeros(n), np.zeros(n)], axis=1)
    w = np.ones(n) if weight is None else np.array(weight, dtype=float)
    return Event(
        name="toy", hit_id=np.arange(1, n + 1), position=position, volume=np.full(n, 8),
        layer=np.arange(n), module=np.ones(n, dtype=np.int64),
        particle_id=np.where(pidx >= 0, pidx + 1, 0), particle_index=pidx, weight=w,
        particles=particles,
    )


def test_double_majority_exactly_half_is_not_a_match() -> None:
    # Particle 0 has 4 hits; the track holds 2 of them (exactly 50% of the particle).
    ev = toy_event([0, 0, 0, 0, 1, 1, 1], pt=[2.0, 2.0])
    tracks = Tracks("toy", np.array([0, 0, -1, -1, 0, -1, -1]))  # 2 of p0 + 1 of p1
    metrics, matches = track_metrics(ev, tracks)
    assert not matches.matched.any()
    assert metrics.efficiency == 0.0 and metrics.num_tracks == 1 and metrics.fake_rate == 1.0


def test_track_with_exactly_half_of_its_hits_from_particle_is_not_a_match() -> None:
    # Track of 4 hits: 2 from p0 (all of p0's hits), 2 from p1.
    ev = toy_event([0, 0, 1, 1, 1, 1, 1], pt=[2.0, 2.0])
    tracks = Tracks("toy", np.array([0, 0, 0, 0, -1, -1, -1]))
    metrics, matches = track_metrics(ev, tracks, TargetConfig(min_hits=2))
    assert not matches.matched[0]
    assert metrics.num_reconstructable == 2 and metrics.num_matched == 0


def test_majority_above_half_matches_and_counts_duplicates() -> None:
    # p0: 6 hits split 4 + 2 over two tracks (track 0 matches; track 1 is p0-majority
    # but holds only 2/6 of p0, so it is a duplicate and a fake). p1 matched exactly.
    ev = toy_event([0, 0, 0, 0, 0, 0, 1, 1, 1, -1], pt=[1.5, 0.5])
    tracks = Tracks("toy", np.array([0, 0, 0, 0, 1, 1, 2, 2, 2, 1]))
    metrics, matches = track_metrics(ev, tracks)
    assert matches.matched.tolist() == [True, True]
    assert matches.reconstructable.tolist() == [True, False]  # p1 has pT 0.5 < 1 GeV
    assert metrics.efficiency == 1.0
    assert metrics.num_tracks == 3 and metrics.num_fake == 1
    assert metrics.num_duplicate == 1
    assert metrics.fake_rate == pytest.approx(1 / 3)
    assert metrics.duplicate_rate == pytest.approx(1 / 3)


def test_reconstructable_cuts_are_configurable() -> None:
    ev = toy_event([0, 0, 0, 1, 1, 1], pt=[0.6, 3.0], eta=[0.0, 4.5])
    tracks = Tracks("toy", np.array([0, 0, 0, 1, 1, 1]))
    default, _ = track_metrics(ev, tracks)
    assert default.num_reconstructable == 0  # p0 too soft, p1 too forward
    loose, _ = track_metrics(ev, tracks, TargetConfig(min_pt=0.5, max_abs_eta=5.0))
    assert loose.num_reconstructable == 2 and loose.efficiency == 1.0


def test_a_soft_models_tracks_scored_against_the_hard_targets_too() -> None:
    # three particles of 0.6, 1.5 and 3 GeV; the 1.5 GeV one's hits are split in two
    ev = toy_event([0, 0, 0, 1, 1, 1, 1, 2, 2, 2], pt=[0.6, 1.5, 3.0])
    tracks = Tracks("toy", np.array([0, 0, 0, 1, 1, 2, 2, 3, 3, 3]))
    soft, matches = track_metrics(ev, tracks, TargetConfig(min_pt=0.5))
    assert (soft.num_matched, soft.num_reconstructable) == (2, 3)
    assert matches.efficiency_above(1.0) == (0.5, 2)  # only the 3 GeV particle matched
    assert matches.efficiency_above(2.0) == (1.0, 1)
    assert np.isnan(matches.efficiency_above(5.0)[0])


def test_two_hit_track_does_not_match_a_three_hit_particle() -> None:
    ev = toy_event([0, 0, 0], pt=[2.0])
    tracks = Tracks("toy", np.array([0, 0, -1]))  # 2/3 of the particle, 2/2 of the track
    metrics, matches = track_metrics(ev, tracks)
    assert not matches.matched[0] and metrics.efficiency == 0.0 and metrics.num_tracks == 0
    relaxed, _ = track_metrics(ev, tracks, min_track_hits=2)
    assert relaxed.efficiency == 1.0


def test_short_tracks_are_not_counted_as_fakes() -> None:
    ev = toy_event([0, 0, 0, -1, -1], pt=[2.0])
    tracks = Tracks("toy", np.array([0, 0, 0, 1, 1]))  # a 2-noise-hit track is ignored
    metrics, _ = track_metrics(ev, tracks)
    assert metrics.num_tracks == 1 and metrics.fake_rate == 0.0


def test_trackml_score_by_hand() -> None:
    # p0 (weights 1, 2, 3) found with one extra noise hit (weight 0): 3/4 > 50% -> scores 6.
    # p1 (weights 1, 1, 1, 1) split 2 + 2: no majority -> 0. Total weight 10.
    ev = toy_event([0, 0, 0, -1, 1, 1, 1, 1], pt=[2.0, 2.0], weight=[1, 2, 3, 0, 1, 1, 1, 1])
    tracks = Tracks("toy", np.array([0, 0, 0, 0, 1, 1, -1, -1]))
    assert trackml_score(ev, tracks) == pytest.approx(0.6)
    perfect = Tracks("toy", np.array([0, 0, 0, -1, 1, 1, 1, 1]))
    assert trackml_score(ev, perfect) == pytest.approx(1.0)


def test_trackml_score_counts_only_the_intersection() -> None:
    # Track holds 3 of p0's 4 hits plus 1 of p1's: only p0's 3 hits score.
    ev = toy_event([0, 0, 0, 0, 1, 1, 1], pt=[2.0, 2.0], weight=[1, 1, 1, 1, 2, 2, 2])
    tracks = Tracks("toy", np.array([0, 0, 0, -1, 0, 1, 1]))
    # track 0: 3/4 from p0 and 3/4 of p0 -> 3; track 1: 2/2 from p1, 2/3 of p1 -> 4.
    assert trackml_score(ev, tracks) == pytest.approx(7 / 10)


def _chain(n: int, offset: int = 0) -> list[list[int]]:
    return [[offset + i, offset + i + 1] for i in range(n - 1)]


def test_components_and_walkthrough_on_a_junction() -> None:
    # Two chains 0-1-2-3 and 4-5-6-7, plus a wrong edge 1->6 scored 0.7.
    edges = np.array(_chain(4) + _chain(4, 4) + [[1, 6]]).T
    scores = np.array([0.9, 0.9, 0.9, 0.9, 0.8, 0.9, 0.7])
    es = EdgeScores("toy", edges, scores, 8)
    merged = build_tracks(es, Components(cut=0.5))
    assert merged.num_tracks == 1
    walked = build_tracks(es, Walkthrough(cut=0.5))
    # Node 6's best incoming edge is 5->6 (0.8 > 0.7), so 1->6 is dropped.
    assert walked.hit_track.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    high_cut = build_tracks(es, Components(cut=0.85))
    assert high_cut.hit_track.tolist() == [0, 0, 0, 0, 1, 1, 2, 2]


def test_short_tracks_are_dropped_and_the_rest_renumbered() -> None:
    # A 2-hit piece (0-1), a 4-hit chain (2-5) and a 3-hit chain (6-8).
    edges = np.array(_chain(2) + _chain(4, 2) + _chain(3, 6)).T
    es = EdgeScores("toy", edges, np.full(edges.shape[1], 0.9), 9)
    assert build_tracks(es, Components(cut=0.5)).hit_track.tolist() == [0, 0, 1, 1, 1, 1, 2, 2, 2]
    assert build_tracks(es, Components(cut=0.5, min_track_hits=3)).hit_track.tolist() == \
        [-1, -1, 0, 0, 0, 0, 1, 1, 1]
    walked = build_tracks(es, Walkthrough(cut=0.5, min_track_hits=4))
    assert walked.hit_track.tolist() == [-1, -1, 0, 0, 0, 0, -1, -1, -1]
    with pytest.raises(ValueError, match="min_track_hits"):
        Components(cut=0.5, min_track_hits=0)


def test_walkthrough_falls_back_to_the_next_best_edge() -> None:
    # Hit 0 prefers 0->1 (0.9) but hit 2 claims 1 with 0.95; 0 then continues via 0->3.
    edges = np.array([[0, 1], [0, 3], [2, 1]]).T
    es = EdgeScores("toy", edges, np.array([0.9, 0.8, 0.95]), 4)
    assert build_tracks(es, Walkthrough(cut=0.5)).hit_track.tolist() == [0, 1, 1, 0]


def test_isolated_hits_are_on_no_track() -> None:
    es = EdgeScores("toy", np.array([[0], [2]]), np.array([0.4]), 4)
    assert build_tracks(es, Components(cut=0.5)).hit_track.tolist() == [-1, -1, -1, -1]
    assert build_tracks(es, Components(cut=0.3)).hit_track.tolist() == [0, -1, 0, -1]


def test_roc_auc_known_values() -> None:
    assert roc_auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.2, 0.8, 0.9])) == 1.0
    assert roc_auc(np.array([0, 1]), np.array([0.5, 0.5])) == 0.5
    assert roc_auc(np.array([1, 0, 1, 0]), np.array([0.9, 0.8, 0.3, 0.1])) == 0.75
    assert np.isnan(roc_auc(np.array([1, 1]), np.array([0.1, 0.2])))


def test_edge_metrics_definitions() -> None:
    graph = HitGraph(
        "toy", np.zeros((2, 5), dtype=np.int64), np.zeros((3, 3), np.float32),
        np.zeros((5, 4), np.float32), y=np.array([1, 1, 1, 0, 0], bool),
        target=np.array([1, 1, 0, 0, 0], bool), num_true_segments=3, num_target_segments=2,
    )
    m = edge_metrics(graph, np.array([0.9, 0.2, 0.8, 0.7, 0.1]), cut=0.5)
    assert m.efficiency == 0.5  # 1 of 2 target edges kept
    assert m.purity == pytest.approx(2 / 3)  # 2 true among 3 kept
    assert m.target_purity == pytest.approx(1 / 3)
    assert m.auc == pytest.approx(5 / 6)  # 5 of 6 (true, false) pairs ordered right


def test_combine_pools_counts() -> None:
    ev = toy_event([0, 0, 0, 1, 1, 1], pt=[2.0, 2.0])
    good, _ = track_metrics(ev, Tracks("toy", np.array([0, 0, 0, 1, 1, 1])))
    bad, _ = track_metrics(ev, Tracks("toy", np.full(6, -1)))
    pooled = combine([good, bad])
    assert pooled.efficiency == 0.5 and pooled.num_reconstructable == 4
    assert pooled.trackml_score == pytest.approx(0.5)


def test_missed_particles_are_attributed_to_the_first_stage_that_lost_them() -> None:
    # Four 4-hit particles (hits 4p..4p+3). p0 is found; p1 has a segment scored below
    # the cut; p2 keeps every segment but track building splits it 2 + 2; p3 misses a
    # segment in the graph itself. A false edge joins p0 and p1.
    ev = toy_event([p for p in range(4) for _ in range(4)], pt=[2.0] * 4)
    pairs = [(4 * p + i, 4 * p + i + 1) for p in range(4) for i in range(3)]
    pairs.remove((13, 14))  # p3's second segment never made it into the graph
    pairs.append((3, 4))
    src, dst = np.array(pairs).T
    y = ev.particle_index[src] == ev.particle_index[dst]
    graph = HitGraph("toy", np.stack([src, dst]), np.zeros((16, 3), np.float32),
                     np.zeros((len(pairs), 4), np.float32), y=y, target=y.copy(),
                     num_true_segments=12, num_target_segments=12)
    scores = np.where(y, 0.9, 0.1)
    scores[pairs.index((5, 6))] = 0.2
    tracks = Tracks("toy", np.array([0, 0, 0, 0] + [-1] * 4 + [1, 1, 2, 2] + [-1] * 4))
    _, matches = track_metrics(ev, tracks)
    assert matches.matched.tolist() == [True, False, False, False]
    lost = missed_particles(ev, graph, scores, 0.5, matches)
    assert lost == MissedParticles(missed=3, lost_in_graph=1, lost_at_score_cut=1,
                                   lost_in_track_building=1)
    assert lost + lost == MissedParticles(6, 2, 2, 2)
