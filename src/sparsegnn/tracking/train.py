"""Train the Interaction Network on hit graphs: ShaDow subgraphs, or whole events with a size cap.

Two regimes, for comparison:

* ``max_sample_nodes`` set: every event is cut into bounded ShaDow minibatches
  (:mod:`sparsegnn.tracking.sampling`), so no event is ever skipped and one step holds
  at most that many hits.
* ``max_sample_nodes`` unset: one step per whole event, skipping the events with more
  than ``skip_larger_than`` hits, as the public Exa.TrkX pipelines do.

Labels are the target edges; true edges of non-target particles (low pT, short) get
loss weight 0, and positives are up-weighted by the negative/positive ratio of the
training graphs unless ``pos_weight`` is given.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.tracking.graph import HitGraph
from sparsegnn.tracking.model import EdgeOperators, INConfig, InteractionNetwork, weighted_bce
from sparsegnn.tracking.reco import EdgeScores
from sparsegnn.tracking.sampling import shadow_subgraphs
from sparsegnn.train import load_checkpoint, save_checkpoint, seed_everything
from sparsegnn.train.checkpoint import rng_state, set_rng_state

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrackTrainConfig:
    """Everything that decides a training run."""

    model: INConfig = field(default_factory=INConfig)
    epochs: int = 10
    lr: float = 1e-3
    pos_weight: float | None = None
    max_sample_nodes: int | None = None
    fanouts: tuple[int, ...] = (4, 2)
    seed_order: str = "random"  # which seeds share a minibatch: "random" or "phi" (wedges)
    skip_larger_than: int | None = None
    seed: int = 0


@dataclass(frozen=True)
class EpochReport:
    epoch: int
    loss: float  # mean training loss over the epoch's steps
    steps: int
    events_used: int
    events_skipped: int
    max_step_nodes: int  # largest number of hits in one step
    edge_coverage: float  # fraction of the epoch's graph edges that entered a loss
    seconds: float


@dataclass
class TrainReport:
    pos_weight: float
    epochs: list[EpochReport] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"pos_weight": self.pos_weight, "epochs": [asdict(e) for e in self.epochs]}


@dataclass(frozen=True)
class _Step:
    """One optimisation step's inputs, on the device."""

    x: torch.Tensor
    edge_attr: torch.Tensor
    ops: EdgeOperators
    target: torch.Tensor
    weight: torch.Tensor
    num_nodes: int
    covered: int  # graph edges this step's loss covers


def loss_weights(graph: HitGraph) -> np.ndarray:
    """1 for target and false edges, 0 for true edges of non-target particles."""
    return (~(graph.y & ~graph.target)).astype(np.float32)


def default_pos_weight(graphs: list[HitGraph]) -> float:
    """Negatives per positive over the weighted training edges (1 if either is absent)."""
    pos = sum(int(g.target.sum()) for g in graphs)
    neg = sum(int((~g.y).sum()) for g in graphs)
    return neg / pos if pos and neg else 1.0


def train(graphs: list[HitGraph], cfg: TrackTrainConfig, device: torch.device | str = "cpu",
          init: InteractionNetwork | None = None, checkpoint: str | Path | None = None,
          resume: bool = False) -> tuple[InteractionNetwork, TrainReport]:
    """Fit an Interaction Network; returns the model and per-epoch statistics.

    ``init`` fine-tunes a trained model (its own sizes replace ``cfg.model``): a model
    trained on smaller events adapts to denser ones in far fewer epochs than a new one.
    ``checkpoint`` is rewritten after every epoch (weights, optimiser, report, RNG
    streams; :func:`load_model` reads it as a model). With ``resume`` the run continues
    from it up to ``cfg.epochs``, exactly as if it had not stopped: restarting from the
    weights alone resets Adam's moments, and on pileup-200 events that cost several
    epochs of progress.
    """
    seed_everything(cfg.seed)
    device = torch.device(device)
    model = InteractionNetwork(cfg.model) if init is None else copy.deepcopy(init)
    model = model.to(device)
    optim = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    pos_weight = cfg.pos_weight if cfg.pos_weight is not None else default_pos_weight(graphs)
    report = TrainReport(pos_weight)
    first = 0
    if resume:
        if checkpoint is None:
            raise InvalidValueError("resume needs the checkpoint to resume from")
        first = _restore(Path(checkpoint), model, optim, report, cfg.lr)
    for epoch in range(first, cfg.epochs):
        stats = _epoch(model, optim, graphs, cfg, pos_weight, epoch, device)
        report.epochs.append(stats)
        log.info("epoch %d: loss %.4f, %d steps, %d events (%d skipped), %.1f s", epoch,
                 stats.loss, stats.steps, stats.events_used, stats.events_skipped, stats.seconds)
        if checkpoint is not None:
            save_checkpoint(checkpoint, {**_model_state(model, report), "epoch": epoch,
                                         "optimizer": optim.state_dict(), "rng": rng_state()})
    return model, report


