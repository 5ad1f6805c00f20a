"""R-GCN node classification on a typed graph, one process: request in, outcome out.

The typed graph is flattened once (:meth:`~sparsegnn.data.hetero.HeteroGraph.to_relational`)
and turned into one row-normalised operator per relation
(:func:`~sparsegnn.nn.rgcn.relation_operators`); every layer is then a sum of SpMMs. A
graph without one shared feature width trains *featureless*, as Schlichtkrull et al. and
PyG's entity-classification example do: the first layer's input is each node's one-hot
id, so ``A_r X W_r`` is ``A_r W_r`` and no identity matrix is ever built (the model's input
is then the node ids, PyG's index form). The epochs run in
:func:`~sparsegnn.train.loop.run_epochs` (checkpoints, resume, early stopping, TensorBoard)
on a full-graph task of the training loop's protocol (loss, accuracy, gradient sum over
labelled nodes of every type), so the same epoch serves one process
(:class:`~sparsegnn.train.fullgraph.LocalTask`) and a grid of ranks
(:mod:`sparsegnn.train.rgcn_grid`).
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from sparsegnn.data.hetero import HeteroGraph, RelationalGraph
from sparsegnn.data.hetero_io import load_hetero
from sparsegnn.names import Algorithm
from sparsegnn.nn.operator import Operator
from sparsegnn.nn.rgcn import RelAggr, RGCNConv, relation_operators
from sparsegnn.train.fullgraph import EpochStats, LocalTask, Split, Task
from sparsegnn.train.loop import LoopConfig, LoopRole, run_epochs
from sparsegnn.train.minibatch import MinibatchConfig

SPLITS: tuple[Split, ...] = ("train", "val", "test")


@dataclass(frozen=True)
class RGCNRequest:
    """One R-GCN run. Defaults are PyG's entity-classification example (hidden 16, two
    layers, Adam lr 0.01, weight decay 5e-4, 50 epochs, no dropout).

    ``inverse=None`` adds a reverse relation per edge type unless the graph lists both
    directions already (``meta['reverse_edges']``); ``featureless`` ignores features.
    ``ranks`` trains full-graph on a grid of ranks (:mod:`sparsegnn.train.rgcn_grid`);
    ``minibatch`` on sampled minibatches (:mod:`sparsegnn.train.rgcn_minibatch`; on
    ``ranks.nprocs`` ranks with the whole topology each).
    """

    source: str = "hsbm:nodes=4096"
    data_dir: Path | None = None
    hidden: int = 16
    num_layers: int = 2
    num_bases: int | None = None
    num_blocks: int | None = None
    aggr: RelAggr = "mean"
    dropout: float = 0.0
    lr: float = 0.01
    weight_decay: float = 5e-4
    epochs: int = 50
    patience: int | None = None
    seed: int = 0
    inverse: bool | None = None
    featureless: bool = False
    device: str = "cpu"
    checkpoint: Path | None = None
    resume: bool = False
    logdir: Path | None = None
    progress: bool | None = False
    dtype: Literal["float32", "float64"] = "float32"
    ranks: RGCNRanks | None = None
    minibatch: MinibatchConfig | None = None

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch.float64 if self.dtype == "float64" else torch.float32


@dataclass(frozen=True)
class RGCNRanks:
    """Ranks for R-GCN: ``nprocs`` spawned local ranks. Full-graph, they run ``algo``
    (``replication`` c for 1.5D) on vertex blocks from ``partition`` (a partitioner of
    the union of the relations, or a vector file), with ``comm`` and ``overlap``; on sampled
    minibatches, ``topology`` says what each rank holds (``replication`` ranks per row
    block when partitioned)."""

    algo: Algorithm = "1d"
    nprocs: int = 1
    replication: int = 1
    partition: str = "block"
    backend: str | None = None
    timeout_s: float = 60.0
    # Full-graph 1D/1.5D: sparsity-aware rows instead of whole blocks, and transfers
    # overlapped with the multiplies (the same bits either way).
    comm: Literal["dense", "sparse"] = "dense"
    overlap: bool = False
    # Sampled minibatches: every rank holds the whole graph, or its rows only (1.5D
    # blocks of ``replication`` ranks each).
    topology: Literal["replicated", "partitioned"] = "replicated"


@dataclass(frozen=True)
class RGCNOutcome:
    """What a run produced; ``asdict``-able into ``--json``."""

    graph: str
    num_nodes: int
    num_edges: int
    num_relations: int
    featureless: bool
    train_accuracy: float
    val_accuracy: float
    test_accuracy: float
    epochs_run: int
    best_epoch: int
    epoch_s: float
    history: list[EpochStats] = field(default_factory=list)


class RelationalClassifier(nn.Module):
    """A stack of :class:`RGCNConv` (ReLU and dropout between), first layer featureless
    when built with ``in_channels=None``. Module names follow PyG's example (``convs``).

    ``mask_rows``: on a grid, the original ids of the rank's rows; dropout then draws the
    whole graph's mask and keeps those rows, which are one process's very masks."""

    def __init__(self, in_channels: int | None, num_nodes: int, hidden: int,
                 num_classes: int, num_relations: int, *, num_layers: int = 2,
                 num_bases: int | None = None, num_blocks: int | None = None,
                 aggr: RelAggr = "mean", dropout: float = 0.0):
        super().__init__()
        if in_channels is None and num_blocks is not None:
            raise ValueError("RelationalClassifier: a featureless first layer cannot be "
                             "block-diagonal; use num_bases or give features")
        widths = [num_nodes if in_channels is None else in_channels,
                  *([hidden] * (num_layers - 1)), num_classes]
        self.featureless = in_channels is None
        self.dropout, self.num_nodes = dropout, num_nodes
        self.mask_rows: torch.Tensor | None = None
        self.convs = nn.ModuleList(
            RGCNConv(a, b, num_relations, num_bases=num_bases,
                     num_blocks=None if (i == 0 and self.featureless) else num_blocks,
                     aggr=aggr) for i, (a, b) in enumerate(itertools.pairwise(widths)))

    def forward(self, x: torch.Tensor | None,
                ops: Sequence[Operator] | Sequence[Sequence[Operator]]) -> torch.Tensor:
        """Logits of the operators' rows; featureless, ``x`` is None (every node) or the
        ids of the input nodes. ``ops``: one operator per relation for every layer, or
        (sampled blocks) such a list per layer."""
        per_layer = ops if isinstance(ops[0], list | tuple) else [ops] * len(self.convs)
        first = self.convs[0]
        if self.featureless:
            h = featureless_forward(first, per_layer[0], x)  # type: ignore[arg-type]
        else:
            h = first(x, per_layer[0])
        for conv, layer_ops in zip(self.convs[1:], per_layer[1:], strict=True):
            h = self._dropout(F.relu(h))
            h = conv(h, layer_ops)
        return h

    def _dropout(self, h: torch.Tensor) -> torch.Tensor:
        if self.mask_rows is None or not self.training or self.dropout == 0.0:
            return F.dropout(h, self.dropout, self.training)
        # F.dropout multiplies by a mask drawn in the input's shape: the same draw here.
        ones = h.new_ones(self.num_nodes, h.shape[1])
        return h * F.dropout(ones, self.dropout, True)[self.mask_rows]


def featureless_forward(conv: RGCNConv, ops: Sequence[Operator],
                        ids: torch.Tensor | None = None) -> torch.Tensor:
    """``conv`` applied to the identity: ``sum_r A_r W_r + root + bias`` (W_r is
    ``[num_nodes, out]``), what PyG's ``RGCNConv`` computes for ``x=None``. ``ids``: the
    nodes whose rows the operators take and return (every node on one process, a rank's
    block on a grid), whose rows of W_r and of the root are the input, as PyG's index
    input."""
    weights = conv.relation_weights()
    if ids is not None:
        weights = weights[:, ids]
    if conv.root is not None:  # a sampled block's rows are the first of its columns
        out = conv.root if ids is None else conv.root[ids[: ops[0].shape[0]]]
    else:
        out = weights.new_zeros(ops[0].shape[0], weights.shape[2])
    # unbind, not weights[r]: each select's backward would add a zero-filled [R, n, out]
    for w, op in zip(weights.unbind(0), ops, strict=True):
        out = out + op.matmul(w)
    return out if conv.bias is None else out + conv.bias


def node_labels(rel: RelationalGraph) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Labels and split masks over every node (other types: label 0, in no split), so
    that the loss and accuracies are row-wise reductions a grid can share out."""
    ids, n = rel.target_ids(), rel.num_nodes
    y = torch.zeros(n, dtype=torch.long)
    y[ids] = rel.y
    masks = {}
    for split in SPLITS:
        mask = torch.zeros(n, dtype=torch.bool)
        mask[ids] = getattr(rel, f"{split}_mask")
        masks[split] = mask
    return y, masks


