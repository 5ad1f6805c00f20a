"""TU data sets (Morris et al., 2020, "TUDataset: A collection of benchmark datasets for
learning with graphs") from their folder of text files.

A folder ``DS/`` (or ``DS/raw/``, where PyG's ``TUDataset`` keeps it) holds
``DS_A.txt`` (one ``row, col`` edge per line, 1-based node ids over all graphs),
``DS_graph_indicator.txt`` (each node's 1-based graph id), ``DS_graph_labels.txt``
(one label per graph) and optionally ``DS_node_labels.txt`` / ``DS_node_attributes.txt``.
Read as PyG reads it by default, so the two train on identical inputs: node features
are the one-hot node labels (attributes only with ``use_node_attr``), graph labels are
renumbered ``0..C-1`` in sorted order, self-loops and repeated edges are dropped. A set
with neither node labels nor attributes (social networks) gets one constant feature.
Files may be ``.xz``-compressed (the bundled copies are).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from sparsegnn.data.graph_set import GraphSet, from_arrays, one_hot_columns
from sparsegnn.data.paths import read_data_bytes
from sparsegnn.errors import DataFormatError


def is_tu_folder(path: Path) -> bool:
    """Whether ``path`` (or its ``raw/``) holds a TU ``*_graph_indicator.txt``."""
    return _tu_files(path) is not None


def read_tu_folder(folder: str | os.PathLike[str], *, use_node_attr: bool = False,
                   allow_empty: bool = False) -> GraphSet:
    """The TU data set in ``folder`` as a checked :class:`GraphSet`."""
    found = _tu_files(Path(folder))
    if found is None:
        raise DataFormatError(f"{folder}: no TU files (DS_A.txt, DS_graph_indicator.txt, "
                              "DS_graph_labels.txt) here or in raw/")
    base, name = found
    edges = _numbers(base / f"{name}_A.txt", np.int64, 2)
    graph_of_node = _numbers(base / f"{name}_graph_indicator.txt", np.int64, 1)[:, 0] - 1
    raw_labels = _numbers(base / f"{name}_graph_labels.txt", np.float64, 1)[:, 0]
    classes, y = np.unique(raw_labels, return_inverse=True)
    n = graph_of_node.shape[0]
    x = _features(base, name, n, use_node_attr)
    if edges.size and (edges.min() < 1 or edges.max() > n):
        raise DataFormatError(f"{base / (name + '_A.txt')}: node ids span "
                              f"[{edges.min()}, {edges.max()}], expected 1..{n}")
    out = from_arrays(edges[:, 0] - 1, edges[:, 1] - 1, graph_of_node, x, y, name=name,
                      num_classes=len(classes), allow_empty=allow_empty,
                      num_graphs=raw_labels.shape[0])
    out.meta.update({"source": "tu", "folder": str(base), "label_values": classes.tolist()})
    return out


def _tu_files(path: Path) -> tuple[Path, str] | None:
    for base in (path, path / "raw"):
        if not base.is_dir():
            continue
        for f in sorted(base.iterdir()):
            for suffix in ("_graph_indicator.txt", "_graph_indicator.txt.xz"):
                if f.name.endswith(suffix):
                    return base, f.name[: -len(suffix)]
    return None


def _features(base: Path, name: str, n: int, use_node_attr: bool) -> np.ndarray:
    """One-hot node labels, after the attributes when ``use_node_attr`` (PyG's order)."""
    parts = []
    if use_node_attr and _exists(base / f"{name}_node_attributes.txt"):
        parts.append(_numbers(base / f"{name}_node_attributes.txt", np.float32, None))
    if _exists(base / f"{name}_node_labels.txt"):
        parts.append(one_hot_columns(_numbers(base / f"{name}_node_labels.txt", np.int64,
                                              None)))
    for part, what in zip(parts, ("features", "labels"), strict=False):
        if part.shape[0] != n:
            raise DataFormatError(f"{base}/{name}: node {what} have {part.shape[0]} rows "
                                  f"for {n} nodes in the graph indicator")
    if not parts:
        return np.ones((n, 1), dtype=np.float32)
    return np.concatenate(parts, axis=1)


def _exists(path: Path) -> bool:
    return path.is_file() or path.with_name(path.name + ".xz").is_file()


def _numbers(path: Path, dtype: type, columns: int | None) -> np.ndarray:
    """A comma-separated text file of numbers as ``[lines, columns]``; every line must
    have the same count (``columns`` when given), else one line naming the file."""
    try:
        text = read_data_bytes(path).decode("ascii")
    except FileNotFoundError as err:
        raise DataFormatError(f"{path}: file is missing (TU layout)") from err
    except UnicodeDecodeError as err:
        raise DataFormatError(f"{path}: not a text file") from err
    lines = [ln for ln in text.splitlines() if ln.strip()]
    widths = {ln.count(",") + 1 for ln in lines}
    if len(widths) > 1:
        raise DataFormatError(f"{path}: lines have {sorted(widths)} values; every line "
                              "needs the same number (mixed feature widths)")
    width = widths.pop() if widths else (columns or 1)
    if columns is not None and width != columns:
        raise DataFormatError(f"{path}: {width} values per line, expected {columns}")
    try:
        flat = np.array(text.replace(",", " ").split(), dtype=np.float64)
    except ValueError as err:
        raise DataFormatError(f"{path}: not numeric ({err})") from err
    if dtype is np.int64:
        if (flat != np.round(flat)).any():
            raise DataFormatError(f"{path}: expected integers")
        return flat.astype(np.int64).reshape(-1, width)
    return flat.astype(dtype).reshape(-1, width)
