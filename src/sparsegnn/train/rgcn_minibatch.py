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

from sparsegnn.data.hetero import HeteroGraph
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
from sparsegnn.nn.rgcn import RelationIndex, relation_operators
from sparsegnn.sampling import ShadowSampler
from sparsegnn.sampling.loader import MinibatchLoader
from sparsegnn.sampling.samplers import Minibatch
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.fullgraph import LocalTask
from sparsegnn.train.minibatch import make_sampler
from sparsegnn.train.rgcn_task import (
    RelationalClassifier,
    RGCNOutcome,
    RGCNRequest,
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


def fit_rgcn_sampled(request: RGCNRequest, graph: HeteroGraph | None = None, *,
                     rank: int = 0, world_size: int = 1,
                     sync: GradientSum | None = None) -> RGCNSampledRank:
    """Train ``request`` (its ``minibatch`` settings) on sampled minibatches; ``rank`` of
    ``world_size`` samples its share of each minibatch, ``sync`` sums the gradients."""
    mb = request.minibatch
    if mb is None:
        raise InvalidValueError("fit_rgcn_sampled needs request.minibatch (the sampler)")
    typed, rel = relational_problem(request, graph)
    dtype = request.torch_dtype
    index = RelationIndex(rel.edge_index, rel.edge_type, rel.num_relations, rel.num_nodes)
    sampler = make_sampler(mb.sampler, index.union(dtype), mb.fanouts, mb.batch_size)
    if not isinstance(sampler, ShadowSampler) and sampler.num_layers != request.num_layers:
        raise InvalidValueError(
            f"{sampler.num_layers} fan-outs for a {request.num_layers}-layer R-GCN; give one "
            "fan-out per layer (--fanouts) or change --layers")
    y, masks = node_labels(rel)
    x = model_input(request, rel)
    device = torch.device(request.device)
    model = build_classifier(request, rel, typed.num_classes).to(device)
    loader = MinibatchLoader(sampler, masks["train"].nonzero().flatten(), x, y,
                             batch_size=mb.batch_size, bulk=mb.bulk, seed=request.seed,
                             prefetch=mb.prefetch, rank=rank, world_size=world_size,
                             device=device)
    ops = [op.to(device=device) for op in relation_operators(
        rel.edge_index, rel.edge_type, rel.num_relations, rel.num_nodes, request.aggr, dtype)]
    evaluation = LocalTask(x.to(device), ops, y.to(device),  # type: ignore[arg-type]
                           {s: m.to(device) for s, m in masks.items()})
    step = sampled_step(loader, index, request, sync)
    outcome = run_relational(model, evaluation, request, typed, rel, is_main=rank == 0,
                             step=step)
    return RGCNSampledRank(model, outcome)


def sampled_step(loader: MinibatchLoader, index: RelationIndex, request: RGCNRequest,
                 sync: GradientSum | None) -> TrainStep:
    """One pass over the training seeds: a step per minibatch on its relation blocks."""
    def step(model: RelationalClassifier, opt: torch.optim.Optimizer, epoch: int) -> float:
        total, seeds = 0.0, 0
        for item in loader.epoch(epoch):
            opt.zero_grad()
            ops = [[op.to(device=item.x.device) for op in layer] for layer in
                   relation_blocks(item.batch, request.num_layers, index, request)]
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
                    request: RGCNRequest) -> list[list[CSRMatrix]]:
    """Each layer's sampled block split into one operator per relation (ShaDow's one
    subgraph split once). A block's rows are the first of its columns' nodes, and every
    layer's nodes the first of the input's (``node_ids``)."""
    blocks = batch.operators(num_layers)
    ids = batch.node_ids.long()
    split: dict[int, list[CSRMatrix]] = {}
    for block in blocks:
        if id(block) not in split:
            rows, cols = block.shape
            split[id(block)] = index.split(block, ids[:rows], ids[:cols], request.aggr)
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
        return [RankResult(0, 1, SampledReplica(run.outcome, _weights(run.model)),
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
                      SampledReplica(run.outcome, _weights(run.model)), comm.counts())


def _weights(model: RelationalClassifier) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
