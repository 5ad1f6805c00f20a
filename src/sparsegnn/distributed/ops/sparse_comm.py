"""Sparsity-aware 1D / 1.5D SpMM: each rank receives only the rows of H it multiplies.

Rank ``(i, k)`` multiplies the tiles ``A_ij`` of its stage blocks j (see
:func:`~sparsegnn.distributed.layout.block_partition.stage_blocks`). Of block j it needs only the
rows
whose ids are nonzero columns of ``A_ij``, and it gets exactly those from rank
``(j, k)`` of its column group, in one ``all_to_all`` per SpMM, instead of all of
``H_j`` by broadcast. The 1.5D replicas then all-reduce their partial sums as before.

A :class:`RowPlan` is built once per graph and partition (the setup phase): every rank
compresses the columns of its tiles to the distinct ids they use (so received rows are
multiplied in place, never scattered into a full-width buffer) and sends those id lists
to their owners, who keep them as the rows to send. The compressed tiles are stacked
side by side in the order the rows arrive, so an SpMM is two products (the own block's
tile, the stacked rest) whatever p is: one product per block cost 1D at p = 8 eight
output allocations and additions per SpMM. The backward pass multiplies the
tiles of ``A^T`` and so has its own plan (the same one when A is symmetric).

Bytes: what a rank sends to and receives from the *other* members of its column group,
counted under the current phase as ``all_to_all``; the exact numbers are what
:mod:`sparsegnn.distributed.planning.plan` computes without ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sparsegnn.distributed.layout.block_partition import BlockPartition, LocalBlocks
from sparsegnn.distributed.layout.grid import GridError
from sparsegnn.distributed.ops.row_exchange import SparseCommunicator, request_rows
from sparsegnn.distributed.ops.spmm import DistributedOperator, column_slices
from sparsegnn.distributed.runtime.comm import Group, ProcessGrid
from sparsegnn.sparse import CSRMatrix, hstack


def compress_columns(t: CSRMatrix) -> tuple[CSRMatrix, torch.Tensor]:
    """``(A[:, used], used)``: the tile restricted to the sorted distinct columns it uses."""
    used, inverse = torch.unique(t.col, sorted=True, return_inverse=True)
    return CSRMatrix(t.crow, inverse, t.val, (t.shape[0], len(used))), used


@dataclass
class RowPlan:
    """One direction's send/receive lists for rank ``(i, k)`` of a 1D/1.5D grid.

    Attributes:
        own: the own block's tile, full columns (None when block i is not a stage).
        remote: the other stage blocks' tiles, each compressed to the rows received from
            its block, side by side in member order: its columns are the received
            buffer's rows (None when nothing is received).
        send_index: local rows to send, concatenated in member (block) order.
        send_counts / recv_counts: rows to / from each member of the column group.
    """

    own: CSRMatrix | None
    remote: CSRMatrix | None
    send_index: torch.Tensor
    send_counts: list[int]
    recv_counts: list[int]


def build_plan(
    tiles: dict[int, CSRMatrix], me: int, comm: SparseCommunicator, group: Group
) -> RowPlan:
    """Compress the tiles and tell every owner which of its rows this rank needs.

    Collective over the column group ``group`` (member index = block index); it moves
    the id lists once, in the setup phase.
    """
    # The lists travel on the tiles' device: NCCL only moves CUDA tensors.
    device = next(iter(tiles.values())).col.device if tiles else torch.device("cpu")
    compressed: list[CSRMatrix] = []
    wanted = [torch.empty(0, dtype=torch.long, device=device) for _ in range(group.size)]
    for j in sorted(tiles):
        if j != me:
            tile, wanted[j] = compress_columns(tiles[j])
            compressed.append(tile)
    need_counts = [len(w) for w in wanted]
    requests, send_counts = request_rows(wanted, comm, group)
    remote = hstack(compressed) if compressed and sum(need_counts) else None
    return RowPlan(tiles.get(me), remote, requests, send_counts, need_counts)


class SparseRowOperator(DistributedOperator):
    """1D and 1.5D with sparsity-aware communication (one ``all_to_all`` per SpMM).

    With ``overlap`` the rank multiplies its own diagonal tile while the exchange is in
    flight, then the received rows, which move in column slices
    (:func:`~sparsegnn.distributed.ops.spmm.column_slices`) so that each slice's multiply
    hides the next slice's transfer (and on 1.5D each finished slice's replica sum the
    next slice's multiply); both ways add the same two products in the same order, so
    the result is the same to the bit.
    """

    def __init__(
        self, grid: ProcessGrid, comm: SparseCommunicator, part: BlockPartition,
        blocks: LocalBlocks, overlap: bool = False,
    ) -> None:
        if not grid.shape.row_wise:
            raise GridError(
                f"--comm sparse supports 1d and 1.5d, not {grid.shape.algo}; "
                "use --comm dense for 2d/3d"
            )
        super().__init__(grid, comm, part, blocks)
        self.sparse_comm = comm
        self.overlap = overlap
        me = grid.coords[0]
        with comm.phase("setup"):
            self.forward_plan = build_plan(blocks.forward, me, comm, grid.col)
            self.backward_plan = (
                self.forward_plan if blocks.backward is blocks.forward
                else build_plan(blocks.backward, me, comm, grid.col)
            )

    def multiply(self, x: torch.Tensor, transpose: bool) -> torch.Tensor:
        plan = self.backward_plan if transpose else self.forward_plan
        slices = (column_slices(x, self.grid.row.size > 1) if self.overlap
                  else [slice(0, x.shape[1])])
        # Every slice's exchange is started at once (together one block of rows, as
        # unsliced); slice s + 1 is still on the wire while slice s is multiplied.
        moving = [self.sparse_comm.exchange_async(
            x[plan.send_index, cols] if len(slices) > 1 else x[plan.send_index],
            plan.send_counts, plan.recv_counts, self.grid.col) for cols in slices]
        mine = plan.own is not None and x.shape[0] > 0
        # The own tile needs nothing received: with overlap it runs during the transfer.
        own = plan.own.matmul(x) if self.overlap and mine else None
        # 1.5D, sliced: each slice's replica sum starts once the slice is done (every
        # replica starts the same reductions in the same order, tile or no tile).
        reduce_slices = len(slices) > 1 and self.grid.row.size > 1
        done = []
        for (recv, work), cols in zip(moving, slices, strict=True):
            self.comm.wait(work)
            if mine and own is None:
                own = plan.own.matmul(x)
            rest = plan.remote.matmul(recv) if plan.remote is not None else None
            if own is None and len(slices) == 1:  # no own tile: rest is the product
                own = rest
                continue
            if own is None:
                own = x.new_zeros(self.n_local, x.shape[1])
            if rest is not None:
                own[:, cols] += rest  # in place: own is a fresh product
            if reduce_slices:
                done.append(self.comm.all_reduce_async(own[:, cols], self.grid.row))
        if reduce_slices:
            return torch.cat([finish() for finish in done], 1)
        if own is None:
            own = x.new_zeros(self.n_local, x.shape[1])
        return self.comm.all_reduce(own, self.grid.row)

    def rows_per_spmm(self, transpose: bool) -> tuple[int, int]:
        """Rows this rank sends to and receives from other ranks in one SpMM."""
        plan = self.backward_plan if transpose else self.forward_plan
        me = self.grid.col.me
        return (sum(plan.send_counts) - plan.send_counts[me],
                sum(plan.recv_counts) - plan.recv_counts[me])
