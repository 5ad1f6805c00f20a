"""Whole-graph classifiers on a :class:`~sparsegnn.sparse.graph_batch.GraphBatch`.

:class:`GraphGIN` is the model of Xu et al. (ICLR 2019, "How Powerful are Graph Neural
Networks?"), section 7: ``num_layers`` representations counting the input, each GIN
layer a two-layer MLP with batch norm inside and after it, and a readout that sums, over
every layer's representation including the input, a linear map of its sum-pooled graph
vector (with dropout): the input's and the shallow layers' pooled features are the
Weisfeiler-Lehman features of small subtrees, which is why they are kept. :class:`GraphGCN`
is the GCN baseline: GCN layers on ``gcn_norm`` of the batch, mean pooling, a two-layer
classifier. Both only multiply by the batch's operators, so any batch of any size runs.
"""

from __future__ import annotations

import itertools
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

from sparsegnn.nn.conv import GCNConv
from sparsegnn.nn.gin import GINConv
from sparsegnn.nn.graph_pool import PoolKind, global_pool
from sparsegnn.nn.operator import operator_for
from sparsegnn.sparse.graph_batch import GraphBatch

GraphModelKind = Literal["gin", "gcn"]
GRAPH_MODELS: tuple[GraphModelKind, ...] = ("gin", "gcn")


def gin_mlp(a: int, b: int) -> nn.Sequential:
    """The GIN paper's two-layer MLP: linear, batch norm, ReLU, linear."""
    return nn.Sequential(nn.Linear(a, b), nn.BatchNorm1d(b), nn.ReLU(), nn.Linear(b, b))


class GraphGIN(nn.Module):
    """GIN for graph classification, readout over every layer (see the module doc).

    ``num_layers`` counts the input, as the paper does (5: four GIN layers); ``pool``:
    how each layer's node features become a graph vector (the paper's ``sum``).
    """

    def __init__(self, in_channels: int, hidden: int, num_classes: int, num_layers: int = 5,
                 dropout: float = 0.5, train_eps: bool = False, pool: PoolKind = "sum"):
        super().__init__()
        if num_layers < 2:
            raise ValueError(f"num_layers counts the input and needs at least 2, got "
                             f"{num_layers}")
        widths = [in_channels] + [hidden] * (num_layers - 1)
        self.convs = nn.ModuleList(GINConv(gin_mlp(a, hidden), train_eps=train_eps)
                                   for a in widths[:-1])
        self.norms = nn.ModuleList(nn.BatchNorm1d(hidden) for _ in widths[1:])
        self.heads = nn.ModuleList(nn.Linear(w, num_classes) for w in widths)
        self.dropout, self.pool = dropout, pool

    def forward(self, x: torch.Tensor, batch: GraphBatch) -> torch.Tensor:
        """Class scores ``[num_graphs, num_classes]`` (logits)."""
        hs = [x]
        for conv, norm in zip(self.convs, self.norms, strict=True):
            hs.append(torch.relu(norm(conv(hs[-1], batch.adj))))
        if self.pool == "max":
            return sum((F.dropout(head(global_pool(h, batch, "max")), self.dropout,
                                  self.training) for h, head in zip(hs, self.heads,
                                                                    strict=True)),
                       start=torch.zeros(()))
        return self._linear_readout(hs, batch)

    def _linear_readout(self, hs: list[torch.Tensor], batch: GraphBatch) -> torch.Tensor:
        """Sum and mean pooling commute with each head's linear map, so every head maps
        its node features first and one SpMM pools them all, ``P [h_0 W_0^T | ... |
        h_L W_L^T] + b``: one narrow product and its backward per batch instead of one
        per layer at the hidden width."""
        z = torch.cat([F.linear(h, head.weight) for h, head in
                       zip(hs, self.heads, strict=True)], dim=1)
        bias = torch.cat([head.bias for head in self.heads])
        scores = F.dropout(global_pool(z, batch, self.pool) + bias, self.dropout,
                           self.training)
        return scores.view(batch.num_graphs, len(self.heads), self.heads[0].out_features).sum(1)


class GraphGCN(nn.Module):
    """GCN layers (ReLU) on ``gcn_norm`` of the batch, ``pool`` (mean), then a hidden
    linear layer with dropout and the class scores."""

    def __init__(self, in_channels: int, hidden: int, num_classes: int, num_layers: int = 3,
                 dropout: float = 0.5, pool: PoolKind = "mean"):
        super().__init__()
        widths = [in_channels] + [hidden] * num_layers
        self.convs = nn.ModuleList(GCNConv(a, b) for a, b in itertools.pairwise(widths))
        self.lin1, self.lin2 = nn.Linear(hidden, hidden), nn.Linear(hidden, num_classes)
        self.dropout, self.pool = dropout, pool

    def forward(self, x: torch.Tensor, batch: GraphBatch) -> torch.Tensor:
        op = operator_for("gcn", batch.adj)
        h = x
        for conv in self.convs:
            h = torch.relu(conv(h, op))
        h = torch.relu(self.lin1(global_pool(h, batch, self.pool)))
        return self.lin2(F.dropout(h, self.dropout, self.training))


def build_graph_model(kind: str, in_channels: int, hidden: int, num_classes: int,
                      num_layers: int = 5, dropout: float = 0.5,
                      pool: PoolKind | None = None) -> nn.Module:
    """A fresh graph classifier of ``kind`` (:data:`GRAPH_MODELS`); ``pool`` defaults to
    each model's own (GIN: sum, GCN: mean). GCN's ``num_layers`` counts GCN layers."""
    if kind == "gin":
        return GraphGIN(in_channels, hidden, num_classes, num_layers, dropout,
                        pool=pool or "sum")
    if kind == "gcn":
        return GraphGCN(in_channels, hidden, num_classes, num_layers, dropout,
                        pool=pool or "mean")
    raise ValueError(f"unknown graph model {kind!r}; choose one of {', '.join(GRAPH_MODELS)}")
