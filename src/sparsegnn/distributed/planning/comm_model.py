"""Analytic communication volume per rank and epoch, for comparison with the counters.

The formulas restate, in closed form over block sizes, tile nonzeros and feature widths,
what each algorithm of :mod:`sparsegnn.distributed.ops.spmm` sends under the payload model
of :mod:`sparsegnn.distributed.runtime.comm`; they never call the communication code. With b
bytes per value, rank ``(i, k)`` / ``(i, j, m)`` and one SpMM of width f:

* 1D/1.5D (R = p/c process rows): for each stage block j of replica k, the owner sends
  ``n_j f b (R - 1)`` and every other member receives ``n_j f b``; then the c replicas
  all-reduce ``n_i f b`` (each sends and receives ``(c - 1) n_i f b``).
* 2D/3D (q x q x l): per stage k, the A tile ``A[i, inner(k, m)]`` travels along the row
  as ``8 (n_i + 1 + nnz)`` index bytes plus ``b nnz`` value bytes, and the piece
  ``|inner(k, m)| w_j b`` down the column (w_j: width of feature slice j); then the
  fiber all-reduce ``(l - 1) n_i w_j b`` and the column all-gather, which sends
  ``n_i w_j b (q - 1)`` and receives ``n_i (f - w_j) b``; a first-layer SpMM of the
  column-sliced input features (``sliced``) has no all-gather.
* 2D/3D input slicing (:mod:`sparsegnn.distributed.ops.feature_slices`): each forward pass
  all-reduces the first layer's partial products, ``n_i h`` values per linear map of
  output width h, over the q ranks of the process row (phase ``input_allreduce``,
  ``(q - 1) n_i h b`` each way), and the gradients of those maps' ``f h`` weights are
  summed over the row once more, ``(q - 1) f h b`` each way.
* per epoch, the gradient all-reduce of P parameters, ``(R - 1) P b`` each way over the
  R vertex blocks, and three scalar reductions (loss: b bytes, two correct counts: 8 bytes
  each), ``(R - 1)`` times each. A full-graph epoch that records the validation loss
  (``val_loss``) sums it in the validation count's all-reduce, as one more float64 value:
  that call carries 16 bytes instead of 8, ``(R - 1) 8`` more each way per epoch, and the
  number of reductions stays three.

For the usual equal blocks this is ``~ n f`` per rank for 1D, ``~ n f / c + n f c / p``
for 1.5D and ``~ (nnz + n f) / sqrt(p) + n f / sqrt(p)`` for 2D; 3D's SUMMA part is
``~ (nnz + n f) / p^(2/3)`` plus the ``~ n f / p^(1/3)`` all-gather back to full rows.
The input slicing adds ``~ n h / sqrt(p)`` (2D) and ``~ n h / p^(1/3)`` (3D) per forward.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Protocol

import torch

from sparsegnn.distributed.layout.block_partition import BlockPartition, split_sizes, stage_blocks
from sparsegnn.distributed.layout.grid import GridShape
from sparsegnn.names import ATTENTION_MODELS
from sparsegnn.sparse import CSRMatrix

Volume = dict[str, dict[str, int]]
# Keys of :data:`Volume`: (row block, col coordinate, layer) -> nnz of that rank's tile.
NnzTable = dict[tuple[int, int, int], int]


@dataclass(frozen=True)
class SpmmCall:
    """One distributed SpMM of an epoch: its feature width and its phase; ``sliced``: it
    multiplies the 2D/3D column-sliced input features, so input and output stay column
    slices (no all-gather)."""

    width: int
    phase: str  # "forward_spmm" or "backward_spmm"
    sliced: bool = False


@dataclass(frozen=True)
class InputSlicing:
    """What cutting the input features by columns adds to a 2D/3D epoch: the widths of the
    row all-reduces of the first layer's partial products (training and evaluation
    forward), and how many weights hold column-sliced gradients."""

    sums: tuple[int, ...]
    params: int


class ModelShape(Protocol):
    """The layer widths a model's SpMMs depend on (a ``TrainConfig`` is one)."""

    @property
    def model(self) -> str: ...

    @property
    def hidden(self) -> int: ...

    @property
    def num_layers(self) -> int: ...

    @property
    def heads(self) -> int: ...


def _widths(cfg: ModelShape, in_dim: int, out_dim: int) -> list[int]:
    return [in_dim] + [cfg.hidden] * (cfg.num_layers - 1) + [out_dim]


def spmm_schedule(
    cfg: ModelShape, in_dim: int, out_dim: int, sliced: bool = False
) -> list[SpmmCall]:
    """The distributed SpMMs of one epoch (training forward, evaluation forward, backward).

    Mirrors the layers (their ``transforms_first``): GCNConv and SAGEConv multiply after
    their linear map when it narrows (``out < in``), else before it; GINConv always
    aggregates its input first (the raw sum, then its MLP); attention layers call the
    edge protocol instead (:mod:`~sparsegnn.distributed.planning.attention_model`), no
    SpMM. Only the first layer's SpMM on raw features needs no backward pass.
    ``sliced``: the grid cuts the input features by columns (2D/3D), so a first layer
    aggregating raw features multiplies column slices.
    """
    if cfg.model in ATTENTION_MODELS:
        return []
    forward, backward = [], []
    for layer, (a, b) in enumerate(itertools.pairwise(_widths(cfg, in_dim, out_dim))):
        shrink = b < a and cfg.model != "gin"
        width = b if shrink else a
        forward.append(SpmmCall(width, "forward_spmm", sliced and layer == 0 and not shrink))
        if shrink or layer > 0:
            backward.append(SpmmCall(width, "backward_spmm"))
    return forward * 2 + backward


