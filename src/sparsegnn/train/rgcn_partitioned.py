"""R-GCN on sampled minibatches with a partitioned topology: each rank keeps its rows.

The union pattern's rows and the feature rows are cut 1.5D-style into ``p / c`` blocks,
each held by ``c`` ranks, as for the homogeneous models
(:class:`~sparsegnn.distributed.ops.sampled.PartitionedTopology`,
:class:`~sparsegnn.distributed.ops.feature_fetch.PartitionedFeatures`), so every rank
samples the same share with the same streams as a replicated rank and draws the very
same minibatches. What R-GCN adds is the relation counts of a sampled pair: each rank
keeps the relation index of its rows only (:meth:`~sparsegnn.nn.rgcn.RelationIndex.rows`)
and answers the pairs other ranks sampled in its rows (one request/answer exchange per
split block). A featureless model's input rows are the node ids, which need no fetch.

Evaluation is full-neighbourhood inference over the row blocks: every relation's rows
of the rank's block (whole rows, so normalised exactly) multiply, layer by layer, the
block's rows and the remote rows any relation needs, fetched from their owners once per
layer (phase ``evaluation``; a featureless first layer needs none). One replica of each
block counts its labelled rows, and one all-reduce sums the counts. Each rank builds its
share from the whole graph, then keeps only its rows (a row-block folder of typed graphs
does not exist yet).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from sparsegnn.data.hetero import HeteroGraph, RelationalGraph
from sparsegnn.distributed import Group, RankResult, lost_peers_named, rank_session, run_on_ranks
from sparsegnn.distributed.ops.feature_fetch import PartitionedFeatures
from sparsegnn.distributed.ops.sampled import (
    ExchangeCommunicator,
    GradientSum,
    PartitionedTopology,
    RowOwners,
    separate_group,
)
from sparsegnn.errors import InvalidValueError
from sparsegnn.nn.rgcn import RelationIndex, relation_operators
from sparsegnn.sampling.loader import FeatureSource
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.rgcn_minibatch import (
    SampledReplica,
    SampledSource,
    fit_sampled,
    model_weights,
)
from sparsegnn.train.rgcn_task import (
    RelationalClassifier,
    RGCNRequest,
    Split,
    featureless_forward,
    model_input,
    node_labels,
    relational_problem,
)


class NodeIds:
    """The input rows of a featureless model: a node's row is its id (no fetch)."""

    def __init__(self, num_nodes: int):
        self.num_features = num_nodes

    def fetch(self, ids: torch.Tensor) -> torch.Tensor:
        return ids.long()


@dataclass
class PartitionedEvaluation:
    """Full-neighbourhood logits of this rank's block, layer by layer: every layer's
    input is the block's rows and the remote rows any relation needs (``remote``,
    fetched once per layer from their owners; a featureless first layer's are its ids),
    multiplied by each relation's rows of the block (``ops``, own columns first), the
    rectangular form sampled blocks use. Accuracy sums the counts over the ranks (one
    replica of each block counts)."""

    x: torch.Tensor
    ids: torch.Tensor  # the block's node ids, then ``remote``
    remote: torch.Tensor
    ops: list[CSRMatrix]
    owners: RowOwners
    y: torch.Tensor
    masks: dict[str, torch.Tensor]

    def logits(self, model: RelationalClassifier) -> torch.Tensor:
        h = self.x
        for layer, conv in enumerate(model.convs):
            if layer == 0 and model.featureless:
                h = featureless_forward(conv, self.ops, self.ids)
            else:
                h = conv(torch.cat([h, self._fetch(h)]), self.ops)
            if layer < len(model.convs) - 1:
                h = F.relu(h)
        return h

    def _fetch(self, h: torch.Tensor) -> torch.Tensor:
        lo = self.owners.lo
        with self.owners.comm.phase("evaluation"):
            return self.owners.ask(self.remote, lambda req: h[req - lo]).to(h.dtype)

    def accuracy(self, logits: torch.Tensor, split: Split) -> float:
        m = self.masks[split]
        counts = torch.stack([(logits[m].argmax(1) == self.y[m]).sum(), m.sum()]).long()
        if self.owners.group.me % self.owners.replication:
            counts.zero_()
        with self.owners.comm.phase("evaluation"):
            counts = self.owners.comm.all_reduce(counts, self.owners.group)
        return float(counts[0].float() / counts[1].clamp(min=1).float())


