"""Distributed full-graph training: the :func:`fit` loop on partitioned ranks.

Each rank builds the operator of the chosen algorithm over its tiles, a
:class:`~sparsegnn.distributed.DistributedTask` over its vertex block and the same model
as a single process (same seed, same initial weights), then runs the unchanged
:func:`~sparsegnn.train.fullgraph.fit`. Dropout either reproduces the single-process
masks (each rank draws the whole graph's mask and keeps its rows) or, for graphs read
from a partitioned directory, draws per vertex block from ``seed + 1_000_003 * block``
(the replicas of a block share that stream, so they stay identical).

Checkpoints are per rank (``<stem>.<algo>-<grid>.rank<r><suffix>``) and resume on the
same grid only; a checkpoint of another grid is refused with a clear error.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from sparsegnn.distributed import (
    BlockPartition,
    Communicator,
    DistributedOperator,
    DistributedTask,
    GridError,
    GridShape,
    ProcessGrid,
    Session,
    SpmmCall,
    build_operator,
    grid_shape,
    predict,
)
from sparsegnn.distributed.comm_model import spmm_schedule
from sparsegnn.distributed.grid import Algorithm
from sparsegnn.distributed.shard import (
    Shard,
    make_shard,
    manifest_shape,
    read_manifest,
    read_shard,
    relabel,
    write_shards,
)
from sparsegnn.distributed.sparse_comm import SparseCommunicator, SparseRowOperator
from sparsegnn.nn import graph_operator
from sparsegnn.partition import PARTITIONERS, Adjacency, partition
from sparsegnn.train.checkpoint import content_hash, rank_checkpoint
from sparsegnn.train.fullgraph import (
    EpochStats,
    TrainConfig,
    TrainResult,
    build_model,
    check_trainable,
    fingerprint,
    fit,
    graph_fingerprint,
    row_normalize,
)

_SEED_STRIDE = 1_000_003


@dataclass(frozen=True)
class DistributedConfig:
    """How to distribute: algorithm, replication (1.5D), backend, timeout, partition (a
    vector file or a partitioner name), and dense or sparsity-aware SpMM communication."""

    algo: Algorithm = "1d"
    replication: int = 1
    backend: str | None = None
    timeout_s: float = 60.0
    partition: Path | str | None = None
    comm: Literal["dense", "sparse"] = "dense"
    # "global": every rank draws the whole graph's dropout mask and keeps its rows, which
    # reproduces single-process training exactly but costs an n x f mask per layer;
    # "block": each vertex block draws its own; "auto": global when the rank holds the
    # whole graph anyway (in memory), block when it reads a partitioned directory.
    dropout_masks: Literal["auto", "global", "block"] = "auto"


@dataclass
class RankReport:
    """What one rank measured in one epoch (the last), per phase: ``sent``/``recv`` totals and
    per-collective ``<collective>_sent``/``_recv``, next to the model's ``sent``/``recv``."""

    rank: int
    coords: tuple[int, int, int]
    epoch_bytes: dict[str, dict[str, int]]
    constant_across_epochs: bool
    predicted: dict[str, dict[str, int]]

    def matches_model(self) -> bool:
        """Measured == predicted, phase by phase (the model predicts totals per phase)."""
        measured = {
            p: {"sent": v.get("sent", 0), "recv": v.get("recv", 0)}
            for p, v in self.epoch_bytes.items()
        }
        return measured == self.predicted


def partition_for(
    num_nodes: int, shape: GridShape, path: Path | str | None,
    edge_index: torch.Tensor | None = None, seed: int = 0,
) -> BlockPartition:
    """Even contiguous blocks, the blocks of a partition vector file (.npy or text), or
    those a named partitioner (:data:`sparsegnn.partition.PARTITIONERS`) computes from
    ``edge_index``."""
    if path is None:
        return BlockPartition.even(num_nodes, shape.row_blocks)
    if str(path) in PARTITIONERS and not Path(path).is_file():
        if edge_index is None:
            raise GridError(f"the {path} partitioner needs the graph's edges")
        parts = partition(
            Adjacency.from_edge_index(edge_index, num_nodes), str(path), shape.row_blocks,
            seed=seed,
        )
        return BlockPartition.from_parts(torch.from_numpy(parts), shape.row_blocks)
    if not Path(path).is_file():
        raise GridError(
            f"partition file {path} not found; --partition takes a partitioner "
            f"({', '.join(PARTITIONERS)}) or a file with one block id in "
            f"[0, {shape.row_blocks}) per vertex (.npy or text)"
        )
    parts = np.load(path) if Path(path).suffix == ".npy" else np.loadtxt(path, dtype=np.int64)
    if parts.shape != (num_nodes,):
        raise GridError(
            f"partition {path} has {parts.size} entries for a graph of {num_nodes} vertices"
        )
    return BlockPartition.from_parts(torch.from_numpy(parts.astype(np.int64)), shape.row_blocks)


