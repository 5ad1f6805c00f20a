"""R-GCN node classification on a typed graph, one process: request in, outcome out.

The typed graph is flattened once (:meth:`~sparsegnn.data.hetero.HeteroGraph.to_relational`)
and turned into one row-normalised operator per relation
(:func:`~sparsegnn.nn.rgcn.relation_operators`); every layer is then a sum of SpMMs. A
graph without one shared feature width trains *featureless*, as Schlichtkrull et al. and
PyG's entity-classification example do: the first layer's input is each node's one-hot
id, so ``A_r X W_r`` is ``A_r W_r`` and no identity matrix is ever built. The epochs run in
:func:`~sparsegnn.train.loop.run_epochs` (checkpoints, resume, early stopping, TensorBoard).
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from sparsegnn.data.hetero import HeteroGraph, RelationalGraph
from sparsegnn.data.hetero_io import load_hetero
from sparsegnn.nn.operator import Operator
from sparsegnn.nn.rgcn import RelAggr, RGCNConv, relation_operators
from sparsegnn.train.fullgraph import EpochStats
from sparsegnn.train.loop import LoopConfig, run_epochs


@dataclass(frozen=True)
class RGCNRequest:
    """One R-GCN run. Defaults are PyG's entity-classification example (hidden 16, two
    layers, Adam lr 0.01, weight decay 5e-4, 50 epochs, no dropout).

    ``inverse=None`` adds a reverse relation per edge type unless the graph lists both
    directions already (``meta['reverse_edges']``); ``featureless`` ignores features.
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
    when built with ``in_channels=None``. Module names follow PyG's example (``convs``)."""

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
        self.dropout = dropout
        self.convs = nn.ModuleList(
            RGCNConv(a, b, num_relations, num_bases=num_bases,
                     num_blocks=None if (i == 0 and self.featureless) else num_blocks,
                     aggr=aggr) for i, (a, b) in enumerate(itertools.pairwise(widths)))

    def forward(self, x: torch.Tensor | None, ops: Sequence[Operator]) -> torch.Tensor:
        first = self.convs[0]
        h = featureless_forward(first, ops) if self.featureless else first(x, ops)
        for conv in self.convs[1:]:
            h = F.dropout(F.relu(h), self.dropout, self.training)
            h = conv(h, ops)
        return h


def featureless_forward(conv: RGCNConv, ops: Sequence[Operator]) -> torch.Tensor:
    """``conv`` applied to the identity: ``sum_r A_r W_r + root + bias`` (W_r is
    ``[num_nodes, out]``), what PyG's ``RGCNConv`` computes for ``x=None``."""
    weights = conv.relation_weights()
    out = conv.root if conv.root is not None else weights.new_zeros(weights.shape[1:])
    for r, op in enumerate(ops):
        out = out + op.matmul(weights[r])
    return out if conv.bias is None else out + conv.bias


def train_rgcn(request: RGCNRequest, graph: HeteroGraph | None = None) -> RGCNOutcome:
    """Train R-GCN on ``graph`` (else ``request.source``) and report its accuracies."""
    typed = graph if graph is not None else load_hetero(request.source, request.data_dir,
                                                        seed=request.seed)
    inverse = request.inverse if request.inverse is not None \
        else not bool(typed.meta.get("reverse_edges"))
    rel = typed.to_relational(inverse=inverse)
    rel.check_trainable()
    device = torch.device(request.device)
    x = None if request.featureless or rel.x is None else rel.x.to(device)
    ops = [op.to(device=device) for op in relation_operators(
        rel.edge_index, rel.edge_type, rel.num_relations, rel.num_nodes, request.aggr)]
    torch.manual_seed(request.seed)
    model = RelationalClassifier(None if x is None else x.shape[1], rel.num_nodes,
                                 request.hidden, typed.num_classes, rel.num_relations,
                                 num_layers=request.num_layers, num_bases=request.num_bases,
                                 num_blocks=request.num_blocks, aggr=request.aggr,
                                 dropout=request.dropout).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=request.lr, weight_decay=request.weight_decay)
    task = _Task(model, opt, x, ops, rel, device)
    cfg = LoopConfig(epochs=request.epochs, patience=request.patience, seed=request.seed,
                     checkpoint=request.checkpoint, resume=request.resume,
                     logdir=request.logdir, progress=request.progress)
    state = run_epochs(model, opt, task.epoch, cfg, EpochStats,
                       score=lambda s: s.val_accuracy,
                       stamp={"model": "rgcn", "graph": typed.name, "nodes": rel.num_nodes,
                              "relations": rel.num_relations, "hidden": request.hidden})
    accs = task.accuracies()
    times = [h.seconds for h in state.history] or [0.0]
    return RGCNOutcome(graph=typed.name, num_nodes=rel.num_nodes,
                       num_edges=int(rel.edge_index.shape[1]), num_relations=rel.num_relations,
                       featureless=x is None, train_accuracy=accs[0], val_accuracy=accs[1],
                       test_accuracy=accs[2], epochs_run=state.epoch,
                       best_epoch=state.best_epoch, epoch_s=statistics.median(times),
                       history=list(state.history))


class _Task:
    """One epoch (forward, loss on the target's train nodes, step) and the evaluation."""

    def __init__(self, model: RelationalClassifier, opt: torch.optim.Optimizer,
                 x: torch.Tensor | None, ops: list[Operator], rel: RelationalGraph,
                 device: torch.device):
        self.model, self.opt, self.x, self.ops = model, opt, x, ops
        self.ids = rel.target_ids().to(device)
        self.y = rel.y.to(device)
        self.masks = [m.to(device) for m in (rel.train_mask, rel.val_mask, rel.test_mask)]

    def epoch(self, epoch: int) -> EpochStats:
        start = time.perf_counter()
        self.model.train()
        self.opt.zero_grad()
        out = self.model(self.x, self.ops)[self.ids]
        loss = F.cross_entropy(out[self.masks[0]], self.y[self.masks[0]])
        loss.backward()
        self.opt.step()
        seconds = time.perf_counter() - start
        train, val, _ = self.accuracies()
        return EpochStats(epoch=epoch, loss=float(loss.detach()), train_accuracy=train,
                          val_accuracy=val, seconds=seconds)

    @torch.no_grad()
    def accuracies(self) -> tuple[float, float, float]:
        self.model.eval()
        pred = self.model(self.x, self.ops)[self.ids].argmax(1)
        return tuple(float((pred[m] == self.y[m]).float().mean()) for m in self.masks)
