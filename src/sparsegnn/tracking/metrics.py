"""Edge-level and track-level metrics, with the definitions of the Exa.TrkX literature.

Efficiency is recall and purity is precision everywhere (one public code base swaps
them). Track matching is *double majority* with strict inequalities: a track and a
particle match when more than half of the track's hits are the particle's and more than
half of the particle's hits are on the track. A track with exactly half is not matched.
Strict majorities on both sides make matching one-to-one, so duplicates are counted with
the one-sided (track) majority, as ACTS does: a particle that is the majority particle
of k > 1 tracks contributes k - 1 duplicates.
"""

from __future__ import annotations

from dataclasses import asdict, astuple, dataclass

import numpy as np
from scipy.stats import rankdata

from sparsegnn.tracking.events import Event
from sparsegnn.tracking.hit_graph import HitGraph
from sparsegnn.tracking.tracks import Tracks
from sparsegnn.tracking.truth import DEFAULT_TARGETS, TargetConfig, segments, selected_particles

# Hit groups shorter than this are not tracks to the metrics (they match nothing and count
# in no rate; docs/tracking.md): a definition of the measurement, apart from the minimum
# length track building keeps (sparsegnn.tracking.building.MIN_TRACK_HITS).
COUNTED_TRACK_HITS = 3


@dataclass(frozen=True)
class EdgeMetrics:
    """Edge classifier quality at one score cut, on one graph."""

    cut: float
    efficiency: float  # target edges kept / target edges in the graph
    purity: float  # true edges kept / edges kept
    target_purity: float  # target edges kept / edges kept
    auc: float  # ROC AUC separating true from false edges (nan if one class is absent)
    num_kept: int


@dataclass(frozen=True)
class TrackMetrics:
    """Tracking performance of one event (or events summed, see :func:`combine`)."""

    efficiency: float  # matched reconstructable particles / reconstructable particles
    fake_rate: float  # unmatched tracks / tracks with >= min_track_hits
    duplicate_rate: float  # duplicate tracks / tracks with >= min_track_hits
    trackml_score: float  # Kaggle score, normalised by the event's total hit weight
    num_reconstructable: int
    num_matched: int
    num_tracks: int
    num_fake: int
    num_duplicate: int

    def to_dict(self) -> dict[str, float]:
        """The fields, with the efficiency under the name every command prints."""
        d = asdict(self)
        return {"tracking_efficiency": d.pop("efficiency"), **d}


@dataclass(frozen=True)
class ParticleMatches:
    """Per-particle results, for efficiency-vs-pT/eta plots."""

    pt: np.ndarray
    eta: np.ndarray
    nhits: np.ndarray
    reconstructable: np.ndarray  # bool
    matched: np.ndarray  # bool: double-majority matched to some track

    def efficiency_above(self, min_pt: float) -> tuple[float, int]:
        """Efficiency over the reconstructable particles of at least ``min_pt`` GeV, and
        how many there are: one model's tracks scored against a harder target (pT > 1
        GeV for a model trained for 0.5). A bound below the targets' own counts none of
        the particles between them."""
        reco = self.reconstructable & (self.pt >= min_pt)
        return _ratio(int((reco & self.matched).sum()), int(reco.sum())), int(reco.sum())


def edge_metrics(graph: HitGraph, scores: np.ndarray, cut: float = 0.5) -> EdgeMetrics:
    """Efficiency, purity (both at ``cut``) and ROC AUC of ``scores`` on ``graph``'s edges."""
    kept = scores >= cut
    n_kept = int(kept.sum())
    return EdgeMetrics(
        cut=cut,
        efficiency=_ratio(int((kept & graph.target).sum()), int(graph.target.sum())),
        purity=_ratio(int((kept & graph.y).sum()), n_kept),
        target_purity=_ratio(int((kept & graph.target).sum()), n_kept),
        auc=roc_auc(graph.y, scores),
        num_kept=n_kept,
    )


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve via the Mann-Whitney rank statistic (ties count half)."""
    labels = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def match_tracks(event: Event,
                 tracks: Tracks) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Track-particle pairs sharing hits: ``(track, particle, shared, double_majority)``."""
    hit_track, pidx = tracks.hit_track, event.particle_index
    both = (hit_track >= 0) & (pidx >= 0)
    n_particles = len(event.particles)
    keys, shared = np.unique(hit_track[both] * n_particles + pidx[both], return_counts=True)
    track, particle = keys // max(n_particles, 1), keys % max(n_particles, 1)
    track_size = tracks.sizes()[track]
    particle_size = event.particles.nhits[particle]
    majority = (2 * shared > track_size) & (2 * shared > particle_size)
    return track, particle, shared, majority