def _restore(path: Path, model: InteractionNetwork, optim: torch.optim.Optimizer,
             report: TrainReport, lr: float) -> int:
    """Load a training checkpoint into ``model``, ``optim`` and ``report``; the next epoch.

    The learning rate is this run's, so a run can resume with a lower one."""
    state = load_checkpoint(path)
    if "optimizer" not in state:
        raise DataFormatError(f"{path} is a finished model, not a training checkpoint "
                              "(fine-tune it with init instead)")
    if state["config"] != asdict(model.cfg):
        raise InvalidValueError(f"{path} holds a model of sizes {state['config']}, this run "
                                f"builds {asdict(model.cfg)}")
    model.load_state_dict(state["state_dict"])
    optim.load_state_dict(state["optimizer"])
    for group in optim.param_groups:  # the saved moments, this run's learning rate
        group["lr"] = lr
    report.pos_weight = state["report"]["pos_weight"]
    report.epochs = [EpochReport(**e) for e in state["report"]["epochs"]]
    set_rng_state(state["rng"])
    return int(state["epoch"]) + 1


def _epoch(model: InteractionNetwork, optim: torch.optim.Optimizer, graphs: list[HitGraph],
           cfg: TrackTrainConfig, pos_weight: float, epoch: int,
           device: torch.device) -> EpochReport:
    start = time.perf_counter()
    model.train()
    losses: list[float] = []
    used = skipped = covered = total_edges = max_nodes = 0
    for graph in graphs:
        if _skipped(graph, cfg):
            skipped += 1
            continue
        used += 1
        total_edges += graph.num_edges
        for step in _steps(graph, cfg, epoch, device):
            optim.zero_grad()
            logits = model(step.x, step.edge_attr, step.ops)
            loss = weighted_bce(logits, step.target, step.weight, pos_weight)
            loss.backward()
            optim.step()
            losses.append(float(loss.detach()))
            covered += step.covered
            max_nodes = max(max_nodes, step.num_nodes)
    return EpochReport(
        epoch=epoch, loss=float(np.mean(losses)) if losses else float("nan"), steps=len(losses),
        events_used=used, events_skipped=skipped, max_step_nodes=max_nodes,
        edge_coverage=covered / total_edges if total_edges else float("nan"),
        seconds=time.perf_counter() - start,
    )


def _skipped(graph: HitGraph, cfg: TrackTrainConfig) -> bool:
    """Only the whole-event baseline skips; sampled training uses every event."""
    return (cfg.max_sample_nodes is None and cfg.skip_larger_than is not None
            and graph.num_nodes > cfg.skip_larger_than)


def _steps(graph: HitGraph, cfg: TrackTrainConfig, epoch: int, device: torch.device):
    """The steps of one event: one whole-graph step, or its ShaDow minibatches."""
    weight = loss_weights(graph)
    if cfg.max_sample_nodes is None:
        yield _make_step(graph, np.arange(graph.num_nodes), np.arange(graph.num_edges),
                         graph.edge_index, weight, device)
        return
    for sub in shadow_subgraphs(graph, cfg.max_sample_nodes, cfg.fanouts, cfg.seed, epoch,
                                order=cfg.seed_order):
        sub_weight = weight[sub.edges] * sub.loss_mask
        yield _make_step(graph, sub.nodes, sub.edges, sub.edge_index, sub_weight, device,
                         covered=int(sub.loss_mask.sum()))