def operator_kind(model: str) -> str:
    """The operator a model multiplies by, as a partitioned directory records it."""
    return "gcn" if model == "gcn" else "mean"


def check_manifest(path: str | Path, shape: GridShape, model: str) -> None:
    """Refuse a partitioned directory written for another grid or operator."""
    manifest = read_manifest(path)
    written = manifest_shape(manifest)
    if written != shape or manifest["operator"] != operator_kind(model):
        raise GridError(
            f"{path} was partitioned for {written.describe()} and the {manifest['operator']} "
            f"operator; this run is {shape.describe()} with --model {model}"
        )


def load_shard(
    source: Any, cfg: TrainConfig, shape: GridShape, rank: int,
    parts: Path | str | None = None,
) -> Shard:
    """This rank's shard: from a partitioned directory (reads only its own file) or cut out
    of a whole :class:`~sparsegnn.data.GraphData` held in memory."""
    if isinstance(source, str | Path):
        check_manifest(source, shape, cfg.model)
        return read_shard(source, rank)
    graph = source
    check_trainable(graph)
    part = partition_for(graph.num_nodes, shape, parts, graph.edge_index, cfg.seed)
    adj = graph_operator(graph.edge_index, graph.num_nodes, cfg.model)
    rows = {"x": graph.x, "y": graph.y}
    rows.update({f"{s}_mask": getattr(graph, f"{s}_mask") for s in ("train", "val", "test")})
    adj, rows = relabel(adj.to(dtype=cfg.torch_dtype), rows, part.order)
    return make_shard(graph.name, adj, rows, part, shape, rank)


def write_partitioned(
    graph: Any, out: Path, algo: Algorithm, nprocs: int, replication: int, model: str,
    parts: Path | str | None = None, *, normalize_features: bool = True, seed: int = 0,
) -> dict[str, Any]:
    """Write the per-rank shards of ``graph`` for a grid (``sparsegnn data partition``).

    ``parts``: a partition vector file or a partitioner name; the vertex order and block
    boundaries it gives are kept in the manifest (``block_sizes``) and, for a named
    partitioner, its vector in ``OUT/parts.npy`` so other grids can reuse it.
    """
    shape = grid_shape(algo, nprocs, replication)
    check_trainable(graph)
    part = partition_for(graph.num_nodes, shape, parts, graph.edge_index, seed)
    adj = graph_operator(graph.edge_index, graph.num_nodes, model)
    rows = {"x": row_normalize(graph.x) if normalize_features else graph.x, "y": graph.y}
    rows.update({f"{s}_mask": getattr(graph, f"{s}_mask") for s in ("train", "val", "test")})
    adj, rows = relabel(adj, rows, part.order)
    write_shards(out, graph.name, adj, rows, part, shape, operator_kind(model))
    if parts is not None and str(parts) in PARTITIONERS and part.order is not None:
        np.save(out / "parts.npy", _parts_vector(part).numpy())
    return {
        "out": str(out), "grid": shape.describe(), "ranks": shape.size,
        "operator": operator_kind(model),
        "block_sizes": [part.size(i) for i in range(part.blocks)],
        "bytes_per_rank": [(out / f"rank{r}.npz").stat().st_size for r in range(shape.size)],
    }


