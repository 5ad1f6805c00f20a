"""PyG graphs: a ``torch_geometric.data.Data`` in memory, or one saved to a ``.pt`` file.

A saved dataset is what ``InMemoryDataset.save`` writes (``processed/data.pt`` of
``Planetoid``, ``Amazon``, ...: the collated attribute dict, the slices, the class) or a
``Data`` passed to ``torch.save``. Files are read with ``torch.load(weights_only=True)``,
allowing only PyG's own data classes, so a downloaded file cannot run code.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sparsegnn.data.edges import directed_edge_index, undirected_edge_index
from sparsegnn.data.graph import GraphData, check_features, check_labels
from sparsegnn.errors import DataFormatError
from sparsegnn.optional import require

_MASKS = ("train_mask", "val_mask", "test_mask")
# Written by InMemoryDataset beside the data; they describe it, they are not graphs.
_NOT_GRAPHS = {"pre_filter.pt", "pre_transform.pt"}


def from_pyg(data: Any, name: str = "pyg", *, undirected: bool = True) -> GraphData:
    """A :class:`GraphData` from a PyG ``Data`` (``edge_index``, ``x``, ``y``, masks).

    ``undirected`` stores both directions of every edge; either way self-loops and
    repeated edges are dropped, as for every graph sparsegnn loads. A ``y`` of one column
    (OGB's PyG datasets) is flattened; masks of several splits (``[N, k]``) use split 0.
    """
    edge_index = getattr(data, "edge_index", None)
    if not isinstance(edge_index, torch.Tensor) or edge_index.dim() != 2 \
            or edge_index.shape[0] != 2:
        raise DataFormatError(f"{name}: needs an edge_index of shape [2, E]")
    num_nodes = int(data.num_nodes)
    ei = edge_index.detach().cpu().numpy()
    build = undirected_edge_index if undirected else directed_edge_index
    g = GraphData(edge_index=build(ei[0], ei[1], num_nodes), num_nodes=num_nodes, name=name,
                  meta={"source": "pyg"})
    x = getattr(data, "x", None)
    if x is not None:
        check_features(x.detach().cpu().numpy(), name)
        g.x = x.detach().cpu().to(torch.float32)
    g.y = class_ids(getattr(data, "y", None), name)
    for key in _MASKS:
        mask = getattr(data, key, None)
        if mask is not None:
            setattr(g, key, (mask[:, 0] if mask.dim() == 2 else mask).cpu().to(torch.bool))
    return g


def load_pyg_file(path: Path, hetero: bool = False) -> Any:
    """A PyG ``.pt`` file's object, unpickled with only PyG's own data classes allowed
    (``weights_only``): a hostile file is refused instead of running code."""
    data_module = require("torch_geometric.data.data", "to read PyG files")
    storage = require("torch_geometric.data.storage", "to read PyG files")
    allowed: list[Any] = [data_module.Data, data_module.DataEdgeAttr,
                          data_module.DataTensorAttr, storage.GlobalStorage]
    if hetero:
        hetero_data = require("torch_geometric.data.hetero_data", "to read PyG files")
        allowed += [hetero_data.HeteroData, storage.BaseStorage, storage.NodeStorage,
                    storage.EdgeStorage]
    # Only the classes not yet allowed: leaving the context removes what it was given,
    # which would take PyG's own registrations with it and break PyG's later loads.
    registered = torch.serialization.get_safe_globals()
    missing = [cls for cls in allowed if cls not in registered]
    try:
        with torch.serialization.safe_globals(missing):
            return torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as err:
        raise DataFormatError(f"{path}: not a PyG file readable without running code "
                              f"({str(err).splitlines()[0]})") from err


def read_pyg(path: str | os.PathLike[str], *, undirected: bool = True) -> GraphData:
    """A graph from a PyG ``.pt`` file, or from a dataset folder holding ``processed/*.pt``."""
    path = _graph_file(Path(path))
    obj = load_pyg_file(path)
    data = _single_graph(obj, require("torch_geometric.data.data", "").Data, path)
    return from_pyg(data, path.parent.parent.name if path.parent.name == "processed"
                    else path.stem, undirected=undirected)


def is_pyg_dir(path: Path) -> bool:
    return (path / "processed").is_dir() and bool(_processed(path))


def _graph_file(path: Path) -> Path:
    if not path.is_dir():
        return path
    found = _processed(path)
    if len(found) != 1:
        raise DataFormatError(f"{path}/processed: expected one graph .pt file, found "
                              f"{[p.name for p in found] or 'none'}")
    return found[0]


def _processed(folder: Path) -> list[Path]:
    return sorted(p for p in (folder / "processed").glob("*.pt") if p.name not in _NOT_GRAPHS)


def _single_graph(obj: Any, data_cls: type, path: Path) -> Any:
    """The one graph of ``torch.save(data)`` or of ``InMemoryDataset.save``'s tuple."""
    if isinstance(obj, data_cls):
        return obj
    if not isinstance(obj, tuple) or len(obj) not in (2, 3):
        raise DataFormatError(f"{path}: neither a PyG Data nor an InMemoryDataset file")
    data, slices = obj[0], obj[1]
    if slices:
        counts = {int(v.numel()) - 1 for v in slices.values()}
        if counts != {1}:
            raise DataFormatError(f"{path}: holds {max(counts)} graphs; sparsegnn reads "
                                  "node-level datasets of one graph")
    return data_cls.from_dict(data) if isinstance(data, dict) else data


def class_ids(y: torch.Tensor | None, name: str) -> torch.Tensor | None:
    """PyG's ``y`` as one int64 class id per node (a ``[n, 1]`` column too), checked."""
    if y is None:
        return None
    if y.dim() == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.dim() != 1 or y.dtype.is_floating_point:
        raise DataFormatError(f"{name}: y must be one class id per node, got dtype "
                              f"{y.dtype} shape {list(y.shape)}")
    y = y.cpu().to(torch.int64)
    check_labels(np.asarray(y), name)
    return y
