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
from torch.nn import functional as F

from sparsegnn.names import DEFAULT_MASK
from sparsegnn.nn.dropout import MaskKind, bias_relu_dropout
from sparsegnn.nn.operator import Operator
from sparsegnn.nn.pyg_adjacency import gcn_operator, is_adjacency, sage_operator, weighs_max
from sparsegnn.sparse import REDUCED_DTYPES, CSRMatrix


def _linear(lin: nn.Module, x: torch.Tensor, bias: bool = True) -> torch.Tensor:
    """``lin(x)``, or ``x W^T`` alone with ``bias=False`` (a layer that adds the bias
    after aggregating). For 16-bit ``x`` the parameters are cast to its dtype (see the
    module doc); any other dtype is left to ``nn.Linear``, which refuses a mismatch.
    A stand-in for a linear map (a distributed trainer's row-sum map) is called with
    ``bias=False`` when the bias is to be left out."""
    if not isinstance(lin, nn.Linear):
        return lin(x) if bias else lin(x, bias=False)
    b = lin.bias if bias else None
    if x.dtype not in REDUCED_DTYPES:
        return lin(x) if b is lin.bias else F.linear(x, lin.weight)
    return F.linear(x, lin.weight.to(x.dtype), None if b is None else b.to(x.dtype))


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
    r"""Kipf & Welling's graph convolution, ``Z = Â (H W) + b``, with PyG's interface.

    ``Â = D^-1/2 (A + I) D^-1/2``. Our operators (``sparsegnn.sparse.gcn_norm`` of a
    graph, a distributed operator) are used as they are; PyG's forms (an ``edge_index``
    with optional ``edge_weight``, a ``torch.sparse`` matrix, a ``SparseTensor``) are
    normalised as PyG's ``GCNConv`` does (:mod:`sparsegnn.nn.pyg_adjacency`) and, with
    ``cached=True``, only once. The dense product runs on the narrower side of the SpMM:
    ``Â (H W)`` when the layer shrinks the width, ``(Â H) W`` when it keeps or grows it,
    which is the cheaper order. At equal widths aggregating first is never dearer and,
    on a first layer (raw features need no gradient), saves the backward SpMM: ``W``'s
    gradient is ``(Â H)^T G``, from the saved ``Â H``, where ``Â (H W)`` needs ``Â^T G``.

    Args (PyG's, same defaults; parameters named as PyG's: ``lin.weight``, ``bias``):
        in_channels: input feature width.
        out_channels: output feature width.
        improved: self-loops of weight 2 (``A + 2I``) where edge weights are given.
        cached: keep the operator built from a PyG adjacency (transductive use).
        add_self_loops: add self-loops before normalising (default: ``normalize``).
        normalize: normalise symmetrically; without it the weights are used as given.
        bias: add a learnable bias.

    ``forward(x, adj, relu_dropout=p)`` returns ``dropout(relu(conv(x)), p)`` computed
    in one pass over the output (what the models do between layers); ``mask`` picks the
    dropout mask (:data:`~sparsegnn.nn.dropout.MaskKind`).

    Shapes:
        x ``[n_in, in_channels]``, operator ``[n_out, n_in]`` -> ``[n_out, out_channels]``.
    """

    def __init__(
        self, in_channels: int, out_channels: int, improved: bool = False,
        cached: bool = False, add_self_loops: bool | None = None, normalize: bool = True,
        bias: bool = True,
    ):
        super().__init__()
        if add_self_loops is None:
            add_self_loops = normalize
        if add_self_loops and not normalize:
            raise ValueError("GCNConv: add_self_loops=True needs normalize=True (PyG's "
                             "rule); pass add_self_loops=False for a raw weighted sum")
        self.in_channels, self.out_channels, self.cached = in_channels, out_channels, cached
        self.improved, self.add_self_loops, self.normalize = improved, add_self_loops, normalize
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
        self, x: torch.Tensor, edge_index: Operator | torch.Tensor,
        edge_weight: torch.Tensor | None = None, *,
        relu_dropout: float | None = None, mask: MaskKind = DEFAULT_MASK,
    ) -> torch.Tensor:
        if isinstance(x, tuple | list):
            raise ValueError("GCNConv: got a tuple of node features, but a GCN layer is not "
                             "bipartite; use SAGEConv for (x_src, x_dst)")
        op = self.operator(x, edge_index, edge_weight)
        if self.transforms_first:
            out = op.matmul(_linear(self.lin, x))
        else:
            out = _linear(self.lin, op.matmul(x))
        owned = _owned(out, op if self.transforms_first else self.lin)
        return _epilogue(self, out, self.bias, relu_dropout, mask, owned)

    def operator(self, x: torch.Tensor, adj: Operator | torch.Tensor,
                 edge_weight: torch.Tensor | None = None) -> Operator:
        """What this layer multiplies ``x`` by: ``adj`` itself when it is one of our
        operators, else the operator PyG's layer would build from it."""
        if not is_adjacency(adj):
            if edge_weight is not None:
                raise ValueError("GCNConv: edge_weight goes with an edge_index; an "
                                 "operator already holds its weights")
            return adj
        if self.cached and self._cache is not None:
            return self._cache
        op = gcn_operator(adj, x.shape[0], edge_weight, fill=2.0 if self.improved else 1.0,
                          self_loops=self.add_self_loops, normalize=self.normalize,
                          dtype=_operator_dtype(x))
        if self.cached:
            self._cache = op
        return op

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels})"


