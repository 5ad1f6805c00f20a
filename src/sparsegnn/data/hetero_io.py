"""One entry point for typed graphs, as :func:`~sparsegnn.data.io.load_any` is for plain ones.

:func:`load_hetero` takes a generator spec (``hsbm:nodes=65536,blocks=8,degree=8``), a
dataset name (an OpenHINE folder in the data root such as ``acm``; ``cora_words`` and
``citeseer_words``, the paper-word graphs of :mod:`~sparsegnn.data.word_graph`), or a path: a
PyG ``HeteroData`` ``.pt`` file, a DGL heterograph ``CSVDataset`` folder (``meta.yaml``) or
an OpenHINE folder. :func:`is_hetero_source` lets a command route a source here instead of
to the homogeneous loaders.
"""

from __future__ import annotations

import os
from pathlib import Path

from sparsegnn.data.dgl_hetero import is_dgl_hetero_dir, read_dgl_hetero
from sparsegnn.data.hetero import HeteroGraph
from sparsegnn.data.openhine import is_openhine_dir, read_openhine
from sparsegnn.data.paths import dataset_dir
from sparsegnn.data.pyg_hetero import is_pyg_hetero_file, read_pyg_hetero
from sparsegnn.data.typed_sbm import typed_sbm
from sparsegnn.data.word_graph import WORD_GRAPHS, load_word_graph
from sparsegnn.errors import DataFormatError

SPEC = "hsbm:"
# Typed datasets known by name: the folder name under the data root, or a paper-word graph.
HETERO_DATASETS = ("acm", *WORD_GRAPHS)
_SPEC_KEYS = {"nodes": int, "blocks": int, "degree": float, "features": int, "p_in": float}


def is_hetero_source(source: str | os.PathLike[str], root: str | os.PathLike[str] | None = None
                     ) -> bool:
    """Whether ``source`` names a typed graph :func:`load_hetero` reads."""
    text = os.fspath(source)
    if text.startswith(SPEC) or text.lower() in HETERO_DATASETS:
        return True
    path = Path(text)
    return (path.is_dir() and (is_dgl_hetero_dir(path) or is_openhine_dir(path))) \
        or is_pyg_hetero_file(path)


def load_hetero(source: str | os.PathLike[str], root: str | os.PathLike[str] | None = None,
                *, seed: int | None = None, target: str | None = None) -> HeteroGraph:
    """A validated typed graph from a spec, a dataset name or a path (see the module)."""
    text = os.fspath(source)
    if text.startswith(SPEC):
        return hsbm_from_spec(text, seed=seed or 0)
    if text.lower() in WORD_GRAPHS:
        return load_word_graph(text.lower(), root)
    if text.lower() in HETERO_DATASETS:
        return read_openhine(dataset_dir(text.lower(), root), seed=seed or 0)
    path = Path(text)
    if path.is_dir() and is_dgl_hetero_dir(path):
        return read_dgl_hetero(path, target=target)
    if path.is_dir() and is_openhine_dir(path):
        return read_openhine(path, seed=seed or 0)
    if path.suffix == ".pt" and path.is_file():
        return read_pyg_hetero(path, target=target)
    raise DataFormatError(f"{path}: not a typed graph (expected {SPEC}... , "
                          f"{', '.join(HETERO_DATASETS)}, a HeteroData .pt file, a folder with "
                          "meta.yaml or an OpenHINE folder with edge.txt and label.txt)")


def hsbm_from_spec(spec: str, *, seed: int = 0) -> HeteroGraph:
    """``hsbm:nodes=N,blocks=B,degree=D,features=F,p_in=P`` as a :func:`typed_sbm`."""
    args: dict[str, float] = {}
    for part in filter(None, spec[len(SPEC):].split(",")):
        key, _, value = part.partition("=")
        if key not in _SPEC_KEYS:
            raise DataFormatError(f"{spec}: unknown key {key!r} (keys: {', '.join(_SPEC_KEYS)})")
        try:
            args[key] = _SPEC_KEYS[key](value)
        except ValueError:
            raise DataFormatError(f"{spec}: {key}={value!r} is not a number") from None
    return typed_sbm(int(args.get("nodes", 4096)), blocks=int(args.get("blocks", 4)),
                     degree=float(args.get("degree", 4.0)), p_in=args.get("p_in"),
                     num_features=int(args.get("features", 0)), seed=seed)
