"""PyG ``HeteroData``: in memory, or saved with ``torch.save`` / ``InMemoryDataset.save``.

Files are read with ``torch.load(weights_only=True)`` allowing only PyG's own data and
storage classes, as :mod:`sparsegnn.data.pyg` does for ``Data``: a downloaded file cannot
run code. The target node type is the one carrying ``y`` (or the one named).
"""

from __future__ import annotations

import os
import pickletools
import zipfile
from pathlib import Path
from typing import Any

import torch

from sparsegnn.data.hetero import EdgeType, HeteroGraph
from sparsegnn.data.pyg import class_ids, load_pyg_file
from sparsegnn.errors import DataFormatError
from sparsegnn.optional import require

_MASKS = ("train_mask", "val_mask", "test_mask")


def from_pyg_hetero(data: Any, name: str = "pyg", *, target: str | None = None) -> HeteroGraph:
    """A validated :class:`HeteroGraph` from a PyG ``HeteroData``.

    Edge ids stay as given (repeated edges and self-loops are kept: R-GCN's mean counts
    them, as PyG's does). A ``y`` of one column is flattened; masks of several splits
    (``[N, k]``) use split 0. ``target`` picks the labelled type when several have ``y``.
    """
    try:
        node_types, edge_types = list(data.node_types), list(data.edge_types)
    except AttributeError as err:
        raise DataFormatError(f"{name}: not a PyG HeteroData (no node_types/edge_types)") from err
    num_nodes = {t: _count(data[t], t, name) for t in node_types}
    edges: dict[EdgeType, torch.Tensor] = {}
    for et in edge_types:
        ei = getattr(data[et], "edge_index", None)
        if not isinstance(ei, torch.Tensor):
            raise DataFormatError(f"{name}: edge type {et} has no edge_index tensor")
        edges[tuple(str(p) for p in et)] = ei.detach().cpu().to(torch.int64)
    feats = {t: data[t].x.detach().cpu().to(torch.float32) for t in node_types
             if isinstance(getattr(data[t], "x", None), torch.Tensor)}
    g = HeteroGraph(num_nodes=num_nodes, edge_index=edges, x=feats, name=name,
                    meta={"source": "pyg"})
    g.target = _target(data, node_types, target, name)
    if g.target is not None:
        store = data[g.target]
        g.y = class_ids(getattr(store, "y", None), name)
        for key in _MASKS:
            mask = getattr(store, key, None)
            if isinstance(mask, torch.Tensor):
                setattr(g, key, (mask[:, 0] if mask.dim() == 2 else mask).cpu().to(torch.bool))
    return g.validate()


def read_pyg_hetero(path: str | os.PathLike[str], *, target: str | None = None) -> HeteroGraph:
    """The ``HeteroData`` of a ``.pt`` file (``torch.save(data)``, or ``InMemoryDataset``'s
    ``processed/data.pt``), loaded without running pickled code."""
    path = Path(path)
    obj = load_pyg_file(path, hetero=True)
    data = _single(obj, require("torch_geometric.data.hetero_data", "").HeteroData, path)
    return from_pyg_hetero(data, path.stem, target=target)


def is_pyg_hetero_file(path: Path) -> bool:
    """Whether ``path`` is a ``.pt`` file whose pickle names PyG's ``HeteroData`` or its
    node storage; read from the pickle's opcodes, so nothing is unpickled to decide (and
    what is registered as safe does not change the answer)."""
    if path.suffix != ".pt" or not path.is_file():
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            member = next(n for n in archive.namelist() if n.endswith("data.pkl"))
            names = {arg for _, arg, _ in pickletools.genops(archive.read(member))
                     if isinstance(arg, str)}
    except (OSError, StopIteration, ValueError, zipfile.BadZipFile):
        return False
    return any(n.endswith(("HeteroData", "NodeStorage")) for n in names)


def _single(obj: Any, cls: type, path: Path) -> Any:
    if isinstance(obj, cls):
        return obj
    if not isinstance(obj, tuple) or len(obj) not in (2, 3) or not isinstance(obj[0], dict):
        raise DataFormatError(f"{path}: neither a PyG HeteroData nor an InMemoryDataset file")
    slices = obj[1]
    if slices:
        counts = {int(v.numel()) - 1 for s in slices.values()
                  for v in (s.values() if isinstance(s, dict) else [s])}
        if counts != {1}:
            raise DataFormatError(f"{path}: holds {max(counts)} graphs; sparsegnn reads "
                                  "node-level datasets of one graph")
    return cls.from_dict(obj[0])


def _count(store: Any, ntype: str, name: str) -> int:
    try:
        n = store.num_nodes
    except (AttributeError, TypeError, ValueError):
        n = None
    if n is None:
        raise DataFormatError(f"{name}: node type {ntype!r} has neither num_nodes nor x")
    return int(n)


def _target(data: Any, node_types: list[str], target: str | None, name: str) -> str | None:
    if target is not None:
        if target not in node_types:
            raise DataFormatError(f"{name}: target {target!r} is not a node type "
                                  f"({', '.join(node_types)})")
        return target
    labelled = [t for t in node_types if isinstance(getattr(data[t], "y", None), torch.Tensor)]
    if len(labelled) > 1:
        raise DataFormatError(f"{name}: node types {', '.join(labelled)} all have y; name the "
                              "target type")
    return labelled[0] if labelled else None

