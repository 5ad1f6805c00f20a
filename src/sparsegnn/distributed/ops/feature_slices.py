"""Input features cut by columns within a process row (2D/3D), and the first layer on them.

Why: on 2D/3D every rank of process row i holds the full rows of vertex block i of the
activations (:mod:`sparsegnn.distributed.ops.spmm`), which costs little for hidden widths but
made the q ranks of a row each hold the whole ``n_i x f`` input block: per-rank feature
memory fell as 1/sqrt(p) (2D), not 1/p. So rank ``(i, j, m)`` holds only column slice j
of ``X_i``
(:func:`~sparsegnn.distributed.layout.block_partition.feature_columns`, ``f / q`` columns;
the fiber replicas m hold the same slice), and the first layer, the only one that reads
``X``, runs on partial products:

* ``X_i W = sum_j X_i[:, j] W[j, :]``: every linear map of the first layer that reads its
  input (GCNConv's ``lin``; SAGEConv's ``lin_l`` and ``lin_r``; GAT's ``lin``,
  GATv2's ``lin_l`` and ``lin_r``; the first map of GINConv's MLP) becomes a
  :class:`RowSumLinear`,
  which multiplies the slice by its rows of ``W`` and all-reduces the partial product
  over the process row. The layer's output, and everything after it, is full rows again.
* a first layer that aggregates before its map (``(A X) W``, when it widens; GIN's
  ``(A X + (1 + eps) X) W``) gets the
  column-sliced SUMMA operator (:meth:`~sparsegnn.distributed.ops.spmm.SummaOperator.
  column_sliced`): SUMMA computes slice j of ``A X`` anyway, so ``(A X)_i[:, j] W[j, :]``
  is summed the same way, without the all-gather back to full rows.
* backward: the row sum passes its gradient through (every rank of the row holds the same
  downstream gradient G, all later work being replicated), so rank j's weight gradient is
  ``X_i[:, j]^T G`` in slice j's columns and zero elsewhere. The task sums it over the
  column group like every gradient, then over the row
  (:class:`~sparsegnn.distributed.ops.task.DistributedTask`), which assembles the slices
  exactly and bit-identically on every rank.

Parameters keep their names and shapes (each rank keeps the whole ``W``), so the model
and its checkpoints are those of any other grid.

Dropout on a slice must consume the block's shared random stream as the whole block
would on every rank of the row, else the replicas' streams, and with them the hidden
layers' masks, drift apart. With the graph in memory every rank keeps its rows and
columns of the whole graph's mask (as before). Per block, :class:`SliceDropout` draws one
seed from the shared stream and the slice's mask from a generator seeded by it and the
slice. When the first layer maps its input before aggregating, the maps apply that mask
themselves and keep only the raw slice and the seed for the backward pass, where the
mask is drawn again: a dropped copy of the slice, as large as the features the rank
holds, is never kept between the passes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from sparsegnn.distributed.ops.spmm import DistributedOperator, SummaOperator
from sparsegnn.distributed.ops.task import group_sum
from sparsegnn.distributed.runtime.comm import Communicator, Group
from sparsegnn.names import DEFAULT_MASK, MaskKind
from sparsegnn.nn.dropout import dropout as drop
from sparsegnn.nn.dropout import dropout_noise

# Seeds drawn for a slice's dropout generator lie below this (torch's seeds are 64-bit;
# the slice index is added to the draw).
_SEED_RANGE = 2**62


class SliceDropout:
    """Per-block dropout of this rank's feature slice ``slice_index`` (the 2D/3D first
    layer's input), ``p`` the drop probability, ``kind`` the mask (the model's).

    :meth:`pre_hook` runs before the first layer. It draws one seed from the torch stream
    every rank of the block shares (all consume the same draw) and adds the slice index,
    so fiber replicas of a slice get the same mask and other slices independent ones.
    A layer that aggregates first gets its input dropped at once; one that maps first
    leaves it raw and its :class:`RowSumLinear` maps apply the mask (:attr:`seed`, set
    for the current forward pass).
    """

    def __init__(self, p: float, slice_index: int, kind: MaskKind = DEFAULT_MASK) -> None:
        self.p, self.slice_index, self.kind = p, slice_index, kind
        self.seed: int | None = None

    def mask(self, like: torch.Tensor, seed: int) -> torch.Tensor:
        """The scaled keep-mask of ``like``'s shape drawn from ``seed`` (the same seed gives
        the same mask)."""
        gen = torch.Generator(device=like.device).manual_seed(seed)
        return dropout_noise(like, self.p, self.kind, gen)

    def pre_hook(self, layer: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        self.seed = None
        if not layer.training:
            return None
        seed = int(torch.randint(_SEED_RANGE, (1,))) + self.slice_index
        if layer.transforms_first:
            self.seed = seed
            return None
        x = args[0]
        return (self.mask(x, seed).mul_(x), *args[1:])


class _DroppedProduct(torch.autograd.Function):
    """``(x * mask) W^T`` keeping only ``x`` and the mask's seed for the backward pass,
    which draws the mask again."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, dropout: SliceDropout,  # type: ignore[override]
                seed: int) -> torch.Tensor:
        ctx.dropout, ctx.seed = dropout, seed
        ctx.save_for_backward(x, weight)
        return F.linear(dropout.mask(x, seed).mul_(x), weight)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        mask = ctx.dropout.mask(x, ctx.seed)
        grad_x = (grad @ weight).mul_(mask) if ctx.needs_input_grad[0] else None
        grad_w = grad.t() @ mask.mul_(x) if ctx.needs_input_grad[1] else None
        return grad_x, grad_w, None, None


