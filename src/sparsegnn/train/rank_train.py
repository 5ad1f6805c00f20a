"""One rank of distributed full-graph training: the :func:`fit` loop on its share.

Each rank builds the operator of the chosen algorithm over its tiles, a
:class:`~sparsegnn.distributed.DistributedTask` over its vertex block and the same model
as a single process (same seed, same initial weights), then runs the unchanged
:func:`~sparsegnn.train.fullgraph.fit`. Dropout either reproduces the single-process
masks (each rank draws the whole graph's mask and keeps its rows) or, for graphs read
from a partitioned directory, draws per vertex block from ``seed + 1_000_003 * block``
(the replicas of a block share that stream, so they stay identical). On 2D/3D each rank
holds only its column slice of the input features and the first layer runs on partial
products summed over the process row (:mod:`sparsegnn.distributed.ops.feature_slices`).

``--checkpoint`` names a folder: every saved epoch is a sub-folder of one shard per rank
and a manifest written last (:mod:`sparsegnn.train.dist_checkpoint`); a run resumes from
the newest complete one on the same or on another grid, and refuses one of another graph,
model or dtype.

What a rank measures is recorded by :mod:`sparsegnn.train.rank_report`; the job that
starts the ranks and gathers their reports is :mod:`sparsegnn.train.distributed`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from sparsegnn.distributed import (
    ByteCounts,
    DistributedOperator,
    DistributedTask,
    GridShape,
    ProcessGrid,
    Session,
    build_operator,
    grid_shape,
    predict,
)
from sparsegnn.distributed.layout.partitioned import load_shard
from sparsegnn.distributed.layout.shard import Shard, read_manifest
from sparsegnn.distributed.ops.feature_slices import slice_first_layer, use_slice_dropout
from sparsegnn.distributed.ops.sparse_comm import SparseCommunicator, SparseRowOperator
from sparsegnn.distributed.ops.spmm import SummaOperator, col_lanes
from sparsegnn.distributed.planning.attention_model import edge_volume, model_calls
from sparsegnn.distributed.planning.comm_model import input_slicing, spmm_schedule
from sparsegnn.names import ATTENTION_MODELS, DEFAULT_MASK, PARTITIONERS, Algorithm
from sparsegnn.nn.dropout import dropout
from sparsegnn.nn.model_size import layer_widths
from sparsegnn.train.checkpoint import graph_hash
from sparsegnn.train.dist_checkpoint import DistributedStore, file_sha256
from sparsegnn.train.fullgraph import TrainConfig, TrainResult, build_model, fingerprint, fit
from sparsegnn.train.memory import measure_rank_memory
from sparsegnn.train.rank_report import EpochMeter, RankReport, planned_spmm_bytes

_SEED_STRIDE = 1_000_003


@dataclass(frozen=True)
class DistributedConfig:
    """How to distribute: algorithm, replication (1.5D), backend, timeout, partition (a
    vector file or a partitioner name), and dense or sparsity-aware SpMM communication."""

    algo: Algorithm = "1d"
    replication: int = 1
    backend: str | None = None
    timeout_s: float = 60.0
    partition: Path | str = "block"
    comm: Literal["dense", "sparse"] = "dense"
    # "global": every rank draws the whole graph's dropout mask and keeps its rows, which
    # reproduces single-process training exactly but costs an n x f mask per layer;
    # "block": each vertex block draws its own; "auto": global when the rank holds the
    # whole graph anyway (in memory), block when it reads a partitioned directory.
    dropout_masks: Literal["auto", "global", "block"] = "auto"
    # 1D/1.5D: move the next blocks (dense) or the rows (sparse) while multiplying
    # what has arrived (distributed.spmm.RowOperator, sparse_comm.SparseRowOperator).
    overlap: bool = False


def use_global_dropout(
    model: nn.Module, num_nodes: int, rows: slice | torch.Tensor, columns: tuple[int, int],
) -> None:
    """Make ``model`` apply the whole graph's dropout mask, restricted to this rank's rows.

    The model's own dropout is switched off and a pre-hook on each layer draws the mask
    of the full ``num_nodes x f`` input exactly as a single process would (same kind of
    mask, same shape, same RNG stream, hence the same bits) and keeps ``rows`` (original vertex
    ids of the local rows, in local order) and, for the first layer, the ``columns`` of
    the input features the rank holds (a slice of them on 2D/3D).
    """
    p = float(getattr(model, "dropout", 0.0))
    layers = getattr(model, "layers", None)
    if p == 0.0 or layers is None:
        return
    model.dropout = 0.0
    kind = getattr(model, "dropout_mask", DEFAULT_MASK)

    def hook(layer: nn.Module, args: tuple[Any, ...], cols: slice, width: int | None,
             ) -> tuple[Any, ...] | None:
        if not layer.training:
            return None
        x = args[0]
        ones = torch.ones(num_nodes, width or x.shape[1], dtype=x.dtype, device=x.device)
        return (x * dropout(ones, p, True, kind)[rows, cols], *args[1:])

    layers[0].register_forward_pre_hook(
        partial(hook, cols=slice(*columns), width=layers[0].in_channels))
    for layer in layers[1:]:
        layer.register_forward_pre_hook(partial(hook, cols=slice(None), width=None))


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
    grid = ProcessGrid.create(shape, members,
                              col_lanes=col_lanes(dcfg.algo, dcfg.comm, dcfg.overlap))
    if grid is None:
        return None
    shard = load_shard(source, cfg.model, shape, grid.rank, dcfg.partition,
                       dtype=cfg.torch_dtype, seed=cfg.seed)
    shard = shard.to(session.device, cfg.torch_dtype)
    sparse = dcfg.comm == "sparse"
    # Every operator may exchange rows: the sparsity-aware SpMM and, on any grid, the
    # attention layers' edge protocol. A SparseCommunicator counts like a Communicator.
    comm = SparseCommunicator()
    op: DistributedOperator
    if sparse:
        # A named partitioner runs on every rank (in load_shard); it is seeded and
        # deterministic, so all ranks hold the same blocks and their plans agree.
        op = SparseRowOperator(grid, comm, shard.part, shard.blocks, dcfg.overlap)
    else:
        op = build_operator(grid, comm, shard.part, shard.blocks, dcfg.overlap)
    model = build_model(cfg, shard.num_features, shard.num_classes)
    model = model.to(session.device, cfg.torch_dtype)
    sliced = shape.feature_slices > 1
    adj: DistributedOperator | list[DistributedOperator] = op
    row_sliced: list[nn.Parameter] = []
    if sliced:
        assert isinstance(op, SummaOperator)  # 2D/3D: sparse communication is 1D/1.5D only
        adj, row_sliced = slice_first_layer(model, op, shard.columns, comm, grid.row)
    task = DistributedTask(shard.x, adj, shard.y, shard.masks, comm, grid.col, row_sliced,
                           grid.row)
    global_masks = dcfg.dropout_masks == "global" or (
        dcfg.dropout_masks == "auto" and not isinstance(source, str | Path)
    )
    if global_masks:
        use_global_dropout(model, shard.part.num_nodes, _original_rows(shard, grid.coords[0]),
                           shard.columns)
    elif sliced:
        use_slice_dropout(model, grid.coords[1])
    rank_cfg = replace(
        cfg, seed=cfg.seed if global_masks else cfg.seed + _SEED_STRIDE * grid.coords[0],
    )
    meter = EpochMeter(comm)
    store = None if cfg.checkpoint is None else DistributedStore(
        Path(cfg.checkpoint), grid, _identity(source, shard, cfg),
        _layout(shape, dcfg, source, global_masks, cfg.seed), cfg.seed,
        None if global_masks else grid.coords[0], resume=cfg.resume, restart=cfg.restart)
    result = fit(model, task, rank_cfg, is_main=grid.rank == 0, on_epoch=meter.on_epoch,
                 store=store)
    calls = spmm_schedule(cfg, shard.num_features, shard.num_classes, sliced)
    predicted = predict(
        shape, shard.part, grid.rank, [] if sparse else calls,
        value_bytes=shard.x.element_size(),
        num_params=sum(p.numel() for p in model.parameters()), nnz=shard.nnz,
        slicing=input_slicing(cfg, shard.num_features, shard.num_classes) if sliced else None,
        val_loss=True,
    )
    if isinstance(op, SparseRowOperator):
        predicted.update(planned_spmm_bytes(op, calls, shard.x.element_size()))
    if cfg.model in ATTENTION_MODELS:
        widths = layer_widths(shard.num_features, cfg.hidden, shard.num_classes,
                              cfg.num_layers)
        predicted.update(edge_volume(shape, shard.part, grid.rank,
                                     model_calls(cfg.model, widths, cfg.heads),
                                     op.edges.fetched_rows(), shard.x.element_size()))
    tiles = [*shard.blocks.forward.values(), *shard.blocks.backward.values()]
    memory = measure_rank_memory(tiles, [shard.x], model, session.start_rss_bytes)
    report = RankReport(grid.rank, grid.coords, meter.last, meter.constant,
                        ByteCounts(predicted), memory,
                        store.resumed if store else None, store.skipped if store else [],
                        meter.waited_per_epoch())
    return model, result, report


def _identity(source: Any, shard: Shard, cfg: TrainConfig) -> dict[str, str | int]:
    """What a checkpoint must match to be resumed, whatever the grid: model, sizes, dtype
    and the graph (its hash when in memory; a partitioned folder's own fingerprint, which
    covers its grid too, since a rank reads only its share of it)."""
    if isinstance(source, str | Path):
        graph = str(read_manifest(source)["fingerprint"])[:16]
    else:
        graph = graph_hash(source.num_nodes, source.edge_index, tuple(source.x.shape))
    return fingerprint(cfg, graph=graph, classes=shard.num_classes)


def _layout(shape: GridShape, dcfg: DistributedConfig, source: Any, global_masks: bool,
            seed: int) -> dict[str, Any]:
    """How this run is distributed, as a checkpoint manifest records it: a checkpoint of
    the same layout resumes each rank from its own shard, bit-identically."""
    return {"world_size": shape.size, "algo": shape.algo,
            "grid": [shape.rows, shape.cols, shape.layers],
            "replication": shape.replication,
            "partition": _partition_label(dcfg.partition, source, seed),
            "dropout_masks": "global" if global_masks else "block"}


def _partition_label(partition: Path | str, source: Any, seed: int) -> str:
    """The vertex blocks' origin: even (``block``, labelled so since before it had that
    name), a seeded partitioner, a file's content, a folder."""
    if isinstance(source, str | Path):
        return "partitioned folder"
    named = str(partition) in PARTITIONERS and not Path(partition).is_file()
    if named and str(partition) == "block":
        return "even"
    if named:
        return f"{partition} seed {seed}"
    return f"file sha256 {file_sha256(Path(partition))[:16]}"


def _original_rows(shard: Shard, block: int) -> slice | torch.Tensor:
    """Original vertex ids of a block's rows, in local order (a slice when not relabelled)."""
    lo, hi = shard.part.block(block)
    order = shard.part.order
    return slice(lo, hi) if order is None else order[lo:hi].to(shard.x.device)
