"""Link prediction on a grid of ranks: full-graph encoders on 1D, 1.5D, 2D and 3D.

Each rank holds its vertex block of the training message graph's operator (and of the
test one: training plus validation edges) as the node-classification grids do
(:mod:`sparsegnn.train.rank_train`): the encoder is the one-process model, its SpMMs the
distributed operators, its first layer column-sliced on 2D/3D. Candidate edges, positive
and negative, are scored on the ranks that own their destination rows, which fetch
exactly the source rows they lack (:mod:`sparsegnn.distributed.ops.link_scoring`); the
loss is summed over every rank, so gradients, and the weights after any number of
epochs, are one process's (:func:`~sparsegnn.train.link_task.train_link`). Every rank
draws the same negatives from ``(seed, epoch)``, the split is the same on every rank, and
the loop is :func:`~sparsegnn.train.loop.run_epochs` on every rank (progress on rank 0).

Each epoch's bytes are measured per phase and compared with the closed-form model of
:mod:`sparsegnn.distributed.planning.link_model` for that epoch's candidates.
Checkpoints, TensorBoard and resume are the one-process run's for now (refused here).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import torch
from torch import nn
from torch.nn import functional as F

from sparsegnn.data.graph import GraphData
from sparsegnn.data.link_edges import LabeledEdges, LinkSplit, split_state
from sparsegnn.distributed import (
    ByteCounts,
    ProcessGrid,
    RankResult,
    gather_objects,
    grid_shape,
    local_blocks,
    lost_peers_named,
    rank_session,
    ranks_for,
    run_on_ranks,
    spmm_schedule,
)
from sparsegnn.distributed.layout.partitioned import partition_for
from sparsegnn.distributed.layout.shard import SPLITS, make_shard, relabel
from sparsegnn.distributed.ops.feature_slices import slice_first_layer
from sparsegnn.distributed.ops.link_scoring import LinkScorer
from sparsegnn.distributed.ops.row_exchange import SparseCommunicator
from sparsegnn.distributed.ops.spmm import DistributedOperator, SummaOperator, build_operator
from sparsegnn.distributed.ops.task import sum_gradients
from sparsegnn.distributed.planning.comm_model import input_slicing
from sparsegnn.distributed.planning.link_model import LinkEpochCounts, link_epoch_volume
from sparsegnn.errors import InvalidValueError
from sparsegnn.names import Algorithm
from sparsegnn.sampling.link_split import random_link_split
from sparsegnn.sampling.streams import batch_generator
from sparsegnn.train.checkpoint import content_hash, seed_everything
from sparsegnn.train.link_metrics import link_metrics, roc_auc
from sparsegnn.train.link_task import (
    LinkEpoch,
    LinkOutcome,
    LinkRequest,
    build_link_model,
    epoch_negatives,
    link_data,
    link_epoch,
    link_setup,
    pair_relations,
    relation_count,
    require_labels,
    split_seed,
)
from sparsegnn.train.loop import LoopConfig, LoopRole, run_epochs
from sparsegnn.train.memory import peak_memory_bytes
from sparsegnn.train.rank_train import use_global_dropout
from sparsegnn.train.task_runs import flat_link_metrics, refuse_typed
from sparsegnn.train.train_request import TrainOutcome, plain_config
from sparsegnn.train.train_summary import title

Volume = dict[str, dict[str, int]]


@dataclass(frozen=True)
class LinkGridRequest:
    """A link-prediction run on ranks: the one-process run's ``link`` request plus the
    grid (algorithm, ranks, 1.5D replication, vertex partition) and the value type."""

    link: LinkRequest = field(default_factory=LinkRequest)
    algo: Algorithm = "1d"
    nprocs: int = 4
    replication: int = 1
    partition: str = "block"
    dtype: Literal["float32", "float64"] = "float32"
    backend: str | None = None
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        link = self.link
        if link.checkpoint is not None or link.resume or link.logdir is not None:
            raise InvalidValueError("link prediction on ranks keeps no checkpoints or "
                                    "TensorBoard logs yet; drop --checkpoint, --resume and "
                                    "--logdir, or train on one process")
        if self.dtype not in ("float32", "float64"):
            raise InvalidValueError(f"dtype must be float32 or float64, got {self.dtype!r}")


@dataclass
class RankBytes:
    """One rank's bytes per phase in every epoch, measured and as the model predicts."""

    rank: int
    coords: tuple[int, int, int]
    measured: list[Volume]
    predicted: list[Volume]

    def matches_model(self) -> bool:
        return [_totals(v) for v in self.measured] == [_totals(v) for v in self.predicted]


