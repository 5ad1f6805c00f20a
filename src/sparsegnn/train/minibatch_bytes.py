"""The exact bytes of partitioned minibatch training, predicted without a process group.

Every exchange of a partitioned topology (:class:`~sparsegnn.distributed.ops.sampled.
PartitionedTopology`) and of the feature fetch (:class:`~sparsegnn.distributed.
feature_fetch.PartitionedFeatures`) moves a number of bytes fixed by the vertex ids each
rank asks for, and those ids are fixed by ``(seed, epoch, batch)``: a sampler over the
whole local A draws the very same minibatches (the identity the tests check). So the
model replays every rank's loader over the whole graph, records each collective request
in order, and charges each rank, per exchange, with ``p`` ranks and replication ``c``
(a request for vertex v goes to rank ``block(v) * c + r % c``, free when that is r):

* every exchange that sizes itself: ``8 (p - 1)`` bytes each way for the counts;
* ``degree``: 8 per remote id out, 8 per degree back;
* ``entries``: 16 per remote (row, offset) out, 16 per (column, value bits) back;
* ``rows`` (LADIES, ShaDow): 8 per remote id out, 8 per degree back and 16 per entry of
  a remote row back, the last two without a count exchange;
* ``feature_fetch``: 8 per remote id out and one feature row back per remote id;
* ``grad_allreduce``: every parameter from each of the ``p - 1`` peers, per step.

A rank's sent bytes are its own requests to others plus its answers to theirs; its
received bytes the converse. Costs ``p`` times one rank's sampling, in one process: a
check for test and benchmark sizes, not for every run.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from sparsegnn.distributed.layout.block_partition import split_range
from sparsegnn.sampling.loader import MinibatchLoader
from sparsegnn.sampling.samplers import LocalTopology
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.minibatch import MinibatchConfig, make_sampler

PhaseBytes = dict[str, dict[str, int]]  # phase -> {"sent": bytes, "recv": bytes}


@dataclass
class _Call:
    """One collective request of one rank: its kind and the ids it asks for."""

    kind: str  # degree | entries | rows | fetch
    ids: torch.Tensor


class _RecordingTopology(LocalTopology):
    """A whole local A that logs every request a partitioned rank would send."""

    def __init__(self, adj: CSRMatrix, log: list[_Call]):
        super().__init__(adj)
        self.log = log

    def degree(self, rows: torch.Tensor) -> torch.Tensor:
        self.log.append(_Call("degree", rows.long()))
        return super().degree(rows)

    def entries(
        self, rows: torch.Tensor, offsets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.log.append(_Call("entries", rows.long()))
        return super().entries(rows, offsets)

    def rows(self, rows: torch.Tensor) -> CSRMatrix:
        self.log.append(_Call("rows", rows.long()))
        return super().rows(rows)


class _RecordingFeatures:
    """A feature source that logs each bulk's fetch and returns zeros of the right shape."""

    def __init__(self, num_features: int, log: list[_Call]):
        self._f, self.log = num_features, log

    @property
    def num_features(self) -> int:
        return self._f

    def fetch(self, ids: torch.Tensor) -> torch.Tensor:
        self.log.append(_Call("fetch", ids.long()))
        return torch.zeros(ids.numel(), self._f)