def track_metrics(event: Event, tracks: Tracks, cfg: TargetConfig = DEFAULT_TARGETS,
                  min_track_hits: int = COUNTED_TRACK_HITS) -> tuple[TrackMetrics, ParticleMatches]:
    """Tracking efficiency, fake and duplicate rates and TrackML score of ``tracks``.

    Only tracks with at least ``min_track_hits`` hits count, for matching as for the
    rates; the TrackML score follows the challenge and uses every hit assignment.
    """
    track, particle, shared, majority = match_tracks(event, tracks)
    sizes = tracks.sizes()
    counted = sizes >= min_track_hits
    majority &= counted[track]  # shorter hit groups are not tracks: they match nothing
    matched_track = np.zeros(tracks.num_tracks, dtype=bool)
    matched_track[track[majority]] = True
    matched_particle = np.zeros(len(event.particles), dtype=bool)
    matched_particle[particle[majority]] = True
    reco = selected_particles(event, cfg)
    n_dup = _duplicates(track, particle, shared, sizes, counted)
    n_tracks = int(counted.sum())
    n_fake = int((counted & ~matched_track).sum())
    metrics = TrackMetrics(
        efficiency=_ratio(int((reco & matched_particle).sum()), int(reco.sum())),
        fake_rate=_ratio(n_fake, n_tracks), duplicate_rate=_ratio(n_dup, n_tracks),
        trackml_score=trackml_score(event, tracks),
        num_reconstructable=int(reco.sum()), num_matched=int((reco & matched_particle).sum()),
        num_tracks=n_tracks, num_fake=n_fake, num_duplicate=n_dup,
    )
    p = event.particles
    return metrics, ParticleMatches(p.pt, p.eta, p.nhits, reco, matched_particle)


def _duplicates(track: np.ndarray, particle: np.ndarray, shared: np.ndarray,
                sizes: np.ndarray, counted: np.ndarray) -> int:
    """Sum over particles of (tracks whose > 50% majority is that particle) - 1."""
    majority_of_track = (2 * shared > sizes[track]) & counted[track]
    per_particle = np.bincount(particle[majority_of_track])
    return int(np.maximum(per_particle - 1, 0).sum())


def trackml_score(event: Event, tracks: Tracks) -> float:
    """The TrackML (Kaggle) score: weight of hits on double-majority track-particle pairs.

    Hits on no track count as one-hit tracks, as the challenge assigned every hit to a
    track. The sum is divided by the event's total weight, which is 1 on a full Kaggle
    event, so subsampled events score on the same 0-1 scale.
    """
    full = tracks.with_singletons()
    track, particle, _, majority = match_tracks(event, full)
    good_particle = np.full(full.num_tracks, -1, dtype=np.int64)
    good_particle[track[majority]] = particle[majority]
    on_good = (event.particle_index >= 0) & (good_particle[full.hit_track] == event.particle_index)
    total = float(event.weight.sum())
    return float(event.weight[on_good].sum()) / total if total > 0 else float("nan")


@dataclass(frozen=True)
class MissedParticles:
    """Where the unmatched reconstructable particles were first lost, stage by stage.

    A particle counts at the first stage that lost any of its segments (consecutive hit
    pairs): graph construction, then the edge-score cut; a particle that reached track
    building with every segment kept was lost there (a junction resolved the wrong way,
    splitting it or merging it with another particle). Tells which stage to improve.
    """

    missed: int
    lost_in_graph: int
    lost_at_score_cut: int
    lost_in_track_building: int

    def __add__(self, other: MissedParticles) -> MissedParticles:
        return MissedParticles(*(a + b for a, b in zip(astuple(self), astuple(other),
                                                       strict=True)))


def missed_particles(event: Event, graph: HitGraph, scores: np.ndarray, cut: float,
                     matches: ParticleMatches) -> MissedParticles:
    """Attribute each reconstructable, unmatched particle to the stage that first lost it."""
    n = len(event.particles)
    pidx = event.particle_index

    def per_particle(src: np.ndarray) -> np.ndarray:
        owner = pidx[src]
        return np.bincount(owner[owner >= 0], minlength=n)

    in_event = per_particle(segments(event)[0])
    in_graph = per_particle(graph.edge_index[0, graph.y])
    kept = per_particle(graph.edge_index[0, graph.y & (scores >= cut)])
    missed = matches.reconstructable & ~matches.matched
    graph_loss = missed & (in_graph < in_event)
    cut_loss = missed & ~graph_loss & (kept < in_graph)
    return MissedParticles(int(missed.sum()), int(graph_loss.sum()), int(cut_loss.sum()),
                           int((missed & ~graph_loss & ~cut_loss).sum()))


def concat_matches(per_event: list[ParticleMatches]) -> ParticleMatches:
    """All events' particles in one :class:`ParticleMatches` (for plots)."""
    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(m, name) for m in per_event])

    return ParticleMatches(cat("pt"), cat("eta"), cat("nhits"), cat("reconstructable"),
                           cat("matched"))


def combine(per_event: list[TrackMetrics]) -> TrackMetrics:
    """Pool counts over events (rates from summed counts; TrackML score averaged)."""
    def total(name: str) -> int:
        return sum(getattr(m, name) for m in per_event)

    return TrackMetrics(
        efficiency=_ratio(total("num_matched"), total("num_reconstructable")),
        fake_rate=_ratio(total("num_fake"), total("num_tracks")),
        duplicate_rate=_ratio(total("num_duplicate"), total("num_tracks")),
        trackml_score=float(np.mean([m.trackml_score for m in per_event] or [np.nan])),
        num_reconstructable=total("num_reconstructable"), num_matched=total("num_matched"),
        num_tracks=total("num_tracks"), num_fake=total("num_fake"),
        num_duplicate=total("num_duplicate"),
    )


def _ratio(num: int, den: int) -> float:
    return num / den if den else float("nan")
