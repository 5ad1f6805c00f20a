"""The training task of one rank: local rows, global loss and accuracy, gradient sum.

It satisfies the ``Task`` protocol of :func:`sparsegnn.train.fit` structurally (this
package does not import :mod:`sparsegnn.train`). Reductions run over the grid's column
group, which holds exactly one replica of every vertex block, so each vertex counts once:

* loss = (sum over ranks of the local summed cross-entropy) / (global label count);
  the all-reduce's backward is the identity, because each rank back-propagates its own
  rows' share and the distributed SpMM's backward moves the rest;
* accuracy = global correct count / global label count;
* validation scores (:meth:`DistributedTask.scores`): the correct count and the summed
  cross-entropy of one evaluation pass travel in one all-reduce of two float64 values,
  so the validation loss adds one value to the accuracy's collective, not a reduction;
* weight gradients are summed over the column group, which makes them equal on every
  rank (each replica of a block computed the same share). On 2D/3D the first layer's
  maps see only this rank's feature columns (:mod:`sparsegnn.distributed.ops.feature_slices`),
  so their gradients hold only those columns; summing them over the process row as well
  assembles the whole gradient (the other columns are zeros, and adding zeros is exact).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from sparsegnn.distributed.ops.spmm import DistributedOperator
from sparsegnn.distributed.runtime.comm import Communicator, Group

SPLITS = ("train", "val", "test")


class _GroupSum(torch.autograd.Function):
    """Sum over the group in the forward pass, pass the gradient through in the backward."""

    @staticmethod
    def forward(ctx, local: torch.Tensor, comm: Communicator, group: Group) -> torch.Tensor:  # type: ignore[override]
        # A one-rank group hands back its input, which a Function must not return as is.
        return comm.all_reduce(local.detach().clone() if group.size == 1 else local, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        return grad, None, None


def group_sum(local: torch.Tensor, comm: Communicator, group: Group) -> torch.Tensor:
    """The sum of ``local`` over ``group``, identical on every member; its gradient is the
    incoming one unchanged. That is the exact gradient when every member back-propagates
    the same downstream gradient through its own summand (the loss, each rank's share of
    a layer's input), and no communication happens in the backward pass."""
    return _GroupSum.apply(local, comm, group)


@dataclass
class DistributedTask:
    """One rank's share of a full-graph node-classification problem."""

    x: torch.Tensor
    adj: DistributedOperator | list[DistributedOperator]  # one, or one per layer
    y: torch.Tensor
    masks: dict[str, torch.Tensor]
    comm: Communicator
    group: Group
    # Parameters whose gradients hold only this rank's feature columns (2D/3D first
    # layer), assembled over ``row`` after the sum over ``group``.
    row_sliced: list[nn.Parameter] = field(default_factory=list)
    row: Group | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Global label counts per split, reduced once (setup traffic)."""
        local = torch.tensor([float(self.masks[s].sum()) for s in SPLITS], dtype=torch.float64)
        with self.comm.phase("setup"):
            total = self.comm.all_reduce(local.to(self.x.device), self.group)
        self.counts = {s: int(v) for s, v in zip(SPLITS, total.tolist(), strict=True)}

    def loss(self, logits: torch.Tensor, split: str) -> torch.Tensor:
        m = self.masks[split]
        local = F.cross_entropy(logits[m], self.y[m], reduction="sum")
        with self.comm.phase("metrics"):
            total = group_sum(local, self.comm, self.group)
        return total / max(self.counts[split], 1)

    def accuracy(self, logits: torch.Tensor, split: str) -> float:
        m = self.masks[split]
        correct = (logits[m].argmax(1) == self.y[m]).sum().to(torch.float64).reshape(1)
        with self.comm.phase("metrics"):
            total = self.comm.all_reduce(correct, self.group)
        return float(total) / max(self.counts[split], 1)

    def scores(self, logits: torch.Tensor, split: str) -> tuple[float, float]:
        """Accuracy and mean cross-entropy of ``logits`` on ``split``: the correct count and
        the summed loss go over the group in one float64 all-reduce, so the loss is one
        value more in the collective the accuracy needs anyway, not a reduction of its own."""
        m = self.masks[split]
        correct = (logits[m].argmax(1) == self.y[m]).sum()
        loss = F.cross_entropy(logits[m], self.y[m], reduction="sum")
        local = torch.stack([correct.to(torch.float64), loss.to(torch.float64)])
        with self.comm.phase("metrics"):
            total = self.comm.all_reduce(local, self.group)
        count = max(self.counts[split], 1)
        return float(total[0]) / count, float(total[1]) / count

    def sync_gradients(self, model: nn.Module) -> None:
        """Sum every parameter's gradient over one replica of each vertex block, then the
        column-sliced ones over the process row."""
        sum_gradients(list(model.parameters()), self.comm, self.group)
        if self.row_sliced and self.row is not None:
            sum_gradients(self.row_sliced, self.comm, self.row)


def sum_gradients(params: list[nn.Parameter], comm: Communicator, group: Group) -> None:
    """One all-reduce of the parameters' gradients (zeros where none) over ``group``."""
    if not params:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    with comm.phase("grad_allreduce"):
        flat = comm.all_reduce(flat, group)
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset:offset + n].view_as(p).clone()
        offset += n
