"""GCN and GraphSAGE models of any depth and width.

``forward(x, adj)`` takes one operator (full-graph training: every layer multiplies by
the same matrix) or a list with one operator per layer (sampled minibatches: layer l
maps the l-th frontier onto the next, each block rectangular).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from sparsegnn.nn.conv import Aggr, GCNConv, SAGEConv
from sparsegnn.nn.operator import Operator
from sparsegnn.sparse import REDUCED_DTYPES


def _widths(in_channels: int, hidden: int, out_channels: int, num_layers: int) -> list[int]:
    if num_layers < 1:
        raise ValueError(f"num_layers must be at least 1, got {num_layers}")
    return [in_channels] + [hidden] * (num_layers - 1) + [out_channels]


def _per_layer(adj: Operator | torch.Tensor | Sequence[Operator], n: int) -> list:
    if isinstance(adj, list | tuple):
        if len(adj) != n:
            raise ValueError(f"got {len(adj)} per-layer operators for a {n}-layer model")
        return list(adj)
    return [adj] * n


class _Stack(nn.Module):
    """Layers with ReLU and dropout between them; the last layer returns raw logits.

    With 16-bit input features every activation between layers stays 16-bit (half the
    bytes autograd saves) and the logits are widened to float32 on the way out: a
    softmax and its log in bfloat16 would lose the small probabilities the loss and
    its gradient are made of, so everything after the model (loss, accuracy) sees
    float32 whatever the storage precision.
    """

    layers: nn.ModuleList

    def __init__(self, dropout: float):
        super().__init__()
        self.dropout = dropout

    def reset_parameters(self) -> None:
        for layer in self.layers:
            layer.reset_parameters()

    def forward(
        self, x: torch.Tensor, adj: Operator | torch.Tensor | Sequence[Operator]
    ) -> torch.Tensor:
        ops = _per_layer(adj, len(self.layers))
        for i, (layer, op) in enumerate(zip(self.layers, ops, strict=True)):
            x = F.dropout(x, self.dropout, self.training)
            x = layer(x, op)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x.float() if x.dtype in REDUCED_DTYPES else x


class GCN(_Stack):
    """A stack of :class:`GCNConv` (Kipf & Welling); the operator is ``gcn_norm(A)``."""

    def __init__(
        self,
        in_channels: int,
        hidden: int,
        out_channels: int,
        num_layers: int = 2,
        dropout: float = 0.5,
        cached: bool = False,
    ):
        super().__init__(dropout)
        w = _widths(in_channels, hidden, out_channels, num_layers)
        self.layers = nn.ModuleList(GCNConv(a, b, cached=cached) for a, b in itertools.pairwise(w))


class GraphSAGE(_Stack):
    """A stack of :class:`SAGEConv`; for ``aggr='mean'`` the operator is ``row_norm(A)``."""

    def __init__(
        self,
        in_channels: int,
        hidden: int,
        out_channels: int,
        num_layers: int = 3,
        dropout: float = 0.5,
        aggr: Aggr = "mean",
    ):
        super().__init__(dropout)
        w = _widths(in_channels, hidden, out_channels, num_layers)
        self.layers = nn.ModuleList(SAGEConv(a, b, aggr=aggr) for a, b in itertools.pairwise(w))
