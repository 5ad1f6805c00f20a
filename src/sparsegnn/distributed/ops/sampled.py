"""Distributed minibatch sampling and training.

Replicated topology (:func:`train_replicated`): every rank holds the whole adjacency
and feature matrix, takes its share ``r::w`` of every global minibatch and samples it
from its own stream (``i * w + r``) without any communication; the only collective is
the gradient all-reduce after each step, counted by
:class:`~sparsegnn.distributed.runtime.comm.Communicator` under the phase ``grad_allreduce``.
The all-reduce gathers and sums in rank order, so every rank applies bit-identical
updates and the replicas never drift: validation, early stopping and the final test
accuracy agree on all ranks without further communication.

Partitioned topology (:class:`PartitionedTopology`): when A does not fit one rank, its
rows are cut 1.5D-style into ``p / c`` contiguous blocks, each held by ``c`` ranks.
Node-wise sampling of ``Q A`` needs, per frontier row, its degree and the entries at the
drawn offsets; those are fetched from the row's owner (the replica in the requester's
own replica slot ``rank % c``) with two ``all_to_all`` exchanges, ids out and answers
back: a sparsity-aware ``Q A`` that moves only the rows Q selects and, of a row above
the fan-out, only the drawn entries. The random offsets are drawn by the rank that owns
the minibatch from the minibatch's own stream, exactly as the local sampler draws them,
so the partitioned sampler reproduces the replicated one bit for bit.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from sparsegnn.distributed.layout.block_partition import split_range
from sparsegnn.distributed.ops.task import sum_gradients
from sparsegnn.distributed.runtime.comm import Communicator, Group, new_group
from sparsegnn.sparse import CSRMatrix


def separate_group(group: Group) -> Group:
    """The same members on a process group of their own (collective over all ranks).

    Collectives of two threads interleave safely only on different groups: the minibatch
    loader samples and fetches on one while the training thread all-reduces on another.
    """
    return Group(group.ranks, group.me, new_group(list(group.ranks)))


class GradientSum:
    """Sum every parameter's gradient over all ranks, one flat all-reduce per step."""

    def __init__(self, comm: Communicator, group: Group):
        self.comm, self.group = comm, group

    def __call__(self, model: nn.Module) -> None:
        sum_gradients(list(model.parameters()), self.comm, self.group)


class ExchangeCommunicator(Communicator):
    """A :class:`Communicator` that also exchanges variable-sized pieces (``all_to_all``).

    Bytes follow the same model: what a rank sends to and receives from the *other*
    members; a piece a rank keeps for itself costs nothing.
    """

    def all_to_all(
        self,
        send: torch.Tensor,
        send_counts: list[int],
        group: Group,
        recv_counts: list[int] | None = None,
    ) -> tuple[torch.Tensor, list[int]]:
        """Rows ``send_counts[k]`` of ``send`` (in member order) go to member k.

        Returns the received rows (in member order) and how many came from each member;
        ``recv_counts``, when the caller knows them (a reply), saves the count exchange.
        """
        if recv_counts is None:
            counts = torch.tensor(send_counts, dtype=torch.long)
            received = torch.empty_like(counts)
            dist.all_to_all_single(received, counts, group=group.handle)
            self._count("all_to_all", 8 * (group.size - 1), 8 * (group.size - 1))
            recv_counts = received.tolist()
        row = math.prod(send.shape[1:])
        recv = send.new_empty((sum(recv_counts), *send.shape[1:]))
        dist.all_to_all_single(
            recv.view(-1),
            send.contiguous().view(-1),
            [c * row for c in recv_counts],
            [c * row for c in send_counts],
            group=group.handle,
        )
        nbytes = send.element_size() * row
        self._count(
            "all_to_all",
            (sum(send_counts) - send_counts[group.me]) * nbytes,
            (sum(recv_counts) - recv_counts[group.me]) * nbytes,
        )
        return recv, recv_counts


