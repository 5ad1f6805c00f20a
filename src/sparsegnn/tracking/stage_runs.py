"""The stages that write folders, as library calls: a typed request in, an outcome out.

``track build-graphs`` and ``track reconstruct`` loop over events and write one file per
event into a folder that appears whole (:mod:`sparsegnn.tracking.stage_outputs`). The
loops live here, so the command line only builds the request from its options and prints
the outcome, and a script reconstructs exactly as the command does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparsegnn.tracking.events import Event
from sparsegnn.tracking.hit_graph import HitGraph
from sparsegnn.tracking.metrics import COUNTED_TRACK_HITS
from sparsegnn.tracking.pipeline import (
    STAGES,
    Reconstruction,
    graph_summary,
    per_event_timing,
    timing_line,
)
from sparsegnn.tracking.stage_outputs import (
    GRAPHS_FORMAT,
    TRACKS_FORMAT,
    output_folder,
    tracks_file,
    write_tracks,
)


@dataclass(frozen=True)
class ReconstructRequest:
    """Reconstruct ``events`` (from their saved ``graphs`` when given) into ``out``;
    ``model`` and ``graphs_source`` name where they came from, for the manifest."""

    reco: Reconstruction
    events: Sequence[Event]
    out: Path
    graphs: Sequence[HitGraph] | None = None
    model: str | None = None
    graphs_source: str | None = None


@dataclass(frozen=True)
class EventTracks:
    """One event's tracks as written: how many count as tracks (>= COUNTED_TRACK_HITS
    hits, as the metrics count them)."""

    event: str
    num_tracks: int


@dataclass(frozen=True)
class ReconstructOutcome:
    """What :func:`reconstruct` wrote: the folder, the settings, each event's count."""

    out: Path
    settings: dict[str, Any]
    events: list[EventTracks]
    timing: dict[str, Any]
    model: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "model": self.model, "settings": self.settings,
                "events": [{"event": e.event, "num_tracks": e.num_tracks}
                           for e in self.events], **self.timing}

    def summary(self) -> str:
        tracks = sum(e.num_tracks for e in self.events)
        model = "" if self.model is None else f" (model {self.model})"
        return (f"{tracks} tracks of {len(self.events)} events -> {self.out}{model}\n"
                f"reconstruction: {timing_line(self.timing)}")


def reconstruct(request: ReconstructRequest) -> ReconstructOutcome:
    """Every event's tracks as ``{event}-tracks.csv`` in ``request.out`` (replaced whole),
    with a manifest of the settings used, which ``track evaluate --tracks`` reads."""
    reco, graphs = request.reco, request.graphs
    settings = reco.config.to_dict()
    counts, stages = [], dict.fromkeys(STAGES, 0.0)
    reco.prepare()
    with output_folder(request.out, TRACKS_FORMAT) as (tmp, manifest):
        for i, ev in enumerate(request.events):
            done = reco.run(ev, None if graphs is None else graphs[i])
            for name, took in done.seconds.items():
                stages[name] += took
            tracks = done.tracks
            write_tracks(tmp / tracks_file(ev.name), ev, tracks)
            counts.append(EventTracks(ev.name,
                                      int((tracks.sizes() >= COUNTED_TRACK_HITS).sum())))
        manifest([tracks_file(c.event) for c in counts], settings=settings,
                 model=request.model, graphs=request.graphs_source)
    timing = per_event_timing(sum(stages.values()), stages, len(counts))
    return ReconstructOutcome(request.out, settings, counts, timing, request.model)


@dataclass(frozen=True)
class GraphsOutcome:
    """What :func:`build_graphs` wrote: the folder, the graph kind, the module map's
    size and each graph's statistics with their means."""

    out: Path
    graph: str
    module_map_pairs: int
    stats: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "graph": self.graph,
                "module_map_pairs": self.module_map_pairs, **self.stats}

    def summary(self) -> str:
        s = self.stats
        return (f"{len(s['events'])} {self.graph} graphs -> {self.out}: mean "
                f"{s['mean_num_edges']:.0f} edges, efficiency {s['mean_efficiency']:.4f}, "
                f"purity {s['mean_purity']:.4f}")


def build_graphs(reco: Reconstruction, events: Sequence[Event], out: Path) -> GraphsOutcome:
    """Each event's graph as the reconstruction builds it (pruned by its filter, if any),
    one ``.npz`` per event in ``out`` (replaced whole) with a manifest of the settings."""
    graphs = [reco.graph(ev) for ev in events]
    with output_folder(out, GRAPHS_FORMAT) as (tmp, manifest):
        for g in graphs:
            g.save(tmp / f"{g.name}.npz")
        manifest([f"{g.name}.npz" for g in graphs], settings=reco.config.to_dict())
    return GraphsOutcome(out, reco.config.graph, len(reco.module_map or ()),
                         graph_summary(graphs))