@dataclass
class LinkGridOutcome:
    """Rank 0's result: the one-process outcome's fields, the grid and every rank's bytes
    (``weights``: the weights after the last epoch, for checks; not in ``to_dict``)."""

    link: LinkOutcome
    algo: str
    grid: tuple[int, int, int]
    ranks: list[RankBytes]
    weights: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def matches_model(self) -> bool:
        return all(r.matches_model() for r in self.ranks)

    def bytes_per_epoch(self) -> int:
        """Bytes all ranks sent in the last epoch."""
        return sum(sum(v["sent"] for v in r.measured[-1].values()) for r in self.ranks)

    def to_dict(self) -> dict[str, Any]:
        per_rank = [{"rank": r.rank, "coords": list(r.coords),
                     "phases": _totals(r.measured[-1]),
                     "predicted": _totals(r.predicted[-1])} for r in self.ranks]
        return {**self.link.to_dict(), "algo": self.algo, "grid": list(self.grid),
                "world_size": len(self.ranks),
                "comm": {"total_bytes_per_epoch": self.bytes_per_epoch(),
                         "matches_model": self.matches_model, "per_rank": per_rank}}

    def summary(self) -> str:
        rows, cols, layers = self.grid
        mib = self.bytes_per_epoch() / 2**20
        model = "equal to" if self.matches_model else "NOT equal to"
        return (f"{self.link.summary()}\n{self.algo} grid {rows}x{cols}x{layers}: "
                f"{mib:.2f} MiB sent per epoch (all ranks), {model} the link byte model")


@dataclass(frozen=True)
class _Job:
    source: GraphData | str
    split: LinkSplit | None
    data_dir: str | None
    request: LinkGridRequest


@dataclass
class _RankRun:
    outcome: LinkOutcome
    weights: dict[str, torch.Tensor]
    ranks: list[RankBytes]


