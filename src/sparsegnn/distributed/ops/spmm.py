"""Distributed SpMM operators: 1D / 1.5D (stationary A) and 2D / 3D (sparse SUMMA).

Layout contract (what makes the models run unchanged): every rank of process row i holds
the *full rows* of vertex block i of the activations, ``H_i`` (``n_i x f``), and the
operator maps them to the full rows of ``(A H)_i``. Dense work (the layers' linear maps,
ReLU, the loss) is therefore row-local and replicated on the ``replicas`` ranks of a
process row, and the replicas stay bit-identical because every result they receive is
the same gathered data reduced in the same order. The one exception is the input
features on 2D/3D: rank ``(i, j, m)`` holds only column slice j of ``X_i``, and a first
layer that aggregates them before its linear map multiplies by
:meth:`SummaOperator.column_sliced`, which takes and returns slice j (SUMMA without its
final all-gather); :mod:`sparsegnn.distributed.ops.feature_slices` explains the rest.

* 1D/1.5D, rank ``(i, k)``: for each block column j of its stage set, rank ``(j, k)``
  broadcasts ``H_j`` down column group k and every member adds ``A_ij H_j``; then the c
  replicas of row i all-reduce their partial sums (1D: c = 1, no reduction).
* 2D/3D, rank ``(i, j, m)`` of a ``q x q x l`` grid: the feature columns are cut into q
  slices and rank ``(i, j, m)`` computes slice j of ``sum_k A[i, inner(k, m)] H[inner(k, m)]``
  by SUMMA: at stage k, rank ``(i, k, m)`` broadcasts its A tile along the row and rank
  ``(k, j, m)`` broadcasts its H piece down the column. The l layers' partial sums are
  all-reduced along the fiber (3D only), and the q column slices are all-gathered along
  the row so the layer sees full rows again. That last all-gather moves about
  ``n f / q`` per rank, the price of keeping the models unchanged.

The backward pass is the same routine on the tiles of ``A^T`` (``G_H = A^T G_Z``).

Every operator also serves the edge side of the protocol (:class:`sparsegnn.nn.EdgeOperator`:
SDDMM, row softmax, SpMM with per-edge values) through
:class:`~sparsegnn.distributed.ops.edge_exchange.EdgeExchange`, built on first use.
"""

from __future__ import annotations

import copy
import functools
import itertools
from collections import deque
from typing import Any

import torch

from sparsegnn.distributed.layout.block_partition import (
    BlockPartition,
    LocalBlocks,
    split_sizes,
    stage_blocks,
)
from sparsegnn.distributed.ops.edge_exchange import EdgeExchange
from sparsegnn.distributed.runtime.comm import Communicator, ProcessGrid
from sparsegnn.names import row_wise
from sparsegnn.sparse import column_slices_exact

# Overlapped products move X in column slices, given here as (the most slices, the
# fewest columns a slice may have). A slice's multiply re-reads the tile's 12 bytes of
# index and value per nonzero, which a narrower slice would no longer amortise over its
# gathered row. 1D: 8 slices, since gloo runs two of a group's collectives at once, so
# the first slices arrive after 2/count of the transfer and the last two are multiplied
# after it (4 -> 8 slices hid 0.62-0.71 of 1D sparse's waits on 1 Gbit/s links instead
# of 0.38-0.46, benchmarks/overlap.py). 1.5D: 4, since each finished slice also starts a
# replica all-reduce, and with 8 its overlapped epochs on 1 Gbit/s links took 5-11%
# longer (one run against one).
SLICES_1D = (8, 16)
SLICES_REPLICATED = (4, 32)
# Stages an overlapped dense product has in flight, each on a column-group lane of its
# own (``ProcessGrid.create(col_lanes=...)``): a broadcast's root sends g - 1 copies over
# its own uplink while the other members' uplinks idle, so one root at a time leaves
# most of the column group's links unused; three roots at once keep three uplinks busy,
# for three blocks of H in memory.
OVERLAP_LANES = 3


