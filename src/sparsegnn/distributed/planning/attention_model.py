"""Analytic bytes of the edge protocol (attention layers) per rank, in closed form.

Restates what :mod:`sparsegnn.distributed.ops.edge_exchange` moves, without calling it.
With b bytes per value, rank r of process row i (``n_i`` rows) and the split groups that
share a row's edges (fiber of size l, then row of size c; 1.5D: c replicas, 2D: q, 3D:
q and q, 1D: none), every protocol call is made of four movements of width w (values
per row):

* ``fetch``: the rows of the rank's columns, ``recv_rows * w b`` in and the rows its
  column group asked of it, ``sent_rows * w b`` out (one ``all_to_all``, own rows free);
  its backward sends the same gradients the other way and sums them over the split
  groups (``n_i w``);
* ``enter`` (a replicated tensor of ``rows x w`` used by the rank's share of edges):
  nothing forward, a sum of ``rows x w`` over the split groups backward;
* ``leave`` (partial sums of ``n_i x w`` made whole): the sum forward, nothing back;
* ``total`` (the softmax denominator): the sum both ways; ``max``: forward only.

A sum or max of v values over the split groups costs ``(l - 1) v b + (c - 1) v b`` each
way (the Communicator's all-reduce and all-gather). A protocol call is a list of them
(:func:`call_moves`), forward under ``forward_attention``, backward (when the call's
inputs need gradients) under ``backward_attention``.

The fetched rows are the block connectivity at tile granularity: rank ``(i, k)`` of
1D/1.5D receives the distinct columns of block b used by block i's rows, for each stage
block b != i; rank ``(i, j, m)`` of 2D/3D those of the sub-range ``inner(j, m)`` (j != i),
and only ``(i, i, m)`` sends, to every other row of its column group
(:func:`fetch_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from sparsegnn.distributed.layout.block_partition import BlockPartition, stage_blocks
from sparsegnn.distributed.layout.grid import GridShape
from sparsegnn.distributed.planning.comm_model import Volume
from sparsegnn.distributed.planning.plan import RankVolume, relabelled
from sparsegnn.sparse import CSRMatrix

Move = Literal["fetch", "enter", "leave", "total", "max"]
EdgeKind = Literal["sddmm_add", "sddmm_dot", "sddmm_leaky", "edge_softmax", "edge_matmul"]
FORWARD, BACKWARD = "forward_attention", "backward_attention"


@dataclass(frozen=True)
class EdgeCall:
    """One edge-protocol call of a layer: ``heads`` and ``channels`` per head (1 for a
    score), and whether its inputs need gradients (a training forward)."""

    kind: EdgeKind
    heads: int
    channels: int = 1
    grad: bool = True


def call_moves(call: EdgeCall) -> list[tuple[Move, int, bool]]:
    """``(movement, width, per_node)`` of a call; ``per_node`` False: one row (a
    parameter, GATv2's ``att``)."""
    w = call.heads * call.channels
    moves: dict[str, list[tuple[Move, int, bool]]] = {
        "sddmm_add": [("enter", call.heads, True), ("fetch", call.heads, True)],
        "sddmm_dot": [("enter", w, True), ("fetch", w, True)],
        "sddmm_leaky": [("enter", w, True), ("fetch", w, True), ("enter", w, False)],
        "edge_softmax": [("max", call.heads, True), ("total", call.heads, True)],
        "edge_matmul": [("fetch", w, True), ("leave", w, True)],
    }
    return moves[call.kind]


def gat_calls(heads: int, channels: int, grad: bool) -> list[EdgeCall]:
    """A GATConv layer's calls: the additive score, the softmax, the aggregation."""
    return [EdgeCall("sddmm_add", heads, 1, grad), EdgeCall("edge_softmax", heads, 1, grad),
            EdgeCall("edge_matmul", heads, channels, grad)]


def model_calls(model: str, widths: list[int], heads: int) -> list[EdgeCall]:
    """The edge-protocol calls of one training epoch of a GAT or GATv2 stack of layer
    ``widths`` (:class:`~sparsegnn.nn.GAT`: hidden layers of ``heads`` heads, one at the
    output): the training forward, whose inputs need gradients, then the evaluation
    forward."""
    last = len(widths) - 2
    calls = []
    for grad in (True, False):
        for layer, channels in enumerate(widths[1:]):
            h = 1 if layer == last else heads
            if model == "gat":
                calls += gat_calls(h, channels, grad)
            else:
                calls += [EdgeCall("sddmm_leaky", h, channels, grad),
                          EdgeCall("edge_softmax", h, 1, grad),
                          EdgeCall("edge_matmul", h, channels, grad)]
    return calls


def split_peers(shape: GridShape) -> int:
    """``(l - 1) + (c - 1)``: the peers a split-group sum sends to and receives from,
    over the fiber then the row (none on 1D, whose rank holds whole rows)."""
    return (shape.layers - 1) + (shape.cols - 1)


def distinct_columns(a: CSRMatrix, part: BlockPartition, layers: int) -> np.ndarray:
    """``d[i, s]``: distinct columns of column range s used by the rows of block i, where
    s runs over the blocks' ``layers`` sub-ranges (``s = j * layers + m``; ``layers`` 1:
    blocks). ``a`` in the original vertex order. One pass and one sort over the nonzeros."""
    a = relabelled(a, part)
    starts = [part.inner(j, m, layers)[0] for j in range(part.blocks) for m in range(layers)]
    ends = torch.tensor(part.offsets[1:], dtype=torch.long)
    row_block = torch.bucketize(a.row_indices(), ends, right=True)
    key = torch.unique(a.col * part.blocks + row_block)
    col, block = key // part.blocks, key % part.blocks
    sub = torch.bucketize(col, torch.tensor(starts[1:], dtype=torch.long), right=True)
    ranges = part.blocks * layers
    flat = torch.bincount(block * ranges + sub, minlength=part.blocks * ranges)
    return flat.reshape(part.blocks, ranges).numpy()


def fetch_rows(shape: GridShape, part: BlockPartition, d: np.ndarray) -> tuple[np.ndarray,
                                                                              np.ndarray]:
    """Rows every rank sends and receives in one fetch (index = grid rank), from the
    :func:`distinct_columns` table ``d`` of the grid's column ranges."""
    sent = np.zeros(shape.size, dtype=np.int64)
    recv = np.zeros(shape.size, dtype=np.int64)
    for rank in range(shape.size):
        i, j, m = shape.coords(rank)
        if shape.row_wise:
            stages = stage_blocks(shape, j)
            recv[rank] = sum(int(d[i, b]) for b in stages if b != i)
            if i in stages:
                sent[rank] = int(d[:, i].sum() - d[i, i])
        else:
            s = j * shape.layers + m
            recv[rank] = 0 if j == i else int(d[i, s])
            if j == i:
                sent[rank] = int(d[:, s].sum() - d[i, s])
    return sent, recv


def edge_volume(
    shape: GridShape, part: BlockPartition, rank: int, calls: list[EdgeCall],
    rows: tuple[int, int], value_bytes: int,
) -> Volume:
    """Bytes this rank sends and receives for ``calls``, per phase; ``rows``: its
    :func:`fetch_rows` ``(sent, recv)``."""
    n_i = part.size(shape.coords(rank)[0])
    peers = split_peers(shape)
    out: Volume = {}

    def add(phase: str, sent: int, recv: int) -> None:
        v = out.setdefault(phase, {"sent": 0, "recv": 0})
        v["sent"] += sent * value_bytes
        v["recv"] += recv * value_bytes

    for call in calls:
        for move, width, per_node in call_moves(call):
            size = (n_i if per_node else 1) * width * peers
            if move == "fetch":
                add(FORWARD, rows[0] * width, rows[1] * width)
                if call.grad:
                    add(BACKWARD, rows[1] * width + size, rows[0] * width + size)
            elif move in ("leave", "max"):
                add(FORWARD, size, size)
            elif move == "enter" and call.grad:
                add(BACKWARD, size, size)
            elif move == "total":
                add(FORWARD, size, size)
                if call.grad:
                    add(BACKWARD, size, size)
    return {p: v for p, v in out.items() if v["sent"] or v["recv"]}


def epoch_edge_volume(shape: GridShape, part: BlockPartition, operator: CSRMatrix,
                      calls: list[EdgeCall], value_bytes: int) -> dict[str, RankVolume]:
    """Every rank's bytes of an epoch's edge-protocol ``calls``, per phase (what the
    planner adds to the SpMM phases for GAT and GATv2): :func:`edge_volume` of each rank,
    with the fetched rows of ``operator``'s blocks (original vertex order)."""
    sent, recv = fetch_rows(shape, part, distinct_columns(operator, part, shape.layers))
    per = [edge_volume(shape, part, rank, calls, (int(sent[rank]), int(recv[rank])),
                       value_bytes) for rank in range(shape.size)]
    return {phase: RankVolume(np.array([v.get(phase, {}).get("sent", 0) for v in per],
                                       dtype=np.int64),
                              np.array([v.get(phase, {}).get("recv", 0) for v in per],
                                       dtype=np.int64))
            for phase in (FORWARD, BACKWARD) if any(phase in v for v in per)}
