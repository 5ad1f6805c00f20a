"""The stages composed: graph -> edge scores -> tracks -> metrics, one event at a time.

Each stage hands the next a typed object (:class:`HitGraph`, :class:`EdgeScores`,
:class:`Tracks`); this module only wires them and keeps the intermediate results an
evaluation reports (graph statistics, edge metrics, track metrics, per-particle matches).
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from sparsegnn.tracking.events import Event
from sparsegnn.tracking.graph import GraphStats, HitGraph
from sparsegnn.tracking.metrics import (
    EdgeMetrics,
    MissedParticles,
    ParticleMatches,
    TrackMetrics,
    edge_metrics,
    missed_particles,
    track_metrics,
)
from sparsegnn.tracking.model import InteractionNetwork
from sparsegnn.tracking.reco import EdgeScores, Tracks, build_tracks
from sparsegnn.tracking.train import predict, predict_sampled
from sparsegnn.tracking.truth import TargetConfig


@dataclass(frozen=True)
class EventResult:
    """Everything measured on one event."""

    name: str
    graph: GraphStats
    edges: EdgeMetrics
    tracks: TrackMetrics
    matches: ParticleMatches
    missed: MissedParticles
    scores: EdgeScores
    true_edges: np.ndarray  # [E] bool, for the score plot


def score_edges(graph: HitGraph, model: InteractionNetwork | None,
                device: torch.device | str = "cpu",
                max_sample_nodes: int | None = None) -> EdgeScores:
    """Model probabilities, or with no model the truth labels (an oracle classifier).

    The oracle measures what graph construction and track building alone allow. With
    ``max_sample_nodes`` the model scores ShaDow subgraphs of at most that many hits
    (:func:`~sparsegnn.tracking.train.predict_sampled`): bounded memory for events too
    large to score whole, at many times the time.
    """
    if model is not None and max_sample_nodes is not None:
        return predict_sampled(model, graph, max_sample_nodes, device=device)[0]
    if model is not None:
        return predict(model, graph, device)
    return EdgeScores(graph.name, graph.edge_index, graph.y.astype(np.float64), graph.num_nodes)


def evaluate_event(event: Event, graph: HitGraph, scores: EdgeScores, cut: float, method: str,
                   targets: TargetConfig, min_track_hits: int = 1
                   ) -> tuple[EventResult, Tracks]:
    """Build tracks from ``scores`` and measure edges and tracks against ``event``'s truth."""
    tracks = build_tracks(scores, cut, method, min_track_hits)
    return evaluate_tracks(event, graph, scores, tracks, cut, targets), tracks


def evaluate_tracks(event: Event, graph: HitGraph, scores: EdgeScores, tracks: Tracks,
                    cut: float, targets: TargetConfig) -> EventResult:
    """Measure built ``tracks`` (and the edges at ``cut``) against ``event``'s truth."""
    metrics, matches = track_metrics(event, tracks, targets)
    return EventResult(event.name, graph.stats(), edge_metrics(graph, scores.scores, cut),
                       metrics, matches, missed_particles(event, graph, scores.scores, cut,
                                                          matches), scores, graph.y)


def edge_summary(results: list[EventResult]) -> dict[str, float]:
    """Graph and edge metrics averaged over events (NaN where no event defines them, as
    AUC on a graph of true edges only); ``num_edges`` summed."""
    def mean(values: list[float]) -> float:
        finite = [v for v in values if not np.isnan(v)]
        return float(np.mean(finite)) if finite else float("nan")

    return {"graph_efficiency": mean([r.graph.efficiency for r in results]),
            "graph_purity": mean([r.graph.purity for r in results]),
            "num_edges": sum(r.graph.num_edges for r in results),
            "edge_efficiency": mean([r.edges.efficiency for r in results]),
            "edge_purity": mean([r.edges.purity for r in results]),
            "edge_auc": mean([r.edges.auc for r in results])}


def missed_summary(results: list[EventResult]) -> dict[str, int]:
    """Unmatched reconstructable particles of all events by the stage that lost them."""
    return asdict(sum((r.missed for r in results[1:]), results[0].missed))


def plot_results(results: list[EventResult], targets: TargetConfig, out_dir: str | Path
                 ) -> list[Path]:
    """PNGs of tracking efficiency vs pT and vs eta, and of the edge-score distribution."""
    from sparsegnn.tracking.metrics import concat_matches
    from sparsegnn.tracking.plots import efficiency_plots, score_plot

    written = efficiency_plots(concat_matches([r.matches for r in results]), targets, out_dir)
    scores = np.concatenate([r.scores.scores for r in results])
    true = np.concatenate([r.true_edges for r in results])
    return [*written, score_plot(scores, true, out_dir)]


def write_tracks(path: str | Path, event: Event, tracks: Tracks) -> None:
    """TrackML submission rows ``hit_id,track_id``; hits on no track get their own ids."""
    labels = tracks.with_singletons().hit_track
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["hit_id", "track_id"])
        writer.writerows(zip(event.hit_id.tolist(), labels.tolist(), strict=True))
