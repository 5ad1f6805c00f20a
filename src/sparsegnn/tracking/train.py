"""Train the Interaction Network on hit graphs: ShaDow subgraphs, or whole events with a size cap.

Training only: scoring and the model file are :mod:`sparsegnn.tracking.infer`'s.

Two regimes, for comparison:

* ``max_sample_nodes`` set: every event is cut into bounded ShaDow minibatches
  (:mod:`sparsegnn.tracking.sampling`), so no event is ever skipped and one step holds
  at most that many hits.
* ``max_sample_nodes`` unset: one step per whole event, skipping the events with more
  than ``skip_larger_than`` hits, as the public Exa.TrkX pipelines do.

Labels are the target edges; true edges of non-target particles (low pT, short) get
loss weight 0, and positives are up-weighted by the negative/positive ratio of the
training graphs unless ``pos_weight`` is given.

Data-parallel (:class:`DataParallel`, :func:`train_data_parallel`): each rank holds its
own share of the events and takes its own steps; every optimiser step averages the
gradients of the ranks that had a step left, so all ranks apply the same update and
end with the same weights. A rank that runs out of steps first contributes nothing to
the remaining ones rather than repeating events.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from sparsegnn.distributed import RankResult, in_torchrun, rank_session, run_on_ranks
from sparsegnn.distributed.ops.sampled import GradientSum
from sparsegnn.distributed.runtime.comm import Communicator, Group
from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.tracking.hit_graph import HitGraph
from sparsegnn.tracking.infer import MODEL_KIND, TRAIN_KIND, graph_inputs, load_model, model_from
from sparsegnn.tracking.model import EdgeOperators, INConfig, InteractionNetwork, weighted_bce
from sparsegnn.tracking.sampling import shadow_subgraphs
from sparsegnn.train.checkpoint import (
    content_hash,
    rank_checkpoint,
    read_checkpoint,
    seed_everything,
)
from sparsegnn.train.loop import LoopConfig, LoopRole, run_epochs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrackTrainConfig:
    """Everything that decides a training run."""

    model: INConfig = field(default_factory=INConfig)
    epochs: int = 10
    lr: float = 1e-3
    # None: lr throughout; else cosine decay from lr (first epoch) to lr_final (last)
    lr_final: float | None = None
    pos_weight: float | None = None
    max_sample_nodes: int | None = None
    fanouts: tuple[int, ...] = (4, 2)
    seed_order: str = "random"  # which seeds share a minibatch: "random" or "phi" (wedges)
    skip_larger_than: int | None = None
    seed: int = 0
    progress: bool | None = False  # the loop's bar: always, never (default), on a terminal
    logdir: Path | None = None  # TensorBoard event files (rank 0)


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

    def to_dict(self) -> dict:
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


def default_pos_weight(graphs: list[HitGraph], parallel: DataParallel | None = None) -> float:
    """Negatives per positive over the weighted training edges of every rank (1 if either
    is absent)."""
    counts = [float(sum(int(g.target.sum()) for g in graphs)),
              float(sum(int((~g.y).sum()) for g in graphs))]
    pos, neg = counts if parallel is None else parallel.sum(counts)
    return neg / pos if pos and neg else 1.0


class DataParallel:
    """This rank's collectives in data-parallel training, every byte counted by ``comm``."""

    def __init__(self, comm: Communicator, group: Group):
        self.comm, self.group = comm, group
        self._grad_sum = GradientSum(comm, group)

    def sum(self, values: list[float]) -> list[float]:
        with self.comm.phase("stats"):
            return self.comm.all_reduce(torch.tensor(values, dtype=torch.float64),
                                        self.group).tolist()

    def max(self, value: int) -> int:
        with self.comm.phase("stats"):
            return max(v[0] for v in self.comm.gather_ints([value], self.group))

    def average_gradients(self, model: nn.Module, active: int) -> None:
        """Gradients summed over ranks, divided by the ranks that took a step."""
        self._grad_sum(model)
        for p in model.parameters():
            p.grad /= active