def col_lanes(algo: str, comm: str, overlap: bool) -> int:
    """Column-group lanes a run needs: :data:`OVERLAP_LANES` for an overlapped dense
    1D/1.5D product (its stage broadcasts), one otherwise. The grid is created with
    them, and the memory model counts the blocks they keep in flight."""
    return OVERLAP_LANES if overlap and comm == "dense" and row_wise(algo) else 1


def column_slices(x: torch.Tensor, replicated: bool = False) -> list[slice]:
    """The column slices an overlapped product moves and multiplies one at a time
    (``replicated``: the product's replicas sum every slice, 1.5D).

    Why slices: with the whole width in one transfer, the rank can multiply nothing that
    needs it until all of it has arrived; in slices, slice s is multiplied while slice
    s + 1 is on the wire, so all but the last slice's multiply hides transfer time. One
    slice (the whole width) where X is narrow or where slices would not give the same
    bits (:func:`~sparsegnn.sparse.column_slices_exact`)."""
    width = x.shape[1]
    most, columns = SLICES_REPLICATED if replicated else SLICES_1D
    count = min(most, width // columns) if column_slices_exact(x) else 1
    if count <= 1:
        return [slice(0, width)]
    bounds = list(itertools.accumulate(split_sizes(width, count), initial=0))
    return [slice(lo, hi) for lo, hi in itertools.pairwise(bounds)]


class DistributedOperator:
    """An :class:`~sparsegnn.nn.Operator` on this rank's vertex block.

    ``shape`` is ``(n_i, n_i)``: the operator takes and returns the rows of the local
    block, which is all a layer needs to know.
    """

    def __init__(
        self, grid: ProcessGrid, comm: Communicator, part: BlockPartition, blocks: LocalBlocks
    ) -> None:
        self.grid, self.comm, self.part, self.blocks = grid, comm, part, blocks
        row = grid.coords[0]
        self.n_local = part.size(row)

    @property
    def shape(self) -> tuple[int, int]:
        return self.n_local, self.n_local

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """``(A H)_i`` with autograd when ``x`` needs a gradient."""
        if torch.is_grad_enabled() and x.requires_grad:
            return _DistSpMM.apply(x, self)
        with self.comm.phase("forward_spmm"):
            return self.multiply(x.detach().contiguous(), transpose=False)

    __matmul__ = matmul

    def multiply(self, x: torch.Tensor, transpose: bool) -> torch.Tensor:
        """``(A H)_i`` (or ``(A^T H)_i``) without autograd; implemented per algorithm."""
        raise NotImplementedError

    # ------------------------------------------------------------ the edge protocol
    @functools.cached_property
    def edges(self) -> EdgeExchange:
        """The rank's edges and their row exchange, built at the first attention call
        (collective: every rank of the grid makes that call at the same point)."""
        return EdgeExchange(self.grid, self.comm, self.part, self.blocks)

    def edge_values(self) -> torch.Tensor:
        """The operator's values on this rank's edges, in their edge order."""
        return self.edges.edge_values()

    def sddmm_add(self, u_dst: torch.Tensor, v_src: torch.Tensor) -> torch.Tensor:
        """``u_dst[row_e] + v_src[col_e]`` per local edge and head."""
        return self.edges.sddmm_add(u_dst, v_src)

    def sddmm_dot(self, a_dst: torch.Tensor, b_src: torch.Tensor) -> torch.Tensor:
        """``<a_dst[row_e], b_src[col_e]>`` per local edge and head."""
        return self.edges.sddmm_dot(a_dst, b_src)

    def sddmm_leaky(self, u_dst: torch.Tensor, v_src: torch.Tensor, att: torch.Tensor,
                    negative_slope: float = 0.2) -> torch.Tensor:
        """GATv2's ``att . leaky_relu(u_dst[row_e] + v_src[col_e])`` per edge and head."""
        return self.edges.sddmm_leaky(u_dst, v_src, att, negative_slope)

    def edge_softmax(self, scores: torch.Tensor) -> torch.Tensor:
        """Softmax within each row over all of its edges, on every rank that holds some."""
        return self.edges.edge_softmax(scores)

    def edge_matmul(self, values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``out_i = sum_j values_ij x_j`` over the row's edges, full rows of block i."""
        return self.edges.edge_matmul(values, x)

    def edge_dropout(self, values: torch.Tensor, p: float, training: bool) -> torch.Tensor:
        """Attention dropout of this rank's edges (its own masks, not one process's)."""
        return self.edges.edge_dropout(values, p, training)


class _DistSpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, op: DistributedOperator) -> torch.Tensor:  # type: ignore[override]
        ctx.op = op
        with op.comm.phase("forward_spmm"):
            return op.multiply(x.contiguous(), transpose=False)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        op: DistributedOperator = ctx.op
        with op.comm.phase("backward_spmm"):
            return op.multiply(grad.contiguous(), transpose=True), None


class RowOperator(DistributedOperator):
    """1D and 1.5D: A stays where it is, blocks of H travel down the column group.

    With ``overlap`` the broadcasts of the next blocks are started before the local SpMM
    of the current one, so the transfers run while the rank computes, each block's on a
    lane of the column group of its own (:data:`OVERLAP_LANES` blocks in flight where
    the grid has lanes, one block ahead where it has not), and each block moves in
    column slices (:func:`column_slices`), so that the last block's transfer too hides
    behind the multiply of its earlier slices, and on 1.5D each finished slice's replica
    sum behind the next slice's multiply; the blocks are added and the replicas summed
    in the same order, so the result is the same to the bit. The time still spent
    waiting is :meth:`Communicator.waited_seconds`.
    """

    def __init__(
        self, grid: ProcessGrid, comm: Communicator, part: BlockPartition, blocks: LocalBlocks,
        overlap: bool = False,
    ) -> None:
        super().__init__(grid, comm, part, blocks)
        self.overlap = overlap

    def multiply(self, x: torch.Tensor, transpose: bool) -> torch.Tensor:
        shape, comm = self.grid.shape, self.comm
        i, k, _ = self.grid.coords
        tiles = self.blocks.backward if transpose else self.blocks.forward
        out = torch.zeros(self.n_local, x.shape[1], dtype=x.dtype, device=x.device)
        stages = stage_blocks(shape, k)
        if not self.overlap:
            for j in stages:
                h = x if j == i else x.new_empty(self.part.size(j), x.shape[1])
                comm.broadcast(h, j, self.grid.col)
                out += tiles[j].matmul(h)
            return comm.all_reduce(out, self.grid.row)

        slices = column_slices(x, self.grid.row.size > 1)
        whole = len(slices) == 1
        col = self.grid.col

        def start(n: int) -> tuple[torch.Tensor, Any]:
            j, cols = units[n]
            if j == i:
                h = x if whole else x[:, cols].contiguous()
            else:
                h = x.new_empty(self.part.size(j), cols.stop - cols.start)
            return h, comm.broadcast_async(h, j, col.lane(n // len(slices)))

        # With L lanes, L - 1 stages' slices are in flight ahead of the multiply (one
        # stage with one lane), each stage on a lane of its own, so that L roots send at
        # once: L blocks of memory (two with one lane) where the plain loop holds one.
        # Every output column adds its blocks in stage order, as the plain loop does: the
        # same result to the bit.
        units = [(j, cols) for j in stages for cols in slices]
        ahead = len(slices) * max(1, len(col.lanes) - 1)
        pending = deque(start(n) for n in range(min(ahead, len(units))))
        # 1.5D, sliced: a slice's replica sum starts as soon as its last block is added
        # (every replica has stages: the grid asks c * c <= p).
        reduce_slices = not whole and self.grid.row.size > 1
        done = []
        for n, (j, cols) in enumerate(units):
            if n + ahead < len(units):
                pending.append(start(n + ahead))
            h, work = pending.popleft()
            comm.wait(work)
            if whole:
                out += tiles[j].matmul(h)
                continue
            out[:, cols] += tiles[j].matmul(h)
            if reduce_slices and j == stages[-1]:
                done.append(comm.all_reduce_async(out[:, cols], self.grid.row))
        if reduce_slices:
            return torch.cat([finish() for finish in done], 1)
        return comm.all_reduce(out, self.grid.row)


class SummaOperator(DistributedOperator):
    """2D (one layer) and 3D (split-3D): sparse SUMMA per layer, then fiber reduction.

    ``gather`` False is the column-sliced view (:meth:`column_sliced`): input and output
    are this rank's column slice, and the final all-gather along the row is skipped.
    """

    def __init__(
        self, grid: ProcessGrid, comm: Communicator, part: BlockPartition, blocks: LocalBlocks
    ) -> None:
        super().__init__(grid, comm, part, blocks)
        j = grid.coords[1]
        with comm.phase("setup"):
            nnz = comm.gather_ints([blocks.forward[j].nnz, blocks.backward[j].nnz], grid.row)
        self._nnz = {False: [n[0] for n in nnz], True: [n[1] for n in nnz]}
        self.gather = True

    def column_sliced(self) -> SummaOperator:
        """This operator on column slices: ``matmul`` takes slice j of ``H_i``'s columns
        and returns slice j of ``(A H)_i``'s, which is what SUMMA computes anyway (the
        first layer's SpMM of features this rank holds only a slice of). Shares the tiles."""
        view = copy.copy(self)
        view.gather = False
        return view

    def multiply(self, x: torch.Tensor, transpose: bool) -> torch.Tensor:
        if not self.gather:
            return self._summa(x, transpose)
        j = self.grid.coords[1]
        widths = split_sizes(x.shape[1], self.grid.shape.cols)
        start = sum(widths[:j])
        out = self._summa(x[:, start:start + widths[j]], transpose)
        pieces = self.comm.all_gather(out, [(self.n_local, w) for w in widths], self.grid.row)
        return torch.cat(pieces, 1)

    def _summa(self, mine: torch.Tensor, transpose: bool) -> torch.Tensor:
        """Slice j of ``(A H)_i`` from slice j of ``H_i`` (``mine``), the layers' partial
        sums reduced along the fiber."""
        shape, comm, grid = self.grid.shape, self.comm, self.grid
        i, j, m = grid.coords
        own = (self.blocks.backward if transpose else self.blocks.forward)[j]
        width = mine.shape[1]  # the same on the whole column group: all hold slice j
        out = mine.new_zeros(self.n_local, width)
        for k in range(shape.cols):
            lo, hi = self.part.inner(k, m, shape.layers)
            a_tile = comm.broadcast_sparse(
                own if k == j else None, (self.n_local, hi - lo), self._nnz[transpose][k],
                k, grid.row, mine.dtype, mine.device,
            )
            base = self.part.block(k)[0]
            piece = (
                mine[lo - base:hi - base].contiguous() if k == i
                else mine.new_empty(hi - lo, width)
            )
            comm.broadcast(piece, k, grid.col)
            if width:
                out += a_tile.matmul(piece)
        return comm.all_reduce(out, grid.fiber)


def build_operator(
    grid: ProcessGrid, comm: Communicator, part: BlockPartition, blocks: LocalBlocks,
    overlap: bool = False,
) -> DistributedOperator:
    """The operator of the grid's algorithm over this rank's tiles (``overlap``: 1D/1.5D
    start the next blocks' broadcasts before multiplying the current one)."""
    if grid.shape.row_wise:
        return RowOperator(grid, comm, part, blocks, overlap)
    return SummaOperator(grid, comm, part, blocks)

