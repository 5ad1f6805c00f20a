"""Minibatch training on several ranks, with a replicated or a partitioned topology.

Replicated (:func:`train_replicated`): every rank holds the whole topology and samples its
own share of each minibatch from its own random stream, so sampling needs no
communication; the only collective is the gradient sum of
:class:`~sparsegnn.distributed.ops.sampled.GradientSum`.

Partitioned (:func:`train_partitioned`): the rows of A and of the feature matrix are cut
1.5D-style into ``p / c`` blocks, each held by ``c`` ranks
(:class:`~sparsegnn.distributed.ops.sampled.PartitionedTopology`,
:class:`~sparsegnn.distributed.ops.feature_fetch.PartitionedFeatures`). Each rank samples the
same share with the same streams as a replicated rank, asking the owners for degrees and
drawn entries, and fetches the bulk's feature rows with one exchange, so it draws the very
minibatches and ends with the very weights of a replicated run. Sampling and fetching run
on their own process group and communicator (the loader's background thread), gradients
and evaluation on the world group, so the two threads never interleave collectives.
Validation and test accuracy are full-neighbourhood inference over the row blocks: per
layer, a rank fetches the hidden rows of its block's remote neighbours (phase
``evaluation``) and counts its own rows; one all-reduce sums the counts.

This lives in ``train`` (not ``distributed``) because it drives the training loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from sparsegnn.distributed import (
    RankResult,
    Session,
    barrier,
    lost_peers_named,
    rank_session,
    ranks_for,
    run_on_ranks,
)
from sparsegnn.distributed.layout.row_blocks import read_row_block
from sparsegnn.distributed.ops.feature_fetch import CacheStats, PartitionedFeatures
from sparsegnn.distributed.ops.sampled import (
    ExchangeCommunicator,
    GradientSum,
    PartitionedTopology,
    RowOwners,
    separate_group,
)
from sparsegnn.distributed.runtime.comm import Communicator, Group
from sparsegnn.errors import InvalidValueError
from sparsegnn.nn import normalize, operator_for
from sparsegnn.nn.operator import MODEL_NORMS
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.fullgraph import TrainConfig
from sparsegnn.train.memory import RankMemory, measure_rank_memory
from sparsegnn.train.minibatch import MinibatchConfig, MinibatchData, fit_minibatch

TopologyKind = Literal["replicated", "partitioned"]


@dataclass
class Replica:
    """One replica's training result (the JSON summary) and its final weights."""

    summary: dict[str, Any]
    state: dict[str, torch.Tensor]
    memory: RankMemory | None = None


RankOutcome = RankResult[Replica]


def train_replicated_rank(
    data: MinibatchData,
    cfg: TrainConfig,
    mb: MinibatchConfig,
    backend: str | None = None,
    timeout_s: float = 60.0,
) -> RankOutcome:
    """One rank's part of a replicated-topology run; every rank of the job calls this."""
    with rank_session(backend, timeout_s) as session:
        comm = Communicator()
        group = Group(tuple(range(session.world_size)), session.rank)
        with lost_peers_named():
            barrier()  # every rank's clock starts once all have their data
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
        memory = measure_rank_memory(
            [data.adj] if isinstance(data.adj, CSRMatrix) else [],
            [data.x] if isinstance(data.x, torch.Tensor) else [], model,
            session.start_rss_bytes)
        return RankResult(session.rank, session.world_size,
                          Replica(result.to_dict(), state, memory), comm.counts())


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
    """Train on ``nprocs`` spawned local ranks (every rank's outcome, in rank order), or
    as this process's rank under torchrun (its outcome alone)."""
    return run_on_ranks(
        train_replicated_rank,
        nprocs,
        (data, cfg, mb, backend, timeout_s),
        wall_timeout_s=wall_timeout_s,
        heartbeat_timeout_s=timeout_s,
    ).results


class Handoff:
    """The whole graph, handed to a rank once: :meth:`take` drops this holder's reference,
    so a rank that cuts its shard and lets go of the result keeps no whole matrix."""

    def __init__(self, data: MinibatchData):
        self._data: MinibatchData | None = data

    def take(self) -> MinibatchData:
        data, self._data = self._data, None
        if data is None:
            raise RuntimeError("the graph was already handed over")
        return data


