"""GCN, GraphSAGE, GAT, GATv2 and GIN models of any depth and width.

``forward(x, adj)`` takes one operator (full-graph training: every layer multiplies by
the same matrix) or a list with one operator per layer (sampled minibatches: layer l
maps the l-th frontier onto the next, each block rectangular).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import nn

from sparsegnn.data.limits import require_memory
from sparsegnn.names import DEFAULT_MASK, MODEL_KINDS
from sparsegnn.nn.conv import Aggr, GCNConv, SAGEConv
from sparsegnn.nn.dropout import MASK_KINDS, MaskKind, dropout
from sparsegnn.nn.gat import GATConv, GATv2Conv
from sparsegnn.nn.gin import GINConv
from sparsegnn.nn.model_size import layer_widths, parameter_count
from sparsegnn.nn.operator import Operator
from sparsegnn.sparse import REDUCED_DTYPES


def _widths(in_channels: int, hidden: int, out_channels: int, num_layers: int) -> list[int]:
    if num_layers < 1:
        raise ValueError(f"num_layers must be at least 1, got {num_layers}")
    return layer_widths(in_channels, hidden, out_channels, num_layers)


def _require_weights(model: str, in_dim: int, hidden: int, out_dim: int,
                     num_layers: int, heads: int = 8, out_heads: int = 1) -> None:
    """Refuse (:class:`~sparsegnn.errors.ResourceError`) a model whose weights alone
    exceed available memory, before torch allocates them: ``--hidden 99999999999`` would
    otherwise end in a RuntimeError from the allocator, or, where memory is overcommitted,
    in the OOM killer."""
    params = parameter_count(model, in_dim, hidden, out_dim, num_layers, heads, out_heads)
    widths = layer_widths(in_dim, hidden, out_dim, num_layers)
    itemsize = torch.empty(0).element_size()  # parameters are made in the default dtype
    require_memory(params * itemsize, f"a {model.upper()} of layer widths "
                   f"{' -> '.join(map(str, widths))} ({params} weights; --hidden, --layers)")


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

    The input's dropout is :func:`~sparsegnn.nn.dropout.dropout` and each hidden layer
    computes ``dropout(relu(.))`` fused into its output (``relu_dropout``), in fewer
    passes and with less memory held for backward. The default ``dropout_mask="bytes"``
    draws one random byte per element; ``"bernoulli"`` gives the very values and random
    draws of ``F.dropout`` and ``F.relu`` (:data:`~sparsegnn.nn.dropout.MaskKind`).
    Layers are called as modules, so forward pre-hooks on them (a distributed trainer
    applying its own masks with the model's ``dropout`` set to 0) see each layer's input.
    """

    layers: nn.ModuleList

    def __init__(self, dropout: float, dropout_mask: MaskKind = DEFAULT_MASK):
        super().__init__()
        if dropout_mask not in MASK_KINDS:
            raise ValueError(f"dropout_mask must be one of {MASK_KINDS}, got {dropout_mask!r}")
        self.dropout, self.dropout_mask = dropout, dropout_mask

    def reset_parameters(self) -> None:
        for layer in self.layers:
            layer.reset_parameters()

    def activation(self, x: torch.Tensor) -> torch.Tensor:
        """The nonlinearity between layers (ReLU), for a caller running layer by layer."""
        return torch.relu(x)

    def forward(
        self, x: torch.Tensor, adj: Operator | torch.Tensor | Sequence[Operator]
    ) -> torch.Tensor:
        ops = _per_layer(adj, len(self.layers))
        x = dropout(x, self.dropout, self.training, self.dropout_mask)
        last = len(self.layers) - 1
        for i, (layer, op) in enumerate(zip(self.layers, ops, strict=True)):
            if i < last:
                x = layer(x, op, relu_dropout=self.dropout, mask=self.dropout_mask)
            else:
                x = layer(x, op)
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
        dropout_mask: MaskKind = DEFAULT_MASK,
    ):
        super().__init__(dropout, dropout_mask)
        w = _widths(in_channels, hidden, out_channels, num_layers)
        _require_weights("gcn", in_channels, hidden, out_channels, num_layers)
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
        dropout_mask: MaskKind = DEFAULT_MASK,
    ):
        super().__init__(dropout, dropout_mask)
        w = _widths(in_channels, hidden, out_channels, num_layers)
        _require_weights("sage", in_channels, hidden, out_channels, num_layers)
        self.layers = nn.ModuleList(SAGEConv(a, b, aggr=aggr) for a, b in itertools.pairwise(w))


