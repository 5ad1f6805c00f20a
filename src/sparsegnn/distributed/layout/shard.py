"""One rank's share of a graph, built in memory or read from a partitioned directory.

A :class:`Shard` is all a rank trains on: its tiles of the operator and its transpose,
the features, labels and masks of its vertex block, and the tile nonzero tables the
comm model needs. :func:`write_shards` (``sparsegnn data partition``) stores one file
per rank plus a manifest, so that :func:`read_shard` loads only that rank's blocks and no
rank ever holds the whole graph:

    OUT/manifest.json   format, grid, block offsets, sizes, operator kind, nnz tables
    OUT/rank<r>.npz     tile arrays ``fwd<k>_crow|col|val`` (and ``bwd<k>_*`` when the
                        operator is not symmetric), ``x``, ``y``, ``train|val|test_mask``

Tile indices are stored as int64, values in the dtype they were written with. ``x`` holds
the rank's rows of the features and, on 2D/3D, only its column slice
(:func:`~sparsegnn.distributed.layout.block_partition.feature_columns`), so no rank reads more.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sparsegnn.data.graph import check_features, check_labels
from sparsegnn.data.io import NPZ_ERRORS, atomic_dir
from sparsegnn.distributed.layout.block_partition import (
    BlockPartition,
    LocalBlocks,
    feature_columns,
    local_blocks,
)
from sparsegnn.distributed.layout.grid import ALGORITHMS, GridShape
from sparsegnn.distributed.planning.comm_model import NnzTable, tile_nnz
from sparsegnn.errors import DataFormatError, SparseGNNError
from sparsegnn.sparse import CSRMatrix

# 2: rank files and manifest carry the partition's fingerprint (format 1 did not).
# 3: 2D/3D rank files hold only their feature column slice; rank_holdings give columns.
SHARD_FORMAT = 3
SPLITS = ("train", "val", "test")
MANIFEST = "manifest.json"


@dataclass
class Shard:
    """What one rank trains on. ``x`` holds feature columns ``columns`` of the block's rows
    (all ``num_features`` on 1D/1.5D, slice j on 2D/3D)."""

    name: str
    part: BlockPartition
    blocks: LocalBlocks
    x: torch.Tensor
    y: torch.Tensor
    masks: dict[str, torch.Tensor]
    num_features: int
    num_classes: int
    nnz: dict[str, NnzTable] | None  # 2D/3D only: tables of A and A^T for the comm model
    columns: tuple[int, int]

    def to(self, device: torch.device, dtype: torch.dtype) -> Shard:
        """Tiles and features on ``device`` in ``dtype``; labels and masks on ``device``."""
        def move(tiles: dict[int, CSRMatrix]) -> dict[int, CSRMatrix]:
            return {k: t.to(device, dtype) for k, t in tiles.items()}

        fwd = move(self.blocks.forward)
        bwd = fwd if self.blocks.backward is self.blocks.forward else move(self.blocks.backward)
        return Shard(
            self.name, self.part, LocalBlocks(fwd, bwd), self.x.to(device, dtype),
            self.y.to(device), {s: m.to(device) for s, m in self.masks.items()},
            self.num_features, self.num_classes, self.nnz, self.columns,
        )


Rows = dict[str, torch.Tensor]


def relabel(adj: CSRMatrix, rows: Rows, order: torch.Tensor | None) -> tuple[CSRMatrix, Rows]:
    """Apply a partition's vertex order to the operator and to per-vertex tensors."""
    if order is None:
        return adj, rows
    return adj.permute(order), {k: v[order] for k, v in rows.items()}


def make_shard(
    name: str, adj: CSRMatrix, rows: dict[str, torch.Tensor], part: BlockPartition,
    shape: GridShape, rank: int,
) -> Shard:
    """The shard of ``rank`` from the whole (already relabelled) operator and vertex data.

    ``rows`` holds ``x``, ``y`` and the three masks, in the relabelled vertex order.
    """
    i, j, _ = shape.coords(rank)
    lo, hi = part.block(i)
    f = int(rows["x"].shape[1])
    c0, c1 = feature_columns(shape, j, f)
    return Shard(
        name, part, local_blocks(adj, part, shape, rank),
        rows["x"][lo:hi, c0:c1].contiguous(), rows["y"][lo:hi],
        {s: rows[f"{s}_mask"][lo:hi] for s in SPLITS}, f,
        int(rows["y"].max()) + 1, _nnz_tables(adj, part, shape), (c0, c1),
    )


