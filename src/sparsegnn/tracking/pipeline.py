"""Tracking as one pipeline: graph -> [doublet filter] -> edge scores -> tracks -> metrics.

:class:`Reconstruction` holds every choice between an event and its tracks (a
:class:`~sparsegnn.tracking.settings.RecoConfig`, the model or none for oracle scores,
the module map, the optional doublet filter) and runs the stages on one event, each
handing the next a typed object (:class:`HitGraph`, :class:`EdgeScores`,
:class:`Tracks`). The command line (``track build-graphs|reconstruct|evaluate|demo``)
and every tracking benchmark reconstruct through it. :func:`tune` is the rule that
chooses the score cut and minimum track length on training events
(:func:`tune_and_evaluate`: then measure held-out events); a model saved by
:meth:`Reconstruction.save` carries the result, so ``track reconstruct --model M``
reconstructs as the benchmark that tuned it did. :func:`evaluate_events` measures a
reconstruction on events (edge metrics, track metrics, per-particle matches).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.sparse import native
from sparsegnn.tracking import graph_kernel
from sparsegnn.tracking.building import TrackBuilding, candidates
from sparsegnn.tracking.events import Event
from sparsegnn.tracking.graph_construction import module_map_graph, truth_graph
from sparsegnn.tracking.hit_graph import GraphStats, HitGraph
from sparsegnn.tracking.infer import (
    TrackModel,
    load_track_model,
    predict,
    predict_sampled,
    scoring_model,
)
from sparsegnn.tracking.metrics import (
    EdgeMetrics,
    MissedParticles,
    ParticleMatches,
    TrackMetrics,
    combine,
    edge_metrics,
    missed_particles,
    track_metrics,
)
from sparsegnn.tracking.model import InteractionNetwork
from sparsegnn.tracking.module_map import ModuleMap
from sparsegnn.tracking.reco import build_tracks
from sparsegnn.tracking.settings import RecoConfig
from sparsegnn.tracking.tracks import EdgeScores, HitGeometry, Tracks
from sparsegnn.tracking.truth import DEFAULT_TARGETS, TargetConfig

# What tune() tries on training events: edge-score cuts, and minimum track lengths (the
# CKF keeps tracks of >= 6 measurements).
CUT_CHOICES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
MIN_TRACK_HITS_CHOICES = (5, 6, 7)


@dataclass(frozen=True)
class EventReco:
    """One event's reconstruction: its graph, edge scores and tracks, and the seconds
    each stage took (:data:`STAGES`; a graph given to :meth:`Reconstruction.run` took 0)."""

    graph: HitGraph
    scores: EdgeScores
    tracks: Tracks
    seconds: dict[str, float] = field(default_factory=dict)


# The timed stages of one event: graph construction (and the filter), edge scoring,
# track building.
STAGES = ("graph", "score", "build")


@dataclass
class Reconstruction:
    """Graph construction -> optional doublet filter -> edge scoring -> track building.

    ``model`` ``None`` scores edges by their truth labels (an oracle: what graph
    construction and track building alone allow). A module-map graph needs
    ``module_map``; ``edge_filter`` prunes every graph this builds (graphs given to
    :meth:`run` are used as they are: ``track build-graphs --filter`` pruned them).
    """

    config: RecoConfig = field(default_factory=RecoConfig)
    model: InteractionNetwork | None = None
    module_map: ModuleMap | None = None
    edge_filter: object | None = None  # an EdgeFilter (torch; imported where it is built)
    targets: TargetConfig = DEFAULT_TARGETS
    device: torch.device | str = "cpu"
    _scorer: tuple | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def from_model(cls, found: TrackModel | str | Path, device: torch.device | str = "cpu",
                   targets: TargetConfig = DEFAULT_TARGETS,
                   base: RecoConfig | None = None) -> Reconstruction:
        """The reconstruction a model file carries (its settings, or ``base`` (default
        :class:`RecoConfig`) for a file without them; its module map and filter)."""
        if not isinstance(found, TrackModel):
            found = load_track_model(found, device)
        config = found.settings or base or RecoConfig()
        return cls(config, found.model, found.module_map, found.edge_filter, targets, device)

    def with_config(self, **given: object) -> Reconstruction:
        """A copy whose settings take the given values (``None``: keep this one's)."""
        return replace(self, config=self.config.overridden(**given))

    def prepare(self) -> Reconstruction:
        """Make now what every event's reconstruction shares, so that no event's time
        holds it: the map's search ranges for these cuts (0.24 s at pileup 200), the
        scoring copy of the model, the compiled kernels (built on a machine's first use).
        The CKF's time likewise leaves out its geometry and start-up."""
        if self.module_map is not None and self.config.graph != "truth":
            self.module_map.search_ranges(self.config.cuts)
        if self.model is not None:
            _ = self.scorer
        graph_kernel.library()
        native.library()
        return self

    def graph(self, event: Event) -> HitGraph:
        """``event``'s graph as the settings build it, pruned by the filter if there is one."""
        if self.config.graph == "truth":
            graph = truth_graph(event, self.targets)
        else:
            if self.module_map is None:
                raise InvalidValueError("a module-map graph needs a module map (give one, or "
                                        "events to learn it from)")
            graph = module_map_graph(event, self.module_map, self.config.cuts, self.targets)
        return graph if self.edge_filter is None else self.edge_filter.prune(graph)

    def score(self, graph: HitGraph) -> EdgeScores:
        """Model probabilities (whole event, or ShaDow subgraphs of at most
        ``config.sample_nodes`` hits with the fan-outs and seed order of training:
        bounded memory, many times the time), or the truth labels without a model."""
        cfg = self.config
        if self.model is None:
            return EdgeScores(graph.name, graph.edge_index, graph.y.astype(np.float64),
                              graph.num_nodes)
        if cfg.sample_nodes is not None:
            return predict_sampled(self.scorer, graph, cfg.sample_nodes, cfg.fanouts,
                                   device=self.device, seed_order=cfg.seed_order)[0]
        return predict(self.scorer, graph, self.device)

    @property
    def scorer(self) -> InteractionNetwork:
        """The model at the settings' scoring precision: a bfloat16 copy is made once per
        model and precision (made again if either is replaced)."""
        key = (self.model, self.config.precision)  # modules compare by identity
        if self._scorer is None or self._scorer[:2] != key:
            self._scorer = (*key, scoring_model(*key))
        return self._scorer[2]

    def build(self, scores: EdgeScores, event: Event | None = None) -> Tracks:
        """Tracks from ``scores``; the triplets method and a layer requirement also read
        the hits' positions and layers from ``event``."""
        geometry = None if event is None else HitGeometry.from_event(event)
        return build_tracks(scores, self.config.building, geometry)

    def run(self, event: Event, graph: HitGraph | None = None,
            clock: Callable[[], float] = time.perf_counter) -> EventReco:
        """Every stage on ``event`` (from ``graph`` when given, else building it), each
        timed by ``clock``."""
        marks = [clock()]
        graph = self.graph(event) if graph is None else graph
        marks.append(clock())
        scores = self.score(graph)
        marks.append(clock())
        tracks = self.build(scores, event)
        marks.append(clock())
        return EventReco(graph, scores, tracks,
                         {name: b - a for name, a, b in zip(STAGES, marks, marks[1:],
                                                            strict=False)})

    def measure(self, event: Event, reco: EventReco) -> EventResult:
        """``reco``'s edges (at the cut) and tracks against ``event``'s truth."""
        return evaluate_tracks(event, reco.graph, reco.scores, reco.tracks,
                               self.config.building.cut, self.targets)

    def save(self, path: str | Path, report: object) -> None:
        """The model with everything this reconstruction uses it with (settings, module
        map, filter), so that :meth:`from_model` rebuilds this reconstruction."""
        from sparsegnn.tracking.infer import save_model

        if self.model is None:
            raise InvalidValueError("an oracle reconstruction has no model to save")
        save_model(path, self.model, report, self.config, self.module_map, self.edge_filter)


def tune(reco: Reconstruction, events: Sequence[Event], graphs: Sequence[HitGraph] | None = None,
         choices: Sequence[TrackBuilding] | None = None, groups: Sequence[str] | None = None,
         max_fake: float | None = None) -> Reconstruction:
    """``reco`` with the track building of ``choices`` that does best on ``events``
    (training or validation events: the test events stay unseen). Default choices: its
    own method at every cut of :data:`CUT_CHOICES` and length of
    :data:`MIN_TRACK_HITS_CHOICES` (:func:`~sparsegnn.tracking.building.candidates` makes
    grids over any of a method's parameters).

    Best is the highest efficiency minus fake rate, averaged over ``groups`` (the
    condition of each event; default: one group). Pooling particles instead lets the
    densest condition choose for all: a 5000-muon gun holds more particles than the other
    conditions together. With ``max_fake``, a choice that keeps more groups at or below
    that fake rate always wins (then the average decides): the operating point that
    meets a fake-rate target where it can, rather than trading it for efficiency.

    Positives are up-weighted by the negatives per positive in the loss, which pushes
    scores up, so 0.5 is not the natural cut. The TrackML score would barely see fakes
    (it weighs hits, and a fragment holds few), hence efficiency minus fake rate. Ties go
    to the first choice. Each event is scored once.
    """
    if choices is None:
        choices = candidates(reco.config.building, CUT_CHOICES, MIN_TRACK_HITS_CHOICES)
    graphs = [reco.graph(ev) for ev in events] if graphs is None else list(graphs)
    scores = [reco.score(g) for g in graphs]
    names = [""] * len(events) if groups is None else list(groups)
    if len(names) != len(events):
        raise InvalidValueError(f"{len(names)} groups for {len(events)} events")
    geometry = [HitGeometry.from_event(ev) for ev in events]

    def quality(building: TrackBuilding) -> tuple[int, float]:
        per_group: dict[str, list[TrackMetrics]] = {}
        for ev, s, g, name in zip(events, scores, geometry, names, strict=True):
            per_group.setdefault(name, []).append(
                track_metrics(ev, build_tracks(s, building, g), reco.targets)[0])
        pooled = [combine(ms) for ms in per_group.values()]
        over = 0 if max_fake is None else sum(m.fake_rate > max_fake for m in pooled)
        return -over, float(np.mean([m.efficiency - m.fake_rate for m in pooled]))

    return replace(reco, config=replace(reco.config, building=max(choices, key=quality)))


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


def evaluate_tracks(event: Event, graph: HitGraph, scores: EdgeScores, tracks: Tracks,
                    cut: float, targets: TargetConfig) -> EventResult:
    """Measure built ``tracks`` (and the edges at ``cut``) against ``event``'s truth."""
    metrics, matches = track_metrics(event, tracks, targets)
    return EventResult(event.name, graph.stats(), edge_metrics(graph, scores.scores, cut),
                       metrics, matches, missed_particles(event, graph, scores.scores, cut,
                                                          matches), scores, graph.y)


@dataclass
class Evaluation:
    """A reconstruction measured on events; ``seconds`` is the reconstruction's alone
    (graph construction, filter, scoring and track building; metrics excluded)."""

    results: list[EventResult]
    seconds: float
    stage_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def tracks(self) -> TrackMetrics:
        """Track metrics pooled over the events."""
        return combine([r.tracks for r in self.results])

    @property
    def seconds_per_event(self) -> float:
        return self.seconds / max(len(self.results), 1)

    def timing(self) -> dict[str, Any]:
        """Seconds per event, in all and by stage, for ``--json``."""
        return per_event_timing(self.seconds, self.stage_seconds, len(self.results))

    def edges(self) -> dict[str, float]:
        return edge_summary(self.results)

    def missed(self) -> dict[str, int]:
        return missed_summary(self.results)


def evaluate_events(reco: Reconstruction, events: Sequence[Event],
                    graphs: Sequence[HitGraph] | None = None,
                    clock: Callable[[], float] = time.perf_counter,
                    progress: bool = False) -> Evaluation:
    """Reconstruct each event (from its given graph, else building it) and measure it;
    ``clock`` times the reconstruction (``time.process_time`` for CPU time)."""
    from tqdm.auto import tqdm

    results, seconds = [], 0.0
    stages = dict.fromkeys(STAGES, 0.0)
    given = [None] * len(events) if graphs is None else list(graphs)
    reco.prepare()
    for ev, graph in tqdm(list(zip(events, given, strict=True)), desc="reconstruct",
                          unit="event", disable=None if progress else True):
        start = clock()
        out = reco.run(ev, graph, clock)
        seconds += clock() - start
        for name, took in out.seconds.items():
            stages[name] += took
        results.append(reco.measure(ev, out))
    return Evaluation(results, seconds, stages)


def time_events(reco: Reconstruction, events: Sequence[Event],
                clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds per event of one more pass of ``reco`` over ``events`` (graph, scores,
    tracks; nothing measured): a timing to repeat where the machine's speed varies from
    one pass to the next and the least of several is the one with least interference."""
    reco.prepare()
    start = clock()
    for ev in events:
        reco.run(ev, None, clock)
    return (clock() - start) / max(len(events), 1)


def per_event_timing(seconds: float, stages: dict[str, float], events: int) -> dict[str, Any]:
    """``seconds_per_event`` and ``stage_seconds_per_event`` (graph, score, build) of a
    reconstruction that took ``seconds`` (``stages``: by stage) on ``events`` events."""
    n = max(events, 1)
    return {"seconds_per_event": seconds / n,
            "stage_seconds_per_event": {k: v / n for k, v in stages.items()}}


def timing_line(timing: dict[str, Any]) -> str:
    """The human form of :func:`per_event_timing`."""
    parts = ", ".join(f"{k} {v:.3f}" for k, v in timing["stage_seconds_per_event"].items())
    return f"{timing['seconds_per_event']:.3f} s/event ({parts})"


def tune_and_evaluate(reco: Reconstruction, tune_events: Sequence[Event],
                      tune_graphs: Sequence[HitGraph] | None, test_events: Sequence[Event],
                      clock: Callable[[], float] = time.perf_counter
                      ) -> tuple[Reconstruction, Evaluation]:
    """Choose the cut and track length on training events (:func:`tune`, from their
    ``tune_graphs`` when given: already pruned), then reconstruct and measure the held-out
    ``test_events`` (graph construction, the filter when ``reco`` has one, scoring and
    track building timed by ``clock``): the tuned reconstruction and its evaluation."""
    reco = tune(reco, tune_events, tune_graphs)
    return reco, evaluate_events(reco, test_events, clock=clock)


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


def with_module_map(reco: Reconstruction, path: Path | None,
                    learn: Callable[[str], ModuleMap]) -> Reconstruction:
    """``reco`` with the module map its graphs are built from: the file at ``path`` when
    there is one, else the map ``reco`` carries (a model's), else ``learn(level)`` at the
    settings' level; written to ``path`` when it names no file yet. A truth-graph
    reconstruction needs none and comes back as it is."""
    if reco.config.graph == "truth":
        return reco
    if path is not None and path.is_file():
        module_map = ModuleMap.load(path)
    else:
        module_map = reco.module_map or learn(reco.config.map_level)
        if path is not None:
            module_map.save(path)
    return replace(reco, module_map=module_map)


def graphs_by_event(graphs: Sequence[HitGraph], events: Sequence[Event],
                    source: str | Path) -> list[HitGraph]:
    """The graph of each event, in the events' order; one error naming every event that
    ``source`` holds no graph for."""
    by_name = {g.name: g for g in graphs}
    missing = [ev.name for ev in events if ev.name not in by_name]
    if missing:
        raise DataFormatError(f"{source}: no graph for event(s) {missing}")
    return [by_name[ev.name] for ev in events]


def score_written_tracks(events: Sequence[Event], directory: Path,
                         targets: TargetConfig = DEFAULT_TARGETS
                         ) -> tuple[TrackMetrics, dict]:
    """Track metrics, pooled over ``events``, of the tracks ``track reconstruct`` wrote to
    ``directory``; and its manifest (the settings they were built with)."""
    from sparsegnn.tracking.stage_outputs import (
        TRACKS_FORMAT,
        read_manifest,
        read_tracks,
        tracks_file,
    )

    manifest = read_manifest(directory, TRACKS_FORMAT)
    missing = [ev.name for ev in events if tracks_file(ev.name) not in manifest["files"]]
    if missing:
        raise DataFormatError(f"{directory}: no tracks for event(s) {missing}")
    metrics = [track_metrics(ev, read_tracks(directory / tracks_file(ev.name), ev), targets)[0]
               for ev in events]
    return combine(metrics), manifest


def trained_settings(cfg: object, graphs_dir: Path | None = None) -> RecoConfig:
    """The settings a model trained with ``cfg`` (a ``TrackTrainConfig``) is saved with:
    the graph settings ``track build-graphs`` recorded in ``graphs_dir``'s manifest (if
    any) and the ShaDow sampling of training (fan-outs and seed order also score it when
    sampled scoring is asked for). Score cut and track length keep their defaults."""
    from sparsegnn.tracking.stage_outputs import GRAPHS_FORMAT, read_manifest

    base = RecoConfig()
    if graphs_dir is not None and (graphs_dir / "manifest.json").is_file():
        try:
            recorded = read_manifest(graphs_dir, GRAPHS_FORMAT).get("settings")
        except DataFormatError:
            recorded = None
        if isinstance(recorded, dict):
            graph = {k: recorded[k] for k in ("graph", "map_level", "cuts") if k in recorded}
            base = RecoConfig.from_dict(graph, str(graphs_dir / "manifest.json"))
    return replace(base, train_sample_nodes=cfg.max_sample_nodes, fanouts=tuple(cfg.fanouts),
                   seed_order=cfg.seed_order)


def graph_summary(graphs: Sequence[HitGraph]) -> dict:
    """Per-event graph statistics and their means (``track build-graphs``)."""
    per_event = [{"event": g.name, **g.stats().to_dict()} for g in graphs]
    keys = ("num_nodes", "num_edges", "efficiency", "true_efficiency", "purity")
    means = {f"mean_{k}": float(np.mean([e[k] for e in per_event])) for k in keys}
    return {**means, "events": per_event}
