"""The edge-side operator protocol (attention) on every grid: 1D, 1.5D, 2D and 3D.

Layout contract, as for SpMM: every rank of process row i holds the full rows of vertex
block i of the activations. A rank's *edges* are the nonzeros of the tiles it owns (its
stage tiles on 1D/1.5D, its one tile on 2D/3D), all in rows of block i; they are stored
once, as one CSR :class:`EdgePlan` ``edges`` whose columns index the source rows the rank
fetched. Per-edge values (scores, attention) live in that order, ``nnz_local x heads``.

* Source side: of every column block it touches the rank fetches exactly the rows whose
  ids are nonzero columns of its tiles, from the member of its column group that owns
  them (member r of a column group is process row r), in one ``all_to_all``
  (:func:`~sparsegnn.distributed.ops.row_exchange.request_rows` builds the lists once).
* Destination side: rows of block i are local; per-edge math runs on the rank's tile
  with the one-process primitives of :mod:`sparsegnn.sparse`.
* A row's edges are split over the ranks of its process row (and fiber on 3D): the
  1.5D replicas, the q ranks of a 2D row, the q x q of a 3D one. The row softmax
  reduces its max and sum over them, and an SpMM's partial sums are all-reduced over
  them (fiber first, then row: the same order on every rank, so results are identical).

Gradients stay exact under the replicated-rows convention (every rank of row i holds
the full gradient of its rows): a replicated tensor used by the rank's share of the edges
(:meth:`EdgeExchange.enter`) all-reduces its gradient over the split groups; a fetch
sends the gradients of the fetched rows back to their owners (the reverse
``all_to_all``), then all-reduces the same way; a sum over the split groups passes its
gradient through (downstream work is replicated), and a softmax denominator, summed and
then used by each share, all-reduces both ways. Bytes are counted under
``forward_attention`` and ``backward_attention``; ``planning.attention_model`` predicts
them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sparsegnn.distributed.layout.block_partition import BlockPartition, LocalBlocks
from sparsegnn.distributed.ops.row_exchange import SparseCommunicator, request_rows
from sparsegnn.distributed.runtime.comm import Communicator, Group, ProcessGrid
from sparsegnn.nn.dropout import dropout_noise
from sparsegnn.sparse import (
    CSRMatrix,
    edge_softmax,
    hstack,
    row_max,
    row_sum,
    sddmm_add,
    sddmm_dot,
    sddmm_leaky,
    spmm_values,
)

FORWARD, BACKWARD = "forward_attention", "backward_attention"
# Attention dropout seeds are drawn below this (the rank is added to the draw).
_SEED_RANGE = 2**62


@dataclass
class EdgePlan:
    """A rank's edges and the rows it exchanges for them.

    Attributes:
        edges: ``n_i x fetched`` CSR of the rank's nonzeros (values: the operator's);
            column c is the c-th fetched source row, in global id order.
        send_index: local rows other ranks asked for, in member order.
        send_counts / recv_counts: rows to / from each member of the column group.
    """

    edges: CSRMatrix
    send_index: torch.Tensor
    send_counts: list[int]
    recv_counts: list[int]


def local_edges(grid: ProcessGrid, part: BlockPartition, blocks: LocalBlocks
                ) -> tuple[CSRMatrix, int]:
    """The rank's forward tiles side by side, and the global id of their first column:
    1D/1.5D stage blocks are contiguous, a 2D/3D tile is one sub-range of a block."""
    keys = sorted(blocks.forward)
    tiles = [blocks.forward[k] for k in keys]
    _, j, m = grid.coords
    if grid.shape.row_wise:
        start = part.block(keys[0])[0]
    else:
        start = part.inner(j, m, grid.shape.layers)[0]
    return (tiles[0] if len(tiles) == 1 else hstack(tiles)), start


def build_edge_plan(grid: ProcessGrid, comm: SparseCommunicator, part: BlockPartition,
                    blocks: LocalBlocks) -> EdgePlan:
    """Compress the rank's columns to the ids it uses and ask their owners for them
    (collective over the column group, setup traffic)."""
    tiles, start = local_edges(grid, part, blocks)
    used, inverse = torch.unique(tiles.col, sorted=True, return_inverse=True)
    ids = used + start
    offsets = torch.tensor(part.offsets, dtype=torch.long, device=ids.device)
    owner = torch.bucketize(ids, offsets[1:], right=True)
    local = ids - offsets[owner]
    wanted = [local[owner == r] for r in range(grid.col.size)]
    send_index, send_counts = request_rows(wanted, comm, grid.col)
    edges = CSRMatrix(tiles.crow, inverse, tiles.val, (tiles.shape[0], len(used)))
    return EdgePlan(edges, send_index, send_counts, [len(w) for w in wanted])


class EdgeExchange:
    """One rank's implementation of the edge protocol (see the module doc)."""

    def __init__(self, grid: ProcessGrid, comm: Communicator, part: BlockPartition,
                 blocks: LocalBlocks) -> None:
        if not isinstance(comm, SparseCommunicator):
            raise TypeError("attention on a grid fetches source rows by all_to_all: build "
                            "the operator with a SparseCommunicator (it counts like a "
                            "Communicator and adds the exchange)")
        self.grid, self.comm = grid, comm
        # The groups that split a row's edges, reduced in this order on every rank.
        self.split: list[Group] = [g for g in (grid.fiber, grid.row) if g.size > 1]
        with comm.phase("setup"):
            self.plan = build_edge_plan(grid, comm, part, blocks)

    @property
    def edges(self) -> CSRMatrix:
        return self.plan.edges

    def fetched_rows(self) -> tuple[int, int]:
        """Rows this rank sends and receives in one fetch (its own not counted), as
        :func:`~sparsegnn.distributed.planning.attention_model.fetch_rows` predicts them."""
        me, plan = self.grid.col.me, self.plan
        return (sum(plan.send_counts) - plan.send_counts[me],
                sum(plan.recv_counts) - plan.recv_counts[me])

    # ------------------------------------------------------------------ movements
    def reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        """Sum over the ranks that split a row, identical on all of them."""
        for group in self.split:
            t = self.comm.all_reduce(t, group)
        return t

    def reduce_max(self, t: torch.Tensor) -> torch.Tensor:
        """Element-wise max over the same ranks (gathered, then taken in rank order)."""
        for group in self.split:
            parts = self.comm.all_gather(t.contiguous(), [tuple(t.shape)] * group.size, group)
            t = torch.stack(parts).amax(0)
        return t

    def fetch(self, x: torch.Tensor) -> torch.Tensor:
        """The source rows of the rank's edges, one per column of :attr:`edges`."""
        return _Fetch.apply(x, self)

    def enter(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (replicated) as used by this rank's share of the edges."""
        return _Enter.apply(x, self) if self.split else x

    def leave(self, partial: torch.Tensor) -> torch.Tensor:
        """The sum of the shares, replicated on the row again."""
        return _Leave.apply(partial, self) if self.split else partial

    def row_total(self, partial: torch.Tensor) -> torch.Tensor:
        """The sum of the shares, used by each share again."""
        return _RowTotal.apply(partial, self) if self.split else partial

    # ------------------------------------------------------------------ the protocol
    def edge_values(self) -> torch.Tensor:
        return self.edges.val

    def sddmm_add(self, u_dst: torch.Tensor, v_src: torch.Tensor) -> torch.Tensor:
        with self.comm.phase(FORWARD):
            return sddmm_add(self.edges, self.enter(u_dst), self.fetch(v_src))

    def sddmm_dot(self, a_dst: torch.Tensor, b_src: torch.Tensor) -> torch.Tensor:
        with self.comm.phase(FORWARD):
            return sddmm_dot(self.edges, self.enter(a_dst), self.fetch(b_src))

    def sddmm_leaky(self, u_dst: torch.Tensor, v_src: torch.Tensor, att: torch.Tensor,
                    negative_slope: float = 0.2) -> torch.Tensor:
        with self.comm.phase(FORWARD):
            return sddmm_leaky(self.edges, self.enter(u_dst), self.fetch(v_src),
                               self.enter(att), negative_slope)

    def edge_softmax(self, scores: torch.Tensor) -> torch.Tensor:
        """Row softmax over all of a row's edges wherever they live: the max and the sum
        reduced over the split groups between the local passes."""
        if not self.split:
            return edge_softmax(self.edges, scores)
        single = scores.dim() == 1
        s = scores.unsqueeze(1) if single else scores
        rows = self.edges.row_indices()
        with self.comm.phase(FORWARD):
            # Any shift equal along the row gives the same softmax; the max keeps exp <= 1.
            shift = self.reduce_max(row_max(self.edges, s.detach()))
            ex = (s - shift.index_select(0, rows)).exp()
            total = self.row_total(row_sum(self.edges, ex))
        alpha = ex / total.index_select(0, rows)
        return alpha.squeeze(1) if single else alpha

    def edge_matmul(self, values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        with self.comm.phase(FORWARD):
            return self.leave(spmm_values(self.edges, values, self.fetch(x)))

    def edge_dropout(self, values: torch.Tensor, p: float, training: bool) -> torch.Tensor:
        """Dropout of this rank's share of the edges. The ranks of a vertex block share one
        torch stream (replicas stay identical only while they draw alike), but hold
        different edges: each takes one draw from it and seeds its own mask with the draw
        plus its rank, so every edge is dropped once and the streams stay in step. The
        masks are not one process's (that would need the whole graph's edge order)."""
        if not training or p == 0.0:
            return values
        seed = int(torch.randint(_SEED_RANGE, (1,))) + self.grid.rank
        gen = torch.Generator(device=values.device).manual_seed(seed)
        return dropout_noise(values, p, "bernoulli", gen).mul_(values)


class _Fetch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, ex: EdgeExchange) -> torch.Tensor:  # type: ignore[override]
        ctx.ex, ctx.rows = ex, x.shape[0]
        plan = ex.plan
        return ex.comm.exchange(x[plan.send_index].contiguous(), plan.send_counts,
                                plan.recv_counts, ex.grid.col)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        ex: EdgeExchange = ctx.ex
        plan = ex.plan
        with ex.comm.phase(BACKWARD):
            back = ex.comm.exchange(grad.contiguous(), plan.recv_counts, plan.send_counts,
                                    ex.grid.col)
            out = grad.new_zeros(ctx.rows, *grad.shape[1:]).index_add_(0, plan.send_index, back)
            return ex.reduce_sum(out), None


class _Enter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, ex: EdgeExchange) -> torch.Tensor:  # type: ignore[override]
        ctx.ex = ex
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        with ctx.ex.comm.phase(BACKWARD):
            return ctx.ex.reduce_sum(grad.contiguous()), None


class _Leave(torch.autograd.Function):
    @staticmethod
    def forward(ctx, partial: torch.Tensor, ex: EdgeExchange) -> torch.Tensor:  # type: ignore[override]
        return ex.reduce_sum(partial.contiguous())

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        return grad, None


class _RowTotal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, partial: torch.Tensor, ex: EdgeExchange) -> torch.Tensor:  # type: ignore[override]
        ctx.ex = ex
        return ex.reduce_sum(partial.contiguous())

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        with ctx.ex.comm.phase(BACKWARD):
            return ctx.ex.reduce_sum(grad.contiguous()), None
