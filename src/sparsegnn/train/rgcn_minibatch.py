"""R-GCN on sampled minibatches (GraphSAGE, LADIES or ShaDow sampling), on one process or
on spawned ranks that each hold the whole topology (replicated).

The samplers draw on the union of the relations (its pattern, unit values), so every
sampler of :mod:`sparsegnn.sampling` serves R-GCN unchanged; each sampled block is then
split back into one operator per relation (:class:`~sparsegnn.nn.rgcn.RelationIndex`:
the relation-r edges between the pairs the block kept, averaged per relation as PyG's
``RGCNConv`` averages over a sampled subgraph's edges). A featureless model's input is
the sampled nodes' ids, so only their rows of the first layer's weights are touched.
Validation and test are full-neighbourhood inference on the whole graph's relation
operators, so they measure the trained weights, not the luck of one more sample.

On ranks every rank samples its own share of each minibatch from its own streams
(:class:`~sparsegnn.sampling.loader.MinibatchLoader`'s ``rank``/``world_size``) and the
gradients are summed over all ranks (:class:`~sparsegnn.distributed.ops.sampled.
GradientSum`), so every rank ends with the same weights. A partitioned topology (rows
of A and of the features per rank) is not built for typed graphs yet.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from sparsegnn.data.hetero import HeteroGraph, RelationalGraph
from sparsegnn.distributed import (
    Communicator,
    Group,
    RankResult,
    lost_peers_named,
    rank_session,
    run_on_ranks,
)
from sparsegnn.distributed.ops.sampled import GradientSum
from sparsegnn.errors import InvalidValueError
from sparsegnn.nn.rgcn import Lookup, RelAggr, RelationIndex, relation_operators
from sparsegnn.sampling import ShadowSampler
from sparsegnn.sampling.loader import FeatureSource, MinibatchLoader
from sparsegnn.sampling.samplers import Minibatch, Topology
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.fullgraph import LocalTask
from sparsegnn.train.minibatch import make_sampler
from sparsegnn.train.rgcn_task import (
    Evaluation,
    RelationalClassifier,
    RGCNOutcome,
    RGCNRequest,
    TaskEvaluation,
    TrainStep,
    build_classifier,
    model_input,
    node_labels,
    relational_problem,
    run_relational,
)


@dataclass
class RGCNSampledRank:
    """One rank's (or the one process's) trained model and outcome."""

    model: RelationalClassifier
    outcome: RGCNOutcome


@dataclass
class SampledSource:
    """Where a sampled run reads: the union pattern to sample (the whole of it, or this
    rank's rows), the input rows (features or ids; a fetching source when partitioned),
    the relation counts of sampled pairs (``lookup``: None reads ``index``) and what the
    epochs evaluate on."""

    index: RelationIndex
    adj: CSRMatrix | Topology
    features: torch.Tensor | FeatureSource
    lookup: Lookup | None
    evaluation: Evaluation


def fit_rgcn_sampled(request: RGCNRequest, graph: HeteroGraph | None = None, *,
                     rank: int = 0, world_size: int = 1,
                     sync: GradientSum | None = None) -> RGCNSampledRank:
    """Train ``request`` (its ``minibatch`` settings) on sampled minibatches with the
    whole topology; ``rank`` of ``world_size`` samples its share of each minibatch,
    ``sync`` sums the gradients."""
    typed, rel = relational_problem(request, graph)
    device = torch.device(request.device)
    index = RelationIndex(rel.edge_index, rel.edge_type, rel.num_relations, rel.num_nodes)
    y, masks = node_labels(rel)
    x = model_input(request, rel)
    ops = [op.to(device=device) for op in relation_operators(
        rel.edge_index, rel.edge_type, rel.num_relations, rel.num_nodes, request.aggr,
        request.torch_dtype)]
    evaluation = TaskEvaluation(LocalTask(x.to(device), ops,  # type: ignore[arg-type]
                                          y.to(device),
                                          {s: m.to(device) for s, m in masks.items()}))
    source = SampledSource(index, index.union(request.torch_dtype), x, None, evaluation)
    return fit_sampled(request, typed, rel, source, rank=rank, world_size=world_size,
                       sync=sync)


def fit_sampled(request: RGCNRequest, typed: HeteroGraph, rel: RelationalGraph,
                source: SampledSource, *, rank: int = 0, world_size: int = 1,
                sync: GradientSum | None = None) -> RGCNSampledRank:
    """The sampled epochs on ``source``, whichever topology it reads."""
    mb = request.minibatch
    if mb is None:
        raise InvalidValueError("R-GCN on sampled minibatches needs request.minibatch")
    sampler = make_sampler(mb.sampler, source.adj, mb.fanouts, mb.batch_size)
    if not isinstance(sampler, ShadowSampler) and sampler.num_layers != request.num_layers:
        raise InvalidValueError(
            f"{sampler.num_layers} fan-outs for a {request.num_layers}-layer R-GCN; give one "
            "fan-out per layer (--fanouts) or change --layers")
    y, masks = node_labels(rel)
    device = torch.device(request.device)
    model = build_classifier(request, rel, typed.num_classes).to(device)
    loader = MinibatchLoader(sampler, masks["train"].nonzero().flatten(), source.features, y,
                             batch_size=mb.batch_size, bulk=mb.bulk, seed=request.seed,
                             prefetch=mb.prefetch, rank=rank, world_size=world_size,
                             device=device)
    step = sampled_step(loader, source, request, sync)
    outcome = run_relational(model, source.evaluation, request, typed, rel, step=step,
                             is_main=rank == 0)
    return RGCNSampledRank(model, outcome)


def sampled_step(loader: MinibatchLoader, source: SampledSource, request: RGCNRequest,
                 sync: GradientSum | None) -> TrainStep:
    """One pass over the training seeds: a step per minibatch on its relation blocks."""
    def step(model: RelationalClassifier, opt: torch.optim.Optimizer, epoch: int) -> float:
        total, seeds = 0.0, 0
        for item in loader.epoch(epoch):
            opt.zero_grad()
            blocks = relation_blocks(item.batch, request.num_layers, source.index,
                                     request.aggr, source.lookup)
            ops = [[op.to(device=item.x.device) for op in layer] for layer in blocks]
            logits = model(item.x, ops)[: item.num_seeds]
            # Summed over this rank's seeds, divided by the whole minibatch: after the
            # gradient sum every rank holds the whole minibatch's mean-loss gradient.
            loss = F.cross_entropy(logits, item.y, reduction="sum") / item.global_seeds
            loss.backward()
            if sync is not None:
                sync(model)
            opt.step()
            total += float(loss.detach()) * item.global_seeds
            seeds += item.num_seeds
        return total / max(seeds, 1)

    return step


def relation_blocks(batch: Minibatch, num_layers: int, index: RelationIndex,
                    aggr: RelAggr = "mean", lookup: Lookup | None = None
                    ) -> list[list[CSRMatrix]]:
    """Each layer's sampled block split into one operator per relation (ShaDow's one
    subgraph split once; ``lookup``: :meth:`RelationIndex.split`'s). A block's rows are
    the first of its columns' nodes, and every layer's nodes the first of the input's
    (``node_ids``)."""
    blocks = batch.operators(num_layers)
    ids = batch.node_ids.long()
    split: dict[int, list[CSRMatrix]] = {}
    for block in blocks:
        if id(block) not in split:
            rows, cols = block.shape
            split[id(block)] = index.split(block, ids[:rows], ids[:cols], aggr, lookup)
    return [split[id(b)] for b in blocks]


@dataclass
class SampledReplica:
    """What one rank hands back: the outcome and its final weights."""

    outcome: RGCNOutcome
    weights: dict[str, torch.Tensor]


def train_rgcn_sampled(request: RGCNRequest) -> list[RankResult[SampledReplica]]:
    """``request.ranks.nprocs`` spawned ranks with the whole topology each (one process
    without ``ranks``); every rank's result and bytes, in rank order."""
    if request.ranks is None or request.ranks.nprocs == 1:
        run = fit_rgcn_sampled(request)
        return [RankResult(0, 1, SampledReplica(run.outcome, model_weights(run.model)),
                           Communicator().counts())]
    if request.checkpoint is not None or request.resume:
        raise InvalidValueError("R-GCN on sampled minibatches checkpoints on one process "
                                "only; drop --checkpoint and --resume, or --nprocs")
    nprocs, timeout = request.ranks.nprocs, request.ranks.timeout_s
    threads = max(1, (os.cpu_count() or 1) // nprocs)
    return run_on_ranks(train_sampled_rank, nprocs, (request,), threads=threads,
                        heartbeat_timeout_s=timeout).results


def train_sampled_rank(request: RGCNRequest, graph: HeteroGraph | None = None
                       ) -> RankResult[SampledReplica]:
    """One replicated rank: its share of every minibatch, gradients summed over all."""
    backend, timeout = (None, 60.0) if request.ranks is None else \
        (request.ranks.backend, request.ranks.timeout_s)
    with rank_session(backend, timeout) as session, lost_peers_named():
        comm = Communicator()
        group = Group(tuple(range(session.world_size)), session.rank)
        run = fit_rgcn_sampled(request, graph, rank=session.rank,
                               world_size=session.world_size, sync=GradientSum(comm, group))
    return RankResult(session.rank, session.world_size,
                      SampledReplica(run.outcome, model_weights(run.model)), comm.counts())


def model_weights(model: RelationalClassifier) -> dict[str, torch.Tensor]:
    """A copy of the weights, to hand back from a rank."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
