"""``track demo``: the whole pipeline on a small simulated sample, end to end.

Simulate particle-gun events with ACTS (training and held-out events with different
seeds), learn a layer-level map from the training events and apply the doublet cuts,
train the Interaction Network on ShaDow subgraphs of bounded size, reconstruct the
held-out events (walkthrough track building), score them, plot, and run ACTS's seeding +
CKF on the very same events for the side-by-side numbers. A few minutes on one CPU core.

Why these choices: a layer-level map because a handful of small events see too few module
pairs for a module-level one (docs/results/tracking.md measures both); sampled training because
it is what bounds memory on events of any size, which is the pipeline's point; a particle
gun because it needs only pyacts (ttbar needs Pythia8 too).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from sparsegnn.tracking.building import Walkthrough
from sparsegnn.tracking.doublet_cuts import DoubletCuts
from sparsegnn.tracking.events import read_events
from sparsegnn.tracking.metrics import TrackMetrics
from sparsegnn.tracking.model import INConfig
from sparsegnn.tracking.module_map import ModuleMap
from sparsegnn.tracking.pipeline import Reconstruction, evaluate_events, plot_results
from sparsegnn.tracking.settings import RecoConfig
from sparsegnn.tracking.train import TrackTrainConfig, train
from sparsegnn.tracking.truth import DEFAULT_TARGETS

# The cuts docs/results/tracking.md tuned on particle-gun events (pT >= ~0.3 GeV, |z0| < 300 mm).
DEMO_CUTS = DoubletCuts(dphi=0.05, phi_slope=0.001, z0=300.0)


@dataclass(frozen=True)
class DemoConfig:
    """Sizes of the demo; the defaults run in a few minutes on one core."""

    particles: int = 200  # muons per event, pT 0.5-10 GeV, |eta| < 2.5
    train_events: int = 8
    test_events: int = 2
    epochs: int = 6
    max_sample_nodes: int = 1000  # hits per ShaDow subgraph
    hidden: int = 64
    iterations: int = 6
    cut: float = 0.5
    min_track_hits: int = 5
    ckf: bool = True
    seed: int = 7
    progress: bool = True

    def overridden(self, **given: Any) -> DemoConfig:
        """A copy with the given fields replaced (``None``: keep this one's)."""
        return replace(self, **{k: v for k, v in given.items() if v is not None})


@dataclass
class DemoResult:
    """What the demo measured; ``gnn`` and ``ckf`` are pooled over the held-out events.

    GNN seconds per event: graph construction + edge scoring + track building (metrics
    excluded); CKF: ACTS's own timing of space points, seeding, CKF and ambiguity
    resolution. Both one thread."""

    config: DemoConfig
    gnn: TrackMetrics
    ckf: TrackMetrics | None
    gnn_seconds_per_event: float
    ckf_seconds_per_event: float | None
    edges: dict[str, float]
    stage_seconds: dict[str, float]
    plots: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "config": asdict(self.config),
            **self.gnn.to_dict(),
            "seconds_per_event": self.gnn_seconds_per_event,
            **self.edges,
            "stage_seconds": self.stage_seconds,
            "plots": self.plots,
        }
        if self.ckf is not None:
            out["ckf"] = {**self.ckf.to_dict(), "seconds_per_event": self.ckf_seconds_per_event}
        return out

    def summary(self) -> str:
        lines = [f"{'method':<6} {'efficiency':>10} {'fake rate':>10} {'duplicates':>10} "
                 f"{'TrackML':>8} {'s/event':>8}"]
        rows = [("GNN", self.gnn, self.gnn_seconds_per_event)]
        if self.ckf is not None and self.ckf_seconds_per_event is not None:
            rows.append(("CKF", self.ckf, self.ckf_seconds_per_event))
        for name, m, sec in rows:
            lines.append(f"{name:<6} {m.efficiency:>10.3f} {m.fake_rate:>10.3f} "
                         f"{m.duplicate_rate:>10.3f} {m.trackml_score:>8.3f} {sec:>8.3f}")
        lines.append(f"edges at cut {self.config.cut}: efficiency "
                     f"{self.edges['edge_efficiency']:.3f}, purity {self.edges['edge_purity']:.3f}"
                     f", ROC AUC {self.edges['edge_auc']:.4f}; graph efficiency "
                     f"{self.edges['graph_efficiency']:.3f}")
        lines.append("stages (s): " + ", ".join(f"{k} {v:.1f}"
                                                 for k, v in self.stage_seconds.items()))
        lines += [f"plot: {p}" for p in self.plots]
        return "\n".join(lines)


def run_demo(out_dir: str | Path, cfg: DemoConfig = DemoConfig()) -> DemoResult:
    """Simulate, build graphs, train, reconstruct, evaluate (and run the CKF) in ``out_dir``."""
    out = Path(out_dir)
    stages: dict[str, float] = {}
    clock = time.perf_counter()
    dirs = _simulate(out, cfg)
    stages["simulate"], clock = time.perf_counter() - clock, time.perf_counter()

    train_events, test_events = read_events(dirs["train"]), read_events(dirs["test"])
    tcfg = TrackTrainConfig(model=INConfig(hidden=cfg.hidden, iterations=cfg.iterations),
                            epochs=cfg.epochs, max_sample_nodes=cfg.max_sample_nodes,
                            seed=cfg.seed)
    settings = RecoConfig(map_level="layer", cuts=DEMO_CUTS,
                          train_sample_nodes=tcfg.max_sample_nodes, fanouts=tcfg.fanouts,
                          seed_order=tcfg.seed_order,
                          building=Walkthrough(cut=cfg.cut, min_track_hits=cfg.min_track_hits))
    reco = Reconstruction(settings, module_map=ModuleMap.learn(train_events, "layer"))
    graphs = [reco.graph(ev) for ev in train_events]
    stages["graphs"], clock = time.perf_counter() - clock, time.perf_counter()

    reco.model, report = train(graphs, tcfg)
    reco.save(out / "model.pt", report)  # 'track reconstruct --model' reconstructs as below
    stages["train"] = time.perf_counter() - clock

    evaluation = evaluate_events(reco, test_events, progress=cfg.progress)
    stages["reconstruct"] = evaluation.seconds
    results = evaluation.results
    plots = [str(p) for p in plot_results(results, DEFAULT_TARGETS, out / "plots")]

    ckf = ckf_seconds = None
    if cfg.ckf:
        from sparsegnn.tracking.ckf import evaluate_ckf

        clock = time.perf_counter()
        ckf, run = evaluate_ckf(dirs["test"])
        ckf_seconds = run.seconds_per_event
        stages["ckf"] = time.perf_counter() - clock
    return DemoResult(cfg, evaluation.tracks, ckf, evaluation.seconds_per_event, ckf_seconds,
                      evaluation.edges(), stages, plots)


def _simulate(out: Path, cfg: DemoConfig) -> dict[str, Path]:
    """Training and held-out events, from different seeds, in ``out/train`` and ``out/test``."""
    from sparsegnn.tracking.simulate import GunConfig, simulate_gun

    dirs = {}
    for split, n, seed in (("train", cfg.train_events, cfg.seed),
                           ("test", cfg.test_events, cfg.seed + 1)):
        dirs[split] = out / split
        simulate_gun(dirs[split], GunConfig(events=n, particles=cfg.particles, seed=seed,
                                            progress=cfg.progress))
    return dirs