def predict_partitioned_bytes(
    adj: CSRMatrix, y: torch.Tensor, train_mask: torch.Tensor, mb: MinibatchConfig, *,
    nprocs: int, replication: int, seed: int, epochs: int, row_bytes: int, num_params: int,
    value_bytes: int, bounds: Sequence[int] | None = None,
) -> list[PhaseBytes]:
    """Each rank's bytes by phase (``sampling``, ``feature_fetch``, ``grad_allreduce``)
    for ``epochs`` epochs of partitioned training without a feature cache.

    ``row_bytes``: one feature row (``d * element size``); ``num_params``,
    ``value_bytes``: the model's size for the gradient all-reduce; ``bounds``: the row
    blocks (default: even, as :class:`~sparsegnn.distributed.ops.sampled.RowOwners` cuts).
    """
    n, p, c = adj.shape[0], nprocs, replication
    if bounds is None:
        bounds = [0, *(hi for _, hi in split_range(0, n, p // c))]
    block_of = torch.repeat_interleave(
        torch.arange(len(bounds) - 1), torch.tensor([b - a for a, b in itertools.pairwise(bounds)]))
    logs = [_replay(adj, y, train_mask, mb, p, r, seed, epochs) for r in range(p)]
    if len({len(log) for log in logs}) != 1:
        raise RuntimeError("ranks made different numbers of collective calls")
    out: list[PhaseBytes] = [defaultdict(lambda: {"sent": 0, "recv": 0}) for _ in range(p)]
    for calls in zip(*logs, strict=True):
        kinds = {call.kind for call in calls}
        if len(kinds) != 1:
            raise RuntimeError(f"ranks made different collective calls at one step: {kinds}")
        (kind,) = kinds
        phase = "feature_fetch" if kind == "fetch" else "sampling"
        dests = [block_of[call.ids] * c + r % c for r, call in enumerate(calls)]
        for r, (sent, recv) in enumerate(_exchange(adj, calls, dests, kind, row_bytes)):
            out[r][phase]["sent"] += sent
            out[r][phase]["recv"] += recv
    steps = epochs * -(-int(train_mask.sum()) // mb.batch_size)
    grad = steps * num_params * value_bytes * (p - 1)
    for rank_bytes in out:
        rank_bytes["grad_allreduce"] = {"sent": grad, "recv": grad}
    return [dict(b) for b in out]


def _replay(
    adj: CSRMatrix, y: torch.Tensor, train_mask: torch.Tensor, mb: MinibatchConfig, world: int,
    rank: int, seed: int, epochs: int,
) -> list[_Call]:
    """Rank ``rank``'s collective requests over ``epochs`` epochs, in order."""
    log: list[_Call] = []
    sampler = make_sampler(mb.sampler, _RecordingTopology(adj, log), mb.fanouts, mb.batch_size)
    loader = MinibatchLoader(sampler, train_mask.nonzero().flatten(), _RecordingFeatures(1, log),
                             y, batch_size=mb.batch_size, bulk=mb.bulk, seed=seed,
                             prefetch=False, rank=rank, world_size=world)
    for epoch in range(epochs):
        for _ in loader.epoch(epoch):
            pass
    return log


def _exchange(
    adj: CSRMatrix, calls: Sequence[_Call], dests: Sequence[torch.Tensor], kind: str,
    row_bytes: int,
) -> list[tuple[int, int]]:
    """(sent, received) bytes of every rank for one collective request."""
    p = len(calls)
    # Per remote request: bytes out from the asker, bytes back from the owner.
    out_bytes, back_bytes = {"degree": (8, 8), "entries": (16, 16), "rows": (8, 8),
                             "fetch": (8, row_bytes)}[kind]
    sent, recv = [8 * (p - 1)] * p, [8 * (p - 1)] * p
    for r, (call, dest) in enumerate(zip(calls, dests, strict=True)):
        remote = dest != r
        ids, owners = call.ids[remote], dest[remote]
        per_owner = torch.bincount(owners, minlength=p)
        back = back_bytes * per_owner
        if kind == "rows":  # and every entry of the remote rows
            degree = adj.crow[ids + 1] - adj.crow[ids]
            back += 16 * torch.zeros(p, dtype=torch.long).index_add_(0, owners, degree)
        sent[r] += out_bytes * int(ids.numel())
        recv[r] += int(back.sum())
        for owner in per_owner.nonzero().flatten().tolist():
            recv[owner] += out_bytes * int(per_owner[owner])
            sent[owner] += int(back[owner])
    return list(zip(sent, recv, strict=True))
