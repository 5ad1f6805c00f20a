"""The annotator models: text features plus propagation over the document graph.

Model (SIGN/APPNP-like, all message passing with our SpMM)::

    H0 = X W_in                  X: sparse TF-IDF rows, W_in: [features, hidden]
    Hk = Â H(k-1), k = 1..K      Â = D^-1/2 (A + I) D^-1/2 of the link and same-site graph
    Sj = Ŝ S(j-1), j = 1..J      Ŝ the same over the k-NN text graph, S0 = H0
    L  = D^-1 A Y                mean teacher label of the neighbours (no self loop)
    Z  = dropout(relu([H0 | H1 | ... | HK | S1 | ... | SJ | L]))
    logits_c = Z W_c + b_c       one head per category

The k-NN edges (``curate ingest --knn``) get their own operator rather than joining
``A``: a paper's citations and its textually nearest papers are different evidence, and
separate weights for each let the heads weigh them (on CiteSeer, pooling the two graphs
into one ``Â`` was worse than either alone next to the text; see docs/curation.md).

``L`` (``label_inputs``) uses the teacher labels the annotator was given: ``Y`` holds each
labelled document's label distribution (zeros elsewhere), and the adjacency has no self
loop, so a document never sees its own label, only its neighbours'.

Projecting *before* propagating is what makes bulk annotation cheap and bounded: X is
only ever touched one batch of documents at a time (``H0`` is ``n x hidden``, dense), and
each hop is one SpMM over ``n x hidden``. ``hops=0`` is the text-only student; the
teacher-side model reads sentence embeddings of a 6-layer transformer
(:class:`~sparsegnn.data.embed.SentenceEmbedder`) instead of hashed n-grams, through a
wider projection: the larger, slower model that the TF-IDF student is compared with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

from sparsegnn.sparse import CSRMatrix, spmm


@dataclass
class StudentConfig:
    """Features, architecture and optimisation of an annotator."""

    featurizer: str = "tfidf"  # or "minilm": sentence embeddings (n_features unused)
    n_features: int = 2**14
    ngram_max: int = 1
    min_df: int = 2
    hidden: int = 64
    hops: int = 2
    knn_hops: int | None = None  # None: 1 if the corpus has k-NN edges, else 0
    dropout: float = 0.5
    lr: float = 0.01
    weight_decay: float = 5e-4
    epochs: int = 200
    patience: int = 50
    label_inputs: bool = False
    batch_size: int | None = None  # None: full-graph training; else ShaDow minibatches
    fanouts: tuple[int, ...] = (10, 10)  # neighbours sampled per hop for minibatches
    seed: int = 0

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


TEXT_ONLY = StudentConfig(hops=0, knn_hops=0)
TEACHER_SIDE = StudentConfig(featurizer="minilm", hidden=256, hops=2)


@dataclass
class DocumentGraph:
    """The operators a student multiplies by: ``gcn`` = D^-1/2 (A+I) D^-1/2 for the text
    propagation over links and sites, ``knn`` the same over the k-NN text graph (None when
    the corpus has none), ``mean`` = D^-1 A for the neighbours' labels, and ``labels``
    (``Y``)."""

    gcn: CSRMatrix
    mean: CSRMatrix
    knn: CSRMatrix | None = None
    labels: torch.Tensor | None = None


class GraphStudent(nn.Module):
    """Input projection, ``hops`` (+ ``knn_hops``) propagation steps, one linear head per
    category.

    Shapes:
        x ``[n, features]`` (CSRMatrix), adj ``[n, n]`` -> ``{category: [n, classes_c]}``.
    """

    def __init__(self, in_features: int, hidden: int, hops: int,
                 heads: Mapping[str, int], dropout: float = 0.5, label_inputs: bool = False,
                 knn_hops: int = 0) -> None:
        super().__init__()
        self.hops, self.knn_hops = hops, knn_hops
        self.dropout, self.label_inputs = dropout, label_inputs
        self.w_in = nn.Parameter(torch.empty(in_features, hidden))
        width = hidden * (hops + knn_hops + 1) + (sum(heads.values()) if label_inputs else 0)
        self.heads = nn.ModuleDict({c: nn.Linear(width, k) for c, k in heads.items()})
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.w_in)
        for head in self.heads.values():
            head.reset_parameters()

    def encode(self, x: CSRMatrix | torch.Tensor) -> torch.Tensor:
        """``X W_in`` for a batch of documents (rows of X: sparse TF-IDF or dense)."""
        return spmm(x, self.w_in) if isinstance(x, CSRMatrix) else x @ self.w_in

    @property
    def needs_graph(self) -> bool:
        return self.hops > 0 or self.knn_hops > 0 or self.label_inputs

    def propagate(self, h0: torch.Tensor, graph: DocumentGraph | None) -> torch.Tensor:
        """``[H0 | ÂH0 | ... | Â^K H0 | ŜH0 | ... | Ŝ^J H0 | L]``, what the heads read."""
        if self.needs_graph and graph is None:
            raise ValueError("a graph-aware student needs the document graph")
        hs = _powers(graph.gcn, h0, self.hops) if self.hops else [h0]
        if self.knn_hops:
            if graph.knn is None:
                raise ValueError("this student propagates over k-NN edges; the corpus has "
                                 "none (ingest with --knn K)")
            hs += _powers(graph.knn, h0, self.knn_hops)[1:]
        if self.label_inputs:
            if graph.labels is None:
                raise ValueError("this student reads neighbours' teacher labels; none given")
            hs.append(spmm(graph.mean, graph.labels))
        return torch.cat(hs, dim=1)

    def classify(self, z: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-category logits of (rows of) the propagated representation."""
        z = F.dropout(F.relu(z), self.dropout, self.training)
        return {c: head(z) for c, head in self.heads.items()}

    def forward(self, x: CSRMatrix | torch.Tensor, adj: DocumentGraph | None) -> torch.Tensor:
        """All heads' logits side by side (``[n, sum of classes]``, in head order), the one
        tensor :func:`sparsegnn.train.fit` expects; :meth:`head_slices` splits it."""
        return torch.cat(list(self.classify(self.propagate(self.encode(x), adj)).values()), 1)

    def head_slices(self) -> dict[str, slice]:
        """Columns of each category's logits in :meth:`forward`'s output."""
        out, start = {}, 0
        for name, head in self.heads.items():
            out[name] = slice(start, start + head.out_features)
            start += head.out_features
        return out


def _powers(op: CSRMatrix, h0: torch.Tensor, k: int) -> list[torch.Tensor]:
    """``[H0, op H0, ..., op^k H0]``."""
    hs = [h0]
    for _ in range(k):
        hs.append(spmm(op, hs[-1]))
    return hs
