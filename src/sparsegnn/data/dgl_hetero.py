"""DGL's ``CSVDataset`` layout for one heterograph: ``meta.yaml`` naming the CSV files.

``meta.yaml`` lists ``node_data`` (``file_name``, ``ntype``) and ``edge_data``
(``file_name``, ``etype: [src_type, relation, dst_type]``). A node file has ``node_id``
and optionally ``label``, ``train_mask``, ``val_mask``, ``test_mask`` and ``feat`` (one
quoted comma-separated vector per node); an edge file has ``src_id`` and ``dst_id``. A
type's node count is one more than the largest id its files mention, as in DGL. The YAML
is read with ``yaml.safe_load``: it can name files, never build objects. The target type
is the node type whose file has ``label``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sparsegnn.data.dgl import META, _bools, _columns, _ints, meta_file, read_meta
from sparsegnn.data.graph import check_features, check_labels
from sparsegnn.data.hetero import EdgeType, HeteroGraph
from sparsegnn.errors import DataFormatError

_MASKS = ("train_mask", "val_mask", "test_mask")


def is_dgl_hetero_dir(path: Path) -> bool:
    """A DGL ``CSVDataset`` folder whose ``meta.yaml`` types its nodes or edges (``ntype``
    on a node file, ``etype`` on an edge file); an untyped one is a plain graph, read by
    :mod:`sparsegnn.data.dgl`. An unreadable ``meta.yaml`` is left to that reader's error."""
    if not (path / META).is_file():
        return False
    try:
        meta = read_meta(path / META)
    except DataFormatError:
        return False
    entries = [e for key in ("node_data", "edge_data") for e in (meta.get(key) or [])
               if isinstance(e, dict)]
    return any("ntype" in e or "etype" in e for e in entries)


def read_dgl_hetero(folder: str | os.PathLike[str], *, target: str | None = None
                    ) -> HeteroGraph:
    """The heterograph of a DGL ``CSVDataset`` folder, validated."""
    folder = Path(folder)
    meta = read_meta(folder / META)
    nodes = {str(e["ntype"]): meta_file(folder, e) for e in _entries(meta, "node_data")}
    tables = {t: _columns(path) for t, path in nodes.items()}
    edges: dict[EdgeType, tuple[np.ndarray, np.ndarray]] = {}
    for entry in _entries(meta, "edge_data"):
        etype = _etype(entry, folder / META)
        path = meta_file(folder, entry)
        cols = _columns(path)
        edges[etype] = (_ints(cols, "src_id", path), _ints(cols, "dst_id", path))
    counts = _counts(folder, nodes, tables, edges)
    g = HeteroGraph(num_nodes=counts, name=str(meta.get("dataset_name") or folder.name),
                    edge_index={et: torch.from_numpy(np.stack(p)) for et, p in edges.items()},
                    meta={"source": str(folder)})
    labelled = [t for t, cols in tables.items() if "label" in cols]
    if target is None and len(labelled) > 1:
        raise DataFormatError(f"{folder}: node types {', '.join(labelled)} all have a label "
                              "column; name the target type")
    g.target = target or (labelled[0] if labelled else None)
    for ntype, cols in tables.items():
        _node_columns(g, ntype, cols, nodes[ntype])
    return g.validate()


def _entries(meta: dict[str, Any], key: str) -> list[dict[str, Any]]:
    entries = meta.get(key) or []
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise DataFormatError(f"{META}: {key} must be a list of mappings")
    need = "ntype" if key == "node_data" else "etype"
    for e in entries:
        if "file_name" not in e or need not in e:
            raise DataFormatError(f"{META}: every {key} entry needs file_name and {need}")
    return entries


def _etype(entry: dict[str, Any], where: Path) -> EdgeType:
    etype = entry["etype"]
    if not isinstance(etype, list) or len(etype) != 3:
        raise DataFormatError(f"{where}: etype must be [src_type, relation, dst_type], "
                              f"got {etype!r}")
    return str(etype[0]), str(etype[1]), str(etype[2])


def _counts(folder: Path, nodes: dict[str, Path], tables: dict[str, dict[str, list[str]]],
            edges: dict[EdgeType, tuple[np.ndarray, np.ndarray]]) -> dict[str, int]:
    """Per node type: one more than the largest id any file mentions."""
    top: dict[str, int] = {t: -1 for t in nodes}
    for ntype, cols in tables.items():
        ids = _ints(cols, "node_id", nodes[ntype])
        top[ntype] = max(top[ntype], int(ids.max(initial=-1)))
    for (s, _, d), (src, dst) in edges.items():
        for ntype, ids in ((s, src), (d, dst)):
            if ids.size and int(ids.min()) < 0:
                raise DataFormatError(f"{folder}: node ids of type {ntype!r} must be >= 0")
            top[ntype] = max(top.get(ntype, -1), int(ids.max(initial=-1)))
    return {t: m + 1 for t, m in top.items()}


def _node_columns(g: HeteroGraph, ntype: str, cols: dict[str, list[str]], where: Path) -> None:
    """Features of every type; labels and masks of the target type, placed by node_id."""
    ids = _ints(cols, "node_id", where)
    if ids.size and int(ids.min()) < 0:
        raise DataFormatError(f"{where}: node_id must be >= 0")
    if np.unique(ids).size != ids.size:
        raise DataFormatError(f"{where}: node_id repeats")
    n = g.num_nodes[ntype]
    if "feat" in cols:
        try:
            rows = np.array([[float(v) for v in s.split(",")] for s in cols["feat"]],
                            dtype=np.float32).reshape(len(ids), -1)
        except ValueError as err:
            raise DataFormatError(f"{where}: feat must be equal-length numeric vectors "
                                  f"({err})") from err
        x = np.zeros((n, rows.shape[1]), np.float32)
        x[ids] = rows
        check_features(x, where)
        g.x[ntype] = torch.from_numpy(x)
    if ntype != g.target:
        return
    if "label" in cols:
        y = np.zeros(n, np.int64)
        y[ids] = _ints(cols, "label", where)
        check_labels(y, where)
        g.y = torch.from_numpy(y)
    for key in _MASKS:
        if key in cols:
            mask = torch.zeros(n, dtype=torch.bool)
            mask[torch.from_numpy(ids)] = torch.from_numpy(_bools(cols[key], key, where))
            setattr(g, key, mask)
