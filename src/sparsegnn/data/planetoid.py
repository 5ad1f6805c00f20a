"""Cora from the original Planetoid split files, with the standard 140/500/1000 split.

The files are Python 2 pickles. Unpickling can run arbitrary code, so they are read with
an Unpickler that resolves only the handful of numpy/scipy/collections names these files
actually reference; anything else is refused as a corrupt file rather than imported.
"""

from __future__ import annotations

import collections
import io
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from sparsegnn.data.edges import undirected_edge_index
from sparsegnn.data.graph import GraphData
from sparsegnn.data.paths import dataset_dir, read_data_bytes
from sparsegnn.errors import DataFormatError

CORA_CLASSES = [
    "Case_Based",
    "Genetic_Algorithms",
    "Neural_Networks",
    "Probabilistic_Methods",
    "Reinforcement_Learning",
    "Rule_Learning",
    "Theory",
]
_NUM_VAL = 500

# numpy's array reconstructor, taken from ndarray's own pickle protocol so that neither the
# deprecated ``numpy.core`` nor the private ``numpy._core`` module has to be imported.
_NP_RECONSTRUCT = np.zeros(0).__reduce__()[0]
_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _NP_RECONSTRUCT,
    ("numpy._core.multiarray", "_reconstruct"): _NP_RECONSTRUCT,
    ("scipy.sparse.csr", "csr_matrix"): sp.csr_matrix,
    ("scipy.sparse._csr", "csr_matrix"): sp.csr_matrix,
    ("collections", "defaultdict"): collections.defaultdict,
    ("__builtin__", "list"): list,
    ("builtins", "list"): list,
}


class _RestrictedUnpickler(pickle.Unpickler):
    """Resolves only the globals in ``_ALLOWED``; the Planetoid files need nothing more."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing to load global {module}.{name}") from None


def load_cora(root: str | os.PathLike[str] | None = None) -> GraphData:
    """Cora: 2708 papers, 5278 citation links, 1433 binary word features, 7 topics.

    ``root`` is the data root holding ``cora/`` (or the ``cora`` folder itself); by
    default :func:`sparsegnn.data.paths.data_root` finds it. Features stay raw 0/1 floats:
    row normalisation is a modelling choice, left to the model.
    """
    folder = dataset_dir("cora", root)
    allx = _as_csr(folder / "ind.cora.allx")
    tx = _as_csr(folder / "ind.cora.tx")
    ally = _as_labels(folder / "ind.cora.ally")
    ty = _as_labels(folder / "ind.cora.ty")
    num_train = _as_labels(folder / "ind.cora.y").shape[0]
    test_path = folder / "ind.cora.test.index"
    test_index = _read_test_index(test_path)
    num_nodes = allx.shape[0] + tx.shape[0]
    if allx.shape[1] != tx.shape[1] or ally.shape[0] != allx.shape[0]:
        raise DataFormatError(
            f"{folder}: allx is {allx.shape}, tx {tx.shape} and ally has {ally.shape[0]} "
            "rows; the feature widths and the allx/ally row counts must match"
        )
    _check_test_index(test_index, allx.shape[0], num_nodes, ty.shape[0], test_path)
    # Row i of tx/ty belongs to node test_index[i]; move it there.
    order = np.arange(num_nodes)
    order[test_index] = np.arange(allx.shape[0], num_nodes)
    x = sp.vstack([allx, tx]).tocsr()[order]
    y = np.concatenate([ally, ty])[order]
    edge_index = _graph_edges(folder / "ind.cora.graph", num_nodes)
    train_mask = _mask(num_nodes, np.arange(num_train))
    val_mask = _mask(num_nodes, np.arange(num_train, num_train + _NUM_VAL))
    return GraphData(
        edge_index=edge_index,
        num_nodes=num_nodes,
        x=torch.from_numpy(x.toarray().astype(np.float32)),
        y=torch.from_numpy(y),
        train_mask=train_mask,
        val_mask=val_mask,
        test_mask=_mask(num_nodes, test_index),
        name="cora",
        class_names=list(CORA_CLASSES),
        meta={"source": str(folder)},
    )


def _read_pickle(path: Path) -> Any:
    try:
        return _RestrictedUnpickler(io.BytesIO(read_data_bytes(path)), encoding="latin1").load()
    except FileNotFoundError:
        raise DataFormatError(f"{path}: file is missing") from None
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError,
            AttributeError, IndexError, KeyError) as err:
        raise DataFormatError(f"{path}: not a readable Planetoid pickle ({err})") from err


def _read_test_index(path: Path) -> np.ndarray:
    try:
        text = read_data_bytes(path).decode()
    except FileNotFoundError:
        raise DataFormatError(f"{path}: file is missing") from None
    except (OSError, UnicodeDecodeError) as err:
        raise DataFormatError(f"{path}: not readable as text ({err})") from err
    try:
        return np.array([int(tok) for tok in text.split()], dtype=np.int64)
    except ValueError as err:
        raise DataFormatError(f"{path}: expected one integer node id per line ({err})") from err


def _check_test_index(
    test_index: np.ndarray, first: int, num_nodes: int, num_labels: int, path: Path
) -> None:
    """The test ids must be exactly the nodes after allx, one per row of tx and ty."""
    expected = num_nodes - first
    if test_index.size != expected or num_labels != expected:
        raise DataFormatError(
            f"{path}: {test_index.size} test ids, but tx has {expected} rows and ty "
            f"{num_labels}; all three must agree"
        )
    if not np.array_equal(np.sort(test_index), np.arange(first, num_nodes)):
        raise DataFormatError(
            f"{path}: test ids must be the distinct node ids {first}..{num_nodes - 1}"
        )


def _as_csr(path: Path) -> sp.csr_matrix:
    """Rebuilt from the raw arrays: the pickled object carries private scipy attributes."""
    obj = _read_pickle(path)
    try:
        return sp.csr_matrix((obj.data, obj.indices, obj.indptr), shape=obj.shape)
    except (AttributeError, ValueError, TypeError) as err:
        raise DataFormatError(f"{path}: expected a scipy CSR feature matrix ({err})") from err


def _as_labels(path: Path) -> np.ndarray:
    """One-hot rows to class ids."""
    obj = _read_pickle(path)
    if not isinstance(obj, np.ndarray) or obj.ndim != 2 or obj.shape[1] == 0:
        raise DataFormatError(f"{path}: expected a 2-d one-hot label array")
    return obj.argmax(axis=1).astype(np.int64)


def _graph_edges(path: Path, num_nodes: int) -> torch.Tensor:
    """The adjacency dict ``{node: [neighbours]}`` to a clean undirected edge_index."""
    graph = _read_pickle(path)
    if not isinstance(graph, dict) or not graph:
        raise DataFormatError(f"{path}: expected a non-empty dict of adjacency lists")
    try:
        src = np.concatenate([np.full(len(nbrs), node, dtype=np.int64)
                              for node, nbrs in graph.items()])
        dst = np.concatenate([np.asarray(nbrs, dtype=np.int64) for nbrs in graph.values()])
        return undirected_edge_index(src, dst, num_nodes)
    except (ValueError, TypeError, IndexError) as err:
        raise DataFormatError(f"{path}: bad adjacency lists ({err})") from err


def _mask(num_nodes: int, index: np.ndarray) -> torch.Tensor:
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[torch.from_numpy(np.asarray(index, dtype=np.int64))] = True
    return mask
