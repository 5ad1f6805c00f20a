"""What an epoch of distillation computes: the task, its loss, and the minibatch epoch.

:class:`DistilTask` holds the labelled rows per split and their soft targets and gives
:func:`sparsegnn.train.fullgraph.train_epoch` the heads' summed loss and the mean accuracy
over categories; :func:`sampled_epoch` trains instead on ShaDow minibatches of training
documents, building the student's operators on each induced subgraph. It is apart from
:mod:`sparsegnn.curation.distil`, which prepares the corpus, runs the loop and keeps the
annotator, because it is the per-epoch arithmetic that loop calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp
import torch
from torch.nn import functional as F

from sparsegnn.curation.student import DocumentGraph, GraphStudent, StudentConfig
from sparsegnn.curation.student_build import as_operand, operators
from sparsegnn.sampling import ShadowSampler, batch_generator, epoch_permutation
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train import EpochStats

Split = Literal["train", "val", "test"]


@dataclass
class DistilTask:
    """Labelled rows per split and soft targets per category (hard labels are one-hot)."""

    x: CSRMatrix | torch.Tensor
    adj: DocumentGraph | None
    heads: dict[str, slice]
    rows: dict[str, torch.Tensor]
    targets: dict[str, dict[str, torch.Tensor]]

    def loss(self, logits: torch.Tensor, split: Split) -> torch.Tensor:
        return heads_loss(logits[self.rows[split]], self.heads, self.targets[split])

    def accuracy(self, logits: torch.Tensor, split: Split) -> float:
        """Mean accuracy over the heads; NaN for a split without labels (``test``: the
        teacher's labels are all used for training and early stopping)."""
        if split not in self.rows:
            return float("nan")
        out = logits[self.rows[split]]
        accs = [float((out[:, cols].argmax(1) == self.targets[split][c].argmax(1)).float().mean())
                for c, cols in self.heads.items()]
        return float(np.mean(accs))

    def scores(self, logits: torch.Tensor, split: Split) -> tuple[float, float]:
        """Accuracy and loss on ``split`` from one forward pass (NaN without labels)."""
        if split not in self.rows:
            return float("nan"), float("nan")
        return self.accuracy(logits, split), float(self.loss(logits, split))

    def sync_gradients(self, model: torch.nn.Module) -> None:
        """One process: nothing to synchronise."""


def heads_loss(out: torch.Tensor, heads: dict[str, slice],
               targets: dict[str, torch.Tensor]) -> torch.Tensor:
    """Sum over the heads of the cross entropy of each head's logits to its targets."""
    losses = [-(targets[c] * F.log_softmax(out[:, cols], dim=1)).sum(1).mean()
              for c, cols in heads.items()]
    return torch.stack(losses).sum()


def sampled_epoch(model: GraphStudent, task: DistilTask,
                   features: sp.csr_matrix | np.ndarray,
                   raw: dict[str, CSRMatrix] | None, cfg: StudentConfig,
                   opt: torch.optim.Optimizer) -> Callable[[int], EpochStats]:
    """One epoch of Adam on ShaDow minibatches of ``cfg.batch_size`` training documents,
    then whole-graph validation accuracy.

    Each step samples ``cfg.fanouts`` neighbours per hop from the seeds over the union of
    the document graphs (our :class:`~sparsegnn.sampling.ShadowSampler`), builds the
    student's operators on the induced subgraph and its feature rows only, and takes the
    loss on the seeds. Memory per step grows with the subgraph, not the corpus.
    """
    graphs = None if raw is None else {name: a.to_scipy() for name, a in raw.items()}
    sampler = None if graphs is None else ShadowSampler(_union(graphs), cfg.fanouts)
    rows, targets = task.rows["train"], task.targets["train"]

    def epoch_fn(epoch: int) -> EpochStats:
        start, losses = time.perf_counter(), []
        model.train()
        for i, pos in enumerate(epoch_permutation(len(rows), cfg.seed, epoch).split(
                cfg.batch_size)):
            seeds = rows[pos]
            nodes = seeds if sampler is None else sampler.sample_one(
                seeds, batch_generator(cfg.seed, epoch, i)).node_ids
            sub = None if graphs is None else _induced(graphs, nodes, task.adj)
            out = model(_feature_rows(features, nodes), sub)[:len(seeds)]
            loss = heads_loss(out, task.heads, {c: t[pos] for c, t in targets.items()})
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        model.eval()
        with torch.no_grad():
            val = task.accuracy(model(task.x, task.adj), "val")
        return EpochStats(epoch, float(np.mean(losses)), float("nan"), val,
                          time.perf_counter() - start)

    return epoch_fn


def _union(graphs: dict[str, sp.csr_matrix]) -> CSRMatrix:
    """The graph the sampler walks: every edge the student's operators have (so each hop,
    of each kind, sees sampled neighbours)."""
    both = sum(graphs.values()).tocsr()
    both.data[:] = 1
    return CSRMatrix.from_scipy(both.astype(np.float32))


def _induced(graphs: dict[str, sp.csr_matrix], nodes: torch.Tensor,
             full: DocumentGraph | None) -> DocumentGraph:
    """The student's operators on the subgraph induced by ``nodes`` (in their order)."""
    idx = nodes.numpy()
    out = operators({name: CSRMatrix.from_scipy(a[idx][:, idx].astype(np.float32))
                     for name, a in graphs.items()})
    if full is not None and full.labels is not None:
        out.labels = full.labels[nodes]
    return out


def _feature_rows(features: sp.csr_matrix | np.ndarray, nodes: torch.Tensor
                  ) -> CSRMatrix | torch.Tensor:
    return as_operand(features[nodes.numpy()])
