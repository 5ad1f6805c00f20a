"""Exa.TrkX-style particle tracking: TrackML events -> hit graphs -> IN edge scores -> tracks.

Stages hand each other typed objects: :class:`Event` (events.py), :class:`HitGraph`
(hit_graph.py, built by graph_construction.py), :class:`EdgeScores` and :class:`Tracks`
(tracks.py, built by reco.py); metrics.py measures them against truth. The model and training loop
(model.py, train.py) import torch; the ACTS simulation (simulate.py) and plots (plots.py)
have optional dependencies and are imported only from their own modules.
"""

from sparsegnn.tracking.building import Components, TrackBuilding, Triplets, Walkthrough
from sparsegnn.tracking.doublet_cuts import DoubletCuts
from sparsegnn.tracking.events import Event, Particles, read_event, read_events
from sparsegnn.tracking.graph_construction import module_map_graph, truth_graph
from sparsegnn.tracking.hit_graph import GraphStats, HitGraph
from sparsegnn.tracking.metrics import (
    EdgeMetrics,
    TrackMetrics,
    edge_metrics,
    track_metrics,
    trackml_score,
)
from sparsegnn.tracking.module_map import ModuleMap
from sparsegnn.tracking.reco import build_tracks
from sparsegnn.tracking.tracks import EdgeScores, Tracks
from sparsegnn.tracking.truth import TargetConfig

__all__ = [
    "Components",
    "DoubletCuts",
    "EdgeMetrics",
    "EdgeScores",
    "Event",
    "GraphStats",
    "HitGraph",
    "ModuleMap",
    "Particles",
    "TargetConfig",
    "TrackBuilding",
    "TrackMetrics",
    "Tracks",
    "Triplets",
    "Walkthrough",
    "build_tracks",
    "edge_metrics",
    "module_map_graph",
    "read_event",
    "read_events",
    "track_metrics",
    "trackml_score",
    "truth_graph",
]