def input_slicing(cfg: ModelShape, in_dim: int, out_dim: int) -> InputSlicing:
    """The row all-reduces and sliced weights of a 2D/3D epoch: one per linear map that
    reads the first layer's input (GCNConv and GIN's MLP have one, SAGEConv a neighbour
    and a root map, GATv2 ``lin_l`` and ``lin_r``), in each of the two forward passes.
    An attention layer's maps are ``heads`` times as wide when it is not the last."""
    width = _widths(cfg, in_dim, out_dim)[1]
    if cfg.model in ATTENTION_MODELS and cfg.num_layers > 1:
        width *= cfg.heads
    maps = 1 if cfg.model in ("gcn", "gin", "gat") else 2
    return InputSlicing((width,) * (2 * maps), maps * in_dim * width)


def tile_nnz(a: CSRMatrix, part: BlockPartition, shape: GridShape) -> NnzTable:
    """Nonzeros of every 2D/3D tile ``A[block i, inner(j, m)]`` of the (relabelled) matrix."""
    layers = shape.layers
    starts = [part.inner(j, m, layers)[0] for j in range(part.blocks) for m in range(layers)]
    ends = torch.tensor(part.offsets[1:], dtype=torch.long)
    row_block = torch.bucketize(a.row_indices(), ends, right=True)
    sub = torch.bucketize(a.col, torch.tensor(starts[1:], dtype=torch.long), right=True)
    key = row_block * (part.blocks * shape.layers) + sub
    counts = torch.bincount(key, minlength=part.blocks * part.blocks * shape.layers).tolist()
    return {
        (i, j, m): counts[i * part.blocks * shape.layers + j * shape.layers + m]
        for i in range(part.blocks) for j in range(part.blocks) for m in range(shape.layers)
    }


def predict(
    shape: GridShape, part: BlockPartition, rank: int, calls: list[SpmmCall], *,
    value_bytes: int, num_params: int, nnz: dict[str, NnzTable] | None = None,
    slicing: InputSlicing | None = None, val_loss: bool = False,
) -> Volume:
    """Bytes this rank sends and receives in one epoch, per phase.

    ``nnz`` (2D/3D only) maps ``"forward_spmm"``/``"backward_spmm"`` to the tile table of
    ``A`` and ``A^T`` (:func:`tile_nnz`); ``slicing`` (2D/3D only,
    :func:`input_slicing`): the input features are cut by columns; ``val_loss``: the
    validation loss rides in the validation count's reduction (one value more per call:
    full-graph training's ``fit``; R-GCN's epochs reduce the counts alone).
    """
    out: Volume = {}
    for call in calls:
        if shape.row_wise:
            sent, recv = _rows(shape, part, rank, call.width * value_bytes)
        else:
            if nnz is None:
                raise ValueError("2d/3d predictions need the tile nonzero tables")
            sent, recv = _summa(shape, part, rank, call, value_bytes, nnz[call.phase])
        _add(out, call.phase, sent, recv)
    peers = shape.rows - 1
    _add(out, "grad_allreduce", peers * num_params * value_bytes, peers * num_params * value_bytes)
    if slicing is not None and shape.feature_slices > 1:
        row_peers = shape.feature_slices - 1
        for width in slicing.sums:
            volume = row_peers * part.size(shape.coords(rank)[0]) * width * value_bytes
            _add(out, "input_allreduce", volume, volume)
        volume = row_peers * slicing.params * value_bytes
        _add(out, "grad_allreduce", volume, volume)
    scalars = value_bytes + 8 + (16 if val_loss else 8)
    _add(out, "metrics", peers * scalars, peers * scalars)
    return {p: v for p, v in out.items() if v["sent"] or v["recv"]}


def _add(out: Volume, phase: str, sent: int, recv: int) -> None:
    v = out.setdefault(phase, {"sent": 0, "recv": 0})
    v["sent"] += sent
    v["recv"] += recv


def _rows(shape: GridShape, part: BlockPartition, rank: int, row_bytes: int) -> tuple[int, int]:
    i, k, _ = shape.coords(rank)
    sent = recv = 0
    if shape.rows > 1:
        for j in stage_blocks(shape, k):
            block = part.size(j) * row_bytes
            if j == i:
                sent += block * (shape.rows - 1)
            else:
                recv += block
    reduce = (shape.cols - 1) * part.size(i) * row_bytes
    return sent + reduce, recv + reduce


def _summa(
    shape: GridShape, part: BlockPartition, rank: int, call: SpmmCall, b: int, nnz: NnzTable
) -> tuple[int, int]:
    i, j, m = shape.coords(rank)
    q, n_i, width = shape.cols, part.size(i), call.width
    widths = split_sizes(width, q)
    sent = recv = 0
    if q > 1:
        for k in range(q):
            e = nnz[(i, k, m)]
            a_bytes = 8 * (n_i + 1 + e) + b * e
            lo, hi = part.inner(k, m, shape.layers)
            h_bytes = (hi - lo) * widths[j] * b
            sent += a_bytes * (q - 1) if k == j else 0
            recv += 0 if k == j else a_bytes
            sent += h_bytes * (q - 1) if k == i else 0
            recv += 0 if k == i else h_bytes
        if not call.sliced:
            sent += n_i * widths[j] * b * (q - 1)
            recv += n_i * (width - widths[j]) * b
    reduce = (shape.layers - 1) * n_i * widths[j] * b
    return sent + reduce, recv + reduce