class _DropoutStack(nn.Module):
    """Layers with dropout before each and ``activation`` between them (GAT, GIN): their
    layers take no fused ReLU-dropout, unlike :class:`_Stack`'s."""

    layers: nn.ModuleList
    dropout: float
    dropout_mask: MaskKind

    def reset_parameters(self) -> None:
        for layer in self.layers:
            layer.reset_parameters()

    def activation(self, x: torch.Tensor) -> torch.Tensor:
        """The nonlinearity between layers (ReLU)."""
        return torch.relu(x)

    def forward(self, x: torch.Tensor, adj: Operator | torch.Tensor | Sequence[Operator]
                ) -> torch.Tensor:
        ops = _per_layer(adj, len(self.layers))
        for i, (layer, op) in enumerate(zip(self.layers, ops, strict=True)):
            x = dropout(x, self.dropout, self.training, self.dropout_mask)
            x = layer(x, op)
            if i < len(self.layers) - 1:
                x = self.activation(x)
        return x


class GAT(_DropoutStack):
    """A stack of :class:`GATConv` (or :class:`GATv2Conv` with ``v2=True``), as in
    Veličković et al. and PyG's example: hidden layers of ``heads`` heads of ``hidden``
    channels, concatenated, with ELU between layers; the last layer averages
    ``out_heads`` heads. ``dropout`` drops the input of every layer and, as attention
    dropout, the attention weights (``attention_dropout``, when given, instead: a grid
    draws its own attention masks, so it equals one process only with that at 0). The
    operator is ``operator_for("gat", A)`` (one self-loop per node) or one such pattern
    per layer (sampled blocks).
    """

    def __init__(self, in_channels: int, hidden: int, out_channels: int, num_layers: int = 2,
                 heads: int = 8, out_heads: int = 1, dropout: float = 0.6, v2: bool = False,
                 dropout_mask: MaskKind = DEFAULT_MASK, attention_dropout: float | None = None):
        super().__init__()
        w = _widths(in_channels, hidden, out_channels, num_layers)
        _require_weights("gatv2" if v2 else "gat", in_channels, hidden, out_channels,
                         num_layers, heads, out_heads)
        conv = GATv2Conv if v2 else GATConv
        last = num_layers - 1
        self.layers = nn.ModuleList(
            conv(a if i == 0 else a * heads, b, heads=out_heads if i == last else heads,
                 concat=i != last,
                 dropout=dropout if attention_dropout is None else attention_dropout)
            for i, (a, b) in enumerate(itertools.pairwise(w)))
        self.dropout, self.dropout_mask = dropout, dropout_mask

    def activation(self, x: torch.Tensor) -> torch.Tensor:
        """The nonlinearity between layers (ELU, the paper's)."""
        return torch.nn.functional.elu(x)


def _gin_mlp(a: int, b: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b))


class GIN(_DropoutStack):
    """A stack of :class:`GINConv` (Xu et al.), each with a two-layer MLP and ``eps``
    fixed at 0 (GIN-0) unless ``train_eps``; ReLU and dropout between layers. The
    operator is the raw adjacency (``operator_for("gin", A)``)."""

    def __init__(self, in_channels: int, hidden: int, out_channels: int, num_layers: int = 2,
                 dropout: float = 0.5, train_eps: bool = False,
                 dropout_mask: MaskKind = DEFAULT_MASK):
        super().__init__()
        w = _widths(in_channels, hidden, out_channels, num_layers)
        _require_weights("gin", in_channels, hidden, out_channels, num_layers)
        self.layers = nn.ModuleList(GINConv(_gin_mlp(a, b), train_eps=train_eps)
                                    for a, b in itertools.pairwise(w))
        self.dropout, self.dropout_mask = dropout, dropout_mask


def build_model(kind: str, in_channels: int, hidden: int, out_channels: int,
                num_layers: int = 2, dropout: float = 0.5, *, heads: int = 8,
                dropout_mask: MaskKind = DEFAULT_MASK,
                attention_dropout: float | None = None) -> nn.Module:
    """A fresh model of ``kind`` (:data:`~sparsegnn.names.MODEL_KINDS`); it multiplies
    by ``operator_for(kind, A)``. ``heads`` is GAT's and GATv2's hidden head count (their
    last layer has one head, as the GAT paper's Cora model); ``attention_dropout`` their
    attention weights' dropout (default: ``dropout``)."""
    if kind == "gcn":
        return GCN(in_channels, hidden, out_channels, num_layers, dropout,
                   dropout_mask=dropout_mask)
    if kind == "sage":
        return GraphSAGE(in_channels, hidden, out_channels, num_layers, dropout,
                         dropout_mask=dropout_mask)
    if kind in ("gat", "gatv2"):
        return GAT(in_channels, hidden, out_channels, num_layers, heads=heads,
                   dropout=dropout, v2=kind == "gatv2", dropout_mask=dropout_mask,
                   attention_dropout=attention_dropout)
    if kind == "gin":
        return GIN(in_channels, hidden, out_channels, num_layers, dropout,
                   dropout_mask=dropout_mask)
    raise ValueError(f"unknown model {kind!r}; choose one of {', '.join(MODEL_KINDS)}")
