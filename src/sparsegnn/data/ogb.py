"""OGB node-property datasets from the folder the ``ogb`` package downloads, without ``ogb``.

``NodePropPredDataset(name, root)`` leaves ``root/<name with _>/`` holding
``raw/edge.csv.gz`` (one ``src,dst`` row per edge), ``raw/num-node-list.csv.gz`` and
``raw/num-edge-list.csv.gz`` (one row: the graph's counts), ``raw/node-feat.csv.gz`` and
``raw/node-label.csv.gz`` (one row per node), and the official split as
``split/<kind>/{train,valid,test}.csv.gz`` (one node id per row); ``ogbn-papers100M`` has
``raw/data.npz`` and ``raw/node-label.npz`` instead of the CSV files. Reading that layout
directly means a dataset already on disk for PyG or DGL trains here as it is, with the
split its leaderboard uses. ``ogb`` itself, where installed, is only used for its
Evaluator (:func:`ogb_evaluate`), so reported metrics are the leaderboard's own.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from sparsegnn.data.edges import directed_edge_index, undirected_edge_index
from sparsegnn.data.graph import GraphData, check_features
from sparsegnn.data.paths import dataset_dir
from sparsegnn.errors import DataFormatError
from sparsegnn.optional import installed, require

PREFIX = "ogbn-"
# Official split folder and whether edge.csv lists each undirected edge once (OGB's
# add_inverse_edge), from ogb's nodeproppred/master.csv for the single-label datasets.
SPLITS = {"ogbn-arxiv": "time", "ogbn-products": "sales_ranking", "ogbn-papers100M": "time"}
_LISTED_ONCE = {"ogbn-products"}
_SPLIT_FILES = {"train": "train", "val": "valid", "test": "test"}


def is_ogb_name(text: str) -> bool:
    return text.lower().startswith(PREFIX)


def is_ogb_folder(path: Path) -> bool:
    """Whether ``path`` is a dataset folder in the layout ``ogb`` downloads."""
    raw = path / "raw"
    return (raw / "edge.csv.gz").is_file() or (raw / "data.npz").is_file()


def load_ogb(name: str, root: str | os.PathLike[str] | None = None, *,
             undirected: bool = True) -> GraphData:
    """Dataset ``name`` (``ogbn-arxiv``) from ``root/ogbn_arxiv`` as ``ogb`` lays it out."""
    folder = dataset_dir(name.replace("-", "_"), root)
    return read_ogb_folder(folder, name, undirected=undirected)


def read_ogb_folder(folder: str | os.PathLike[str], name: str | None = None, *,
                    undirected: bool = True) -> GraphData:
    """One OGB node-property dataset folder (``.../ogbn_arxiv``) as a :class:`GraphData`.

    ``undirected`` stores both directions of every edge (how GCNs are trained on arxiv);
    without it the edges keep OGB's direction, except where OGB itself adds the inverse
    (products). Train/val/test masks are the official split's.
    """
    folder = Path(folder)
    name = name or folder.name.replace("_", "-")
    raw = folder / "raw"
    if (raw / "triplet-type-list.csv.gz").is_file():
        raise DataFormatError(f"{folder}: a heterogeneous OGB graph; sparsegnn reads "
                              "homogeneous node-property datasets only")
    if (raw / "data.npz").is_file():
        src, dst, x, labels = _read_binary(raw)
    else:
        src, dst, x, labels = _read_csv_graph(raw)
    num_nodes = labels.shape[0]
    y, labelled = _labels(labels, raw)
    both = undirected or name in _LISTED_ONCE
    build = undirected_edge_index if both else directed_edge_index
    masks = _split_masks(folder / "split", SPLITS.get(name), num_nodes, labelled)
    return GraphData(
        edge_index=build(src, dst, num_nodes), num_nodes=num_nodes,
        x=None if x is None else torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)),
        y=torch.from_numpy(y), name=name, meta={"source": str(folder), "ogb_name": name},
        **masks,
    )


def _read_csv_graph(raw: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    edges = _csv(raw / "edge.csv.gz", np.int64, columns=2)
    num_nodes = _single_graph(raw / "num-node-list.csv.gz")
    x = _csv(raw / "node-feat.csv.gz", np.float32) if (raw / "node-feat.csv.gz").is_file() \
        else None
    labels = _csv(raw / "node-label.csv.gz", np.float64)
    _check_rows(raw, num_nodes, x, labels, edges)
    return edges[:, 0], edges[:, 1], x, labels


def _read_binary(raw: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """``ogbn-papers100M``'s ``data.npz`` + ``node-label.npz`` (read without pickles)."""
    try:
        with np.load(raw / "data.npz", allow_pickle=False) as data:
            edge_index, nodes = data["edge_index"], data["num_nodes_list"]
            x = data["node_feat"] if "node_feat" in data.files else None
        with np.load(raw / "node-label.npz", allow_pickle=False) as lab:
            labels = lab["node_label"]
    except (OSError, ValueError, KeyError, EOFError) as err:
        raise DataFormatError(f"{raw}: not OGB's binary layout ({err})") from err
    if nodes.size != 1:
        raise DataFormatError(f"{raw}/data.npz: holds {nodes.size} graphs, expected one")
    _check_rows(raw, int(nodes[0]), x, np.asarray(labels).reshape(len(labels), -1),
                edge_index.T)
    return edge_index[0], edge_index[1], x, labels