def relational_problem(request: RGCNRequest, graph: HeteroGraph | None = None
                       ) -> tuple[HeteroGraph, RelationalGraph]:
    """The typed graph of ``request`` (or ``graph``) and its trainable relational form."""
    typed = graph if graph is not None else load_hetero(request.source, request.data_dir,
                                                        seed=request.seed)
    inverse = request.inverse if request.inverse is not None \
        else not bool(typed.meta.get("reverse_edges"))
    rel = typed.to_relational(inverse=inverse)
    rel.check_trainable()
    return typed, rel


def build_classifier(request: RGCNRequest, rel: RelationalGraph, num_classes: int
                     ) -> RelationalClassifier:
    """The seeded model (featureless when asked or when the graph has no shared width):
    every process that builds it from the same request holds the same weights."""
    in_channels = None if request.featureless or rel.x is None else int(rel.x.shape[1])
    torch.manual_seed(request.seed)
    model = RelationalClassifier(in_channels, rel.num_nodes, request.hidden, num_classes,
                                 rel.num_relations, num_layers=request.num_layers,
                                 num_bases=request.num_bases, num_blocks=request.num_blocks,
                                 aggr=request.aggr, dropout=request.dropout)
    return model.to(request.torch_dtype)


def model_input(request: RGCNRequest, rel: RelationalGraph) -> torch.Tensor:
    """The first layer's input over every node: the features, or (featureless) the ids."""
    if request.featureless or rel.x is None:
        return torch.arange(rel.num_nodes)
    return rel.x.to(request.torch_dtype)


