"""Whole-graph classification, data-parallel over ranks.

Many small graphs parallelise by data: every rank holds the model, takes its share of
each minibatch (``batch[rank::ranks]``) and of the test fold, and one flat all-reduce
per step sums the gradients, each rank's loss being its graphs' summed loss over the
whole minibatch's size, so every rank takes the one-process step of the minibatch's
mean loss and all end with the same weights
(:func:`~sparsegnn.train.graph_task.train_pass`). Shuffles and the learning-rate
schedule depend on ``(seed, epoch)`` alone, so the ranks agree on the minibatches
without exchanging them.

The model equals one process's on the same minibatches: batch normalisation (GIN's)
takes its statistics over every rank's rows (:mod:`sparsegnn.distributed.ops.sync_norm`,
unlike ``DistributedDataParallel``'s default of each rank's own), so GIN and GCN without
dropout end with the one-process weights (tested in float64 on two gloo ranks); dropout
draws from each rank's own stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from sparsegnn.data.graph_set import GraphSet, stratified_folds
from sparsegnn.distributed import RankResult, rank_session, run_on_ranks
from sparsegnn.distributed.ops.sync_norm import sync_batch_norms
from sparsegnn.distributed.ops.task import sum_gradients
from sparsegnn.distributed.runtime.comm import ByteCounts, Communicator, Group
from sparsegnn.errors import InvalidValueError
from sparsegnn.nn.graph_models import build_graph_model
from sparsegnn.train.graph_task import (
    FoldRun,
    GraphOutcome,
    GraphRequest,
    summarize_folds,
    train_fold,
)
from sparsegnn.train.loop import LoopState


@dataclass
class RankSyncComm:
    """:class:`~sparsegnn.train.graph_task.RankSync` over a communicator's group, every
    byte counted (``norm_stats``, ``grad_allreduce`` and ``stats`` phases)."""

    comm: Communicator
    group: Group
    shard: tuple[int, int]

    def synchronise(self, model: nn.Module) -> nn.Module:
        return sync_batch_norms(model, self.comm, self.group)

    def gradients(self, model: nn.Module) -> None:
        sum_gradients(list(model.parameters()), self.comm, self.group)

    def total(self, values: torch.Tensor) -> torch.Tensor:
        with self.comm.phase("stats"):
            return self.comm.all_reduce(values, self.group)


@dataclass
class ParallelFold:
    """What a rank hands back for one fold: the weights, history and test confusion."""

    state_dict: dict[str, torch.Tensor]
    state: LoopState
    confusion: torch.Tensor


def cross_validate_parallel(data: GraphSet, request: GraphRequest, nprocs: int,
                            backend: str | None = None, timeout_s: float = 60.0
                            ) -> tuple[GraphOutcome, list[ByteCounts]]:
    """:func:`~sparsegnn.train.graph_task.cross_validate` with every fold trained on
    ``nprocs`` data-parallel ranks (spawned, or this job's under torchrun); the outcome
    and each rank's bytes over all folds."""
    folds = stratified_folds(data.y, request.folds, request.fold_seed)
    runs, counts = [], []
    for fold in range(request.folds):
        results = train_fold_parallel(data, request, folds, fold, nprocs, backend,
                                      timeout_s)
        runs.append(fold_run(data, request, results[0].value))
        counts.append([r.comm for r in results])
    per_rank = [sum((c[r] for c in counts[1:]), counts[0][r]) for r in range(len(counts[0]))]
    return summarize_folds(data, request, runs), per_rank


def train_fold_parallel(data: GraphSet, request: GraphRequest, folds: list[torch.Tensor],
                        fold: int, nprocs: int, backend: str | None = None,
                        timeout_s: float = 60.0) -> list[RankResult[ParallelFold]]:
    """One fold on ``nprocs`` ranks; the results of the ranks run here."""
    if nprocs < 1 or nprocs > request.batch_size:
        raise InvalidValueError(f"{nprocs} ranks for minibatches of {request.batch_size} "
                                "graphs: every rank needs a share of each minibatch")
    return run_on_ranks(_rank_fold, nprocs, (data, request, folds, fold, backend, timeout_s),
                        heartbeat_timeout_s=timeout_s).results


def fold_run(data: GraphSet, request: GraphRequest, share: ParallelFold) -> FoldRun:
    """A rank's fold as :func:`~sparsegnn.train.graph_task.train_fold` returns one."""
    model = build_graph_model(request.model, data.num_features, request.hidden,
                              data.num_classes, request.num_layers, request.dropout,
                              request.pool).to(dtype=data.x.dtype)
    model.load_state_dict(share.state_dict)
    return FoldRun(model, share.state, share.confusion)


def _rank_fold(data: GraphSet, request: GraphRequest, folds: list[torch.Tensor], fold: int,
               backend: str | None, timeout_s: float) -> RankResult[ParallelFold]:
    with rank_session(backend, timeout_s) as session:
        comm = Communicator()
        group = Group(tuple(range(session.world_size)), session.rank)
        sync = RankSyncComm(comm, group, (session.rank, session.world_size))
        run = train_fold(data, request, folds, fold, session.device, sync)
        weights = {k: v.detach().cpu() for k, v in run.model.state_dict().items()}
        share = ParallelFold(weights, run.state, run.confusion)
        return RankResult(session.rank, session.world_size, share, comm.counts())
