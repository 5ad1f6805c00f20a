"""Graph convolution layers whose message passing is one SpMM.

Both layers take the aggregation operator (a normalised :class:`CSRMatrix`, a distributed
operator, or a PyG ``edge_index`` for interop) and never look inside it, so full-graph,
sampled (rectangular ``b x n`` operators) and distributed training share one code path.

Reduced precision: a layer computes in the dtype of its input. Given bfloat16 (or
float16) features it casts its float32 parameters to that dtype at use, so the dense
product and the SpMM read and write 16-bit activations (both accumulate in float32
inside: oneDNN/cuBLAS and :func:`sparsegnn.sparse.spmm`), while the parameters, their
gradients (the cast is differentiable) and Adam's state stay float32: bfloat16's
spacing is 2^-8 of a weight, so any Adam step smaller than about 0.4% of the weight
(most steps once training settles, at lr 0.01) would round away in a 16-bit weight.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from sparsegnn.names import DEFAULT_MASK
from sparsegnn.nn.dropout import MaskKind, bias_relu_dropout
from sparsegnn.nn.operator import Operator, as_operator
from sparsegnn.sparse import REDUCED_DTYPES, CSRMatrix


def _linear(lin: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``lin(x)``, with the weights cast to ``x``'s dtype when ``x`` is 16-bit (see the
    module doc); any other dtype is left to ``nn.Linear``, which refuses a mismatch."""
    if x.dtype not in REDUCED_DTYPES:
        return lin(x)
    bias = None if lin.bias is None else lin.bias.to(x.dtype)
    return nn.functional.linear(x, lin.weight.to(x.dtype), bias)


def _add_bias(out: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``out + bias`` in ``out``'s dtype: type promotion would widen 16-bit activations
    to the float32 bias's dtype and double their memory."""
    return out if bias is None else out + bias.to(out.dtype)


def _owned(out: torch.Tensor, producer: object) -> bool:
    """Whether ``out``, made by ``producer`` (an operator or a linear map), is ours to
    overwrite: our SpMM's and ``nn.Linear``'s outputs are fresh tensors autograd does
    not keep; a distributed trainer's replacements may return views or keep them."""
    known = isinstance(producer, CSRMatrix | nn.Linear)
    return known and not out._is_view()


def _epilogue(
    module: nn.Module, out: torch.Tensor, bias: torch.Tensor | None,
    relu_dropout: float | None, mask: MaskKind, owned: bool,
) -> torch.Tensor:
    """The layer's output from its pre-activation ``out``: ``out + bias``, or with
    ``relu_dropout=p`` the hidden layer's ``dropout(relu(out + bias), p)`` fused in one
    pass (:func:`~sparsegnn.nn.dropout.bias_relu_dropout`), which overwrites ``out``.

    ``owned``: ``out`` is a fresh tensor nothing else holds (our SpMM's or a ``linear``'s
    output). Any other operator's product (a distributed one may return a view, or keep
    its output for backward) is copied first, so the fused pass never writes into it.
    """
    if relu_dropout is None:
        return _add_bias(out, bias)
    return bias_relu_dropout(out if owned else out.clone(), bias, relu_dropout,
                             module.training, mask)


class GCNConv(nn.Module):
    r"""Kipf & Welling's graph convolution, ``Z = Â (H W) + b``.

    ``Â = D^-1/2 (A + I) D^-1/2`` is expected precomputed (``sparsegnn.sparse.gcn_norm``);
    an ``edge_index`` is normalised on the fly and, with ``cached=True``, only once.
    The dense product runs on the narrower side of the SpMM: ``Â (H W)`` when the layer
    shrinks the width, ``(Â H) W`` when it keeps or grows it, which is the cheaper order.
    At equal widths aggregating first is never dearer and, on a first layer (raw
    features need no gradient), saves the backward SpMM: ``W``'s gradient is
    ``(Â H)^T G``, from the saved ``Â H``, where ``Â (H W)`` needs ``Â^T G``.

    Args:
        in_channels: input feature width.
        out_channels: output feature width.
        bias: add a learnable bias.
        cached: cache the operator built from an ``edge_index`` (transductive use).

    ``forward(x, adj, relu_dropout=p)`` returns ``dropout(relu(conv(x)), p)`` computed
    in one pass over the output (what the models do between layers); ``mask`` picks the
    dropout mask (:data:`~sparsegnn.nn.dropout.MaskKind`).

    Shapes:
        x ``[n_in, in_channels]``, operator ``[n_out, n_in]`` -> ``[n_out, out_channels]``.
    """

    def __init__(
        self, in_channels: int, out_channels: int, bias: bool = True, cached: bool = False
    ):
        super().__init__()
        self.in_channels, self.out_channels, self.cached = in_channels, out_channels, cached
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self._cache: Operator | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.lin.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)
        self._cache = None

    @property
    def transforms_first(self) -> bool:
        """Whether :meth:`forward` applies the linear map before the SpMM (the layer
        narrows); a distributed trainer needs to know which side of the SpMM sees the
        raw input."""
        return self.out_channels < self.in_channels

    def forward(
        self, x: torch.Tensor, adj: Operator | torch.Tensor, *,
        relu_dropout: float | None = None, mask: MaskKind = DEFAULT_MASK,
    ) -> torch.Tensor:
        op = self._operator(x, adj)
        if self.transforms_first:
            out = op.matmul(_linear(self.lin, x))
        else:
            out = _linear(self.lin, op.matmul(x))
        owned = _owned(out, op if self.transforms_first else self.lin)
        return _epilogue(self, out, self.bias, relu_dropout, mask, owned)

    def _operator(self, x: torch.Tensor, adj: Operator | torch.Tensor) -> Operator:
        if not isinstance(adj, torch.Tensor):
            return adj
        if self.cached and self._cache is not None:
            return self._cache
        op = as_operator(adj, x.shape[0], "gcn", x.dtype)
        if self.cached:
            self._cache = op
        return op

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels})"