def _nnz_tables(
    adj: CSRMatrix, part: BlockPartition, shape: GridShape
) -> dict[str, NnzTable] | None:
    if shape.row_wise:
        return None
    return {"forward_spmm": tile_nnz(adj, part, shape),
            "backward_spmm": tile_nnz(adj.t(), part, shape)}


def write_shards(
    out: Path, name: str, adj: CSRMatrix, rows: dict[str, torch.Tensor], part: BlockPartition,
    shape: GridShape, operator: str, extras: dict[str, np.ndarray] | None = None,
) -> Path:
    """Write every rank's shard and the manifest (run once, on a machine with the graph).

    Everything goes to a temp folder renamed to ``out`` whole, the manifest last, so a
    failed or interrupted run never leaves a partition that mixes old and new rank files.
    Each rank file is stamped with its rank and the fingerprint of the whole partition
    (the manifest records it too), so a rank file copied in from another graph or grid is
    refused by :func:`read_shard`. ``extras`` are further arrays saved as ``<key>.npy``.
    An existing ``out`` is replaced only if it is an earlier partition (or empty): a
    mistyped ``out`` naming a folder of other files must not be deleted.
    """
    check_replaceable(out)
    manifest: dict[str, Any] = {
        "format": SHARD_FORMAT, "name": name, "operator": operator,
        "grid": {"algo": shape.algo, "rows": shape.rows, "cols": shape.cols,
                 "layers": shape.layers},
        "offsets": list(part.offsets), "num_features": int(rows["x"].shape[1]),
        "num_classes": int(rows["y"].max()) + 1, "symmetric": adj.symmetric,
        "dtype": str(adj.dtype).removeprefix("torch."),
    }
    manifest["fingerprint"] = partition_fingerprint(manifest, adj, rows)
    tables = _nnz_tables(adj, part, shape)
    if tables is not None:
        manifest["nnz"] = {ph: [[*key, n] for key, n in t.items()] for ph, t in tables.items()}
    holdings = []
    with atomic_dir(out) as tmp:
        for rank in range(shape.size):
            shard = make_shard(name, adj, rows, part, shape, rank)
            arrays = _rank_arrays(shard, adj.symmetric)
            arrays.update(fingerprint=np.asarray(manifest["fingerprint"]),
                          rank=np.asarray(rank, dtype=np.int64))
            np.savez(tmp / f"rank{rank}.npz", **arrays)
            holdings.append(_holding(shard, adj.symmetric))
        # What each rank will hold, so a memory limit can be checked from the manifest.
        manifest["rank_holdings"] = holdings
        for key, value in (extras or {}).items():
            np.save(tmp / f"{key}.npy", value)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return out


def _holding(shard: Shard, symmetric: bool) -> list[int]:
    """``[row pointers, nonzeros, feature rows, feature columns]`` one rank holds (tiles of
    A, and of A^T when stored apart)."""
    tiles = list(shard.blocks.forward.values())
    if not symmetric:
        tiles += list(shard.blocks.backward.values())
    return [sum(t.crow.numel() for t in tiles), sum(t.nnz for t in tiles),
            int(shard.x.shape[0]), int(shard.x.shape[1])]


def _rank_arrays(shard: Shard, symmetric: bool) -> dict[str, np.ndarray]:
    """The arrays of one rank file (see the module docstring)."""
    arrays: dict[str, np.ndarray] = {"x": shard.x.numpy(), "y": shard.y.numpy()}
    arrays.update({f"{s}_mask": m.numpy() for s, m in shard.masks.items()})
    for tag, tiles in (("fwd", shard.blocks.forward), ("bwd", shard.blocks.backward)):
        if tag == "bwd" and symmetric:
            continue
        for key, t in tiles.items():
            p = f"{tag}{key}_"
            arrays.update({p + "crow": t.crow.numpy(), p + "col": t.col.numpy(),
                           p + "val": t.val.numpy(), p + "shape": np.array(t.shape)})
    return arrays


def partition_fingerprint(
    manifest: dict[str, Any], adj: CSRMatrix, rows: dict[str, torch.Tensor]
) -> str:
    """sha256 of what must match across one partition's files: the grid, blocks, operator
    kind and dtype (the manifest's fields so far), the operator's arrays and the vertex
    data. Two graphs, or one graph cut for two grids, never share it."""
    digest = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode())
    for tensor in (adj.crow, adj.col, adj.val, *(rows[k] for k in sorted(rows))):
        array = np.ascontiguousarray(tensor.detach().cpu().numpy())
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()


def check_replaceable(out: Path) -> None:
    """Refuse to replace a folder that holds files but is not an earlier partition."""
    if out.is_dir() and not is_shard_dir(out) and any(out.iterdir()):
        raise DataFormatError(
            f"{out}: exists, is not empty and holds no {MANIFEST}; writing the partition "
            "would replace its files, so choose a new or empty folder"
        )