def train_rgcn(request: RGCNRequest, graph: HeteroGraph | None = None) -> RGCNOutcome:
    """Train R-GCN on ``graph`` (else ``request.source``) and report its accuracies."""
    return fit_rgcn(request, graph)[1]


def fit_rgcn(request: RGCNRequest, graph: HeteroGraph | None = None
             ) -> tuple[RelationalClassifier, RGCNOutcome]:
    """The trained model (best-on-validation weights) and its outcome, on one process."""
    typed, rel = relational_problem(request, graph)
    device = torch.device(request.device)
    ops = [op.to(device=device) for op in relation_operators(
        rel.edge_index, rel.edge_type, rel.num_relations, rel.num_nodes, request.aggr,
        request.torch_dtype)]
    y, masks = node_labels(rel)
    model = build_classifier(request, rel, typed.num_classes).to(device)
    task = LocalTask(model_input(request, rel).to(device), ops, y.to(device),  # type: ignore[arg-type]
                     {s: m.to(device) for s, m in masks.items()})
    return model, run_relational(model, TaskEvaluation(task), request, typed, rel,
                                 step=full_graph_step(task))


class Evaluation(Protocol):
    """What the epochs evaluate on: the model's logits over the rows this process
    evaluates, and their accuracy (:class:`TaskEvaluation` for a full-graph task)."""

    def logits(self, model: RelationalClassifier) -> torch.Tensor: ...

    def accuracy(self, logits: torch.Tensor, split: Split) -> float: ...


