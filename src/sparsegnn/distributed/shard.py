"""One rank's share of a graph, built in memory or read from a partitioned directory.

A :class:`Shard` is all a rank trains on: its tiles of the operator and its transpose,
the features, labels and masks of its vertex block, and the tile nonzero tables the
comm model needs. :func:`write_shards` (``sparsegnn data partition``) stores one file
per rank plus a manifest, so that :func:`read_shard` loads only that rank's blocks and no
rank ever holds the whole graph:

    OUT/manifest.json   format, grid, block offsets, sizes, operator kind, nnz tables
    OUT/rank<r>.npz     tile arrays ``fwd<k>_crow|col|val`` (and ``bwd<k>_*`` when the
                        operator is not symmetric), ``x``, ``y``, ``train|val|test_mask``

Tile indices are stored as int64, values in the dtype they were written with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sparsegnn.distributed.comm_model import NnzTable, tile_nnz
from sparsegnn.distributed.grid import GridShape
from sparsegnn.distributed.partition import BlockPartition, LocalBlocks, local_blocks
from sparsegnn.errors import DataFormatError
from sparsegnn.sparse import CSRMatrix

SHARD_FORMAT = 1
SPLITS = ("train", "val", "test")
MANIFEST = "manifest.json"


@dataclass
class Shard:
    """What one rank trains on."""

    name: str
    part: BlockPartition
    blocks: LocalBlocks
    x: torch.Tensor
    y: torch.Tensor
    masks: dict[str, torch.Tensor]
    num_features: int
    num_classes: int
    nnz: dict[str, NnzTable] | None  # 2D/3D only: tables of A and A^T for the comm model

    def to(self, device: torch.device, dtype: torch.dtype) -> Shard:
        """Tiles and features on ``device`` in ``dtype``; labels and masks on ``device``."""
        def move(tiles: dict[int, CSRMatrix]) -> dict[int, CSRMatrix]:
            return {k: t.to(device, dtype) for k, t in tiles.items()}

        fwd = move(self.blocks.forward)
        bwd = fwd if self.blocks.backward is self.blocks.forward else move(self.blocks.backward)
        return Shard(
            self.name, self.part, LocalBlocks(fwd, bwd), self.x.to(device, dtype),
            self.y.to(device), {s: m.to(device) for s, m in self.masks.items()},
            self.num_features, self.num_classes, self.nnz,
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
    lo, hi = part.block(shape.coords(rank)[0])
    return Shard(
        name, part, local_blocks(adj, part, shape, rank), rows["x"][lo:hi], rows["y"][lo:hi],
        {s: rows[f"{s}_mask"][lo:hi] for s in SPLITS}, int(rows["x"].shape[1]),
        int(rows["y"].max()) + 1, _nnz_tables(adj, part, shape),
    )


def _nnz_tables(
    adj: CSRMatrix, part: BlockPartition, shape: GridShape
) -> dict[str, NnzTable] | None:
    if shape.algo in ("1d", "1.5d"):
        return None
    return {"forward_spmm": tile_nnz(adj, part, shape),
            "backward_spmm": tile_nnz(adj.t(), part, shape)}


def write_shards(
    out: Path, name: str, adj: CSRMatrix, rows: dict[str, torch.Tensor], part: BlockPartition,
    shape: GridShape, operator: str,
) -> Path:
    """Write every rank's shard and the manifest (run once, on a machine with the graph)."""
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {
        "format": SHARD_FORMAT, "name": name, "operator": operator,
        "grid": {"algo": shape.algo, "rows": shape.rows, "cols": shape.cols,
                 "layers": shape.layers},
        "offsets": list(part.offsets), "num_features": int(rows["x"].shape[1]),
        "num_classes": int(rows["y"].max()) + 1, "symmetric": adj.symmetric,
        "dtype": str(adj.dtype).removeprefix("torch."),
    }
    tables = _nnz_tables(adj, part, shape)
    if tables is not None:
        manifest["nnz"] = {ph: [[*key, n] for key, n in t.items()] for ph, t in tables.items()}
    for rank in range(shape.size):
        shard = make_shard(name, adj, rows, part, shape, rank)
        arrays: dict[str, np.ndarray] = {"x": shard.x.numpy(), "y": shard.y.numpy()}
        arrays.update({f"{s}_mask": m.numpy() for s, m in shard.masks.items()})
        for tag, tiles in (("fwd", shard.blocks.forward), ("bwd", shard.blocks.backward)):
            if tag == "bwd" and adj.symmetric:
                continue
            for key, t in tiles.items():
                p = f"{tag}{key}_"
                arrays.update({p + "crow": t.crow.numpy(), p + "col": t.col.numpy(),
                               p + "val": t.val.numpy(), p + "shape": np.array(t.shape)})
        np.savez(out / f"rank{rank}.npz", **arrays)
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return out


def is_shard_dir(path: str | Path) -> bool:
    return (Path(path) / MANIFEST).is_file()


def read_manifest(path: str | Path) -> dict[str, Any]:
    file = Path(path) / MANIFEST
    try:
        manifest = json.loads(file.read_text())
    except (OSError, ValueError) as err:
        raise DataFormatError(f"{file}: cannot read the partition manifest: {err}") from err
    if manifest.get("format") != SHARD_FORMAT:
        raise DataFormatError(
            f"{file}: partition format {manifest.get('format')}, expected {SHARD_FORMAT}"
        )
    return manifest


def manifest_shape(manifest: dict[str, Any]) -> GridShape:
    g = manifest["grid"]
    return GridShape(g["algo"], g["rows"], g["cols"], g["layers"])


def read_shard(path: str | Path, rank: int) -> Shard:
    """Load only ``rank``'s file of a directory written by :func:`write_shards`."""
    manifest = read_manifest(path)
    file = Path(path) / f"rank{rank}.npz"
    if not file.is_file():
        raise DataFormatError(f"{file} is missing: the partition has no shard for rank {rank}")
    with np.load(file) as npz:
        arrays = {k: torch.from_numpy(npz[k].copy()) for k in npz.files}
    fwd = _tiles(arrays, "fwd")
    bwd = fwd if manifest["symmetric"] else _tiles(arrays, "bwd")
    nnz = None
    if "nnz" in manifest:
        nnz = {ph: {(i, j, m): n for i, j, m, n in t} for ph, t in manifest["nnz"].items()}
    return Shard(
        manifest["name"], BlockPartition(tuple(manifest["offsets"])), LocalBlocks(fwd, bwd),
        arrays["x"], arrays["y"], {s: arrays[f"{s}_mask"] for s in SPLITS},
        manifest["num_features"], manifest["num_classes"], nnz,
    )


def _tiles(arrays: dict[str, torch.Tensor], tag: str) -> dict[int, CSRMatrix]:
    suffix = "_crow"
    names = [k for k in arrays if k.startswith(tag) and k.endswith(suffix)]
    keys = sorted(int(k[len(tag):-len(suffix)]) for k in names)
    out = {}
    for key in keys:
        p = f"{tag}{key}_"
        rows, cols = (int(v) for v in arrays[p + "shape"].tolist())
        out[key] = CSRMatrix(arrays[p + "crow"], arrays[p + "col"], arrays[p + "val"], (rows, cols))
    return out
