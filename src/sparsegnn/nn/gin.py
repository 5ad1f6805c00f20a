"""Xu et al.'s graph isomorphism layer: ``out = MLP((1 + eps) x_i + sum_j x_j)``.

The neighbour sum is one SpMM with the raw adjacency (repeated edges and self-loops
each count, as PyG sums them): sum, not mean, aggregation is what makes the layer as
expressive as the 1-WL test.
"""

from __future__ import annotations

import torch
from torch import nn

from sparsegnn.nn.operator import Operator, as_operator


class GINConv(nn.Module):
    r"""PyG's ``GINConv`` on our SpMM: ``nn((1 + eps) x_i + sum_{j in N(i)} x_j)``.

    Args:
        nn: any module mapping ``[n, in_channels]`` to the output (usually an MLP).
        eps: the initial (or fixed) ``eps``.
        train_eps: learn ``eps``; otherwise it is a buffer, saved but not trained.

    State dict names equal PyG's (``eps``, ``nn.*``), so a PyG checkpoint loads. The graph
    is an ``edge_index`` or our operator, which it multiplies by as given (the raw
    adjacency: ``operator_for("gin", adj)``). Not supported: bipartite input.
    """

    # The neighbour sum comes before the MLP (a 2D/3D grid multiplies column slices).
    transforms_first = False

    def __init__(self, nn: nn.Module, eps: float = 0.0, train_eps: bool = False):
        super().__init__()
        self.nn = nn
        # The input width where the MLP starts with a linear map (a grid draws the whole
        # input's dropout mask at that width, and may replace the map by a sliced one).
        first = next((m for m in nn.modules() if isinstance(m, torch.nn.Linear)), None)
        self.in_channels = None if first is None else first.in_features
        self.initial_eps = eps
        if train_eps:
            self.eps = torch.nn.Parameter(torch.empty(1))
        else:
            self.register_buffer("eps", torch.empty(1))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in self.nn.modules():
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()
        self.eps.data.fill_(self.initial_eps)

    def forward(self, x: torch.Tensor, adj: Operator | torch.Tensor) -> torch.Tensor:
        op = as_operator(adj, x.shape[0], "sum", x.dtype)
        out = op.matmul(x) + (1 + self.eps) * x[: op.shape[0]]
        return self.nn(out)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(nn={self.nn})"
