"""A real typed graph from a citation data set: papers and the words they contain.

Heterogeneous benchmarks derive "term" nodes from document text (HGB's DBLP and ACM;
Text-GCN's document-word graph). :func:`paper_word_graph` does the same with the
bag-of-words features a citation graph already carries, so Cora and CiteSeer (bundled)
become typed graphs with real labels and their own splits: node types ``paper`` (the
target) and ``word`` (one per feature column some paper uses), edge types ``cites`` (the
citations, undirected, so their own reverse), ``has`` (a paper's nonzero feature columns)
and its reverse ``rev_has``, both directions listed as OpenHINE's reader lists them
(``meta['reverse_edges']``). No node type keeps features: R-GCN learns an input per node,
as in Schlichtkrull et al.'s entity classification.
"""

from __future__ import annotations

import os

import torch

from sparsegnn.data.graph import GraphData
from sparsegnn.data.hetero import HeteroGraph
from sparsegnn.data.io import load_any
from sparsegnn.errors import DataFormatError

# Typed data set name -> the citation data set it is derived from.
WORD_GRAPHS = {"cora_words": "cora", "citeseer_words": "citeseer"}


def paper_word_graph(graph: GraphData, *, name: str) -> HeteroGraph:
    """The paper-word typed graph of a labelled citation graph with features (see the
    module); word ``k`` is the ``k``-th feature column used by at least one paper, its
    column in ``meta['word_columns']``."""
    if graph.x is None or graph.y is None:
        raise DataFormatError(f"{graph.name}: a paper-word graph needs the bag-of-words "
                              "features and the labels of the papers")
    papers, columns = graph.x.nonzero(as_tuple=True)
    used = torch.unique(columns)
    word_of = torch.full((int(graph.x.shape[1]),), -1, dtype=torch.int64)
    word_of[used] = torch.arange(used.numel())
    has = torch.stack([papers, word_of[columns]])
    typed = HeteroGraph(
        num_nodes={"paper": graph.num_nodes, "word": int(used.numel())},
        edge_index={("paper", "cites", "paper"): graph.edge_index.long(),
                    ("paper", "has", "word"): has,
                    ("word", "rev_has", "paper"): has.flip(0)},
        target="paper", y=graph.y, train_mask=graph.train_mask, val_mask=graph.val_mask,
        test_mask=graph.test_mask, name=name,
        meta={"source": graph.meta.get("source", graph.name), "derived_from": graph.name,
              "derivation": "paper-word graph of the bag-of-words features",
              "reverse_edges": True, "word_columns": used.tolist()})
    return typed.validate()


def load_word_graph(name: str, root: str | os.PathLike[str] | None = None) -> HeteroGraph:
    """``cora_words`` or ``citeseer_words``: the paper-word graph of that data set as
    :func:`~sparsegnn.data.io.load_any` reads it (the bundled copy by default)."""
    if name not in WORD_GRAPHS:
        raise DataFormatError(f"{name}: not a paper-word graph (known: "
                              f"{', '.join(WORD_GRAPHS)})")
    return paper_word_graph(load_any(WORD_GRAPHS[name], root), name=name)