Aggr = Literal["mean", "sum", "max"]


class SAGEConv(nn.Module):
    r"""GraphSAGE: ``z_i = W_r h_i + W_n · aggr_{j in N(i)} h_j (+ b)``.

    ``mean`` and ``sum`` are one SpMM with the row-normalised (mean) or raw (sum)
    adjacency, which the caller passes (``sparsegnn.sparse.row_norm`` for mean). ``max``
    needs the neighbour structure and therefore a local :class:`CSRMatrix`.
    For sampled blocks (``[n_out, n_in]`` with ``n_out <= n_in``) the targets are the
    first ``n_out`` inputs, the convention every sampler of sparsegnn follows.

    Shapes:
        x ``[n_in, in_channels]``, operator ``[n_out, n_in]`` -> ``[n_out, out_channels]``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        aggr: Aggr = "mean",
        root_weight: bool = True,
        bias: bool = True,
    ):
        super().__init__()
        if aggr not in ("mean", "sum", "max"):
            raise ValueError(f"SAGEConv: aggr must be 'mean', 'sum' or 'max', got {aggr!r}")
        self.in_channels, self.out_channels, self.aggr = in_channels, out_channels, aggr
        self.lin_neigh = nn.Linear(in_channels, out_channels, bias=False)
        self.lin_root = nn.Linear(in_channels, out_channels, bias=False) if root_weight else None
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin_neigh.reset_parameters()
        if self.lin_root is not None:
            self.lin_root.reset_parameters()
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    @property
    def transforms_first(self) -> bool:
        """Whether :meth:`forward` shrinks with ``lin_neigh`` before aggregating (the
        narrower side of the SpMM); ``lin_root`` always acts on the raw input."""
        return self.aggr != "max" and self.out_channels < self.in_channels

    def forward(
        self, x: torch.Tensor, adj: Operator | torch.Tensor, *,
        relu_dropout: float | None = None, mask: MaskKind = DEFAULT_MASK,
    ) -> torch.Tensor:
        """The layer; ``relu_dropout``/``mask`` fuse the hidden layers' ReLU and dropout
        into its output (as :meth:`GCNConv.forward`)."""
        op = as_operator(adj, x.shape[0], "mean" if self.aggr == "mean" else "sum", x.dtype)
        if self.aggr == "max":
            out = _linear(self.lin_neigh, _max_aggregate(op, x))
        elif self.transforms_first:
            # A linear map commutes with aggregation: shrink first, aggregate the narrow side.
            out = op.matmul(_linear(self.lin_neigh, x))
        else:
            out = _linear(self.lin_neigh, op.matmul(x))
        if self.lin_root is not None:
            out = out + _linear(self.lin_root, x[: op.shape[0]])
        owned = self.lin_root is not None or _owned(
            out, op if self.transforms_first else self.lin_neigh)
        return _epilogue(self, out, self.bias, relu_dropout, mask, owned)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, aggr={self.aggr})"


def _max_aggregate(op: Operator, x: torch.Tensor) -> torch.Tensor:
    """Element-wise max over each row's neighbours (zero for rows without any)."""
    if not isinstance(op, CSRMatrix):
        raise TypeError("SAGEConv(aggr='max') needs a local CSRMatrix operator")
    index = op.row_indices().unsqueeze(1).expand(-1, x.shape[1])
    out = torch.zeros(op.shape[0], x.shape[1], dtype=x.dtype, device=x.device)
    return out.scatter_reduce(0, index, x[op.col], reduce="amax", include_self=False)