def train(graphs: list[HitGraph], cfg: TrackTrainConfig, device: torch.device | str = "cpu",
          init: InteractionNetwork | None = None, checkpoint: str | Path | None = None,
          resume: bool = False, parallel: DataParallel | None = None
          ) -> tuple[InteractionNetwork, TrainReport]:
    """Fit an Interaction Network; returns the model and per-epoch statistics.

    ``init`` fine-tunes a trained model (its own sizes replace ``cfg.model``): a model
    trained on smaller events adapts to denser ones in far fewer epochs than a new one.
    ``checkpoint`` is rewritten after every epoch by :func:`sparsegnn.train.loop.run_epochs`
    (weights, optimiser, report, RNG streams; :func:`load_model` reads it as a model).
    With ``resume`` the run continues from it up to ``cfg.epochs``, exactly as if it had
    not stopped: restarting from the weights alone resets Adam's moments, and on
    pileup-200 events that cost several epochs of progress.

    With ``parallel``, ``graphs`` are this rank's share of the events; the positive
    weight and every epoch's statistics are over all ranks' events, and every rank keeps
    its own checkpoint file (``run.rank1.pt``), so a data-parallel run resumes too.
    """
    if resume and checkpoint is None:
        raise InvalidValueError("resume needs the checkpoint to resume from")
    if resume and _is_finished_model(checkpoint):
        raise DataFormatError(f"{checkpoint} is a finished model, not a training checkpoint "
                              "(fine-tune it with init instead)")
    seed_everything(cfg.seed)
    device = torch.device(device)
    model = InteractionNetwork(cfg.model) if init is None else copy.deepcopy(init)
    model = model.to(device)
    optim = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    pos_weight = cfg.pos_weight if cfg.pos_weight is not None else default_pos_weight(
        graphs, parallel)
    me, world = (0, 1) if parallel is None else (parallel.group.me, parallel.group.size)
    stamp = _train_fingerprint(model, graphs, world, me) if checkpoint is not None else {}

    def epoch_fn(epoch: int) -> EpochReport:
        for group in optim.param_groups:
            group["lr"] = epoch_lr(cfg, epoch)
        stats = _epoch(model, optim, graphs, cfg, pos_weight, epoch, device, parallel)
        log.debug("epoch %d: loss %.4f, %d steps, %d events (%d skipped), %.1f s", epoch,
                 stats.loss, stats.steps, stats.events_used, stats.events_skipped,
                 stats.seconds)
        return stats

    loop = LoopConfig(epochs=cfg.epochs, checkpoint=rank_checkpoint(checkpoint, me, world),
                      resume=resume, progress=cfg.progress, logdir=cfg.logdir)
    state = run_epochs(model, optim, epoch_fn, loop, EpochReport, stamp=stamp,
                       extra=_Sizes(model.cfg, pos_weight), role=LoopRole(reports=me == 0))
    return model, TrainReport(pos_weight, state.history)


def epoch_lr(cfg: TrackTrainConfig, epoch: int) -> float:
    """The learning rate of ``epoch``: ``cfg.lr``, or its cosine decay to ``cfg.lr_final``.

    A pure function of the epoch, so a resumed run continues on the same schedule with
    nothing more in the checkpoint. The decay lets the last epochs settle into a minimum
    that a constant rate keeps stepping around (ShaDow minibatches are noisy steps)."""
    if cfg.lr_final is None or cfg.epochs <= 1:
        return cfg.lr
    done = min(max(epoch, 0), cfg.epochs - 1) / (cfg.epochs - 1)
    return cfg.lr_final + 0.5 * (cfg.lr - cfg.lr_final) * (1.0 + math.cos(math.pi * done))


def _is_finished_model(path: str | Path | None) -> bool:
    return (path is not None and Path(path).is_file()
            and read_checkpoint(path).fingerprint.get("kind") == MODEL_KIND)


@dataclass
class _Sizes:
    """What a training checkpoint adds to the loop's state, so that it also serves as a
    model file (:func:`load_model`): the model's sizes and the positive weight."""

    cfg: INConfig
    pos_weight: float

    def state_dict(self) -> dict[str, Any]:
        return {"config": asdict(self.cfg), "pos_weight": self.pos_weight}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["config"] != asdict(self.cfg):
            raise ValueError(f"model sizes {state['config']} differ from {asdict(self.cfg)}")
        self.pos_weight = float(state["pos_weight"])


