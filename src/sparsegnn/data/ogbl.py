"""OGB link-property datasets (``ogbl-*``) from the folder ``ogb`` downloads, without ``ogb``.

``LinkPropPredDataset(name, root)`` leaves ``root/<name with _>/`` holding the graph of
the training edges as in the ``ogbn-*`` layout (``raw/edge.csv.gz``,
``raw/num-node-list.csv.gz``, ``raw/node-feat.csv.gz`` where there are features) and the
official split as ``split/<kind>/{train,valid,test}.pt``: ``torch.save`` dictionaries of
numpy arrays (or tensors) of one of two shapes:

* pairs (collab, ddi, ppa): ``edge`` ``[P, 2]`` and, for valid/test, ``edge_neg``
  ``[Q, 2]``, ranked against all positives (Hits@K);
* sources (citation2): ``source_node`` and ``target_node`` ``[P]`` and, for valid/test,
  ``target_node_neg`` ``[P, K]``, each positive ranked against its own row (MRR).

The ``.pt`` files are read with ``weights_only=True`` and only numpy's array globals
allowed, so a downloaded file cannot run code. The result is the graph and a
:class:`~sparsegnn.data.link_edges.LinkSplit` whose message edges are the graph's (OGB
holds validation and test edges out of it).
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sparsegnn.data.edges import directed_edge_index, undirected_edge_index
from sparsegnn.data.graph import GraphData, check_features
from sparsegnn.data.link_edges import LabeledEdges, LinkSplit
from sparsegnn.data.ogb import _csv, _single_graph, split_folder
from sparsegnn.data.paths import dataset_dir
from sparsegnn.errors import DataFormatError

PREFIX = "ogbl-"
# Official split folder and whether edge.csv lists each undirected edge once (OGB's
# add_inverse_edge), from ogb's linkproppred/master.csv.
SPLITS = {"ogbl-collab": "time", "ogbl-ddi": "target", "ogbl-ppa": "throughput",
          "ogbl-citation2": "time"}
_DIRECTED = {"ogbl-citation2"}
_NP_RECONSTRUCT = np.zeros(0).__reduce__()[0]
# numpy's array globals, under numpy 1's and 2's module names, and the dtype classes of
# the arrays OGB stores (ids, weights, years): nothing else is allowed to unpickle.
_SAFE = [np.ndarray, np.dtype, _NP_RECONSTRUCT,
         (_NP_RECONSTRUCT, "numpy.core.multiarray._reconstruct"),
         *(type(np.dtype(t)) for t in ("int64", "int32", "float64", "float32", "bool"))]


@dataclass(frozen=True)
class LinkDataset:
    """An ``ogbl-*`` graph (training edges, features) and its official split."""

    graph: GraphData
    split: LinkSplit


def is_ogbl_name(text: str) -> bool:
    return text.lower().startswith(PREFIX)


def load_ogbl(name: str, root: str | os.PathLike[str] | None = None) -> LinkDataset:
    """Dataset ``name`` (``ogbl-collab``) from ``root/ogbl_collab`` as ``ogb`` lays it out."""
    return read_ogbl_folder(dataset_dir(name.replace("-", "_"), root), name)


def read_ogbl_folder(folder: str | os.PathLike[str], name: str | None = None) -> LinkDataset:
    """One OGB link-property folder (``.../ogbl_ddi``) as a graph and its split."""
    folder = Path(folder)
    name = name or folder.name.replace("_", "-")
    raw = folder / "raw"
    if (raw / "triplet-type-list.csv.gz").is_file() or (raw / "edge_reltype.csv.gz").is_file():
        raise DataFormatError(f"{folder}: a knowledge graph (typed triples); sparsegnn reads "
                              "the homogeneous ogbl datasets (collab, ddi, ppa, citation2)")
    num_nodes = _single_graph(raw / "num-node-list.csv.gz")
    edges = _csv(raw / "edge.csv.gz", np.int64, columns=2)
    _check_ids(edges, num_nodes, raw / "edge.csv.gz")
    x = _features(raw / "node-feat.csv.gz", num_nodes)
    undirected = name not in _DIRECTED
    build = undirected_edge_index if undirected else directed_edge_index
    edge_index = build(edges[:, 0], edges[:, 1], num_nodes)
    graph = GraphData(edge_index=edge_index, num_nodes=num_nodes, x=x, name=name,
                      meta={"source": str(folder), "ogb_name": name})
    parts = split_folder(folder / "split", SPLITS.get(name))
    sets = {key: _labeled(_read_pt(parts / f"{stem}.pt"), num_nodes, parts / f"{stem}.pt")
            for key, stem in (("train", "train"), ("val", "valid"), ("test", "test"))}
    split = LinkSplit(num_nodes, undirected, edge_index, edge_index, sets["train"],
                      sets["val"], sets["test"], {"method": "ogb", "name": name,
                                                  "split": parts.name})
    return LinkDataset(graph, split)


def _features(path: Path, num_nodes: int) -> torch.Tensor | None:
    if not path.is_file():
        return None
    x = _csv(path, np.float32)
    if x.shape[0] != num_nodes:
        raise DataFormatError(f"{path}: {x.shape[0]} rows for {num_nodes} nodes")
    check_features(x, path)
    return torch.from_numpy(np.ascontiguousarray(x))


def _read_pt(path: Path) -> dict[str, torch.Tensor]:
    """A split file's dictionary, its arrays as int64 tensors; no pickled code runs."""
    if not path.is_file():
        raise DataFormatError(f"{path}: file is missing (OGB layout: split/<kind>/*.pt)")
    try:
        with torch.serialization.safe_globals(_SAFE):
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as err:
        raise DataFormatError(f"{path}: not an OGB split file readable without running "
                              f"code ({str(err).splitlines()[0]})") from err
    if not isinstance(obj, dict):
        raise DataFormatError(f"{path}: expected a dictionary of arrays")
    return {key: _as_ids(value, path, key) for key, value in obj.items()}


