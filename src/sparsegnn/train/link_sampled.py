"""Sampled link prediction on ranks, over a replicated or a partitioned topology.

PyG's ``LinkNeighborLoader`` training (:class:`~sparsegnn.sampling.link_loader.
LinkMinibatchLoader`): seed edges, their endpoints and the endpoints of negatives drawn
for the same minibatch, those endpoints' sampled neighbourhoods over the training
message edges (node-wise, one fan-out per layer), a GraphSAGE encoder on the blocks and
the decoder on the minibatch's pairs. Every rank takes its share of each minibatch;
the gradient is summed over the ranks (:class:`~sparsegnn.distributed.ops.sampled.
GradientSum`), each rank's summed loss divided by the whole minibatch's candidate count.

The topology is either replicated (every rank holds the message graph and the features)
or partitioned as node classification's minibatches partition it
(:mod:`sparsegnn.train.minibatch_distributed`): 1.5D row blocks of A and of the
features, sampling that asks the owners for degrees and drawn entries, one feature fetch
per bulk, on a process group of their own. The two draw the same minibatches from the
same streams, so a partitioned run ends with the weights of the replicated run.

Validation AUC (every epoch) and the final validation and test metrics score the fixed
candidates through the same loader (no negatives drawn); the test neighbourhoods are
sampled over the training and validation message edges, as the one-process run's test
operator holds them. Each rank scores its share and the scores are summed into one
vector of all candidates (zero elsewhere).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch.nn import functional as F

from sparsegnn.data.graph import GraphData, row_normalize
from sparsegnn.data.link_edges import LabeledEdges, LinkSplit
from sparsegnn.distributed import RankResult, lost_peers_named, rank_session, run_on_ranks
from sparsegnn.distributed.ops.feature_fetch import PartitionedFeatures
from sparsegnn.distributed.ops.sampled import (
    ExchangeCommunicator,
    GradientSum,
    PartitionedTopology,
    separate_group,
)
from sparsegnn.distributed.runtime.comm import Group
from sparsegnn.errors import InvalidValueError
from sparsegnn.nn.link_decoders import LinkModel
from sparsegnn.nn.operator import block_operator
from sparsegnn.sampling.link_loader import LinkBatch, LinkMinibatchLoader
from sparsegnn.sampling.samplers import NodeWiseSampler, Sampler
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.link_grid import load_link_graph
from sparsegnn.train.link_metrics import link_metrics, roc_auc
from sparsegnn.train.link_task import LinkEpoch, LinkRequest, build_link_model
from sparsegnn.train.loop import LoopConfig, LoopRole, run_epochs
from sparsegnn.train.task_runs import flat_link_metrics, refuse_typed
from sparsegnn.train.train_request import TrainOutcome, plain_config
from sparsegnn.train.train_summary import title


@dataclass(frozen=True)
class LinkSampledRequest:
    """A sampled link-prediction run: the one-process ``link`` request (GraphSAGE
    encoder), the minibatches (``fanouts`` per layer, ``batch_size`` seed edges, ``bulk``
    per sampler call) and the ranks (``nprocs``, the topology, its 1.5D replication)."""

    link: LinkRequest = field(default_factory=lambda: LinkRequest(model="sage"))
    fanouts: tuple[int, ...] = (10, 5)
    batch_size: int = 512
    bulk: int = 4
    nprocs: int = 2
    topology: Literal["replicated", "partitioned"] = "replicated"
    replication: int = 1
    dtype: Literal["float32", "float64"] = "float32"
    prefetch: bool = True
    backend: str | None = None
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.link.model != "sage":
            raise InvalidValueError(f"sampled link prediction trains GraphSAGE (a sampled "
                                    f"block has no whole degrees for GCN), not "
                                    f"{self.link.model!r}")
        if len(self.fanouts) != self.link.num_layers:
            raise InvalidValueError(f"{len(self.fanouts)} fan-outs for a "
                                    f"{self.link.num_layers}-layer encoder; give one per layer")
        if self.nprocs % self.replication:
            raise InvalidValueError(f"--replication {self.replication} does not divide "
                                    f"{self.nprocs} ranks")


@dataclass
class LinkSampledOutcome:
    """Rank 0's result: epochs (loss over every rank's candidates, validation AUC),
    validation and test metrics, the final weights and every rank's bytes."""

    history: list[LinkEpoch]
    val: dict[str, float]
    test: dict[str, float]
    weights: dict[str, torch.Tensor]
    bytes_per_rank: list[dict[str, dict[str, int]]]

    def to_dict(self) -> dict[str, Any]:
        return {"epochs_run": len(self.history), "val": self.val, "test": self.test,
                "history": [vars(h) for h in self.history],
                "comm_per_rank": self.bytes_per_rank}