def _train_fingerprint(model: InteractionNetwork, graphs: list[HitGraph], world: int,
                       rank: int) -> dict[str, str | int]:
    """What a training checkpoint must match to resume: the model's sizes and dtype, the
    training graphs (names and sizes, hashed), the number of ranks and this rank."""
    events = [[g.name, g.num_nodes, g.num_edges] for g in graphs]
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    return {"kind": TRAIN_KIND, **asdict(model.cfg), "dtype": dtype,
            "graphs": content_hash(events)[:16], "world_size": world, "rank": rank}


@dataclass
class _Tally:
    """One rank's running sums over an epoch."""

    loss: float = 0.0
    steps: int = 0  # steps this rank computed a loss on
    used: int = 0
    skipped: int = 0
    covered: int = 0
    total_edges: int = 0
    max_nodes: int = 0


def _epoch(model: InteractionNetwork, optim: torch.optim.Optimizer, graphs: list[HitGraph],
           cfg: TrackTrainConfig, pos_weight: float, epoch: int,
           device: torch.device, parallel: DataParallel | None = None) -> EpochReport:
    start = time.perf_counter()
    model.train()
    tally = _Tally()
    updates = 0
    for step, active in _synchronised(_epoch_steps(graphs, cfg, epoch, device, tally), parallel):
        optim.zero_grad()
        if step is not None:
            loss = weighted_bce(model(step.x, step.edge_attr, step.ops), step.target,
                                step.weight, pos_weight)
            loss.backward()
            tally.loss += float(loss.detach())
            tally.steps += 1
            tally.covered += step.covered
            tally.max_nodes = max(tally.max_nodes, step.num_nodes)
        if parallel is not None:
            parallel.average_gradients(model, active)
        optim.step()
        updates += 1
    return _report(tally, updates, epoch, time.perf_counter() - start, parallel)


def _epoch_steps(graphs: list[HitGraph], cfg: TrackTrainConfig, epoch: int,
                 device: torch.device, tally: _Tally) -> Iterator[_Step]:
    for graph in (graphs[i] for i in event_order(len(graphs), cfg.seed, epoch)):
        if _skipped(graph, cfg):
            tally.skipped += 1
            continue
        tally.used += 1
        tally.total_edges += graph.num_edges
        yield from _steps(graph, cfg, epoch, device)


def event_order(events: int, seed: int, epoch: int) -> np.ndarray:
    """The order an epoch visits the events in: a new permutation each epoch.

    Training graphs are usually listed condition by condition (a mixture of guns and
    pileups); in list order every epoch would end on the last condition and the model
    would drift towards it between visits to the others. A pure function of the seed and
    the epoch, so a resumed run visits them as the uninterrupted one would."""
    return np.random.default_rng([seed, epoch, 0x7EA7]).permutation(events)


def _synchronised(steps: Iterator[_Step], parallel: DataParallel | None
                  ) -> Iterator[tuple[_Step | None, int]]:
    """``(step, ranks with a step)`` until no rank has one left; a rank whose own steps
    ran out gets ``None`` (one counted scalar all-reduce per step says who is active)."""
    if parallel is None:
        yield from ((step, 1) for step in steps)
        return
    while True:
        step = next(steps, None)
        active = round(parallel.sum([float(step is not None)])[0])
        if active == 0:
            return
        yield step, active