@dataclass
class TaskEvaluation:
    """A full-graph :class:`~sparsegnn.train.fullgraph.Task` (one process's or one
    rank's) as an :class:`Evaluation`: the model on the task's input and operators."""

    task: Task

    def logits(self, model: RelationalClassifier) -> torch.Tensor:
        return model(self.task.x, self.task.adj)

    def accuracy(self, logits: torch.Tensor, split: Split) -> float:
        return self.task.accuracy(logits, split)


def run_relational(model: RelationalClassifier, task: Evaluation, request: RGCNRequest,
                   typed: HeteroGraph, rel: RelationalGraph, *, step: TrainStep,
                   is_main: bool = True,
                   on_epoch: Callable[[EpochStats], None] | None = None) -> RGCNOutcome:
    """The epochs (``step`` trains one and returns its loss: :func:`full_graph_step`, or
    sampled minibatches') with the accuracies on ``task``, and the final ones."""
    opt = torch.optim.Adam(model.parameters(), lr=request.lr, weight_decay=request.weight_decay)
    epochs = _Epochs(model, opt, task, step)
    cfg = LoopConfig(epochs=request.epochs, patience=request.patience, seed=request.seed,
                     checkpoint=request.checkpoint, resume=request.resume,
                     logdir=request.logdir, progress=request.progress)
    state = run_epochs(model, opt, epochs.epoch, cfg, EpochStats,
                       score=lambda s: s.val_accuracy, on_epoch=on_epoch,
                       stamp={"model": "rgcn", "graph": typed.name, "nodes": rel.num_nodes,
                              "relations": rel.num_relations, "hidden": request.hidden},
                       role=LoopRole(is_main=is_main, reports=is_main))
    accs = epochs.accuracies(SPLITS)
    times = [h.seconds for h in state.history] or [0.0]
    return RGCNOutcome(graph=typed.name, num_nodes=rel.num_nodes,
                       num_edges=int(rel.edge_index.shape[1]), num_relations=rel.num_relations,
                       featureless=model.featureless, train_accuracy=accs[0],
                       val_accuracy=accs[1], test_accuracy=accs[2], epochs_run=state.epoch,
                       best_epoch=state.best_epoch, epoch_s=statistics.median(times),
                       history=list(state.history))


# One epoch's training: (model, optimiser, epoch) -> the epoch's loss.
TrainStep = Callable[[RelationalClassifier, torch.optim.Optimizer, int], float]


def full_graph_step(task: Task) -> TrainStep:
    """One full-batch step on ``task``: forward, loss on the labelled training nodes,
    backward, gradient sum (over ranks on a grid), optimiser step."""
    def step(model: RelationalClassifier, opt: torch.optim.Optimizer, epoch: int) -> float:
        opt.zero_grad()
        loss = task.loss(model(task.x, task.adj), "train")
        loss.backward()
        task.sync_gradients(model)
        opt.step()
        return float(loss.detach())

    return step


class _Epochs:
    """One epoch (the training step, then the training and validation accuracies of one
    evaluation pass on ``task``) and the evaluation."""

    def __init__(self, model: RelationalClassifier, opt: torch.optim.Optimizer,
                 task: Evaluation, step: TrainStep):
        self.model, self.opt, self.task, self.step = model, opt, task, step

    def epoch(self, epoch: int) -> EpochStats:
        start = time.perf_counter()
        self.model.train()
        loss = self.step(self.model, self.opt, epoch)
        seconds = time.perf_counter() - start
        train, val = self.accuracies(("train", "val"))
        return EpochStats(epoch=epoch, loss=loss, train_accuracy=train,
                          val_accuracy=val, seconds=seconds)

    @torch.no_grad()
    def accuracies(self, splits: Sequence[Split]) -> list[float]:
        self.model.eval()
        logits = self.task.logits(self.model)
        return [self.task.accuracy(logits, s) for s in splits]
