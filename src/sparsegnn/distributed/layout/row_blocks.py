"""A graph cut into contiguous row blocks for partitioned minibatch training, on disk.

Partitioned minibatch training (``--topology partitioned``) holds, per rank, one block of
the rows of A (every column, global ids) and the same rows of the features; ``c`` ranks
share each block (1.5D). :func:`write_row_blocks` (``sparsegnn data partition --mode
minibatch``) stores one file per block, so that a rank reads only its block's file and
never the whole graph:

    OUT/manifest.json   format, mode "minibatch", sizes, block bounds, nnz per block
    OUT/vertices.npz    labels and split masks of every vertex (a few bytes per vertex:
                        every rank draws the same global minibatches from them)
    OUT/block<j>.npz    rows bounds[j]..bounds[j+1] of A (crow, col, val) and of x

Files carry the partition's fingerprint and their block number, so a file copied in from
another graph or cut is refused. A named partitioner relabels the vertices so that its
parts become the contiguous blocks (``OUT/parts.npy`` keeps its vector).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sparsegnn.data.graph import GraphData, check_features, check_labels, row_normalize
from sparsegnn.data.io import atomic_dir
from sparsegnn.distributed.layout.grid import grid_shape
from sparsegnn.distributed.layout.partitioned import check_partitionable, partition_for
from sparsegnn.distributed.layout.shard import (
    MANIFEST,
    SPLITS,
    check_replaceable,
    partition_fingerprint,
    read_npz_arrays,
    relabel,
)
from sparsegnn.errors import DataFormatError, SparseGNNError
from sparsegnn.names import PARTITIONERS
from sparsegnn.sparse import CSRMatrix

ROW_BLOCK_FORMAT = 1
MODE = "minibatch"


@dataclass
class RowBlock:
    """What one rank of partitioned minibatch training reads: its block and the labels."""

    name: str
    bounds: tuple[int, ...]  # block j holds rows bounds[j] .. bounds[j + 1]
    index: int
    adj: CSRMatrix  # rows of the block, all columns (global ids)
    x: torch.Tensor
    y: torch.Tensor  # every vertex
    masks: dict[str, torch.Tensor]  # every vertex

    @property
    def num_blocks(self) -> int:
        return len(self.bounds) - 1


def is_row_block_dir(path: str | Path) -> bool:
    """A folder written by :func:`write_row_blocks` (its manifest says mode minibatch)."""
    file = Path(path) / MANIFEST
    if not file.is_file():
        return False
    try:
        return json.loads(file.read_text(encoding="utf-8")).get("mode") == MODE
    except (OSError, ValueError, AttributeError, RecursionError):
        return False


def write_row_blocks(
    graph: GraphData, out: Path, blocks: int, parts: Path | str = "block", *,
    normalize_features: bool = True, seed: int = 0, source: object = None,
) -> dict[str, Any]:
    """Write ``graph`` as ``blocks`` row blocks (``sparsegnn data partition --mode
    minibatch``); a job of p ranks with replication c reads it when ``p / c == blocks``."""
    check_partitionable(graph, blocks, source)
    check_replaceable(out)
    part = partition_for(graph.num_nodes, grid_shape("1d", blocks), parts, graph.edge_index,
                         seed)
    adj = CSRMatrix.from_edge_index(graph.edge_index, graph.num_nodes)
    x = row_normalize(graph.x) if normalize_features else graph.x
    rows = {"x": x, "y": graph.y,
            **{f"{s}_mask": getattr(graph, f"{s}_mask") for s in SPLITS}}
    adj, rows = relabel(adj, rows, part.order)
    bounds = list(part.offsets)
    manifest: dict[str, Any] = {
        "format": ROW_BLOCK_FORMAT, "mode": MODE, "name": graph.name,
        "num_nodes": graph.num_nodes, "num_features": int(x.shape[1]),
        "num_classes": int(rows["y"].max()) + 1, "bounds": bounds,
        "nnz": [int(adj.crow[b] - adj.crow[a]) for a, b in itertools.pairwise(bounds)],
        "dtype": str(x.dtype).removeprefix("torch."),
    }
    manifest["fingerprint"] = partition_fingerprint(manifest, adj, rows)
    stamp = np.asarray(manifest["fingerprint"])
    with atomic_dir(out) as tmp:
        np.savez(tmp / "vertices.npz", fingerprint=stamp, y=rows["y"].numpy(),
                 **{f"{s}_mask": rows[f"{s}_mask"].numpy() for s in SPLITS})
        for j, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            block = adj.select_rows(torch.arange(lo, hi))
            np.savez(tmp / f"block{j}.npz", fingerprint=stamp, block=np.asarray(j),
                     crow=block.crow.numpy(), col=block.col.numpy(), val=block.val.numpy(),
                     x=rows["x"][lo:hi].numpy())
        if str(parts) in PARTITIONERS and part.order is not None:
            inverse = torch.empty_like(part.order)
            inverse[part.order] = torch.arange(part.order.numel())
            np.save(tmp / "parts.npy", np.searchsorted(bounds, inverse.numpy(), "right") - 1)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return {"out": str(out), "mode": MODE, "blocks": blocks, "block_sizes": [
        b - a for a, b in itertools.pairwise(bounds)], "nnz_per_block": manifest["nnz"],
        "bytes_per_block": [(out / f"block{j}.npz").stat().st_size for j in range(blocks)]}


def read_row_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of a row-block folder, every field checked, errors naming the file."""
    file = Path(path) / MANIFEST
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:
        raise DataFormatError(f"{file}: cannot read the partition manifest: {err}") from err
    if not isinstance(manifest, dict) or manifest.get("mode") != MODE:
        raise DataFormatError(f"{file}: not a minibatch partition (write one with "
                              "`sparsegnn data partition --mode minibatch`)")
    if manifest.get("format") != ROW_BLOCK_FORMAT:
        raise DataFormatError(f"{file}: minibatch partition format {manifest.get('format')!r:.20}"
                              f", expected {ROW_BLOCK_FORMAT}; write it again")

    def need(ok: bool, field: str, what: str) -> None:
        if not ok:
            raise DataFormatError(
                f"{file}: field {field!r} must be {what}, got {manifest.get(field)!r:.80}")

    def count(value: Any, lo: int) -> bool:
        return type(value) is int and value >= lo

    for key in ("name", "fingerprint"):
        need(isinstance(manifest.get(key), str), key, "a string")
    need(manifest.get("dtype") in ("float32", "float64"), "dtype", "float32 or float64")
    for key, lo in (("num_nodes", 1), ("num_features", 1), ("num_classes", 1)):
        need(count(manifest.get(key), lo), key, f"an integer >= {lo}")
    bounds = manifest.get("bounds")
    need(isinstance(bounds, list) and len(bounds) >= 2 and all(count(b, 0) for b in bounds)
         and bounds[0] == 0 and bounds[-1] == manifest["num_nodes"]
         and all(a < b for a, b in itertools.pairwise(bounds)),
         "bounds", "increasing integers from 0 to num_nodes")
    nnz = manifest.get("nnz")
    need(isinstance(nnz, list) and len(nnz) == len(bounds) - 1
         and all(count(v, 0) for v in nnz), "nnz", "one count >= 0 per block")
    return manifest


