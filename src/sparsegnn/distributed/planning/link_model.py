"""Analytic bytes of link prediction's candidate scoring per rank and epoch, in closed form.

Restates what :mod:`sparsegnn.distributed.ops.link_scoring` moves, without calling it.
A candidate ``(s, t)`` belongs to the block of t; the ``s = cols * layers`` ranks of a
process row take its block's candidates round-robin (share ``r = j * layers + m``). With
``T[r, i, b]`` the distinct sources in block b of the share-r candidates of block i
(:func:`share_table`), rank ``(i, j, m)`` receives ``sum_{b != i} T[r, i, b]`` rows of
width w and sends ``sum_{a != i} T[r, a, i]`` (:func:`fetch_rows`).

One training epoch (b bytes per value, ``n_i`` rows in the rank's block, ``S`` =
:func:`~sparsegnn.distributed.planning.attention_model.split_peers`: the peers of the
sums over the groups that split a row, R the process rows):

* ``forward_link``: the training candidates' fetch and the validation candidates' fetch,
  ``rows * w * b`` each way;
* ``backward_link``: the training fetch's gradients back (``recv * w * b`` sent,
  ``sent * w * b`` received), plus two sums of ``n_i * w`` over the split groups (the
  fetched rows' gradients at their owners, the local rows' gradients), ``S n_i w b``
  each way each;
* ``link_metrics``: the loss, one value summed over the split groups and the column
  group, ``(S + R - 1) b`` each way, and the validation scores, ``Q_val`` values the same
  way;
* ``grad_allreduce``: besides the encoder's, the decoder's P parameters summed over the
  split groups, ``S P b`` each way.

The encoder's SpMMs, its input slicing and the column group's gradient sum are
:func:`~sparsegnn.distributed.planning.comm_model.predict`'s (without its node-label
``metrics``), which :func:`link_epoch_volume` adds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sparsegnn.distributed.layout.block_partition import BlockPartition
from sparsegnn.distributed.layout.grid import GridShape
from sparsegnn.distributed.planning.attention_model import split_peers
from sparsegnn.distributed.planning.comm_model import (
    InputSlicing,
    NnzTable,
    SpmmCall,
    Volume,
    predict,
)

FORWARD, BACKWARD, METRICS = "forward_link", "backward_link", "link_metrics"


def share_table(pairs: torch.Tensor, part: BlockPartition, shape: GridShape) -> np.ndarray:
    """``T[r, i, b]`` for candidate ``pairs`` (original vertex ids, ``[2, Q]``)."""
    if part.order is not None:
        new_id = torch.empty_like(part.order)
        new_id[part.order] = torch.arange(part.order.numel())
        pairs = new_id[pairs]
    ends = torch.tensor(part.offsets[1:], dtype=torch.long)
    src_block = torch.bucketize(pairs[0], ends, right=True)
    dst_block = torch.bucketize(pairs[1], ends, right=True)
    shares, rows, n = shape.cols * shape.layers, shape.rows, part.num_nodes
    # A candidate's place among its block's candidates, in list order.
    before = torch.empty_like(dst_block)
    for block in range(rows):
        ours = dst_block == block
        before[ours] = torch.arange(int(ours.sum()))
    share = before % shares
    key = torch.unique(((share * rows + dst_block) * rows + src_block) * n + pairs[0])
    cells = torch.bincount(key // n, minlength=shares * rows * rows)
    return cells.reshape(shares, rows, rows).numpy()


def fetch_rows(shape: GridShape, table: np.ndarray, rank: int) -> tuple[int, int]:
    """Rows ``rank`` sends and receives in one fetch of a candidate list."""
    i, j, m = shape.coords(rank)
    t = table[j * shape.layers + m]
    return int(t[:, i].sum() - t[i, i]), int(t[i].sum() - t[i, i])


@dataclass(frozen=True)
class LinkEpochCounts:
    """What one link epoch's scoring depends on: the embedding ``width``, the candidates
    of training and validation (``[2, Q]``, original ids) and the decoder's parameter
    count."""

    width: int
    train_pairs: torch.Tensor
    val_pairs: torch.Tensor
    decoder_params: int


def scoring_volume(shape: GridShape, part: BlockPartition, rank: int,
                   counts: LinkEpochCounts, value_bytes: int) -> Volume:
    """Bytes of the candidates' scoring in one training epoch (the module doc's list)."""
    b, w = value_bytes, counts.width
    n_i = part.size(shape.coords(rank)[0])
    split = split_peers(shape)
    reduce_peers = split + shape.rows - 1
    train_sent, train_recv = fetch_rows(shape, share_table(counts.train_pairs, part, shape),
                                        rank)
    val_sent, val_recv = fetch_rows(shape, share_table(counts.val_pairs, part, shape), rank)
    out: Volume = {}
    _add(out, FORWARD, (train_sent + val_sent) * w * b, (train_recv + val_recv) * w * b)
    owners = 2 * split * n_i * w * b
    _add(out, BACKWARD, train_recv * w * b + owners, train_sent * w * b + owners)
    scalars = (1 + counts.val_pairs.shape[1]) * reduce_peers * b
    _add(out, METRICS, scalars, scalars)
    decoder = split * counts.decoder_params * b
    _add(out, "grad_allreduce", decoder, decoder)
    return out


def link_epoch_volume(
    shape: GridShape, part: BlockPartition, rank: int, counts: LinkEpochCounts,
    calls: list[SpmmCall], *, value_bytes: int, num_params: int,
    nnz: dict[str, NnzTable] | None = None, slicing: InputSlicing | None = None,
) -> Volume:
    """Bytes this rank sends and receives in one link-prediction epoch, per phase: the
    encoder's (:func:`predict` of its SpMM ``calls``, without node labels' ``metrics``)
    plus :func:`scoring_volume`."""
    out = predict(shape, part, rank, calls, value_bytes=value_bytes, num_params=num_params,
                  nnz=nnz, slicing=slicing)
    out.pop("metrics", None)
    for phase, v in scoring_volume(shape, part, rank, counts, value_bytes).items():
        _add(out, phase, v["sent"], v["recv"])
    return {p: v for p, v in out.items() if v["sent"] or v["recv"]}


def _add(out: Volume, phase: str, sent: int, recv: int) -> None:
    v = out.setdefault(phase, {"sent": 0, "recv": 0})
    v["sent"] += sent
    v["recv"] += recv