def use_global_dropout(model: nn.Module, num_nodes: int, rows: slice | torch.Tensor) -> None:
    """Make ``model`` apply the whole graph's dropout mask, restricted to this rank's rows.

    The model's own dropout is switched off and a pre-hook on each layer draws the mask
    of the full ``num_nodes x f`` input exactly as a single process would (same call,
    same shape, same RNG stream, hence the same bits) and keeps ``rows`` (original vertex
    ids of the local rows, in local order).
    """
    p = float(getattr(model, "dropout", 0.0))
    layers = getattr(model, "layers", None)
    if p == 0.0 or layers is None:
        return
    model.dropout = 0.0

    def hook(layer: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        if not layer.training:
            return None
        x = args[0]
        ones = torch.ones(num_nodes, x.shape[1], dtype=x.dtype, device=x.device)
        return (x * F.dropout(ones, p, True)[rows], *args[1:])

    for layer in layers:
        layer.register_forward_pre_hook(hook)


def train_rank(
    source: Any, cfg: TrainConfig, dcfg: DistributedConfig, session: Session,
    members: Sequence[int] | None = None,
) -> tuple[nn.Module, TrainResult, RankReport] | None:
    """Train on this rank's share of ``source``; every rank of the job calls this.

    ``source`` is a :class:`~sparsegnn.data.GraphData` or a directory written by
    ``sparsegnn data partition``. ``members``: the global ranks forming the grid (default:
    all); ranks outside it only take part in creating the groups and get ``None``.
    """
    size = session.world_size if members is None else len(members)
    shape = grid_shape(dcfg.algo, size, dcfg.replication)
    grid = ProcessGrid.create(shape, members)
    if grid is None:
        return None
    shard = load_shard(source, cfg, shape, grid.rank, dcfg.partition)
    shard = shard.to(session.device, cfg.torch_dtype)
    sparse = dcfg.comm == "sparse"
    op: DistributedOperator
    if sparse:
        # A named partitioner runs on every rank (in load_shard); it is seeded and
        # deterministic, so all ranks hold the same blocks and their plans agree.
        rows_comm = SparseCommunicator()
        comm: Communicator = rows_comm
        op = SparseRowOperator(grid, rows_comm, shard.part, shard.blocks)
    else:
        comm = Communicator()
        op = build_operator(grid, comm, shard.part, shard.blocks)
    task = DistributedTask(shard.x, op, shard.y, shard.masks, comm, grid.col)
    model = build_model(cfg, shard.num_features, shard.num_classes)
    model = model.to(session.device, cfg.torch_dtype)
    global_masks = dcfg.dropout_masks == "global" or (
        dcfg.dropout_masks == "auto" and not isinstance(source, str | Path)
    )
    if global_masks:
        use_global_dropout(model, shard.part.num_nodes, _original_rows(shard, grid.coords[0]))
    rank_cfg = replace(
        cfg, seed=cfg.seed if global_masks else cfg.seed + _SEED_STRIDE * grid.coords[0],
        progress=cfg.progress and grid.rank == 0,
        checkpoint=_rank_checkpoint(cfg, shape, grid.rank),
    )
    meter = _EpochMeter(comm)
    stamp = _rank_fingerprint(source, shard, rank_cfg, shape, grid.rank)
    result = fit(model, task, rank_cfg, is_main=True, on_epoch=meter.on_epoch, stamp=stamp)
    calls = spmm_schedule(cfg, shard.num_features, shard.num_classes)
    predicted = predict(
        shape, shard.part, grid.rank, [] if sparse else calls,
        value_bytes=shard.x.element_size(),
        num_params=sum(p.numel() for p in model.parameters()), nnz=shard.nnz,
    )
    if isinstance(op, SparseRowOperator):
        predicted.update(_planned_spmm_bytes(op, calls, shard.x.element_size()))
    report = RankReport(grid.rank, grid.coords, meter.last, meter.constant, predicted)
    return model, result, report


def _rank_fingerprint(source: Any, shard: Shard, cfg: TrainConfig, shape: GridShape,
                      rank: int) -> dict[str, str | int]:
    """What this rank's checkpoint must match: the whole graph's hash when it is in memory,
    else the hash of this rank's own tiles and features (all a rank reads of a partitioned
    directory); plus the grid, so a checkpoint of another grid or rank is refused."""
    if cfg.checkpoint is None:
        return fingerprint(cfg)
    grid = f"{shape.algo} {shape.rows}x{shape.cols}x{shape.layers}"
    if not isinstance(source, str | Path):
        return {**graph_fingerprint(source, cfg, shape.size, grid), "rank": rank}
    tiles = [[t.crow, t.col] for t in shard.blocks.forward.values()]
    local = content_hash([shard.part.num_nodes, list(shard.x.shape), tiles])[:16]
    return fingerprint(cfg, graph=local, classes=shard.num_classes, world_size=shape.size,
                       algo=grid, rank=rank)


def _planned_spmm_bytes(
    op: SparseRowOperator, calls: list[SpmmCall], value_bytes: int
) -> dict[str, dict[str, int]]:
    """What this rank's sparse plan sends and receives per epoch, per SpMM phase."""
    out: dict[str, dict[str, int]] = {}
    reduce = (op.grid.shape.cols - 1) * op.n_local
    for call in calls:
        sent, recv = op.rows_per_spmm(call.phase == "backward_spmm")
        row_bytes = call.width * value_bytes
        v = out.setdefault(call.phase, {"sent": 0, "recv": 0})
        v["sent"] += (sent + reduce) * row_bytes
        v["recv"] += (recv + reduce) * row_bytes
    return {p: v for p, v in out.items() if v["sent"] or v["recv"]}


def _parts_vector(part: BlockPartition) -> torch.Tensor:
    """Original vertex -> block id, the inverse of ``part.order`` and ``offsets``."""
    assert part.order is not None
    sizes = torch.tensor([part.size(i) for i in range(part.blocks)])
    parts = torch.empty(part.num_nodes, dtype=torch.long)
    parts[part.order] = torch.repeat_interleave(torch.arange(part.blocks), sizes)
    return parts


def _original_rows(shard: Shard, block: int) -> slice | torch.Tensor:
    """Original vertex ids of a block's rows, in local order (a slice when not relabelled)."""
    lo, hi = shard.part.block(block)
    order = shard.part.order
    return slice(lo, hi) if order is None else order[lo:hi].to(shard.x.device)


class _EpochMeter:
    """Bytes per epoch: the counter difference between consecutive ``on_epoch`` calls."""

    def __init__(self, comm: Communicator) -> None:
        self.comm, self.previous = comm, comm.counts()
        self.last: dict[str, dict[str, int]] = {}
        self.constant = True

    def on_epoch(self, stats: EpochStats) -> None:
        now = self.comm.counts()
        delta = {}
        for phase, counts in now.items():
            before = self.previous.get(phase, {})
            diff = {key: n - before.get(key, 0) for key, n in counts.items()}
            if phase != "setup" and any(diff.values()):
                delta[phase] = {k: v for k, v in diff.items() if v}
        if self.last and delta != self.last:
            self.constant = False
        self.last, self.previous = delta, now


def _rank_checkpoint(cfg: TrainConfig, shape: GridShape, rank: int) -> Path | None:
    """This rank's checkpoint file; refuse to resume from another grid's checkpoints."""
    if cfg.checkpoint is None:
        return None
    base = Path(cfg.checkpoint)
    tag = f"{shape.algo}-{shape.rows}x{shape.cols}x{shape.layers}"
    mine = rank_checkpoint(base, rank, shape.size, tag)
    if cfg.resume and not mine.exists():
        others = sorted(base.parent.glob(f"{base.stem}.*.rank{rank}{base.suffix}"))
        if others:
            raise GridError(
                f"checkpoint {others[0].name} was written on another grid; resume on that "
                f"grid (this run is {shape.describe()}) or start without --resume"
            )
    return mine


def comm_summary(reports: list[RankReport]) -> dict[str, Any]:
    """Per-rank and total bytes of one epoch, measured, and the comm model's prediction."""

    def rank_entry(r: RankReport, phases: dict[str, dict[str, int]]) -> dict[str, Any]:
        return {"rank": r.rank, "coords": list(r.coords), "sent": _total([phases]),
                "recv": _total([phases], "recv"), "phases": phases}

    return {
        "per_rank": [
            {**rank_entry(r, r.epoch_bytes), "constant_across_epochs": r.constant_across_epochs}
            for r in reports
        ],
        "total_bytes_per_epoch": _total(r.epoch_bytes for r in reports),
        "comm_model": {
            "per_rank": [rank_entry(r, r.predicted) for r in reports],
            "total_bytes_per_epoch": _total(r.predicted for r in reports),
        },
        "matches_model": all(r.matches_model() for r in reports),
    }


def _total(volumes: Iterable[dict[str, dict[str, int]]], key: str = "sent") -> int:
    """Bytes sent (or received) by the given ranks together over all phases."""
    return sum(v.get(key, 0) for vol in volumes for v in vol.values())