def _as_ids(value: Any, path: Path, key: str) -> torch.Tensor:
    t = torch.from_numpy(np.asarray(value)) if isinstance(value, np.ndarray) else value
    if not isinstance(t, torch.Tensor):
        raise DataFormatError(f"{path}: {key!r} is not an array")
    return t if t.dtype.is_floating_point else t.to(torch.int64)


def _labeled(part: dict[str, torch.Tensor], num_nodes: int, path: Path) -> LabeledEdges:
    """Positives and negatives of one split file, in either of OGB's shapes."""
    if "edge" in part:
        pos = _pairs(part["edge"], path, "edge")
        neg = _pairs(part["edge_neg"], path, "edge_neg") if "edge_neg" in part else \
            torch.empty(2, 0, dtype=torch.int64)
        tails = None
    elif "source_node" in part and "target_node" in part:
        pos = torch.stack([part["source_node"].reshape(-1), part["target_node"].reshape(-1)])
        tails = part.get("target_node_neg")
        if tails is not None and (tails.dim() != 2 or tails.shape[0] != pos.shape[1]):
            raise DataFormatError(f"{path}: target_node_neg must be [{pos.shape[1]}, K], got "
                                  f"{list(tails.shape)}")
        neg = _tail_pairs(pos[0], tails)
    else:
        raise DataFormatError(f"{path}: holds {sorted(part)}; expected 'edge' or "
                              "'source_node' and 'target_node'")
    for what, t in (("positive", pos), ("negative", neg)):
        _check_ids(t.T.numpy(), num_nodes, path, what)
    return LabeledEdges(pos, neg, tails)


def _pairs(t: torch.Tensor, path: Path, key: str) -> torch.Tensor:
    if t.dim() != 2 or t.shape[1] != 2:
        raise DataFormatError(f"{path}: {key!r} must be [E, 2], got {list(t.shape)}")
    return t.T.contiguous()


def _tail_pairs(sources: torch.Tensor, tails: torch.Tensor | None) -> torch.Tensor:
    """Per-source negatives as shared pairs too (every ``(s, t')``), for AUC and AP."""
    if tails is None:
        return torch.empty(2, 0, dtype=torch.int64)
    return torch.stack([sources.repeat_interleave(tails.shape[1]), tails.reshape(-1)])


def _check_ids(pairs: np.ndarray, num_nodes: int, path: Path, what: str = "edge") -> None:
    if pairs.size and (pairs.min() < 0 or pairs.max() >= num_nodes):
        raise DataFormatError(f"{path}: {what} ids span [{pairs.min()}, {pairs.max()}] but "
                              f"the graph has {num_nodes} nodes")