def read_row_block(path: str | Path, index: int) -> RowBlock:
    """Load block ``index`` and the vertex labels of a :func:`write_row_blocks` folder;
    reads no other block's file. Anything inconsistent is a DataFormatError naming it."""
    path = Path(path)
    manifest = read_row_manifest(path)
    bounds = tuple(manifest["bounds"])
    if not 0 <= index < len(bounds) - 1:
        raise DataFormatError(f"{path}: has {len(bounds) - 1} blocks, no block {index}")
    n, lo, hi = manifest["num_nodes"], bounds[index], bounds[index + 1]
    file = path / f"block{index}.npz"
    arrays = _stamped(file, manifest, index)
    x = _array(arrays, "x", (hi - lo, manifest["num_features"]), "f", file)
    check_features(x, file)
    nnz = manifest["nnz"][index]
    wanted = (("crow", (hi - lo + 1,), "i"), ("col", (nnz,), "i"), ("val", (nnz,), "f"))
    crow, col, val = (torch.from_numpy(_array(arrays, key, shape, kind, file))
                      for key, shape, kind in wanted)
    try:
        adj = CSRMatrix.from_csr(crow, col, val, (hi - lo, n))
    except (SparseGNNError, ValueError, RuntimeError) as err:
        raise DataFormatError(f"{file}: bad rows of A ({err})") from err
    vertices = path / "vertices.npz"
    labels = _stamped(vertices, manifest, None)
    y = _array(labels, "y", (n,), "iu", vertices).astype(np.int64)
    check_labels(y, vertices)
    if y.size and int(y.max()) >= manifest["num_classes"]:
        raise DataFormatError(f"{vertices}: a label is >= num_classes {manifest['num_classes']}")
    masks = {s: torch.from_numpy(_array(labels, f"{s}_mask", (n,), "b", vertices))
             for s in SPLITS}
    return RowBlock(manifest["name"], bounds, index, adj, torch.from_numpy(x),
                    torch.from_numpy(y), masks)


def check_row_blocks(path: str | Path) -> dict[str, Any]:
    """The manifest of a row-block folder whose files are all present and stamped with its
    fingerprint (reads only the stamps): a launcher's check before any rank starts."""
    manifest = read_row_manifest(path)
    files = [(Path(path) / "vertices.npz", None)]
    files += [(Path(path) / f"block{j}.npz", j) for j in range(len(manifest["bounds"]) - 1)]
    for file, index in files:
        _stamped(file, manifest, index, ("fingerprint", "block"))
    return manifest


def _stamped(
    file: Path, manifest: dict[str, Any], index: int | None, keys: tuple[str, ...] | None = None,
) -> dict[str, np.ndarray]:
    """The arrays ``keys`` (default: all) of ``file``, which must carry the manifest's
    fingerprint (and, for a block file, its block number)."""
    if not file.is_file():
        raise DataFormatError(f"{file} is missing from the minibatch partition")
    arrays = read_npz_arrays(file, keys)
    stamp = arrays.get("fingerprint")
    if stamp is None or stamp.shape != () or str(stamp) != manifest["fingerprint"]:
        raise DataFormatError(f"{file}: its fingerprint differs from the manifest's; the file "
                              "belongs to another graph or cut, so partition again")
    if index is not None:
        written = arrays.get("block")
        if written is None or written.shape != () or written.dtype.kind != "i" \
                or int(written) != index:
            raise DataFormatError(f"{file}: holds block {written}, not block {index}")
    return arrays


def _array(arrays: dict[str, np.ndarray], key: str, shape: tuple[int, ...], kinds: str,
           file: Path) -> np.ndarray:
    value = arrays.get(key)
    if value is None or value.shape != shape or value.dtype.kind not in kinds:
        got = "nothing" if value is None else f"dtype {value.dtype} shape {value.shape}"
        raise DataFormatError(f"{file}: {key} must have shape {shape} (kind {kinds}), got {got}")
    return value