class RowOwners:
    """Who holds which rows under a 1.5D row partition, and the request/answer exchange.

    Rows are cut into ``p / c`` contiguous blocks (even, or at ``bounds``: a partitioner's
    blocks); block j is held by ranks
    ``j*c .. j*c + c - 1``. Rank r sends a request for a row of block j to rank
    ``j * c + r % c`` (its own replica slot), which spreads the requests for a block over
    its replicas. Every exchange is collective over ``group``.
    """

    def __init__(
        self, num_rows: int, replication: int, comm: ExchangeCommunicator, group: Group,
        bounds: Sequence[int] | None = None,
    ):
        if replication < 1 or group.size % replication:
            raise ValueError(f"{group.size} ranks cannot hold {replication} replicas per block")
        blocks = group.size // replication
        if bounds is None:
            ranges = split_range(0, num_rows, blocks)
        elif len(bounds) != blocks + 1 or bounds[0] != 0 or bounds[-1] != num_rows:
            raise ValueError(f"{len(bounds) - 1} row blocks for {blocks} blocks of {num_rows} rows")
        else:
            ranges = list(itertools.pairwise(bounds))
        self.replication, self.comm, self.group = replication, comm, group
        self.bounds = (0, *(b for _, b in ranges))
        self.lo, self.hi = ranges[group.me // replication]
        self._starts = torch.tensor([a for a, _ in ranges], dtype=torch.long)
        self.largest_block = max(b - a for a, b in ranges)

    def on(self, comm: ExchangeCommunicator, group: Group) -> RowOwners:
        """The same blocks, exchanging over another communicator and group."""
        return RowOwners(self.bounds[-1], self.replication, comm, group, self.bounds)

    def check_rows(self, rows: int, what: str) -> None:
        """Refuse a local block whose row count is not this rank's share of the partition."""
        if rows != self.hi - self.lo:
            raise ValueError(f"{what} has {rows} rows, the partition gives this rank "
                             f"{self.hi - self.lo}")

    @property
    def num_blocks(self) -> int:
        return int(self._starts.numel())

    @property
    def my_block(self) -> int:
        return self.group.me // self.replication

    def owned(self, vertex: torch.Tensor) -> torch.Tensor:
        """Which of ``vertex`` lie in this rank's block (a boolean mask)."""
        return (vertex >= self.lo) & (vertex < self.hi)

    def destination(self, vertex: torch.Tensor) -> torch.Tensor:
        """The rank this rank asks for each vertex: its block's replica in my slot."""
        block = torch.searchsorted(self._starts.to(vertex.device), vertex, right=True) - 1
        return block * self.replication + self.group.me % self.replication

    def ask(
        self, request: torch.Tensor, answer: Callable[[torch.Tensor], torch.Tensor]
    ) -> torch.Tensor:
        """Send each request (row id first) to its row's owner; the answers, in order."""
        vertex = request if request.dim() == 1 else request[:, 0].contiguous()
        dest = self.destination(vertex)
        order = torch.argsort(dest, stable=True)
        send_counts = torch.bincount(dest, minlength=self.group.size).tolist()
        received, recv_counts = self.comm.all_to_all(request[order], send_counts, self.group)
        back, _ = self.comm.all_to_all(answer(received), recv_counts, self.group, send_counts)
        out = torch.empty_like(back)
        out[order] = back
        return out


class PartitionedTopology:
    """A sampling :class:`~sparsegnn.sampling.Topology` over 1.5D-partitioned rows of A.

    ``block`` holds rows ``owners.lo .. owners.hi`` of A (all n columns). Every method is
    collective: all ranks must call it the same number of times, which they do when they
    sample the same number of minibatches per call (empty ones included).
    """

    def __init__(self, block: CSRMatrix, owners: RowOwners):
        owners.check_rows(block.shape[0], "block")
        self.block, self.owners = block, owners

    @classmethod
    def from_global(
        cls, adj: CSRMatrix, replication: int, comm: ExchangeCommunicator, group: Group
    ) -> PartitionedTopology:
        """Cut this rank's rows out of a whole A (tests and small runs)."""
        owners = RowOwners(adj.shape[0], replication, comm, group)
        rows = torch.arange(owners.lo, owners.hi, device=adj.device)
        return cls(adj.select_rows(rows), owners)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.block.shape[1], self.block.shape[1])

    @property
    def device(self) -> torch.device:
        return self.block.device

    @property
    def dtype(self) -> torch.dtype:
        return self.block.dtype

    @property
    def unit_values(self) -> bool:
        """Values always travel with the columns: no rank knows all of A's values."""
        return False

    def degree(self, rows: torch.Tensor) -> torch.Tensor:
        def answer(req: torch.Tensor) -> torch.Tensor:
            local = req - self.owners.lo
            return self.block.crow[local + 1] - self.block.crow[local]

        with self.owners.comm.phase("sampling"):
            return self.owners.ask(rows, answer)

    def entries(
        self, rows: torch.Tensor, offsets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Column and value of entry ``offsets[i]`` of row ``rows[i]``, from the owners."""

        def answer(req: torch.Tensor) -> torch.Tensor:
            pos = self.block.crow[req[:, 0] - self.owners.lo] + req[:, 1]
            # Values travel as the bits of a float64 inside the int64 reply: exact.
            bits = self.block.val[pos].double().view(torch.int64)
            return torch.stack([self.block.col[pos], bits], 1)

        with self.owners.comm.phase("sampling"):
            reply = self.owners.ask(torch.stack([rows, offsets], 1), answer)
        return reply[:, 0], reply[:, 1].view(torch.float64).to(self.dtype)

    def rows(self, rows: torch.Tensor) -> CSRMatrix:
        """``Q A`` for the selection ``rows`` (in that order, repeats allowed), whole rows
        fetched from their owners: the sparsity-aware distributed SpGEMM LADIES and
        ShaDow extract with.

        Three exchanges: the row ids go out (with the count exchange), the owners answer
        each row's degree, then its entries as (column, float64 bits of the value) pairs;
        the requester knows every reply's size from the degrees, so the replies need no
        count exchange. Bytes: ``8 (p - 1)`` for the counts, 8 per remote id, 8 per
        remote row's degree and 16 per entry of a remote row, each way.
        """
        owners, comm, group = self.owners, self.owners.comm, self.owners.group
        rows = rows.long()
        dest = owners.destination(rows)
        order = torch.argsort(dest, stable=True)
        send_counts = torch.bincount(dest, minlength=group.size).tolist()
        with comm.phase("sampling"):
            asked, asked_counts = comm.all_to_all(rows[order], send_counts, group)
            answer = self.block.select_rows(asked - owners.lo)
            degree = answer.crow[1:] - answer.crow[:-1]
            got_degree, _ = comm.all_to_all(degree, asked_counts, group, send_counts)
            bits = answer.val.double().view(torch.int64)
            entries = torch.stack([answer.col, bits], 1)
            out_counts = _segment_sums(degree, asked_counts)
            in_counts = _segment_sums(got_degree, send_counts)
            got, _ = comm.all_to_all(entries, out_counts, group, in_counts)
        # Rows arrived in destination order; put them back in the order asked.
        crow = torch.zeros(rows.numel() + 1, dtype=torch.long, device=got.device)
        crow[1:] = torch.cumsum(got_degree, 0)
        sorted_rows = CSRMatrix(crow, got[:, 0].contiguous(),
                                got[:, 1].contiguous().view(torch.float64).to(self.dtype),
                                (rows.numel(), self.shape[1]))
        return sorted_rows.select_rows(torch.argsort(order))


def _segment_sums(values: torch.Tensor, counts: list[int]) -> list[int]:
    """Sums of consecutive segments of ``values`` of lengths ``counts``."""
    return [int(s.sum()) for s in torch.split(values, counts)]