def _operator_dtype(x: torch.Tensor) -> torch.dtype:
    """The values' dtype of an operator built for ``x``: float32 for 16-bit features,
    the type :func:`sparsegnn.sparse.spmm` pairs with them."""
    return torch.float32 if x.dtype in REDUCED_DTYPES else x.dtype


Aggr = Literal["mean", "sum", "max"]


class SAGEConv(nn.Module):
    r"""GraphSAGE, ``z_i = W_l · aggr_{j in N(i)} h_j + W_r h_i (+ b)``, with PyG's interface.

    ``mean`` and ``sum`` are one SpMM with the row-normalised (mean) or raw (sum)
    adjacency: our operators are used as they are (``sparsegnn.sparse.row_norm`` for
    mean), PyG's forms (``edge_index``, ``torch.sparse``, ``SparseTensor``) are turned
    into the operator PyG's layer aggregates with (:mod:`sparsegnn.nn.pyg_adjacency`).
    ``max`` needs the neighbour structure and therefore a local :class:`CSRMatrix`.
    Bipartite input ``(x_src, x_dst)`` aggregates ``x_src`` into the targets and adds
    ``W_r x_dst`` (none when ``x_dst`` is None). Given one tensor and a sampled block
    (``[n_out, n_in]``, ``n_out <= n_in``) the targets are the first ``n_out`` inputs,
    the convention every sampler of sparsegnn follows.

    Args (PyG's, same defaults; parameters named as PyG's: ``lin_l.weight``,
    ``lin_l.bias``, ``lin_r.weight``, and ``lin.weight``, ``lin.bias`` with ``project``):
        in_channels: input width, or ``(source width, target width)`` when bipartite.
        out_channels: output width.
        aggr: ``"mean"``, ``"sum"`` or ``"max"``.
        normalize: divide each output row by its L2 norm.
        root_weight: add ``W_r h_i``.
        project: ``h_j <- relu(W h_j + b)`` before aggregating (the paper's Eq. 3).
        bias: add a learnable bias (``lin_l.bias``).

    Shapes:
        x ``[n_in, in_channels]`` or ``([n_in, f_src], [n_out, f_dst] | None)``, operator
        ``[n_out, n_in]`` -> ``[n_out, out_channels]``.
    """

    def __init__(
        self, in_channels: int | tuple[int, int], out_channels: int, aggr: Aggr = "mean",
        normalize: bool = False, root_weight: bool = True, project: bool = False,
        bias: bool = True,
    ):
        super().__init__()
        if aggr not in ("mean", "sum", "max"):
            raise ValueError(f"SAGEConv: aggr must be 'mean', 'sum' or 'max', got {aggr!r}")
        src, dst = (in_channels, in_channels) if isinstance(in_channels, int) else in_channels
        self.in_channels, self.out_channels, self.aggr = in_channels, out_channels, aggr
        self.normalize, self.root_weight, self.project = normalize, root_weight, project
        if project:
            self.lin = nn.Linear(src, src, bias=True)
        self.lin_l = nn.Linear(src, out_channels, bias=bias)
        self.lin_r = nn.Linear(dst, out_channels, bias=False) if root_weight else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (getattr(self, "lin", None), self.lin_l, self.lin_r):
            if lin is not None:
                lin.reset_parameters()
        if self.lin_l.bias is not None:
            nn.init.zeros_(self.lin_l.bias)

    @property
    def transforms_first(self) -> bool:
        """Whether :meth:`forward` shrinks with ``lin_l`` before aggregating (the
        narrower side of the SpMM); ``lin_r`` always acts on the raw input."""
        src = self.in_channels if isinstance(self.in_channels, int) else self.in_channels[0]
        return self.aggr != "max" and self.out_channels < src

    def forward(
        self, x: torch.Tensor | tuple[torch.Tensor, torch.Tensor | None],
        edge_index: Operator | torch.Tensor, size: tuple[int, int] | None = None, *,
        relu_dropout: float | None = None, mask: MaskKind = DEFAULT_MASK,
    ) -> torch.Tensor:
        """The layer (``size``: PyG's ``(n_src, n_dst)`` for an ``edge_index``);
        ``relu_dropout``/``mask`` fuse the hidden layers' ReLU and dropout into its
        output (as :meth:`GCNConv.forward`)."""
        x_src, x_dst = x if isinstance(x, tuple | list) else (x, None)
        op = self.operator(x, edge_index, size)
        if x_dst is None and not isinstance(x, tuple | list):
            x_dst = x[: op.shape[0]]
        if self.project:
            x_src = torch.relu(_linear(self.lin, x_src))
        if self.aggr == "max":
            out = _linear(self.lin_l, _max_aggregate(op, x_src, weighs_max(edge_index)), bias=False)
        elif self.transforms_first:
            # A linear map commutes with aggregation: shrink first, aggregate the narrow side.
            out = op.matmul(_linear(self.lin_l, x_src, bias=False))
        else:
            out = _linear(self.lin_l, op.matmul(x_src), bias=False)
        root = self.lin_r is not None and x_dst is not None
        if root:
            out = out + _linear(self.lin_r, x_dst)
        bias = self.lin_l.bias
        owned = root or _owned(out, op if self.transforms_first else self.lin_l)
        if self.normalize:
            out, bias, owned = F.normalize(_add_bias(out, bias), p=2.0, dim=-1), None, True
        return _epilogue(self, out, bias, relu_dropout, mask, owned)

    def operator(
        self, x: torch.Tensor | tuple[torch.Tensor, torch.Tensor | None],
        adj: Operator | torch.Tensor, size: tuple[int, int] | None = None,
    ) -> Operator:
        """What this layer aggregates ``x`` with: ``adj`` itself when it is one of our
        operators, else the operator PyG's layer would aggregate with."""
        if not is_adjacency(adj):
            return adj
        x_src, x_dst = x if isinstance(x, tuple | list) else (x, None)
        n_dst = size[1] if size is not None else None if x_dst is None else x_dst.shape[0]
        shape = (n_dst, x_src.shape[0] if size is None else size[0])
        return sage_operator(adj, shape, self.aggr, _operator_dtype(x_src))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, aggr={self.aggr})"


def _max_aggregate(op: Operator, x: torch.Tensor, weighted: bool = False) -> torch.Tensor:
    """Element-wise max over each row's neighbours (zero for rows without any), of
    ``a_ij x_j`` when ``weighted`` (PyG's max over a weighted sparse matrix)."""
    if not isinstance(op, CSRMatrix):
        raise TypeError("SAGEConv(aggr='max') needs a local CSRMatrix operator")
    index = op.row_indices().unsqueeze(1).expand(-1, x.shape[1])
    out = torch.zeros(op.shape[0], x.shape[1], dtype=x.dtype, device=x.device)
    msg = x[op.col] * op.val.to(x.dtype).unsqueeze(1) if weighted else x[op.col]
    return out.scatter_reduce(0, index, msg, reduce="amax", include_self=False)