def _make_step(graph: HitGraph, nodes: np.ndarray, edges: np.ndarray, edge_index: np.ndarray,
               weight: np.ndarray, device: torch.device, covered: int | None = None) -> _Step:
    ei = torch.from_numpy(edge_index).to(device)
    return _Step(
        x=torch.from_numpy(graph.node_features[nodes]).to(device),
        edge_attr=torch.from_numpy(graph.edge_features[edges]).to(device),
        ops=EdgeOperators(ei, int(nodes.size)),
        target=torch.from_numpy(graph.target[edges]).to(device),
        weight=torch.from_numpy(np.asarray(weight, dtype=np.float32)).to(device),
        num_nodes=int(nodes.size),
        covered=int(edges.size) if covered is None else covered,
    )


@torch.no_grad()
def predict(model: InteractionNetwork, graph: HitGraph,
            device: torch.device | str = "cpu") -> EdgeScores:
    """Edge probabilities on a whole event graph (inference needs no gradients, so no sampling)."""
    model.eval()
    device = torch.device(device)
    step = _make_step(graph, np.arange(graph.num_nodes), np.arange(graph.num_edges),
                      graph.edge_index, loss_weights(graph), device)
    scores = torch.sigmoid(model(step.x, step.edge_attr, step.ops)).cpu().numpy()
    return EdgeScores(graph.name, graph.edge_index, scores.astype(np.float64), graph.num_nodes)


@torch.no_grad()
def predict_sampled(model: InteractionNetwork, graph: HitGraph, max_nodes: int,
                    fanouts: tuple[int, ...] = (4, 2), seed: int = 0, max_passes: int = 16,
                    device: torch.device | str = "cpu",
                    seed_order: str = "random") -> tuple[EdgeScores, float]:
    """Edge probabilities scored in the context ShaDow training gave them; ``(scores, coverage)``.

    A model trained on ShaDow subgraphs learnt each edge from its source hit's sampled
    neighbourhood; scoring it on the whole event instead shows it a receptive field it
    never trained on. Here an edge is scored in a minibatch where its source is a seed,
    exactly as its loss was computed, and no step holds more than ``max_nodes`` hits, so
    inference is bounded like training. An edge whose target hit falls outside the
    sampled fan-out is not scored in that pass; further passes reseed only the sources of
    unscored edges (edges scored more than once are averaged). ``coverage`` is the
    fraction scored within ``max_passes``; the rest score 0. ``seed_order`` as in training.
    """
    model.eval()
    device = torch.device(device)
    total = np.zeros(graph.num_edges)
    count = np.zeros(graph.num_edges, dtype=np.int64)
    weight = loss_weights(graph)
    seeds = None
    for sweep in range(max_passes):
        for sub in shadow_subgraphs(graph, max_nodes, fanouts, seed, sweep, seeds, seed_order):
            step = _make_step(graph, sub.nodes, sub.edges, sub.edge_index, weight[sub.edges],
                              device)
            prob = torch.sigmoid(model(step.x, step.edge_attr, step.ops)).cpu().numpy()
            scored = sub.edges[sub.loss_mask]
            total[scored] += prob[sub.loss_mask]
            count[scored] += 1
        missing = count == 0
        if not missing.any():
            break
        seeds = np.unique(graph.edge_index[0][missing])
    scores = np.divide(total, count, out=np.zeros_like(total), where=count > 0)
    coverage = float((count > 0).mean()) if graph.num_edges else 1.0
    return EdgeScores(graph.name, graph.edge_index, scores, graph.num_nodes), coverage


def save_model(path: str | Path, model: InteractionNetwork, report: TrainReport) -> None:
    """Weights, sizes and the training report in one atomic checkpoint file."""
    save_checkpoint(path, _model_state(model, report))


def _model_state(model: InteractionNetwork, report: TrainReport) -> dict:
    return {"config": asdict(model.cfg), "state_dict": model.state_dict(),
            "report": report.as_dict()}


def load_model(path: str | Path, device: torch.device | str = "cpu") -> InteractionNetwork:
    state = load_checkpoint(path)
    model = InteractionNetwork(INConfig(**state["config"]))
    model.load_state_dict(state["state_dict"])
    return model.to(device)
