"""Graph attention (GAT, GATv2) as SDDMM, row softmax and SpMM on one sparse pattern.

PyG gathers an ``E x heads x channels`` message tensor per layer; here the per-edge
state is ``nnz x heads`` scores and weights (:mod:`sparsegnn.sparse.edge_kernels`,
:mod:`sparsegnn.sparse.edge_softmax`), and the aggregation is one SpMM for all heads.

The layers call only the edge protocol (:class:`~sparsegnn.nn.edge_operator.EdgeOperator`),
so they train unchanged on one process and on every distributed grid. The graph is
either a PyG ``edge_index`` (``add_self_loops`` then does what PyG does: drop every
listed self-loop, add one per node) or one of our operators (a :class:`CSRMatrix`, or a
distributed operator) whose pattern is attended over as given (build it with
``operator_for("gat", adj)``, which adds the self-loops once instead of per call). Its
values count edges: a repeated edge, stored once with value ``c``, weighs ``c`` times in
the softmax, exactly as PyG's ``c`` copies do, so outputs and gradients equal PyG's on
multigraphs. A row-normalised operator works too: a constant factor per row cancels.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from sparsegnn.nn.edge_operator import CSREdges, EdgeOperator, edge_operator
from sparsegnn.nn.operator import Operator, unit_self_loops
from sparsegnn.sparse import CSRMatrix


def attention_pattern(adj: Operator | torch.Tensor, num_nodes: int, dtype: torch.dtype,
                      self_loops: bool) -> EdgeOperator:
    """The pattern an attention layer attends over, with edge counts as values.

    An ``edge_index`` becomes its adjacency (``A[dst, src]``, repeated edges summed into
    a count) and, with ``self_loops``, gets PyG's one loop per node. Our own operator is
    used as given; attention needs its edges, so it must speak the edge protocol (a
    :class:`CSRMatrix` is wrapped, a distributed operator does).
    """
    if isinstance(adj, torch.Tensor):
        mat = CSRMatrix.from_edge_index(adj.long(), num_nodes).to(dtype=dtype)
        return edge_operator(unit_self_loops(mat) if self_loops else mat)
    return edge_operator(adj)


def attend(op: EdgeOperator, scores: torch.Tensor, h: torch.Tensor, dropout: float,
           training: bool) -> torch.Tensor:
    """``out_i = sum_j alpha_ij h_j`` with ``alpha`` the row softmax of ``scores`` weighted
    by the pattern's edge counts, attention dropout applied (``[rows, heads, c]``). A
    count of 1 adds ``log 1 = 0``, exactly, so only a local pattern known to be all ones
    skips the addition."""
    if not (isinstance(op, CSREdges) and op.adj.unit_values):
        scores = scores + op.edge_values().log().unsqueeze(1).to(scores.dtype)
    alpha = op.edge_dropout(op.edge_softmax(scores), dropout, training)
    return op.edge_matmul(alpha, h)


def _glorot(param: torch.Tensor) -> None:
    """Glorot-uniform over the last two dimensions, as PyG initialises attention vectors."""
    bound = (6.0 / (param.size(-2) + param.size(-1))) ** 0.5
    nn.init.uniform_(param, -bound, bound)


class _AttentionBase(nn.Module):
    """What GAT and GATv2 share: heads, combining them, the residual map and the bias."""

    # The linear maps come before the aggregation (a 2D/3D grid slices their inputs).
    transforms_first = True

    def __init__(self, in_channels: int, out_channels: int, heads: int, concat: bool,
                 negative_slope: float, dropout: float, add_self_loops: bool, bias: bool,
                 residual: bool):
        super().__init__()
        if heads < 1:
            raise ValueError(f"heads must be at least 1, got {heads}")
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.concat, self.negative_slope, self.dropout = concat, negative_slope, dropout
        self.add_self_loops = add_self_loops
        total = out_channels * (heads if concat else 1)
        self.res = nn.Linear(in_channels, total, bias=False) if residual else None
        self.bias = nn.Parameter(torch.empty(total)) if bias else None

    def _reset_common(self) -> None:
        if self.res is not None:
            nn.init.xavier_uniform_(self.res.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def _finish(self, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Heads concatenated or averaged, then the residual and the bias."""
        out = out.reshape(out.shape[0], -1) if self.concat else out.mean(dim=1)
        if self.res is not None:
            out = out + self.res(x[: out.shape[0]])
        return out if self.bias is None else out + self.bias

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.in_channels}, {self.out_channels}, "
                f"heads={self.heads})")