class RowSumLinear(nn.Module):
    """A :class:`~torch.nn.Linear` applied to columns ``cols`` of its input only, the
    partial products summed over the process row (``X W`` from column slices of X), the
    bias added once after the sum (its gradient is then whole on every rank: only the
    weight's is sliced).

    It holds the original layer's ``weight`` and ``bias`` parameters under the same
    names, so state dicts and parameter order are unchanged. ``forward(x, bias=False)``
    leaves the bias out, for a layer that adds it after aggregating (SAGEConv's
    ``lin_l``, named as PyG's).
    """

    def __init__(self, linear: nn.Linear, cols: tuple[int, int], comm: Communicator,
                 row: Group) -> None:
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.cols, self.comm, self.row = cols, comm, row
        # Whose mask to apply to a raw input slice (per-block dropout, layer maps first).
        self.dropout: SliceDropout | None = None

    def forward(self, x: torch.Tensor, bias: bool = True) -> torch.Tensor:
        lo, hi = self.cols
        seed = None if self.dropout is None else self.dropout.seed
        if seed is None:
            partial = F.linear(x, self.weight[:, lo:hi])
        else:
            partial = _DroppedProduct.apply(x, self.weight[:, lo:hi], self.dropout, seed)
        with self.comm.phase("input_allreduce"):
            total = group_sum(partial, self.comm, self.row)
        return total if self.bias is None or not bias else total + self.bias

    def extra_repr(self) -> str:
        return f"in_columns={self.cols[0]}:{self.cols[1]} of {self.weight.shape[1]}"


def slice_first_layer(
    model: nn.Module, op: SummaOperator, cols: tuple[int, int], comm: Communicator, row: Group,
) -> tuple[list[DistributedOperator], list[nn.Parameter]]:
    """Make ``model``'s first layer take feature columns ``cols`` of its input.

    Returns the per-layer operators to call the model with (the column-sliced one for a
    first layer that aggregates its raw input) and the parameters whose gradients hold
    only those columns.
    """
    first = model.layers[0]
    sliced = []
    for parent, name, linear in input_maps(first):
        setattr(parent, name, RowSumLinear(linear, cols, comm, row))
        sliced.append(linear.weight)
    head = op if first.transforms_first else op.column_sliced()
    return [head] + [op] * (len(model.layers) - 1), sliced


def input_maps(layer: nn.Module) -> list[tuple[nn.Module, str, nn.Linear]]:
    """``(parent, name, map)`` of each linear map that reads a layer's input: its own
    linear children (GCNConv's ``lin``, SAGEConv's two, GAT's ``lin``, GATv2's ``lin_l``
    and ``lin_r``), or, for a layer that aggregates into a module (GINConv's ``nn``), that
    module's first linear map."""
    own = [(layer, name, child) for name, child in layer.named_children()
           if isinstance(child, nn.Linear)]
    if own:
        return own
    inner = getattr(layer, "nn", None)
    for parent in [] if inner is None else inner.modules():
        for name, child in parent.named_children():
            if isinstance(child, nn.Linear):
                return [(parent, name, child)]
    raise ValueError(f"{type(layer).__name__} has no linear map of its input to slice")


def use_slice_dropout(model: nn.Module, slice_index: int) -> None:
    """Per-block dropout for a model whose first layer takes feature slice ``slice_index``
    (:class:`SliceDropout` before the first layer and inside its maps); later layers (full
    rows, replicated) draw from the shared stream as the model would. The model's own
    dropout is switched off."""
    p = float(getattr(model, "dropout", 0.0))
    if p == 0.0:
        return
    model.dropout = 0.0
    kind = getattr(model, "dropout_mask", DEFAULT_MASK)
    first = model.layers[0]
    dropout = SliceDropout(p, slice_index, kind)
    first.register_forward_pre_hook(dropout.pre_hook)
    for child in first.modules():
        if isinstance(child, RowSumLinear):
            child.dropout = dropout

    def rest(layer: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        if not layer.training:
            return None
        return (drop(args[0], p, True, kind), *args[1:])

    for layer in model.layers[1:]:
        layer.register_forward_pre_hook(rest)