def train_link_grid(source: GraphData | str, request: LinkGridRequest,
                    split: LinkSplit | None = None, data_dir: str | None = None
                    ) -> LinkGridOutcome | None:
    """Train ``request`` on ``request.nprocs`` spawned ranks (or this torchrun job's);
    ``source`` is a graph with features or a dataset name every rank loads. Rank 0's
    outcome (``None`` on the other ranks of a torchrun job)."""
    shape = grid_shape(request.algo, ranks_for(request.nprocs), request.replication)
    threads = max(1, (os.cpu_count() or 1) // shape.size)
    lead = run_on_ranks(_run_rank, shape.size, (_Job(source, split, data_dir, request),),
                        threads=threads, heartbeat_timeout_s=request.timeout_s).lead
    if lead is None:
        return None
    run: _RankRun = lead.value
    return LinkGridOutcome(run.outcome, shape.algo, (shape.rows, shape.cols, shape.layers),
                           run.ranks, run.weights)


def one_process_weights(graph: GraphData, split: LinkSplit, link: LinkRequest,
                        dtype: torch.dtype = torch.float64
                        ) -> tuple[dict[str, torch.Tensor], list[LinkEpoch]]:
    """The weights after ``link.epochs`` epochs of the one-process run
    (:func:`~sparsegnn.train.link_task.link_epoch`, seeded as
    :func:`~sparsegnn.train.link_task.train_link` seeds it) in ``dtype``, what a grid run
    of the same request ends with (:attr:`LinkGridOutcome.weights`), and its epochs."""
    setup = link_setup(graph, split, link, torch.device("cpu"))
    setup = replace(setup, x=setup.x.to(dtype), train_op=setup.train_op.to(dtype=dtype),
                    test_op=setup.test_op.to(dtype=dtype))
    model = build_link_model(link, graph.num_features, relation_count(split)).to(dtype)
    optimizer = torch.optim.Adam(model.parameters(), lr=link.lr,
                                 weight_decay=link.weight_decay)
    seed_everything(link.seed)
    history = [link_epoch(model, setup, optimizer, link, e) for e in range(link.epochs)]
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, history


def run_link_grid_task(dataset: str, request: LinkGridRequest,
                       data_dir: str | None = None) -> TrainOutcome | None:
    """``sparsegnn train --task link`` on ranks (every rank loads ``dataset``): the
    one-process run's JSON keys plus ``algo``, ``grid`` and ``comm`` (measured bytes per
    rank, the model's, and whether they are equal); ``None`` on the other ranks of a
    torchrun job."""
    refuse_typed(dataset, data_dir, "link prediction")
    outcome = train_link_grid(dataset, request, data_dir=data_dir)
    if outcome is None:
        return None
    link, result = request.link, outcome.to_dict()
    flat = flat_link_metrics(result)
    out = {"dataset": dataset, "task": "link", "model": link.model, "decoder": link.decoder,
           "device": "cpu", **flat, **result, "config": plain_config(link)}
    heading = title(dataset, link.model, f", link prediction ({link.decoder}) on "
                                         f"{outcome.algo} grid")
    return TrainOutcome(heading, out, f"{link.model}+{link.decoder}: {outcome.summary()}")


def _run_rank(job: _Job) -> RankResult[_RankRun]:
    r = job.request
    with rank_session(r.backend, r.timeout_s) as session, lost_peers_named():
        graph, split = load_link_graph(job.source, job.split, job.data_dir, r.link)
        rank = _GridRank(graph, split, r, session.world_size)
        del graph  # this rank keeps its shard (the job keeps a graph passed in memory)
        outcome, weights, mine = rank.train()
        ranks = gather_objects(mine)
    last = ByteCounts(mine.measured[-1] if mine.measured else {})
    return RankResult(session.rank, session.world_size, _RankRun(outcome, weights, ranks),
                      last)


def load_link_graph(source: GraphData | str, split: LinkSplit | None, data_dir: str | None,
                    link: LinkRequest) -> tuple[GraphData, LinkSplit]:
    """The graph and its split (``split``, the dataset's own, or one drawn from the
    request's ratios and seed, as :func:`~sparsegnn.train.link_task.train_link` draws
    it): the same on every rank."""
    if isinstance(source, GraphData):
        graph = source
    else:
        graph, split = link_data(source, data_dir)
    if graph.x is None:
        raise InvalidValueError(f"{graph.name}: link training needs node features; this "
                                "graph has none")
    split = split or random_link_split(graph.edge_index, graph.num_nodes, val=link.val,
                                       test=link.test, neg_ratio=link.neg_ratio,
                                       seed=split_seed(link))
    require_labels(split)
    return graph, split


class _GridRank:
    """One rank's shard, model and scorer, and its training loop."""

    def __init__(self, graph: GraphData, split: LinkSplit, request: LinkGridRequest,
                 world: int) -> None:
        link = request.link
        self.request, self.split = request, split
        self.dtype = getattr(torch, request.dtype)
        # the whole graph's features and operators live only while the shard is cut
        setup = link_setup(graph, split, link, torch.device("cpu"))
        self.lookup = setup.train_lookup
        self.shape = grid_shape(request.algo, world, request.replication)
        grid = ProcessGrid.create(self.shape)
        assert grid is not None  # the grid spans the whole job
        self.grid, self.comm = grid, SparseCommunicator()
        n = graph.num_nodes
        self.part = partition_for(n, self.shape, request.partition, split.train_message,
                                  link.seed)
        rows = {"x": setup.x.to(self.dtype), "y": torch.zeros(n, dtype=torch.long),
                **{f"{s}_mask": torch.zeros(n, dtype=torch.bool) for s in SPLITS}}
        adj, rows = relabel(setup.train_op.to(dtype=self.dtype), rows, self.part.order)
        self.shard = make_shard(graph.name, adj, rows, self.part, self.shape, grid.rank)
        test_adj, _ = relabel(setup.test_op.to(dtype=self.dtype), {}, self.part.order)
        op = build_operator(grid, self.comm, self.part, self.shard.blocks)
        test_op = build_operator(grid, self.comm, self.part,
                                 local_blocks(test_adj, self.part, self.shape, grid.rank))
        self.model = build_link_model(link, self.shard.num_features, relation_count(split))
        self.model = self.model.to(self.dtype)
        self.sliced = self.shape.feature_slices > 1
        self.row_sliced: list[nn.Parameter] = []
        self.train_adj: Any = op
        self.test_adj: Any = test_op
        if self.sliced:
            assert isinstance(op, SummaOperator) and isinstance(test_op, SummaOperator)
            self.train_adj, self.row_sliced = slice_first_layer(
                self.model.encoder, op, self.shard.columns, self.comm, grid.row)
            self.test_adj = _layer_ops(self.model.encoder, test_op)
        if link.dropout > 0:
            lo, hi = self.part.block(grid.coords[0])
            mine = slice(lo, hi) if self.part.order is None else self.part.order[lo:hi]
            use_global_dropout(self.model.encoder, n, mine, self.shard.columns)
        self.scorer = LinkScorer(grid, self.comm, self.part)
        self.bytes = RankBytes(grid.rank, grid.coords, [], [])
        self.last_weights: dict[str, torch.Tensor] = {}

    def train(self) -> tuple[LinkOutcome, dict[str, torch.Tensor], RankBytes]:
        link = self.request.link
        optimizer = torch.optim.Adam(self.model.parameters(), lr=link.lr,
                                     weight_decay=link.weight_decay)
        main = self.grid.rank == 0
        loop = LoopConfig(epochs=link.epochs, patience=link.patience, seed=link.seed,
                          progress=link.progress if main else False)
        state = run_epochs(self.model, optimizer, lambda e: self.epoch(optimizer, e), loop,
                           LinkEpoch, score=lambda s: s.val_auc,
                           role=LoopRole(is_main=main, reports=main, desc="link"))
        val = self.metrics(self.split.val, self.train_adj)
        test = self.metrics(self.split.test, self.test_adj)
        outcome = LinkOutcome(
            epochs_run=state.epoch, best_epoch=state.best_epoch, val=val, test=test,
            epoch_time_s=statistics.median(h.seconds for h in state.history),
            peak_memory_bytes=peak_memory_bytes(torch.device("cpu")),
            split_hash=content_hash(split_state(self.split))[:16], history=state.history,
            stopped_early=state.stopped_early)
        return outcome, self.last_weights, self.bytes

    def epoch(self, optimizer: torch.optim.Optimizer, epoch: int) -> LinkEpoch:
        """One full-graph step on fresh negatives, then the validation AUC (as
        :func:`~sparsegnn.train.link_task.link_epoch`), its bytes measured."""
        start, before = time.perf_counter(), self.comm.counts().phases
        link, train = self.request.link, self.split.train
        model = self.model
        model.train()
        optimizer.zero_grad(set_to_none=True)
        neg = epoch_negatives(self.split, self.lookup, link,
                              batch_generator(link.seed, epoch, 0))
        pairs = torch.cat([train.pos, neg], dim=1)
        relation = pair_relations(train, neg.shape[1])
        labels = torch.cat([torch.ones(train.num_pos), torch.zeros(neg.shape[1])])
        plan = self.scorer.plan(pairs)
        z = model.encode(self.shard.x, self.train_adj)
        logits = self.scorer.score(model.decoder, z, plan, relation)
        local = F.binary_cross_entropy_with_logits(logits, labels[plan.mine].to(logits),
                                                   reduction="sum")
        loss = self.scorer.total(local) / pairs.shape[1]
        loss.backward()
        self._sync_gradients()
        optimizer.step()
        val = self.split.val
        val_pairs = torch.cat([val.pos, val.neg], dim=1)
        scores = self._scores(val_pairs, _types(val), self.train_adj)
        val_auc = roc_auc(scores[:val.num_pos], scores[val.num_pos:])
        self.bytes.measured.append(_delta(before, self.comm.counts().phases))
        self.bytes.predicted.append(self._predicted(pairs, val_pairs))
        self.last_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return LinkEpoch(epoch, float(loss.detach()), val_auc, time.perf_counter() - start)

    def _sync_gradients(self) -> None:
        """Decoder gradients over the split groups (each rank saw its share of the
        candidates), then every gradient over the column group, then the first layer's
        column-sliced ones over the row, as :class:`~sparsegnn.distributed.DistributedTask`."""
        self.scorer.sync_split(list(self.model.decoder.parameters()))
        sum_gradients(list(self.model.parameters()), self.comm, self.grid.col)
        if self.row_sliced:
            sum_gradients(self.row_sliced, self.comm, self.grid.row)

    @torch.no_grad()
    def _scores(self, pairs: torch.Tensor, relation: torch.Tensor | None, adj: Any
                ) -> torch.Tensor:
        """Every pair's logit from one encoding in eval mode, on every rank."""
        self.model.eval()
        z = self.model.encode(self.shard.x, adj)
        return self.scorer.all_scores(self.model.decoder, z, pairs, relation)

    def metrics(self, edges: LabeledEdges, adj: Any) -> dict[str, float]:
        """Every metric of one split, as :func:`~sparsegnn.train.link_task.evaluate_split`."""
        pairs = torch.cat([edges.pos, edges.neg], dim=1)
        scores = self._scores(pairs, _types(edges), adj)
        pos, neg = scores[:edges.num_pos], scores[edges.num_pos:]
        rows = None
        if edges.neg_tails is not None:
            k = edges.neg_tails.shape[1]
            tails = torch.stack([edges.pos[0].repeat_interleave(k),
                                 edges.neg_tails.reshape(-1)])
            rel = None if edges.pos_type is None else edges.pos_type.repeat_interleave(k)
            rows = self._scores(tails, rel, adj).view(edges.neg_tails.shape)
        return link_metrics(pos, neg, self.request.link.ks, rows)

    def _predicted(self, pairs: torch.Tensor, val_pairs: torch.Tensor) -> Volume:
        link, shard = self.request.link, self.shard
        counts = LinkEpochCounts(link.out_channels, pairs, val_pairs,
                                 sum(p.numel() for p in self.model.decoder.parameters()))
        shape = _EncoderShape(link.model, link.hidden, link.num_layers)
        calls = spmm_schedule(shape, shard.num_features, link.out_channels, self.sliced)
        slicing = (input_slicing(shape, shard.num_features, link.out_channels)
                   if self.sliced else None)
        return link_epoch_volume(
            self.shape, self.part, self.grid.rank, counts, calls,
            value_bytes=shard.x.element_size(),
            num_params=sum(p.numel() for p in self.model.parameters()), nnz=shard.nnz,
            slicing=slicing)


@dataclass(frozen=True)
class _EncoderShape:
    """The encoder's widths as the SpMM schedule reads them (one head: GCN, GraphSAGE)."""

    model: str
    hidden: int
    num_layers: int
    heads: int = 1


def _layer_ops(encoder: nn.Module, op: SummaOperator) -> list[DistributedOperator]:
    """Per-layer operators of an encoder whose first layer is already column-sliced
    (:func:`slice_first_layer` made them for the training operator)."""
    first = encoder.layers[0]
    head = op if first.transforms_first else op.column_sliced()
    return [head] + [op] * (len(encoder.layers) - 1)


def _types(edges: LabeledEdges) -> torch.Tensor | None:
    """Relations of ``cat([pos, neg])``; relation 0 where one side has none (as the
    decoders read ``None``)."""
    if edges.pos_type is None and edges.neg_type is None:
        return None
    pos = edges.pos_type if edges.pos_type is not None else torch.zeros(
        edges.num_pos, dtype=torch.long)
    neg = edges.neg_type if edges.neg_type is not None else torch.zeros(
        edges.num_neg, dtype=torch.long)
    return torch.cat([pos, neg])


def _delta(before: Volume, after: Volume) -> Volume:
    """Bytes counted between two snapshots, per phase (``sent``/``recv`` totals)."""
    out = {}
    for phase, counts in after.items():
        was = before.get(phase, {})
        sent = counts.get("sent", 0) - was.get("sent", 0)
        recv = counts.get("recv", 0) - was.get("recv", 0)
        if sent or recv:
            out[phase] = {"sent": sent, "recv": recv}
    return out


def _totals(volume: Volume) -> Volume:
    return {p: {"sent": v["sent"], "recv": v["recv"]} for p, v in sorted(volume.items())
            if v["sent"] or v["recv"]}

