"""Replicated-topology minibatch training on several ranks.

Every rank holds the whole topology and samples its own share of each minibatch from
its own random stream, so sampling needs no communication; the only collective is the
gradient sum of :class:`~sparsegnn.distributed.sampled.GradientSum`. This lives in
``train`` (not ``distributed``) because it drives the training loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from sparsegnn.distributed import RankResult, close_session, init_session, spawn
from sparsegnn.distributed.comm import Communicator, Group
from sparsegnn.distributed.sampled import GradientSum
from sparsegnn.train.fullgraph import TrainConfig
from sparsegnn.train.minibatch import MinibatchConfig, MinibatchData, fit_minibatch


@dataclass
class Replica:
    """One replica's training result (the JSON summary) and its final weights."""

    summary: dict[str, Any]
    state: dict[str, torch.Tensor]


RankOutcome = RankResult[Replica]


def train_replicated_rank(
    data: MinibatchData,
    cfg: TrainConfig,
    mb: MinibatchConfig,
    backend: str | None = None,
    timeout_s: float = 60.0,
) -> RankOutcome:
    """One rank's part of a replicated-topology run; every rank of the job calls this."""
    session = init_session(backend, timeout_s)
    try:
        comm = Communicator()
        group = Group(tuple(range(session.world_size)), session.rank)
        model, result = fit_minibatch(
            data,
            cfg,
            mb,
            session.device,
            rank=session.rank,
            world_size=session.world_size,
            sync=GradientSum(comm, group),
        )
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        return RankResult(session.rank, session.world_size, Replica(result.to_dict(), state),
                          comm.counts())
    finally:
        close_session()


def train_replicated(
    data: MinibatchData,
    cfg: TrainConfig,
    mb: MinibatchConfig,
    nprocs: int,
    *,
    backend: str | None = None,
    timeout_s: float = 60.0,
    wall_timeout_s: float | None = None,
) -> list[RankOutcome]:
    """Spawn ``nprocs`` local ranks, train, and return every rank's outcome in rank order."""
    return spawn(
        train_replicated_rank,
        nprocs,
        (data, cfg, mb, backend, timeout_s),
        wall_timeout_s=wall_timeout_s,
        heartbeat_timeout_s=timeout_s,
    )


def run_replicated(
    data: MinibatchData, cfg: TrainConfig, mb: MinibatchConfig, nprocs: int, *,
    backend: str | None = None, timeout_s: float = 60.0,
) -> RankOutcome | None:
    """``nprocs`` spawned local ranks, or this process's rank under torchrun; rank 0's
    outcome (``None`` on the other torchrun ranks)."""
    if nprocs > 1:
        return train_replicated(data, cfg, mb, nprocs, backend=backend,
                                timeout_s=timeout_s)[0]
    outcome = train_replicated_rank(data, cfg, mb, backend, timeout_s)
    return outcome if outcome.rank == 0 else None
