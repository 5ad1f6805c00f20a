"""Batch normalisation over the rows of every rank: data-parallel training that equals one
process.

When each rank normalises its share of a minibatch with its own mean and variance (what
``DistributedDataParallel`` does unless told otherwise), the model differs from the
one-process model of the same minibatches, and the gap grows as shares shrink. Here the
statistics are those of the whole minibatch: the forward pass sums the row count and the
row sums over the ranks, then the squared deviations from that mean (two passes, so
float32 keeps its precision where the mean is large against the spread), and the
backward pass sums the two per-channel terms of the input gradient, ``sum(g)`` and
``sum(g * x_hat)``. That is 3 x channels values per layer and step, counted in the
``norm_stats`` phase. The weight and bias gradients stay local; the usual gradient
all-reduce sums them. Evaluation uses the running statistics, which every rank updates
identically, so it needs no communication.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from sparsegnn.distributed.runtime.comm import Communicator, Group

PHASE = "norm_stats"


class _SyncedNorm(torch.autograd.Function):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` with mean and (biased) variance
    over the rows of every rank; also returns them and the row count for the running
    statistics."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                eps: float, comm: Communicator, group: Group
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        with comm.phase(PHASE):
            head = comm.all_reduce(torch.cat([x.sum(0), x.new_tensor([x.shape[0]])]), group)
            count, mean = head[-1], head[:-1] / head[-1].clamp(min=1)
            centred = x - mean
            var = comm.all_reduce((centred * centred).sum(0), group) / count.clamp(min=1)
        invstd = torch.rsqrt(var + eps)
        x_hat = centred * invstd
        ctx.save_for_backward(x_hat, invstd, weight, count)
        ctx.comm, ctx.group = comm, group
        ctx.mark_non_differentiable(mean, var, count)
        return x_hat * weight + bias, mean, var, count

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *_: Any) -> tuple[Any, ...]:
        x_hat, invstd, weight, count = ctx.saved_tensors
        local = torch.cat([grad.sum(0), (grad * x_hat).sum(0)])
        with ctx.comm.phase(PHASE):
            sums = ctx.comm.all_reduce(local, ctx.group) / count.clamp(min=1)
        mean_grad, mean_grad_x_hat = sums.chunk(2)
        grad_x = (grad - mean_grad - x_hat * mean_grad_x_hat) * (invstd * weight)
        return grad_x, local[x_hat.shape[1]:], local[:x_hat.shape[1]], None, None, None


class SyncedBatchNorm1d(nn.BatchNorm1d):
    """``BatchNorm1d`` whose training statistics are those of every rank's rows together
    (same parameters, buffers and state-dict keys, so checkpoints move freely between it
    and the one-process module). Needs affine parameters and tracked running statistics,
    as GIN's normalisation has."""

    def __init__(self, num_features: int, comm: Communicator, group: Group,
                 eps: float = 1e-5, momentum: float | None = 0.1) -> None:
        super().__init__(num_features, eps=eps, momentum=momentum)
        self.comm, self.group = comm, group

    @classmethod
    def replacing(cls, norm: nn.BatchNorm1d, comm: Communicator, group: Group
                  ) -> SyncedBatchNorm1d:
        """A synced module holding ``norm``'s very parameters and buffers."""
        if not (norm.affine and norm.track_running_stats):
            raise ValueError("synced batch norm needs affine parameters and running stats")
        synced = cls(norm.num_features, comm, group, norm.eps, norm.momentum)
        synced.weight, synced.bias = norm.weight, norm.bias
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            synced.register_buffer(name, getattr(norm, name))
        return synced.train(norm.training)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return super().forward(x)
        out, mean, var, count = _SyncedNorm.apply(x, self.weight, self.bias, self.eps,
                                                  self.comm, self.group)
        self._update_running(mean, var, int(count))
        return out

    @torch.no_grad()
    def _update_running(self, mean: torch.Tensor, var: torch.Tensor, count: int) -> None:
        """As ``BatchNorm1d`` does: the unbiased variance, the momentum (or the cumulative
        average when it is None)."""
        self.num_batches_tracked += 1
        momentum = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                    else self.momentum)
        unbiased = var * (count / max(count - 1, 1))
        self.running_mean.mul_(1 - momentum).add_(mean, alpha=momentum)
        self.running_var.mul_(1 - momentum).add_(unbiased, alpha=momentum)


def sync_batch_norms(model: nn.Module, comm: Communicator, group: Group) -> nn.Module:
    """``model`` with every ``BatchNorm1d`` replaced, in place, by its synced twin."""
    for name, child in model.named_children():
        if isinstance(child, nn.BatchNorm1d) and not isinstance(child, SyncedBatchNorm1d):
            setattr(model, name, SyncedBatchNorm1d.replacing(child, comm, group))
        else:
            sync_batch_norms(child, comm, group)
    return model