class GATConv(_AttentionBase):
    r"""Veličković et al.'s graph attention, PyG's ``GATConv`` on our sparse kernels.

    ``h = W x`` per head; ``e_ij = LeakyReLU(a_dst·h_i + a_src·h_j)`` (an additive SDDMM of
    two per-node scalars per head); ``alpha`` the softmax over i's in-edges, dropped out
    with probability ``dropout`` in training; ``out_i = sum_j alpha_ij h_j`` (an SpMM per
    head); heads concatenated or averaged; then residual and bias.

    Parameters carry PyG's names (``lin.weight``, ``att_src``, ``att_dst``, ``bias``,
    ``res.weight``), so a PyG ``GATConv`` state dict loads. Not supported: ``edge_dim``
    (edge features), bipartite ``(x_src, x_dst)`` input, ``return_attention_weights``.

    Shapes: x ``[n_in, in_channels]``, operator ``[n_out, n_in]`` (targets are the first
    ``n_out`` inputs) -> ``[n_out, heads * out_channels]`` (concat) or ``[n_out,
    out_channels]``.
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1,
                 concat: bool = True, negative_slope: float = 0.2, dropout: float = 0.0,
                 add_self_loops: bool = True, bias: bool = True, residual: bool = False):
        super().__init__(in_channels, out_channels, heads, concat, negative_slope, dropout,
                         add_self_loops, bias, residual)
        self.lin = nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.lin.weight)
        _glorot(self.att_src)
        _glorot(self.att_dst)
        self._reset_common()

    def forward(self, x: torch.Tensor, adj: Operator | torch.Tensor) -> torch.Tensor:
        op = attention_pattern(adj, x.shape[0], x.dtype, self.add_self_loops)
        h = self.lin(x).view(-1, self.heads, self.out_channels)
        score_src = (h * self.att_src).sum(-1)
        score_dst = (h[: op.shape[0]] * self.att_dst).sum(-1)
        scores = F.leaky_relu(op.sddmm_add(score_dst, score_src), self.negative_slope)
        out = attend(op, scores, h, self.dropout, self.training)
        return self._finish(out, x)


class GATv2Conv(_AttentionBase):
    r"""Brody et al.'s GATv2, PyG's ``GATv2Conv`` on our sparse kernels.

    ``e_ij = a · LeakyReLU(W_r x_i + W_l x_j)``: the nonlinearity comes before the dot, so
    the score is an edge-wise MLP (:func:`~sparsegnn.sparse.sddmm_leaky`, chunked), then
    the same softmax and SpMM as :class:`GATConv`, aggregating ``W_l x_j``.

    Parameters carry PyG's names (``lin_l``, ``lin_r`` with their biases, ``att``,
    ``bias``, ``res.weight``); ``share_weights`` uses ``lin_l`` for both sides. Not
    supported: ``edge_dim``, bipartite input, ``return_attention_weights``.
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1,
                 concat: bool = True, negative_slope: float = 0.2, dropout: float = 0.0,
                 add_self_loops: bool = True, bias: bool = True, share_weights: bool = False,
                 residual: bool = False):
        super().__init__(in_channels, out_channels, heads, concat, negative_slope, dropout,
                         add_self_loops, bias, residual)
        self.share_weights = share_weights
        self.lin_l = nn.Linear(in_channels, heads * out_channels, bias=bias)
        self.lin_r = self.lin_l if share_weights else nn.Linear(
            in_channels, heads * out_channels, bias=bias)
        self.att = nn.Parameter(torch.empty(1, heads, out_channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.lin_l, self.lin_r):
            nn.init.xavier_uniform_(lin.weight)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)
        _glorot(self.att)
        self._reset_common()

    def forward(self, x: torch.Tensor, adj: Operator | torch.Tensor) -> torch.Tensor:
        op = attention_pattern(adj, x.shape[0], x.dtype, self.add_self_loops)
        shape = (-1, self.heads, self.out_channels)
        h_src = self.lin_l(x).view(shape)
        h_dst = h_src if self.share_weights else self.lin_r(x).view(shape)
        scores = op.sddmm_leaky(h_dst[: op.shape[0]], h_src, self.att[0], self.negative_slope)
        out = attend(op, scores, h_src, self.dropout, self.training)
        return self._finish(out, x)
