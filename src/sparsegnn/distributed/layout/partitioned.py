"""A graph cut into a grid's vertex blocks: one shard per rank, in memory or on disk.

:func:`partition_for` decides the blocks (even, a partition vector file, or a named
partitioner); :func:`write_partitioned` writes every rank's shard of a graph to a folder
(``sparsegnn data partition``), and :func:`load_shard` gives one rank its shard, read
from such a folder (its own file only) or cut out of a graph held in memory. The file
format itself is :mod:`sparsegnn.distributed.layout.shard`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from sparsegnn.data.graph import GraphData, row_normalize
from sparsegnn.data.limits import require_memory
from sparsegnn.data.vectors import read_int_vector
from sparsegnn.distributed.layout.block_partition import BlockPartition
from sparsegnn.distributed.layout.grid import GridError, GridShape, grid_shape
from sparsegnn.distributed.layout.shard import (
    Shard,
    make_shard,
    manifest_shape,
    read_manifest,
    read_shard,
    relabel,
    write_shards,
)
from sparsegnn.errors import InvalidValueError
from sparsegnn.names import PARTITIONERS, Algorithm
from sparsegnn.nn import graph_operator
from sparsegnn.nn.operator import MODEL_NORMS
from sparsegnn.partition import Adjacency, partition


def check_partitionable(graph: GraphData, blocks: int, source: object = None) -> None:
    """Refuse, before any work, a graph that cannot be trained, a grid with empty blocks
    or an operator too large to build; messages name ``source`` (what the user gave)
    when given, else the graph's stored name.

    The operator is a CSR matrix with one int64 row pointer per vertex (built, then
    relabelled: two of them) besides its nonzeros, so a sparse id space (ids near 3e9 on
    a few edges) needs tens of GiB although the edge list is tiny.
    """
    name = graph.name if source is None else source
    feature_bytes = 0 if graph.x is None else graph.x.element_size() * graph.x.numel()
    require_memory(2 * (8 * (graph.num_nodes + 1) + 16 * graph.num_edges + feature_bytes),
                   f"partitioning {name} ({graph.num_nodes} vertices, {graph.num_edges} edges)")
    graph.check_trainable(source)
    if blocks > graph.num_nodes:
        raise InvalidValueError(
            f"{name}: the grid has {blocks} vertex blocks but the graph only "
            f"{graph.num_nodes} vertices; use fewer ranks"
        )


def partition_for(
    num_nodes: int, shape: GridShape, path: Path | str = "block",
    edge_index: torch.Tensor | None = None, seed: int = 0,
) -> BlockPartition:
    """Even contiguous blocks (``block``), the blocks of a partition vector file (.npy or
    text), or those another named partitioner (:data:`sparsegnn.partition.PARTITIONERS`)
    computes from ``edge_index``."""
    named = str(path) in PARTITIONERS and not Path(path).is_file()
    if named and str(path) == "block":
        return BlockPartition.even(num_nodes, shape.row_blocks)
    if named:
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
    parts = read_int_vector(path)
    if parts.shape != (num_nodes,):
        raise GridError(
            f"partition {path} has {parts.size} entries for a graph of {num_nodes} vertices"
        )
    return BlockPartition.from_parts(torch.from_numpy(parts.astype(np.int64)), shape.row_blocks)


def operator_kind(model: str) -> str:
    """The operator a model multiplies by, as a partitioned directory records it (``gcn``,
    ``mean``, ``attention`` or ``sum``: :data:`~sparsegnn.nn.operator.MODEL_NORMS`)."""
    return MODEL_NORMS.get(model, "mean")


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
    source: GraphData | str | Path, model: str, shape: GridShape, rank: int,
    parts: Path | str = "block", *, dtype: torch.dtype = torch.float32, seed: int = 0,
) -> Shard:
    """This rank's shard: from a partitioned directory (reads only its own file) or cut out
    of a whole :class:`~sparsegnn.data.GraphData` held in memory."""
    if isinstance(source, str | Path):
        check_manifest(source, shape, model)
        return read_shard(source, rank)
    graph = source
    graph.check_trainable()
    part = partition_for(graph.num_nodes, shape, parts, graph.edge_index, seed)
    adj = graph_operator(graph.edge_index, graph.num_nodes, model)
    rows = {"x": graph.x, "y": graph.y}
    rows.update({f"{s}_mask": getattr(graph, f"{s}_mask") for s in ("train", "val", "test")})
    adj, rows = relabel(adj.to(dtype=dtype), rows, part.order)
    return make_shard(graph.name, adj, rows, part, shape, rank)


def write_partitioned(
    graph: GraphData, out: Path, algo: Algorithm, nprocs: int, replication: int, model: str,
    parts: Path | str = "block", *, normalize_features: bool = True, seed: int = 0,
    source: object = None,
) -> dict[str, Any]:
    """Write the per-rank shards of ``graph`` for a grid (``sparsegnn data partition``).

    ``parts``: a partition vector file or a partitioner name; the vertex order and block
    boundaries it gives are kept in the manifest (``block_sizes``) and, for a named
    partitioner, its vector in ``OUT/parts.npy`` so other grids can reuse it.
    """
    shape = grid_shape(algo, nprocs, replication)
    check_partitionable(graph, shape.row_blocks, source)
    part = partition_for(graph.num_nodes, shape, parts, graph.edge_index, seed)
    adj = graph_operator(graph.edge_index, graph.num_nodes, model)
    rows = {"x": row_normalize(graph.x) if normalize_features else graph.x, "y": graph.y}
    rows.update({f"{s}_mask": getattr(graph, f"{s}_mask") for s in ("train", "val", "test")})
    adj, rows = relabel(adj, rows, part.order)
    named = str(parts) in PARTITIONERS and part.order is not None
    write_shards(out, graph.name, adj, rows, part, shape, operator_kind(model),
                 extras={"parts": _parts_vector(part).numpy()} if named else None)
    return {
        "out": str(out), "grid": shape.describe(), "ranks": shape.size,
        "operator": operator_kind(model),
        "block_sizes": [part.size(i) for i in range(part.blocks)],
        "bytes_per_rank": [(out / f"rank{r}.npz").stat().st_size for r in range(shape.size)],
    }


def _parts_vector(part: BlockPartition) -> torch.Tensor:
    """Original vertex -> block id, the inverse of ``part.order`` and ``offsets``."""
    assert part.order is not None
    sizes = torch.tensor([part.size(i) for i in range(part.blocks)])
    parts = torch.empty(part.num_nodes, dtype=torch.long)
    parts[part.order] = torch.repeat_interleave(torch.arange(part.blocks), sizes)
    return parts