def train_rgcn_partitioned(request: RGCNRequest) -> list[RankResult[SampledReplica]]:
    """``request.ranks.nprocs`` spawned ranks, each keeping its rows; every rank's result
    and bytes, in rank order. What this path lacks is refused before any rank starts."""
    ranks = request.ranks
    if ranks is None or ranks.nprocs % ranks.replication:
        raise InvalidValueError("a partitioned topology needs --nprocs divisible by "
                                "--replication")
    if request.checkpoint is not None or request.device != "cpu":
        raise InvalidValueError("R-GCN with a partitioned topology trains on CPU ranks "
                                "without checkpoints; drop --checkpoint or --device")
    threads = max(1, (os.cpu_count() or 1) // ranks.nprocs)
    return run_on_ranks(train_partitioned_rank, ranks.nprocs, (request,), threads=threads,
                        heartbeat_timeout_s=ranks.timeout_s).results


def train_partitioned_rank(request: RGCNRequest, graph: HeteroGraph | None = None
                           ) -> RankResult[SampledReplica]:
    """One rank: cut its rows, train on its share of every minibatch. Sampling and
    feature fetches run on a group of their own (the loader's thread), relation counts,
    gradients and evaluation on the world group."""
    assert request.ranks is not None
    with (rank_session(request.ranks.backend, request.ranks.timeout_s) as session,
          lost_peers_named()):
        world = Group(tuple(range(session.world_size)), session.rank)
        sampling = separate_group(world)
        xcomm, gcomm = ExchangeCommunicator(), ExchangeCommunicator()
        typed, rel = relational_problem(request, graph)
        owners = RowOwners(rel.num_nodes, request.ranks.replication, xcomm, sampling)
        source = partitioned_source(request, rel, owners, owners.on(gcomm, world))
        run = fit_sampled(request, typed, rel, source, rank=session.rank,
                          world_size=session.world_size, sync=GradientSum(gcomm, world))
    return RankResult(session.rank, session.world_size,
                      SampledReplica(run.outcome, model_weights(run.model)),
                      xcomm.counts() + gcomm.counts())


def partitioned_source(request: RGCNRequest, rel: RelationalGraph, sampling: RowOwners,
                       main: RowOwners) -> SampledSource:
    """This rank's rows of everything a sampled run reads: ``sampling`` exchanges in the
    loader's thread, ``main`` in the training thread."""
    lo, hi = sampling.lo, sampling.hi
    own = torch.arange(lo, hi)
    index = RelationIndex(rel.edge_index, rel.edge_type, rel.num_relations, rel.num_nodes)
    topology = PartitionedTopology(index.union(request.torch_dtype).select_rows(own), sampling)
    x = model_input(request, rel)
    features: torch.Tensor | FeatureSource = (
        NodeIds(rel.num_nodes) if x.dim() == 1 else PartitionedFeatures(x[lo:hi], sampling))
    mine = index.rows(lo, hi)
    y, masks = node_labels(rel)
    remote, ops = _block_operators(request, rel, lo, hi)
    evaluation = PartitionedEvaluation(x[lo:hi], torch.cat([own, remote]), remote, ops, main,
                                       y[lo:hi], {s: m[lo:hi] for s, m in masks.items()})
    return SampledSource(mine, topology, features, _asking(main, mine), evaluation)


def _asking(owners: RowOwners, mine: RelationIndex
            ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A lookup that asks each pair's row owner for its relation counts (collective)."""
    def lookup(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        pairs = torch.stack([dst.long(), src.long()], 1)
        with owners.comm.phase("relations"):
            return owners.ask(pairs, lambda req: mine.lookup(req[:, 0], req[:, 1]))

    return lookup


def _block_operators(request: RGCNRequest, rel: RelationalGraph, lo: int, hi: int
                     ) -> tuple[torch.Tensor, list[CSRMatrix]]:
    """The remote rows any relation of rows ``lo .. hi`` needs, and every relation's
    rows of the block with columns renumbered: the block's own rows first, then those."""
    own = torch.arange(lo, hi)
    rows = [op.select_rows(own) for op in relation_operators(
        rel.edge_index, rel.edge_type, rel.num_relations, rel.num_nodes, request.aggr,
        request.torch_dtype)]
    cols = torch.unique(torch.cat([r.col for r in rows]))
    remote = cols[(cols < lo) | (cols >= hi)]
    width = (hi - lo) + remote.numel()
    out = []
    for r in rows:
        inside = (r.col >= lo) & (r.col < hi)
        local = torch.where(inside, r.col - lo, (hi - lo) + torch.searchsorted(remote, r.col))
        out.append(CSRMatrix.from_coo(r.row_indices(), local, r.val, (hi - lo, width)))
    return remote, out