def is_shard_dir(path: str | Path) -> bool:
    return (Path(path) / MANIFEST).is_file()


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of a partition folder, every field checked, errors naming the file."""
    file = Path(path) / MANIFEST
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:  # UnicodeDecodeError: a ValueError
        raise DataFormatError(f"{file}: cannot read the partition manifest: {err}") from err
    if not isinstance(manifest, dict):
        raise DataFormatError(f"{file}: the partition manifest must be a JSON object")
    if manifest.get("mode") == "minibatch":
        raise DataFormatError(f"{file}: a minibatch partition (row blocks); train it with "
                              "`sparsegnn train --mode minibatch`")
    if manifest.get("format") != SHARD_FORMAT:
        raise DataFormatError(
            f"{file}: partition format {manifest.get('format')}, expected {SHARD_FORMAT}; "
            "write it again with `sparsegnn data partition`"
        )
    _check_manifest(manifest, file)
    return manifest


def _check_manifest(manifest: dict[str, Any], file: Path) -> None:
    """Every field :func:`read_shard` and the trainers use has the type and range they
    assume, so a truncated or edited manifest is one clear error, not a KeyError."""
    def need(ok: bool, field: str, what: str) -> None:
        if not ok:
            raise DataFormatError(
                f"{file}: field {field!r} must be {what}, got {manifest.get(field)!r:.80}"
            )

    def count(value: Any, lo: int) -> bool:
        return type(value) is int and value >= lo

    for key in ("name", "operator", "fingerprint"):
        need(isinstance(manifest.get(key), str), key, "a string")
    need(manifest.get("dtype") in ("float32", "float64"), "dtype", "float32 or float64")
    need(isinstance(manifest.get("symmetric"), bool), "symmetric", "true or false")
    for key in ("num_features", "num_classes"):
        need(count(manifest.get(key), 0), key, "an integer >= 0")
    grid = manifest.get("grid")
    need(isinstance(grid, dict) and grid.get("algo") in ALGORITHMS
         and all(count(grid.get(k), 1) for k in ("rows", "cols", "layers")),
         "grid", f"{{algo: one of {', '.join(ALGORITHMS)}, rows, cols, layers >= 1}}")
    offsets = manifest.get("offsets")
    need(isinstance(offsets, list) and len(offsets) == grid["rows"] + 1
         and all(count(o, 0) for o in offsets) and offsets[0] == 0
         and all(a <= b for a, b in itertools.pairwise(offsets)),
         "offsets", "grid rows + 1 increasing integers from 0")
    holdings = manifest.get("rank_holdings", [])
    need(isinstance(holdings, list) and all(
        isinstance(h, list) and len(h) == 4 and all(count(v, 0) for v in h) for h in holdings),
        "rank_holdings", "[row pointers, nonzeros, feature rows, feature columns] per rank")
    nnz = manifest.get("nnz", {})
    need(isinstance(nnz, dict) and all(
        isinstance(t, list) and all(
            isinstance(e, list) and len(e) == 4 and all(count(v, 0) for v in e) for e in t)
        for t in nnz.values()), "nnz", "tables of [i, j, m, nnz] integer rows")


def manifest_shape(manifest: dict[str, Any]) -> GridShape:
    g = manifest["grid"]
    return GridShape(g["algo"], g["rows"], g["cols"], g["layers"])


def read_shard(path: str | Path, rank: int) -> Shard:
    """Load only ``rank``'s file of a directory written by :func:`write_shards`.

    The file must carry the manifest's fingerprint and its own rank, and every array the
    shape the manifest implies; anything else is a :class:`DataFormatError` naming it.
    """
    manifest = read_manifest(path)
    file = Path(path) / f"rank{rank}.npz"
    if not file.is_file():
        raise DataFormatError(f"{file} is missing: the partition has no shard for rank {rank}")
    arrays = read_npz_arrays(file)
    _check_stamp(arrays, manifest, file, rank)
    shape = manifest_shape(manifest)
    if not 0 <= rank < shape.size:
        raise DataFormatError(f"{file}: rank {rank} is outside the manifest's grid")
    part = BlockPartition(tuple(manifest["offsets"]))
    i, j, _ = shape.coords(rank)
    lo, hi = part.block(i)
    columns = feature_columns(shape, j, manifest["num_features"])
    x, y, masks = _vertex_arrays(arrays, (hi - lo, columns[1] - columns[0]), manifest, file)
    tensors = {k: torch.from_numpy(v) for k, v in arrays.items() if k.startswith(("fwd", "bwd"))}
    try:
        fwd = _tiles(tensors, "fwd")
        bwd = fwd if manifest["symmetric"] else _tiles(tensors, "bwd")
    except (SparseGNNError, KeyError, ValueError, TypeError, RuntimeError) as err:
        raise DataFormatError(f"{file}: bad operator tiles ({err})") from err
    nnz = None
    if "nnz" in manifest:
        nnz = {ph: {(i, j, m): n for i, j, m, n in t} for ph, t in manifest["nnz"].items()}
    return Shard(
        manifest["name"], part, LocalBlocks(fwd, bwd), x, y, masks,
        manifest["num_features"], manifest["num_classes"], nnz, columns,
    )


def check_partition(path: str | Path) -> dict[str, Any]:
    """The manifest of a partition folder whose rank files are all present and stamped
    with its fingerprint; reads only each file's stamp, not its arrays.

    A launcher can call this once before starting ranks, so that a partition mixing rank
    files of two graphs (or missing one) is refused up front rather than by one rank.
    """
    manifest = read_manifest(path)
    for rank in range(manifest_shape(manifest).size):
        file = Path(path) / f"rank{rank}.npz"
        if not file.is_file():
            raise DataFormatError(
                f"{file} is missing: the partition has no shard for rank {rank}"
            )
        _check_stamp(read_npz_arrays(file, ("fingerprint", "rank")), manifest, file, rank)
    return manifest


def read_npz_arrays(file: Path, keys: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """The arrays ``keys`` (default: all) of a rank file, read eagerly; an unreadable file
    is a DataFormatError naming it."""
    try:
        with file.open("rb") as f, np.load(f, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files if keys is None or k in keys}
    except NPZ_ERRORS as err:
        raise DataFormatError(f"{file}: not a readable rank file ({err})") from err


def _check_stamp(arrays: dict[str, np.ndarray], manifest: dict[str, Any], file: Path,
                 rank: int) -> None:
    """The rank file belongs to this partition and to this rank."""
    stamp = arrays.get("fingerprint")
    found = str(stamp) if stamp is not None and stamp.shape == () else "none"
    if found != manifest["fingerprint"]:
        raise DataFormatError(
            f"{file}: fingerprint {found[:16]} differs from the manifest's "
            f"{manifest['fingerprint'][:16]}; the rank file belongs to another graph or "
            "grid, so write the partition again with `sparsegnn data partition`"
        )
    written = arrays.get("rank")
    if written is None or written.shape != () or written.dtype.kind != "i" or written != rank:
        raise DataFormatError(f"{file}: holds the shard of rank {written}, not of rank {rank}")


def _vertex_arrays(
    arrays: dict[str, np.ndarray], x_shape: tuple[int, int], manifest: dict[str, Any],
    file: Path,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Features (the rank's rows and feature columns, ``x_shape``), labels and masks of the
    rank's vertex block, shapes and values checked."""
    rows, cols = x_shape

    def get(key: str, ndim: int, kinds: str) -> np.ndarray:
        value = arrays.get(key)
        if value is None or value.ndim != ndim or value.shape[0] != rows \
                or value.dtype.kind not in kinds:
            got = "nothing" if value is None else f"dtype {value.dtype} shape {value.shape}"
            raise DataFormatError(
                f"{file}: {key} must be {ndim}-d with {rows} rows (kind {kinds}), got {got}"
            )
        return value

    x = get("x", 2, "f")
    if x.shape[1] != cols:
        raise DataFormatError(
            f"{file}: x has {x.shape[1]} feature columns; this rank holds {cols} of the "
            f"manifest's {manifest['num_features']}"
        )
    check_features(x, file)
    y = get("y", 1, "iu").astype(np.int64)
    check_labels(y, file)
    masks = {s: torch.from_numpy(get(f"{s}_mask", 1, "b")) for s in SPLITS}
    return torch.from_numpy(x), torch.from_numpy(y), masks


def _tiles(arrays: dict[str, torch.Tensor], tag: str) -> dict[int, CSRMatrix]:
    suffix = "_crow"
    names = [k for k in arrays if k.startswith(tag) and k.endswith(suffix)]
    keys = sorted(int(k[len(tag):-len(suffix)]) for k in names)
    out = {}
    for key in keys:
        p = f"{tag}{key}_"
        rows, cols = (int(v) for v in arrays[p + "shape"].tolist())
        out[key] = CSRMatrix.from_csr(arrays[p + "crow"], arrays[p + "col"], arrays[p + "val"],
                                      (rows, cols))
    return out
