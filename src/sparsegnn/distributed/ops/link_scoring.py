"""Candidate edges of link prediction scored on the ranks that own their endpoints.

Layout contract, as for SpMM (:mod:`sparsegnn.distributed.ops.spmm`): every rank of
process row i holds the full rows ``Z_i`` of vertex block i of the embeddings. A
candidate pair ``(s, t)`` (``pairs[0]`` the source, ``pairs[1]`` the destination, in the
relabelled vertex order) belongs to the block of its destination t, and the ranks that
hold that block split its candidates: the ``s = cols * layers`` ranks of a process row
(1.5D's c replicas, 2D's q, 3D's q x q) take them round-robin in list order, share
``r = j * layers + m`` for rank ``(i, j, m)`` (:func:`candidate_shares`). So every
candidate is scored exactly once, on a rank that holds its destination row.

* Destination rows are local. The rank's share uses the replicated ``Z_i``
  (:meth:`LinkScorer.enter`), so the backward pass sums that gradient over the groups
  that split a row (fiber, then row), after which every replica holds the whole gradient
  of its rows, the convention the encoder's backward pass relies on.
* Source rows outside block i are fetched from the member of the rank's column group that
  holds their block (member b is process row b, with the same share index), exactly the
  distinct ones the share uses, in one ``all_to_all``. The backward pass sends their
  gradients back, the owner adds them into its rows, and the split groups sum them.
* The candidate list is the same on every rank (negatives are drawn from the run's seed),
  so each rank computes its own plan and what each member of its column group will ask
  of it, without exchanging ids.

The loss is each rank's sum over its share reduced over the split groups and the column
group (:meth:`LinkScorer.total`; its gradient passes through, as
:func:`~sparsegnn.distributed.ops.task.group_sum`'s). Evaluation scores are put back in
list order by summing a vector of all candidates, zero where another rank scored
(:meth:`LinkScorer.all_scores`: adding zeros is exact). Bytes: ``forward_link``,
``backward_link`` and ``link_metrics``; ``planning.link_model`` predicts them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from sparsegnn.distributed.layout.block_partition import BlockPartition
from sparsegnn.distributed.ops.row_exchange import SparseCommunicator
from sparsegnn.distributed.ops.task import group_sum, sum_gradients
from sparsegnn.distributed.runtime.comm import Group, ProcessGrid

FORWARD, BACKWARD, METRICS = "forward_link", "backward_link", "link_metrics"


def candidate_shares(dst_block: torch.Tensor, shares: int) -> torch.Tensor:
    """The share of each candidate: its position among its block's candidates (in list
    order) modulo ``shares``."""
    order = torch.argsort(dst_block, stable=True)
    counts = torch.bincount(dst_block)
    starts = torch.cumsum(counts, 0) - counts
    pos = torch.empty_like(dst_block)
    pos[order] = torch.arange(dst_block.numel(), device=dst_block.device) - starts[
        dst_block[order]]
    return pos % shares


@dataclass
class CandidatePlan:
    """One rank's share of a candidate list and the rows it exchanges for it.

    Attributes:
        mine: positions (in the list) of the candidates this rank scores.
        local_pairs: ``[2, len(mine)]`` rows of ``cat([Z_i, fetched])`` for each
            candidate's source and destination.
        send_index: local rows the column group asked of this rank, in member order.
        send_counts / recv_counts: rows to / from each member of the column group.
    """

    mine: torch.Tensor
    local_pairs: torch.Tensor
    send_index: torch.Tensor
    send_counts: list[int]
    recv_counts: list[int]


def plan_candidates(pairs: torch.Tensor, part: BlockPartition, grid: ProcessGrid
                    ) -> CandidatePlan:
    """This rank's plan for ``pairs`` (relabelled ids, the same list on every rank)."""
    shape = grid.shape
    i, j, m = grid.coords
    src, dst = pairs[0], pairs[1]
    ends = torch.tensor(part.offsets[1:], dtype=torch.long, device=pairs.device)
    src_block = torch.bucketize(src, ends, right=True)
    dst_block = torch.bucketize(dst, ends, right=True)
    taken = candidate_shares(dst_block, shape.cols * shape.layers) == j * shape.layers + m
    lo, n_i = part.block(i)[0], part.size(i)
    rows = shape.rows
    # What the column group's members (same share) ask of this rank: block-i sources of
    # their candidates, distinct per asking block, ordered by member then id.
    wanted = taken & (src_block == i) & (dst_block != i)
    asked = torch.unique(dst_block[wanted] * part.num_nodes + src[wanted])
    send_index = asked % part.num_nodes - lo
    send_counts = torch.bincount(asked // part.num_nodes, minlength=rows).tolist()
    mine = torch.nonzero(taken & (dst_block == i)).flatten()
    remote = src_block[mine] != i
    fetched = torch.unique(src[mine][remote])  # sorted: grouped by block, member order
    recv_counts = torch.bincount(torch.bucketize(fetched, ends, right=True),
                                 minlength=rows).tolist()
    local_src = torch.where(remote, n_i + torch.searchsorted(fetched, src[mine]),
                            src[mine] - lo)
    return CandidatePlan(mine, torch.stack([local_src, dst[mine] - lo]), send_index,
                         send_counts, recv_counts)


class LinkScorer:
    """Scores candidate lists on this rank's share (see the module doc)."""

    def __init__(self, grid: ProcessGrid, comm: SparseCommunicator, part: BlockPartition
                 ) -> None:
        self.grid, self.comm, self.part = grid, comm, part
        # The groups that split a block's candidates, reduced in this order on every rank.
        self.split: list[Group] = [g for g in (grid.fiber, grid.row) if g.size > 1]
        self.reduce_over: list[Group] = [*self.split, grid.col]
        self._new_id: torch.Tensor | None = None
        if part.order is not None:
            self._new_id = torch.empty_like(part.order)
            self._new_id[part.order] = torch.arange(part.order.numel())

    def relabelled(self, pairs: torch.Tensor) -> torch.Tensor:
        """``pairs`` of original vertex ids in the partition's vertex order."""
        return pairs if self._new_id is None else self._new_id[pairs]

    def plan(self, pairs: torch.Tensor) -> CandidatePlan:
        """:func:`plan_candidates` of ``pairs`` (original ids) for this rank."""
        return plan_candidates(self.relabelled(pairs), self.part, self.grid)

    def score(self, decoder: nn.Module, z: torch.Tensor, plan: CandidatePlan,
              relation: torch.Tensor | None = None) -> torch.Tensor:
        """The decoder's logits of this rank's share, in the order of ``plan.mine``."""
        with self.comm.phase(FORWARD):
            rows = torch.cat([self.enter(z), _Fetch.apply(z, self, plan)])
        rel = None if relation is None else relation[plan.mine]
        return decoder(rows, plan.local_pairs, rel)

    def all_scores(self, decoder: nn.Module, z: torch.Tensor, pairs: torch.Tensor,
                   relation: torch.Tensor | None = None) -> torch.Tensor:
        """Every candidate's logit, in list order, on every rank (no gradient)."""
        plan = self.plan(pairs)
        with torch.no_grad():
            mine = self.score(decoder, z, plan, relation)
            out = mine.new_zeros(pairs.shape[1]).index_copy_(0, plan.mine, mine)
            with self.comm.phase(METRICS):
                return self.reduce(out, self.reduce_over)

    def total(self, local: torch.Tensor) -> torch.Tensor:
        """The sum of every rank's ``local`` (each candidate counted once); its gradient
        is the incoming one, each rank back-propagating its own share."""
        with self.comm.phase(METRICS):
            for group in self.reduce_over:
                local = group_sum(local, self.comm, group)
        return local

    def enter(self, z: torch.Tensor) -> torch.Tensor:
        """``z`` (replicated on the process row) as used by this rank's share."""
        return _Enter.apply(z, self) if self.split else z

    def reduce(self, t: torch.Tensor, groups: list[Group]) -> torch.Tensor:
        for group in groups:
            t = self.comm.all_reduce(t, group)
        return t

    def sync_split(self, params: list[nn.Parameter]) -> None:
        """Sum the gradients of parameters used by the rank's share of the candidates only
        (the decoder's) over the split groups, so the column group's sum that follows
        (:func:`~sparsegnn.distributed.ops.task.sum_gradients`) sees each candidate once."""
        for group in self.split:
            sum_gradients(params, self.comm, group)


class _Fetch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z: torch.Tensor, scorer: LinkScorer, plan: CandidatePlan  # type: ignore[override]
                ) -> torch.Tensor:
        ctx.scorer, ctx.plan, ctx.rows = scorer, plan, z.shape[0]
        return scorer.comm.exchange(z[plan.send_index].contiguous(), plan.send_counts,
                                    plan.recv_counts, scorer.grid.col)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        scorer: LinkScorer = ctx.scorer
        plan: CandidatePlan = ctx.plan
        with scorer.comm.phase(BACKWARD):
            back = scorer.comm.exchange(grad.contiguous(), plan.recv_counts,
                                        plan.send_counts, scorer.grid.col)
            out = grad.new_zeros(ctx.rows, *grad.shape[1:]).index_add_(0, plan.send_index,
                                                                        back)
            return scorer.reduce(out, scorer.split), None, None


class _Enter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z: torch.Tensor, scorer: LinkScorer) -> torch.Tensor:  # type: ignore[override]
        ctx.scorer = scorer
        return z.view_as(z)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        with ctx.scorer.comm.phase(BACKWARD):
            return ctx.scorer.reduce(grad.contiguous(), ctx.scorer.split), None
