"""Building a student on a corpus: its featurizer, its graph operators, its network.

What distil trains and what an :class:`~sparsegnn.curation.distil.Annotator` reloads to
annotate are built by the same functions here, so an annotator sees exactly the inputs it
was trained on: the featurizer a configuration names (hashed TF-IDF or sentence
embeddings) and its rows as an operand, the normalised operators over the edge kinds
ingest wrote, the label inputs, and the network (a graph student with its text-only
fallback, or one student alone). It is apart from the training
(:mod:`sparsegnn.curation.distil`) because annotating a corpus needs all of this and none
of the training.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from sparsegnn.curation.document_store import DOCUMENTS_FILE, GRAPH_FILE
from sparsegnn.curation.ingest import edge_kinds, iter_ids, load_graph_edges
from sparsegnn.curation.labels import LabelSet
from sparsegnn.curation.student import (
    POOLED,
    DocumentGraph,
    GraphStudent,
    StudentConfig,
    TextFallback,
)
from sparsegnn.data.edges import undirected_edge_index
from sparsegnn.data.embed import SentenceEmbedder
from sparsegnn.data.text import HashedTfidf
from sparsegnn.errors import DataFormatError
from sparsegnn.sparse import CSRMatrix, gcn_norm, row_norm

Featurizer = HashedTfidf | SentenceEmbedder


def featurizer_for(cfg: StudentConfig) -> Featurizer:
    if cfg.featurizer == "minilm":
        return SentenceEmbedder()
    if cfg.featurizer != "tfidf":
        raise ValueError(f"unknown featurizer {cfg.featurizer!r}: use 'tfidf' or 'minilm'")
    return HashedTfidf(n_features=cfg.n_features, ngram_range=(1, cfg.ngram_max),
                       sublinear_tf=True, min_df=cfg.min_df)


def in_features(cfg: StudentConfig) -> int:
    """Width of the feature rows the input projection reads."""
    return SentenceEmbedder.dim if cfg.featurizer == "minilm" else cfg.n_features


def as_operand(block: sp.csr_matrix | np.ndarray) -> CSRMatrix | torch.Tensor:
    """A featurized block as the input projection's operand: sparse TF-IDF rows as our
    CSRMatrix (float32, multiplied by SpMM), dense embeddings as a tensor."""
    if sp.issparse(block):
        return CSRMatrix.from_scipy(block.astype(np.float32))
    return torch.from_numpy(np.ascontiguousarray(block, dtype=np.float32))


def operator_names(cfg: StudentConfig) -> list[str]:
    """The operators a (resolved) configuration multiplies by: its edge kinds (or
    ``graph``, links and sites pooled), ``knn``, and ``mean`` for label inputs."""
    return list(cfg.operator_hops()) + (["mean"] if cfg.label_inputs else [])


def document_graph(store_dir: str | Path, names: list[str]) -> DocumentGraph:
    """The named operators over the undirected graphs written by ingest."""
    return operators(raw_adjacency(store_dir, names))


_EDGES_OF = {"link": ("link",), "site": ("site",), "knn": ("knn",), POOLED: ("link", "site"),
             "mean": ("link", "site")}


def raw_adjacency(store_dir: str | Path, names: list[str]) -> dict[str, CSRMatrix]:
    """Each named operator's undirected adjacency, unnormalised (``graph`` and ``mean``:
    links and same-site edges together)."""
    path = Path(store_dir) / GRAPH_FILE
    if "knn" in names and "knn" not in edge_kinds(path):
        raise DataFormatError(f"{path}: no k-NN edges for a student that propagates over "
                              "them; ingest with --knn K")
    return {name: _adjacency(*load_graph_edges(path, _EDGES_OF[name])) for name in names}


def operators(raw: dict[str, CSRMatrix]) -> DocumentGraph:
    """A student's operators from the raw adjacencies (of a corpus or of a subgraph)."""
    ops = {name: gcn_norm(a, symmetric=True) for name, a in raw.items() if name != "mean"}
    return DocumentGraph(ops, row_norm(raw["mean"]) if "mean" in raw else None)


def _adjacency(n: int, src: np.ndarray, dst: np.ndarray) -> CSRMatrix:
    return CSRMatrix.from_edge_index(undirected_edge_index(src, dst, n), n)


def text_config(cfg: StudentConfig) -> StudentConfig:
    """The text-only student trained beside a graph student: the same, with no graph."""
    return replace(cfg, hops=0, knn_hops=0, label_inputs=False)


def build_model(cfg: StudentConfig, heads: dict[str, int], seed: int | None = None
                ) -> GraphStudent | TextFallback:
    """The annotator network ``cfg`` describes (``knn_hops`` and ``edge_kinds`` already
    resolved): a graph student with its text-only fallback, or one student alone (text
    only, or the previous design). With ``seed``, torch is seeded before each student is
    built, so each starts as a run of that student alone would."""
    if cfg.mixing == "none" or not cfg.uses_graph:
        return _student(cfg, heads, seed)
    return TextFallback(_student(text_config(cfg), heads, seed), _student(cfg, heads, seed))


def _student(cfg: StudentConfig, heads: dict[str, int], seed: int | None) -> GraphStudent:
    if seed is not None:
        torch.manual_seed(seed)
    return GraphStudent(in_features(cfg), cfg.hidden, cfg.operator_hops(), heads, cfg.dropout,
                        cfg.label_inputs, learn_weights=cfg.mixing != "none")


def resolve_graph(cfg: StudentConfig, store_dir: str | Path) -> StudentConfig:
    """``knn_hops=None`` means one k-NN hop when ingest made k-NN edges, none otherwise;
    ``edge_kinds=None`` the kinds among links and same-site edges the corpus has."""
    path = Path(store_dir) / GRAPH_FILE
    kinds = edge_kinds(path)
    if cfg.knn_hops is None:
        cfg = replace(cfg, knn_hops=1 if "knn" in kinds else 0)
    if cfg.edge_kinds is None:
        present = tuple(k for k in ("link", "site")
                        if k in kinds and load_graph_edges(path, (k,))[1].size)
        cfg = replace(cfg, edge_kinds=present)
    return cfg


def label_matrix(row_of: dict[str, int], labels: LabelSet, classes: dict[str, list[str]],
                 n: int) -> torch.Tensor:
    """``Y``: each labelled document's label distribution per head, side by side.

    Labelled ids absent from this corpus are skipped (an annotator may label a corpus
    other than the one it was trained on)."""
    labels = labels.subset([d for d in labels.ids if d in row_of])
    targets = label_targets(labels, classes)
    y = torch.zeros(n, sum(len(v) for v in classes.values()))
    rows = torch.tensor([row_of[d] for d in labels.ids], dtype=torch.long)
    y[rows] = torch.cat([targets[c] for c in classes], dim=1)
    return y


def corpus_ids(store_dir: str | Path, batch_rows: int = 65536) -> list[str]:
    return [d for chunk in iter_ids(Path(store_dir) / DOCUMENTS_FILE, batch_rows) for d in chunk]


def label_targets(labels: LabelSet, classes: dict[str, list[str]]) -> dict[str, torch.Tensor]:
    out = {}
    for cat, codes in classes.items():
        col = {c: j for j, c in enumerate(codes)}
        lab = labels.categories[cat]
        t = torch.zeros(len(labels.ids), len(codes))
        if lab.probs is not None:
            src = [col[c] for c in lab.classes]
            t[:, src] = torch.from_numpy(lab.probs)
        else:
            t[torch.arange(len(labels.ids)), torch.tensor([col[p] for p in lab.primary])] = 1.0
        out[cat] = t
    return out