def train_link_sampled(graph: GraphData | str, request: LinkSampledRequest,
                       split: LinkSplit | None = None, data_dir: str | None = None
                       ) -> LinkSampledOutcome | None:
    """Train on ``request.nprocs`` spawned ranks (or this torchrun job's); rank 0's
    outcome with every spawned rank's bytes (``None`` on the other torchrun ranks)."""
    threads = max(1, (os.cpu_count() or 1) // request.nprocs)
    ranks = run_on_ranks(_run_rank, request.nprocs, (graph, split, data_dir, request),
                         threads=threads, heartbeat_timeout_s=request.timeout_s)
    if ranks.lead is None:
        return None
    lead: LinkSampledOutcome = ranks.lead.value
    lead.bytes_per_rank = [r.comm.to_dict() for r in ranks.results]
    return lead


def run_link_sampled_task(dataset: str, request: LinkSampledRequest,
                          data_dir: str | None = None) -> TrainOutcome | None:
    """``sparsegnn train --task link --mode minibatch``: the one-process run's metric
    keys (``test_auc``, ...), the epochs and every rank's bytes by phase."""
    refuse_typed(dataset, data_dir, "link prediction")
    outcome = train_link_sampled(dataset, request, data_dir=data_dir)
    if outcome is None:
        return None
    link, result = request.link, outcome.to_dict()
    flat = flat_link_metrics(result)
    out = {"dataset": dataset, "task": "link", "mode": "minibatch", "model": link.model,
           "decoder": link.decoder, "topology": request.topology, "world_size": request.nprocs,
           **flat, **result, "config": plain_config(link)}
    shown = "  ".join(f"{k} {v:.4f}" for k, v in outcome.test.items())
    return TrainOutcome(
        title(dataset, link.model, f", sampled link prediction ({request.topology}, "
                                   f"{request.nprocs} ranks)"), out,
        f"{link.model}+{link.decoder}: test {shown} ({len(outcome.history)} epochs)")


def minibatch_logits(model: LinkModel, item: LinkBatch, num_layers: int) -> torch.Tensor:
    """The decoder's logits of a minibatch's candidates: the GraphSAGE encoder on its
    sampled blocks (one per layer), the decoder on the seeds' rows."""
    blocks = item.batch.operators(num_layers)
    z = model.encode(item.x, [block_operator("sage", b) for b in blocks])
    return model.decode(z[:item.batch.seeds.numel()], item.pairs)


def minibatch_step(model: LinkModel, optimizer: torch.optim.Optimizer, item: LinkBatch,
                   num_layers: int, sync: Callable[[LinkModel], None] | None = None
                   ) -> float:
    """One optimiser step on a minibatch of candidates; returns the summed loss of this
    rank's share. The loss is divided by the whole minibatch's candidate count, so
    ``sync`` (the gradient sum over the ranks; None on one process) makes it the mean."""
    optimizer.zero_grad(set_to_none=True)
    logits = minibatch_logits(model, item, num_layers)
    local = F.binary_cross_entropy_with_logits(logits, item.labels.to(logits), reduction="sum")
    (local / item.global_pairs).backward()
    if sync is not None:
        sync(model)
    optimizer.step()
    return float(local.detach())


def _run_rank(source: GraphData | str, split: LinkSplit | None, data_dir: str | None,
              request: LinkSampledRequest) -> RankResult[LinkSampledOutcome]:
    with rank_session(request.backend, request.timeout_s) as session, lost_peers_named():
        graph, split = load_link_graph(source, split, data_dir, request.link)
        rank = _SampledRank(graph, split, request, Group(tuple(range(session.world_size)),
                                                         session.rank))
        outcome = rank.train()
    return RankResult(session.rank, session.world_size, outcome,
                      rank.xcomm.counts() + rank.gcomm.counts())


class _SampledRank:
    """One rank's topology, features, model and loaders, and its training loop."""

    def __init__(self, graph: GraphData, split: LinkSplit, request: LinkSampledRequest,
                 world: Group) -> None:
        if any(e.pos_type is not None for e in (split.train, split.val, split.test)):
            raise InvalidValueError("sampled link prediction reads untyped edges; train "
                                    "typed edges (DistMult) full-graph")
        link, dtype = request.link, getattr(torch, request.dtype)
        self.request, self.split, self.world = request, split, world
        self.xcomm, self.gcomm = ExchangeCommunicator(), ExchangeCommunicator()
        # The loaders' thread samples and fetches on a group of its own.
        self.sampling = separate_group(world)
        assert graph.x is not None
        x = row_normalize(graph.x) if link.normalize_features else graph.x
        self.x = x.to(torch.float32).to(dtype)  # the one-process run's features
        self.n, self.dtype = graph.num_nodes, dtype
        self.features: Any = self.x
        if request.topology == "partitioned":
            self.features = PartitionedFeatures.from_global(
                self.x, request.replication, self.xcomm, self.sampling)
        self.model: LinkModel = build_link_model(link, graph.num_features).to(dtype)
        self.train_sampler = self._sampler(split.train_message)

    def _sampler(self, message: torch.Tensor) -> Sampler:
        adj = CSRMatrix.from_edge_index(message, self.n).to(dtype=self.dtype)
        if self.request.topology == "partitioned":
            return NodeWiseSampler(PartitionedTopology.from_global(
                adj, self.request.replication, self.xcomm, self.sampling),
                self.request.fanouts)
        return NodeWiseSampler(adj, self.request.fanouts)

    def _loader(self, sampler: Sampler, pairs: torch.Tensor,
                labels: torch.Tensor | None) -> LinkMinibatchLoader:
        r, link = self.request, self.request.link
        return LinkMinibatchLoader(
            sampler, pairs, self.features, self.n, labels=labels, neg_ratio=link.neg_ratio,
            batch_size=r.batch_size, bulk=r.bulk, seed=link.seed, shuffle=labels is None,
            prefetch=r.prefetch, rank=self.world.me, world_size=self.world.size)

    def train(self) -> LinkSampledOutcome:
        link = self.request.link
        optimizer = torch.optim.Adam(self.model.parameters(), lr=link.lr,
                                     weight_decay=link.weight_decay)
        loader = self._loader(self.train_sampler, self.split.train.pos, None)
        sync = GradientSum(self.gcomm, self.world)
        main = self.world.me == 0
        state = run_epochs(
            self.model, optimizer, lambda e: self._epoch(loader, optimizer, sync, e),
            LoopConfig(epochs=link.epochs, patience=link.patience, seed=link.seed,
                       progress=link.progress if main else False),
            LinkEpoch, score=lambda s: s.val_auc,
            role=LoopRole(is_main=main, reports=main, desc="link"))
        weights = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        val = self._metrics(self.split.val, self.train_sampler)
        test = self._metrics(self.split.test, self._sampler(self.split.test_message))
        return LinkSampledOutcome(state.history, val, test, weights, [])

    def _epoch(self, loader: LinkMinibatchLoader, optimizer: torch.optim.Optimizer,
               sync: GradientSum, epoch: int) -> LinkEpoch:
        """One pass over the seed edges; the loss is every rank's, summed."""
        start = time.perf_counter()
        self.model.train()
        total = torch.zeros(2, dtype=torch.float64)
        for item in loader.epoch(epoch):
            local = minibatch_step(self.model, optimizer, item, self.request.link.num_layers, sync)
            total += torch.tensor([local, float(item.labels.numel())])
        with self.gcomm.phase("metrics"):
            total = self.gcomm.all_reduce(total, self.world)
        val_auc = self._auc(self.split.val)
        return LinkEpoch(epoch, float(total[0] / total[1].clamp(min=1)), val_auc,
                         time.perf_counter() - start)

    @torch.no_grad()
    def _scores(self, edges: LabeledEdges, sampler: Sampler) -> torch.Tensor:
        """Every candidate's logit (positives, then negatives), on every rank."""
        self.model.eval()
        pairs = torch.cat([edges.pos, edges.neg], dim=1)
        labels = torch.cat([torch.ones(edges.num_pos), torch.zeros(edges.num_neg)])
        out = torch.zeros(pairs.shape[1], dtype=self.dtype)
        for item in self._loader(sampler, pairs, labels).epoch(0):
            out[item.positions] = minibatch_logits(self.model, item,
                                                    self.request.link.num_layers)
        with self.gcomm.phase("metrics"):
            return self.gcomm.all_reduce(out, self.world)

    def _auc(self, edges: LabeledEdges) -> float:
        scores = self._scores(edges, self.train_sampler)
        return roc_auc(scores[:edges.num_pos], scores[edges.num_pos:])

    def _metrics(self, edges: LabeledEdges, sampler: Sampler) -> dict[str, float]:
        scores = self._scores(edges, sampler)
        return link_metrics(scores[:edges.num_pos], scores[edges.num_pos:],
                            self.request.link.ks)

