"""DGL's ``CSVDataset`` layout for one homogeneous graph: the edge and node files that
``meta.yaml`` names (``edge_data`` / ``node_data``), else ``edges.csv`` and ``nodes.csv``.

``edges.csv`` has ``src_id`` and ``dst_id`` columns (others ignored); the optional
``nodes.csv`` has ``node_id`` and optionally ``label``, ``train_mask``, ``val_mask``,
``test_mask`` and ``feat`` (one quoted, comma-separated vector per node), as DGL writes
them. Columns are found by name in the header, so their order does not matter.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sparsegnn.data.edges import directed_edge_index, undirected_edge_index
from sparsegnn.data.graph import GraphData, check_features, check_labels
from sparsegnn.errors import DataFormatError
from sparsegnn.optional import require

EDGES, NODES, META = "edges.csv", "nodes.csv", "meta.yaml"
_MASKS = ("train_mask", "val_mask", "test_mask")


def is_dgl_dir(path: Path) -> bool:
    return (path / EDGES).is_file() or (path / META).is_file()


def dgl_files(folder: Path) -> tuple[Path, Path | None]:
    """The edge file and node file (if any) of a plain graph: as ``meta.yaml`` names them
    (DGL allows any names, e.g. ``edges_0.csv``), else ``edges.csv`` and ``nodes.csv``."""
    if not (folder / META).is_file():
        return folder / EDGES, (folder / NODES) if (folder / NODES).is_file() else None
    meta = read_meta(folder / META)
    edge_files = [e for e in meta.get("edge_data") or [] if isinstance(e, dict)]
    node_files = [e for e in meta.get("node_data") or [] if isinstance(e, dict)]
    if len(edge_files) != 1 or len(node_files) > 1:
        raise DataFormatError(f"{folder / META}: a plain graph has one edge file and at most "
                              f"one node file, this lists {len(edge_files)} and "
                              f"{len(node_files)} (a typed graph names ntype / etype)")
    return (meta_file(folder, edge_files[0]),
            meta_file(folder, node_files[0]) if node_files else None)


def read_dgl_csv(folder: str | os.PathLike[str], *, undirected: bool = True) -> GraphData:
    """The graph of a DGL ``CSVDataset`` folder; node ids index the rows of every array."""
    folder = Path(folder)
    edge_file, node_file = dgl_files(folder)
    edges = _columns(edge_file)
    src, dst = (_ints(edges, key, edge_file) for key in ("src_id", "dst_id"))
    nodes = _columns(node_file) if node_file is not None else {}
    ids = _ints(nodes, "node_id", node_file) if node_file is not None else np.zeros(0, np.int64)
    num_nodes = int(max(ids.max(initial=-1), src.max(initial=-1), dst.max(initial=-1))) + 1
    if (ids.size and ids.min() < 0) or (src.size and min(src.min(), dst.min()) < 0):
        raise DataFormatError(f"{folder}: node ids must be >= 0")
    build = undirected_edge_index if undirected else directed_edge_index
    g = GraphData(edge_index=build(src, dst, num_nodes), num_nodes=num_nodes,
                  name=folder.name, meta={"source": str(folder)})
    if node_file is not None and nodes:
        _node_data(g, nodes, ids, node_file)
    return g


def _node_data(g: GraphData, nodes: dict[str, list[str]], ids: np.ndarray, path: Path) -> None:
    """Labels, masks and features, each placed at its row's ``node_id``."""
    if np.unique(ids).size != ids.size:
        raise DataFormatError(f"{path}: node_id repeats")
    if "label" in nodes:
        y = np.zeros(g.num_nodes, np.int64)
        y[ids] = _ints(nodes, "label", path)
        check_labels(y, path)
        g.y = torch.from_numpy(y)
    for key in _MASKS:
        if key in nodes:
            mask = torch.zeros(g.num_nodes, dtype=torch.bool)
            mask[torch.from_numpy(ids)] = torch.from_numpy(_bools(nodes[key], key, path))
            setattr(g, key, mask)
    if "feat" in nodes:
        try:
            rows = np.array([[float(v) for v in s.split(",")] for s in nodes["feat"]],
                            dtype=np.float32)
        except ValueError as err:
            raise DataFormatError(f"{path}: feat must be equal-length numeric vectors "
                                  f"({err})") from err
        x = np.zeros((g.num_nodes, rows.shape[1]), np.float32)
        x[ids] = rows
        check_features(x, path)
        g.x = torch.from_numpy(x)


def _columns(path: Path) -> dict[str, list[str]]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise DataFormatError(f"{path}: not readable as CSV ({err})") from err
    if not rows:
        raise DataFormatError(f"{path}: empty; expected a header line")
    header = [h.strip() for h in rows[0]]
    body = [r for r in rows[1:] if r]
    bad = next((i for i, r in enumerate(body) if len(r) != len(header)), None)
    if bad is not None:
        raise DataFormatError(f"{path}: line {bad + 2} has {len(body[bad])} fields, "
                              f"the header {len(header)}")
    return {name: [r[i] for r in body] for i, name in enumerate(header)}


def _ints(columns: dict[str, list[str]], key: str, path: Path) -> np.ndarray:
    if key not in columns:
        raise DataFormatError(f"{path}: no {key} column (header: {', '.join(columns)})")
    try:
        return np.array([int(v) for v in columns[key]], dtype=np.int64)
    except ValueError as err:
        raise DataFormatError(f"{path}: {key} must hold integers ({err})") from err


def _bools(values: list[str], key: str, path: Path) -> np.ndarray:
    """pandas writes boolean masks as True/False; 1/0 is accepted too."""
    table = {"true": True, "1": True, "false": False, "0": False}
    try:
        return np.array([table[v.strip().lower()] for v in values], dtype=bool)
    except KeyError as err:
        raise DataFormatError(f"{path}: {key} must be True/False or 1/0, got {err}") from None


def read_meta(path: Path) -> dict[str, Any]:
    """A ``meta.yaml`` read with ``yaml.safe_load`` (no tags that build objects)."""
    yaml = require("yaml", "to read a DGL dataset's meta.yaml")
    try:
        meta = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise DataFormatError(f"{path}: not readable YAML ({str(err).splitlines()[0]})") from err
    if not isinstance(meta, dict):
        raise DataFormatError(f"{path}: must be a YAML mapping with node_data and edge_data")
    if str(meta.get("separator", ",")) != ",":
        raise DataFormatError(f"{path}: separator {meta['separator']!r} is not supported; "
                              "write the CSV files comma-separated")
    return meta


def meta_file(folder: Path, entry: dict[str, Any]) -> Path:
    """The named CSV, which must lie inside ``folder`` (a YAML cannot point elsewhere)."""
    path = (folder / str(entry["file_name"])).resolve()
    if folder.resolve() not in path.parents:
        raise DataFormatError(f"{folder / META}: file_name {entry['file_name']!r} leaves the "
                              "dataset folder")
    if not path.is_file():
        raise DataFormatError(f"{path}: no such file (named in {META})")
    return path