def _csv(path: Path, dtype: type, columns: int | None = None) -> np.ndarray:
    """A headerless CSV (``.gz`` or not) as a 2-d array, or an error naming the file."""
    if not path.is_file():
        raise DataFormatError(f"{path}: file is missing (OGB layout: raw/*.csv.gz)")
    try:
        out = np.loadtxt(path, dtype=dtype, delimiter=",", ndmin=2)
    except (ValueError, OSError, EOFError) as err:
        raise DataFormatError(f"{path}: not a numeric CSV ({err})") from err
    if columns is not None and out.shape[1] != columns and out.size:
        raise DataFormatError(f"{path}: {out.shape[1]} columns, expected {columns}")
    return out


def _single_graph(path: Path) -> int:
    counts = _csv(path, np.int64).ravel()
    if counts.size != 1:
        raise DataFormatError(f"{path}: lists {counts.size} graphs; a node-property "
                              "dataset has one (graph-property datasets are not read)")
    return int(counts[0])


def _check_rows(raw: Path, num_nodes: int, x: np.ndarray | None, labels: np.ndarray,
                edges: np.ndarray) -> None:
    for what, rows in (("node-feat", None if x is None else x.shape[0]),
                       ("node-label", labels.shape[0])):
        if rows is not None and rows != num_nodes:
            raise DataFormatError(f"{raw}: {what} has {rows} rows for {num_nodes} nodes")
    if x is not None:
        check_features(x, raw / "node-feat.csv.gz")
    if edges.size and (edges.min() < 0 or edges.max() >= num_nodes):
        raise DataFormatError(f"{raw}: edge ids span [{edges.min()}, {edges.max()}] but the "
                              f"graph has {num_nodes} nodes")


def _labels(labels: np.ndarray, raw: Path) -> tuple[np.ndarray, np.ndarray]:
    """Class ids (0 where unlabelled) and which nodes carry a label (papers100M has NaN)."""
    labels = np.asarray(labels, dtype=np.float64)
    if labels.ndim == 2 and labels.shape[1] != 1:
        raise DataFormatError(f"{raw}: {labels.shape[1]} label columns (multi-task, as "
                              "ogbn-proteins); sparsegnn trains single-label classification")
    labels = labels.reshape(-1)
    labelled = ~np.isnan(labels)
    y = np.where(labelled, labels, 0)
    if (y < 0).any() or (y != np.round(y)).any():
        raise DataFormatError(f"{raw}: labels must be class ids >= 0")
    return y.astype(np.int64), labelled


def split_folder(split_root: Path, kind: str | None) -> Path:
    """``split/<kind>``; ``kind`` None takes the one folder there is."""
    kinds = sorted(p.name for p in split_root.iterdir() if p.is_dir()) \
        if split_root.is_dir() else []
    if kind is None and len(kinds) == 1:
        kind = kinds[0]
    if kind is None or kind not in kinds:
        raise DataFormatError(f"{split_root}: expected the official split folder "
                              f"{kind or 'split/<kind>'}; found {kinds or 'none'}")
    return split_root / kind


def _split_masks(split_root: Path, kind: str | None, num_nodes: int,
                 labelled: np.ndarray) -> dict[str, torch.Tensor]:
    """The official split as masks; ``kind`` None takes the one folder under ``split/``."""
    folder = split_folder(split_root, kind)
    masks = {}
    for key, stem in _SPLIT_FILES.items():
        path = folder / f"{stem}.csv.gz"
        index = _csv(path, np.int64).ravel()
        if index.size and (index.min() < 0 or index.max() >= num_nodes):
            raise DataFormatError(f"{path}: node ids outside [0, {num_nodes})")
        if not labelled[index].all():
            raise DataFormatError(f"{path}: lists nodes that have no label")
        mask = torch.zeros(num_nodes, dtype=torch.bool)
        mask[torch.from_numpy(index)] = True
        masks[f"{key}_mask"] = mask
    return masks


def ogb_evaluate(name: str, y_true: torch.Tensor, y_pred: torch.Tensor) -> dict[str, float] | None:
    """OGB's own Evaluator on class predictions (``{"acc": ...}``), or None when ``ogb``
    is not installed or ``name`` is not one of its datasets. Its ``master.csv`` ships in
    the package, so this needs no network."""
    if not installed("ogb"):
        return None
    try:
        evaluator = require("ogb.nodeproppred").Evaluator(name)
    except ValueError:  # not an OGB dataset name
        return None
    result = evaluator.eval({"y_true": y_true.reshape(-1, 1).cpu(),
                             "y_pred": y_pred.reshape(-1, 1).cpu()})
    return {key: float(value) for key, value in result.items()}


def ogb_evaluate_pairs(name: str, confusion: list[list[int]]) -> dict[str, float] | None:
    """:func:`ogb_evaluate` on predictions given as a confusion matrix (rows true class,
    columns predicted): accuracy, the metric of every single-label OGB node dataset,
    depends only on the (true, predicted) pairs, which the matrix holds exactly."""
    counts = torch.tensor(confusion, dtype=torch.int64)
    true, pred = counts.nonzero(as_tuple=True)
    reps = counts[true, pred]
    return ogb_evaluate(name, true.repeat_interleave(reps), pred.repeat_interleave(reps))