@dataclass
class _Chunk:
    """Rows ``a .. b`` of a rank's block and what their layer needs: the operator over
    ``[the chunk's rows; other own rows ``own``; remote rows ``remote``]``."""

    a: int
    b: int
    op: Any
    own: torch.Tensor
    remote: torch.Tensor


class PartitionedEvaluator:
    """Full-neighbourhood accuracy with A's rows and the features partitioned (collective).

    A layer runs over the rank's block in chunks of rows: per chunk, the rank fetches the
    rows of the chunk's remote neighbours from their owners (phase ``evaluation``) and
    applies the layer to ``[chunk rows; other own neighbours; fetched rows]``, the
    rectangular-operator forward the sampled blocks use. Chunks hold about
    ``chunk_mb`` MiB of input rows, so evaluation memory stays bounded as the graph grows
    instead of holding every remote neighbour of the block at once; every rank runs the
    same number of chunks (from the largest block), empty ones included, so the fetches
    stay collective.
    """

    def __init__(
        self,
        topo: PartitionedTopology,
        features: PartitionedFeatures,
        y: torch.Tensor,
        masks: dict[str, torch.Tensor],
        comm: ExchangeCommunicator,
        group: Group,
        device: torch.device,
        model: str = "sage",
        chunk_mb: float = 64.0,
    ):
        self.owners = topo.owners.on(comm, group)
        lo, hi = self.owners.lo, self.owners.hi
        # The mean is normalised on the block (every row whole), the others on each chunk,
        # whose targets come first (attention's self-loops are its diagonal).
        self.norm = MODEL_NORMS.get(model, "mean")
        op = operator_for(model, topo.block) if self.norm == "mean" else topo.block
        per_row = features.row_bytes * (1 + -(-op.nnz // max(hi - lo, 1)))
        # Every rank must run as many chunks: all take the smallest chunk any rank wants.
        with comm.phase("evaluation"):
            wanted = comm.gather_ints([max(1, int(chunk_mb * 2**20) // per_row)], group)
        size = min(w[0] for w in wanted)
        count = -(-self.owners.largest_block // size)
        self.chunks = [self._chunk(op, a, min(a + size, hi - lo), device)
                       for a in range(0, count * size, size)]
        self.x = features.rows.to(device)
        self.y = y[lo:hi].to(device)
        self.masks = {k: v[lo:hi].to(device) for k, v in masks.items()}
        # One replica of each block counts its rows.
        self.counts_rows = group.me % topo.owners.replication == 0
        self.comm, self.group, self.device = comm, group, device

    def _chunk(self, op: CSRMatrix, a: int, b: int, device: torch.device) -> _Chunk:
        lo, hi = self.owners.lo, self.owners.hi
        rows = op.select_rows(torch.arange(a, max(a, b), device=op.device))
        cols = torch.unique(rows.col)
        mine = (cols >= lo + a) & (cols < lo + b)
        own = (cols >= lo) & (cols < hi) & ~mine
        remote = cols[(cols < lo) | (cols >= hi)]
        order = torch.cat([torch.arange(lo + a, lo + max(a, b), device=op.device), cols[own],
                           remote])
        # Renumber columns to positions in ``order`` by search, not through an n-long map:
        # a block has hundreds of chunks at millions of vertices.
        keys, where = torch.sort(order)
        local = where[torch.searchsorted(keys, rows.col)]
        chunk = CSRMatrix.from_coo(rows.row_indices(), local, rows.val,
                                   (max(a, b) - a, order.numel()))
        if self.norm != "mean":
            chunk = normalize(chunk, self.norm)
        return _Chunk(a, max(a, b), chunk.to(device), cols[own] - lo, remote)

    def _remote_rows(self, h: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        lo = self.owners.lo
        with self.comm.phase("evaluation"):
            got = self.owners.ask(ids, lambda req: h[req.to(h.device) - lo])
        return got.to(h.device)

    @torch.no_grad()
    def accuracy(self, model: nn.Module, split: str) -> float:
        model.eval()
        h = self.x.to(next(model.parameters()).dtype)
        layers = model.layers
        if not isinstance(layers, nn.ModuleList):
            raise InvalidValueError("the partitioned evaluator runs a layer stack "
                                    "(nn.build_model's)")
        for i, layer in enumerate(layers):
            parts = []
            for chunk in self.chunks:
                fetched = self._remote_rows(h, chunk.remote)
                if chunk.b > chunk.a:
                    parts.append(layer(torch.cat([h[chunk.a : chunk.b], h[chunk.own], fetched]),
                                       chunk.op))
            h = torch.cat(parts)
            if i < len(layers) - 1:
                h = model.activation(h)
        m = self.masks[split]
        right = (h[m].argmax(1) == self.y[m]).sum()
        counts = torch.stack([right, m.sum()]).long()
        if not self.counts_rows:
            counts.zero_()
        with self.comm.phase("evaluation"):
            counts = self.comm.all_reduce(counts, self.group)
        # As the local evaluator's float32 mean of a boolean vector.
        return float(counts[0].float() / counts[1].float())


def check_partitioned(nprocs: int, replication: int) -> None:
    """Refuse, before any rank starts, a replication factor that does not divide the ranks."""
    if replication < 1 or nprocs % replication:
        raise InvalidValueError(f"--replication {replication} does not divide {nprocs} ranks")


Source = Handoff | Path  # the whole graph handed over, or a row-block folder


def _rank_rows(
    source: Source, replication: int, comm: ExchangeCommunicator, group: Group,
    device: torch.device, dtype: torch.dtype,
) -> tuple[PartitionedTopology, PartitionedFeatures, torch.Tensor, dict[str, torch.Tensor]]:
    """This rank's rows of A and x (and every vertex's labels and masks): read from its
    block's file of a row-block folder, or cut from the handed-over graph, which is then
    dropped."""
    if isinstance(source, Path):
        block = read_row_block(source, group.me // replication)
        if block.num_blocks != group.size // replication:
            raise InvalidValueError(
                f"{source} has {block.num_blocks} row blocks; {group.size} ranks with "
                f"--replication {replication} need {group.size // replication}")
        owners = RowOwners(block.adj.shape[1], replication, comm, group, block.bounds)
        topo = PartitionedTopology(block.adj.to(device=device, dtype=dtype), owners)
        features = PartitionedFeatures(block.x.to(device=device, dtype=dtype), owners)
        return topo, features, block.y, block.masks
    data = source.take()
    if not isinstance(data.adj, CSRMatrix) or not isinstance(data.x, torch.Tensor):
        raise InvalidValueError("partitioned training cuts its rows from a whole graph")
    cut = PartitionedTopology.from_global(data.adj, replication, comm, group)
    topo = PartitionedTopology(cut.block.to(device=device), cut.owners)
    cut_x = PartitionedFeatures.from_global(data.x, replication, comm, group)
    return (topo, PartitionedFeatures(cut_x.rows.to(device), cut_x.owners), data.y,
            data.masks)


def fit_partitioned(
    session: Session,
    source: Source,
    cfg: TrainConfig,
    mb: MinibatchConfig,
    replication: int = 1,
    feature_cache_mb: float = 0.0,
) -> RankOutcome:
    """One rank's partitioned-topology training inside an open session: take this rank's
    rows of A and x (from its block file, or cut from the handed-over graph, which it
    then drops), fill the feature cache (``feature_cache_mb`` MiB of the highest-in-degree
    remote rows; 0: none), train.

    The summary's ``feature_cache`` holds every rank's fetch record (cache rows, hit rate,
    bytes fetched and saved), gathered at the end under the phase ``report``."""
    check_partitioned(session.world_size, replication)
    world = Group(tuple(range(session.world_size)), session.rank)
    # The loader's thread samples and fetches on a group of its own.
    sampling = separate_group(world)
    xcomm, gcomm = ExchangeCommunicator(), ExchangeCommunicator()
    topo, features, y, masks = _rank_rows(source, replication, xcomm, sampling,
                                          session.device, cfg.torch_dtype)
    features.with_cache(topo.block, feature_cache_mb)
    evaluator = PartitionedEvaluator(topo, features, y, masks, gcomm, world, session.device,
                                     cfg.model)
    shard = MinibatchData(topo, features, y, masks)
    barrier()  # every rank's clock starts once all have their rows
    model, result = fit_minibatch(
        shard, cfg, mb, session.device, rank=session.rank, world_size=session.world_size,
        sync=GradientSum(gcomm, world), evaluate=evaluator.accuracy,
    )
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    summary = result.to_dict()
    summary["feature_cache"] = _cache_report(features, feature_cache_mb, gcomm, world)
    memory = measure_rank_memory([topo.block], [features.rows, features.cache_rows], model,
                                 session.start_rss_bytes)
    return RankResult(session.rank, session.world_size, Replica(summary, state, memory),
                      xcomm.counts() + gcomm.counts())


def _cache_report(
    features: PartitionedFeatures, cache_mb: float, comm: ExchangeCommunicator, group: Group
) -> dict[str, Any]:
    """Every rank's fetch record, on every rank (one small gather, phase ``report``)."""
    mine = features.stats
    with comm.phase("report"):
        rows = comm.gather_ints([mine.cache_rows, mine.remote_rows, mine.hits], group)
    ranks = [CacheStats(cache, mine.row_bytes, remote, hits).to_dict()
             for cache, remote, hits in rows]
    total = CacheStats(sum(r[0] for r in rows), mine.row_bytes, sum(r[1] for r in rows),
                       sum(r[2] for r in rows)).to_dict()
    return {"cache_mb": cache_mb, "policy": "in-degree", "hit_rate": total["hit_rate"],
            "fetched_bytes": total["fetched_bytes"], "saved_bytes": total["saved_bytes"],
            "ranks": ranks}


def train_partitioned_rank(
    source: Source,
    cfg: TrainConfig,
    mb: MinibatchConfig,
    replication: int = 1,
    backend: str | None = None,
    timeout_s: float = 60.0,
    feature_cache_mb: float = 0.0,
) -> RankOutcome:
    """One rank's part of a partitioned-topology run; every rank of the job calls this."""
    with rank_session(backend, timeout_s) as session, lost_peers_named():
        return fit_partitioned(session, source, cfg, mb, replication, feature_cache_mb)


def train_partitioned(
    data: MinibatchData | Source,
    cfg: TrainConfig,
    mb: MinibatchConfig,
    nprocs: int,
    replication: int = 1,
    *,
    backend: str | None = None,
    timeout_s: float = 60.0,
    wall_timeout_s: float | None = None,
    feature_cache_mb: float = 0.0,
) -> list[RankOutcome]:
    """Train on ranks that each keep only their rows (cut from ``data``, or read from a
    row-block folder): ``nprocs`` spawned local ranks (every rank's outcome), or this
    process's rank under torchrun (its outcome alone). A bad replication is refused
    before any rank starts."""
    check_partitioned(ranks_for(nprocs), replication)
    source = data if isinstance(data, Path | Handoff) else Handoff(data)
    return run_on_ranks(
        train_partitioned_rank,
        nprocs,
        (source, cfg, mb, replication, backend, timeout_s, feature_cache_mb),
        wall_timeout_s=wall_timeout_s,
        heartbeat_timeout_s=timeout_s,
    ).results


def run_minibatch(
    source: Source, cfg: TrainConfig, mb: MinibatchConfig, nprocs: int, *,
    topology: TopologyKind = "replicated", replication: int = 1,
    backend: str | None = None, timeout_s: float = 60.0, feature_cache_mb: float = 0.0,
) -> RankOutcome | None:
    """``nprocs`` spawned local ranks, or this process's rank under torchrun, with either
    topology; rank 0's outcome (``None`` on the other torchrun ranks). A row-block folder
    (``source`` a Path) is always trained partitioned. The feature cache
    (``feature_cache_mb``) applies to the partitioned topology only."""
    if isinstance(source, Handoff) and topology == "replicated":
        outcomes = train_replicated(source.take(), cfg, mb, nprocs, backend=backend,
                                    timeout_s=timeout_s)
    else:  # a torchrun rank takes its rows from the handed-over graph and drops the rest
        outcomes = train_partitioned(source, cfg, mb, nprocs, replication, backend=backend,
                                     timeout_s=timeout_s, feature_cache_mb=feature_cache_mb)
    return _with_memory(outcomes) if outcomes[0].rank == 0 else None


def memory_per_rank(outcomes: list[RankOutcome]) -> list[dict[str, Any]]:
    """Each rank's :class:`~sparsegnn.train.memory.RankMemory` as JSON, in rank order."""
    return [{"rank": o.rank, **o.value.memory.to_dict()} for o in outcomes
            if o.value.memory is not None]


def _with_memory(outcomes: list[RankOutcome]) -> RankOutcome:
    """Rank 0's outcome with every given rank's memory record in its summary (under
    torchrun a rank sees only its own)."""
    first = outcomes[0]
    first.value.summary["memory_per_rank"] = memory_per_rank(outcomes)
    return first