def _report(t: _Tally, updates: int, epoch: int, seconds: float,
            parallel: DataParallel | None) -> EpochReport:
    """The epoch's statistics over all ranks."""
    max_nodes = t.max_nodes
    if parallel is not None:
        sums = parallel.sum([t.loss, t.steps, t.used, t.skipped, t.covered, t.total_edges])
        t = _Tally(sums[0], *(round(v) for v in sums[1:]))
        max_nodes = parallel.max(max_nodes)
    if not t.steps:  # summed over ranks: every rank stops at the same epoch
        raise InvalidValueError(f"epoch {epoch}: every event was skipped ({t.skipped} larger "
                                "than skip_larger_than); raise it or sample subgraphs")
    return EpochReport(
        epoch=epoch, loss=t.loss / t.steps, steps=updates,
        events_used=t.used, events_skipped=t.skipped, max_step_nodes=max_nodes,
        edge_coverage=t.covered / t.total_edges if t.total_edges else float("nan"),
        seconds=seconds,
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
    inputs = graph_inputs(graph, nodes, edges, edge_index, device)
    return _Step(
        x=inputs.x, edge_attr=inputs.edge_attr, ops=inputs.ops,
        target=torch.from_numpy(graph.target[edges]).to(device),
        weight=torch.from_numpy(np.asarray(weight, dtype=np.float32)).to(device),
        num_nodes=int(nodes.size),
        covered=int(edges.size) if covered is None else covered,
    )


@dataclass
class TrainedShare:
    """What one data-parallel rank trained: its share of the events and the model."""

    events: int  # events in this rank's share
    config: dict  # the model's sizes (the init model's when fine-tuning)
    state_dict: dict[str, torch.Tensor]
    report: TrainReport

    def model(self) -> InteractionNetwork:
        return model_from(self.config, self.state_dict)


def train_rank(paths: list[str], cfg: TrackTrainConfig, init: str | None = None,
               checkpoint: str | None = None, backend: str | None = None,
               timeout_s: float = 60.0, resume: bool = False) -> RankResult[TrainedShare]:
    """One rank of data-parallel training (spawned, or under torchrun): it loads only its
    share of the graph files, ``paths[rank::world_size]``, so no rank holds every event."""
    with rank_session(backend, timeout_s) as session:
        if len(paths) < session.world_size:
            raise InvalidValueError(f"{len(paths)} graphs for {session.world_size} ranks: "
                                    "every rank needs at least one event")
        comm = Communicator()
        parallel = DataParallel(comm, Group(tuple(range(session.world_size)), session.rank))
        graphs = [HitGraph.load(p) for p in paths[session.rank::session.world_size]]
        start = None if init is None else load_model(init)
        model, report = train(graphs, cfg, session.device, start, checkpoint, resume,
                              parallel=parallel)
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        share = TrainedShare(len(graphs), asdict(model.cfg), state, report)
        return RankResult(session.rank, session.world_size, share, comm.counts())


def train_data_parallel(paths: list[str], cfg: TrackTrainConfig, nprocs: int,
                        init: str | None = None, checkpoint: str | None = None,
                        backend: str | None = None, timeout_s: float = 60.0,
                        wall_timeout_s: float | None = None, resume: bool = False,
                        ) -> tuple[InteractionNetwork, TrainReport,
                                   list[RankResult[TrainedShare]]]:
    """Train over ``nprocs`` spawned local gloo ranks, or as this process's rank under
    torchrun; the trained model (every rank ends with the same weights; the first result's
    are returned), its report and the results of the ranks run here (every rank's when
    spawned, this rank's alone under torchrun): events and communication bytes by phase."""
    if nprocs > len(paths):
        raise InvalidValueError(f"{nprocs} ranks for {len(paths)} graphs: every rank needs "
                                "at least one event")
    results = run_on_ranks(train_rank, nprocs,
                           (paths, cfg, init, checkpoint, backend, timeout_s, resume),
                           wall_timeout_s=wall_timeout_s, heartbeat_timeout_s=timeout_s).results
    return results[0].value.model(), results[0].value.report, results


def run_training(paths: list[Path], cfg: TrackTrainConfig, device: torch.device | str = "cpu",
                 init: Path | None = None, checkpoint: Path | None = None,
                 resume: bool = False, nprocs: int = 1, backend: str | None = None,
                 timeout_s: float = 60.0
                 ) -> tuple[InteractionNetwork | None, TrainReport | None, dict | None]:
    """``track train``: here on ``device``, over ``nprocs`` spawned ranks, or as this
    process's rank of a torchrun job. The model and report (``None`` on torchrun ranks
    other than 0, where rank 0 writes and reports), and for ranks what each one held
    and sent (``None`` for one process)."""
    if nprocs == 1 and not in_torchrun():
        start = None if init is None else load_model(init)
        model, report = train([HitGraph.load(p) for p in paths], cfg, device, start,
                              checkpoint, resume)
        return model, report, None
    model, report, results = train_data_parallel(
        [str(p) for p in paths], cfg, nprocs, None if init is None else str(init),
        None if checkpoint is None else str(checkpoint), backend, timeout_s, resume=resume)
    if results[0].rank != 0:  # every rank ends with the same weights; rank 0 reports
        return None, None, None
    return model, report, {
        "world_size": results[0].world_size, "events_per_rank": [r.value.events for r in results],
        "bytes_sent_per_rank": [r.comm.sent for r in results],
        "comm_bytes": [r.comm.to_dict() for r in results]}
