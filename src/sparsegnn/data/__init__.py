"""Datasets, formats and generators: where every graph enters sparsegnn.

Everything returns a :class:`GraphData`. :func:`load_any` is the one entry point that
accepts a dataset name (``cora``, ``citeseer``), a generator spec (``rmat:18``,
``sbm:nodes=4096,blocks=8,degree=16``) or a file (our ``.npz``, a scipy ``.npz``, an
edge list). Typed graphs are a :class:`HeteroGraph`, from :func:`load_hetero` (PyG
``HeteroData`` files, DGL heterograph CSV folders, OpenHINE folders, ``hsbm:`` specs).
"""

from sparsegnn.data.citeseer import default_featurizer, load_citeseer_text
from sparsegnn.data.edges import degree_stats, directed_edge_index, undirected_edge_index
from sparsegnn.data.generators import from_spec, parse_spec, rmat, sbm, uniform_random
from sparsegnn.data.graph import GraphData, row_normalize
from sparsegnn.data.hetero import EdgeType, HeteroGraph, RelationalGraph
from sparsegnn.data.hetero_io import is_hetero_source, load_hetero
from sparsegnn.data.io import (
    DATASETS,
    FORMAT_VERSION,
    convert,
    load_any,
    load_graph,
    read_edge_list,
    read_graph,
    read_scipy_npz,
    save_graph,
)
from sparsegnn.data.paths import data_root, dataset_dir
from sparsegnn.data.planetoid import load_cora
from sparsegnn.data.pyg_hetero import from_pyg_hetero
from sparsegnn.data.splits import stratified_split
from sparsegnn.data.text import HashedTfidf, tokenize
from sparsegnn.data.typed_sbm import typed_sbm

__all__ = [
    "DATASETS",
    "FORMAT_VERSION",
    "EdgeType",
    "GraphData",
    "HashedTfidf",
    "HeteroGraph",
    "RelationalGraph",
    "convert",
    "data_root",
    "dataset_dir",
    "default_featurizer",
    "degree_stats",
    "directed_edge_index",
    "from_pyg_hetero",
    "from_spec",
    "is_hetero_source",
    "load_any",
    "load_citeseer_text",
    "load_cora",
    "load_graph",
    "load_hetero",
    "parse_spec",
    "read_edge_list",
    "read_graph",
    "read_scipy_npz",
    "rmat",
    "row_normalize",
    "save_graph",
    "sbm",
    "stratified_split",
    "tokenize",
    "typed_sbm",
    "undirected_edge_index",
    "uniform_random",
]
