"""The annotator models: text features plus the document graph, as separate channels.

Model (SIGN/H2GCN-like, all message passing with our SpMM)::

    H0 = X W_in                  X: sparse TF-IDF rows, W_in: [features, hidden]
    Hk = Â_e H(k-1), k = 1..K    one operator per edge kind e (links, same-site edges),
                                 Â_e = D^-1/2 (A_e + I) D^-1/2
    Sj = Ŝ S(j-1), j = 1..J      Ŝ the same over the k-NN text graph, S0 = H0
    L  = D^-1 A Y                mean teacher label of the neighbours (no self loop)
    R  = dropout(relu([H0 | H1_link .. HK_link | H1_site .. HK_site | S1 .. SJ | L]))
    logits_c = (R * g_c) W_c + b_c   g_c: category c's learnt weight of each channel

Each channel (the document's own text, and each edge kind at each hop) keeps its own
columns, as in H2GCN or GraphSAGE's root weight, rather than being averaged into the
document's own representation: propagating only (``H = Â X``) assumes that linked
documents share codes, and on web links (navigation, ads, cross-topic references) they
often do not. The per-category channel weights ``g_c = n_channels * softmax(a_c)`` are
learnt with the heads and recorded, so a user sees how much each category leans on the
text and on each kind of neighbour (``curate distil`` prints them). Links and same-site
edges get operators of their own because a site says something about a page's type but
little about its topic, and the k-NN edges (``curate ingest --knn``) because textual
neighbours are different evidence again (on CiteSeer, pooling citations and k-NN edges
into one ``Â`` was worse than either alone next to the text; see docs/curation.md).

Learnt weights alone cannot promise to do no worse than text: they are fitted on the
training documents, where neighbours can look more useful than they are.
:class:`TextFallback` therefore pairs the graph student with a text-only student (the
same model with no hops, trained on its own), and mixes their probabilities per category,
``p_c = (1 - alpha_c) p_text + alpha_c p_graph``, with ``alpha_c`` chosen out of fold on
every teacher label (:mod:`~sparsegnn.curation.mix_choice`); ``alpha_c = 0`` is the
text-only student itself.

``L`` (``label_inputs``) uses the teacher labels the annotator was given: ``Y`` holds each
labelled document's label distribution (zeros elsewhere), and the adjacency has no self
loop, so a document never sees its own label, only its neighbours'.

Projecting *before* propagating is what makes bulk annotation cheap and bounded: X is
only ever touched one batch of documents at a time (``H0`` is ``n x hidden``, dense), and
each hop is one SpMM over ``n x hidden``. ``hops=0`` is the text-only student; the
teacher-side model reads sentence embeddings of a 6-layer transformer
(:class:`~sparsegnn.data.embed.SentenceEmbedder`) instead of hashed n-grams, through a
wider projection: the larger, slower model that the TF-IDF student is compared with.

``mixing="none"`` is the previous design, kept as the baseline the curation benchmark
compares with: links and same-site edges pooled into one operator, the channels
concatenated with fixed equal weights, and no text-only fallback.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

from sparsegnn.sparse import CSRMatrix, spmm

Mixing = Literal["learnt", "none"]
# The operator of the previous design: links and same-site edges pooled.
POOLED = "graph"
ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)  # graph student's shares, chosen out of fold


@dataclass
class StudentConfig:
    """Features, architecture and optimisation of an annotator."""

    featurizer: str = "tfidf"  # or "minilm": sentence embeddings (n_features unused)
    n_features: int = 2**14
    ngram_max: int = 1
    min_df: int = 2
    hidden: int = 64
    hops: int = 2  # over each edge kind (links, same-site edges)
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
    mixing: Mixing = "learnt"  # "none": the previous design (see the module docstring)
    edge_kinds: tuple[str, ...] | None = None  # None: the link/site kinds the corpus has
    share_folds: int = 5  # folds of the teacher labels the graph share is chosen on
    share_z: float = 2.0  # a share's gain must exceed this many standard errors

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @property
    def uses_graph(self) -> bool:
        return self.hops > 0 or bool(self.knn_hops) or self.label_inputs

    def operator_hops(self) -> dict[str, int]:
        """Hops per operator, in channel order (``edge_kinds`` and ``knn_hops`` resolved)."""
        kinds = (POOLED,) if self.mixing == "none" else tuple(self.edge_kinds or ())
        out = {kind: self.hops for kind in kinds if self.hops > 0}
        if self.knn_hops:
            out["knn"] = self.knn_hops
        return out


TEXT_ONLY = StudentConfig(hops=0, knn_hops=0)
TEACHER_SIDE = StudentConfig(featurizer="minilm", hidden=256, hops=2)
PROPAGATE = StudentConfig(mixing="none")  # the previous design, a benchmark baseline


@dataclass
class DocumentGraph:
    """The operators a student multiplies by: ``ops`` maps an operator's name (an edge
    kind: ``link``, ``site``, ``knn``, or ``graph`` for links and sites pooled) to
    D^-1/2 (A+I) D^-1/2 over those edges; ``mean`` = D^-1 A over links and sites, for
    the neighbours' labels, and ``labels`` (``Y``)."""

    ops: dict[str, CSRMatrix]
    mean: CSRMatrix | None = None
    labels: torch.Tensor | None = None


class GraphStudent(nn.Module):
    """Input projection, ``hops[kind]`` propagation steps per operator, one linear head per
    category reading every channel through its own learnt channel weights.

    Shapes:
        x ``[n, features]`` (CSRMatrix), graph ``[n, n]`` operators
        -> ``[n, sum of classes]``.
    """

    def __init__(self, in_features: int, hidden: int, hops: Mapping[str, int],
                 heads: Mapping[str, int], dropout: float = 0.5, label_inputs: bool = False,
                 learn_weights: bool = True) -> None:
        super().__init__()
        self.hops = dict(hops)
        self.hidden, self.dropout, self.label_inputs = hidden, dropout, label_inputs
        self.w_in = nn.Parameter(torch.empty(in_features, hidden))
        self.widths = [hidden] * (1 + sum(self.hops.values()))
        if label_inputs:
            self.widths.append(sum(heads.values()))
        self.heads = nn.ModuleDict({c: nn.Linear(sum(self.widths), k) for c, k in heads.items()})
        logits = torch.zeros(len(heads), len(self.widths))
        if learn_weights:
            self.mix_logits = nn.Parameter(logits)
        else:  # fixed equal weights: plain concatenation, as the previous design
            self.register_buffer("mix_logits", logits)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.w_in)
        for head in self.heads.values():
            head.reset_parameters()
        with torch.no_grad():
            self.mix_logits.zero_()

    @property
    def knn_hops(self) -> int:
        return self.hops.get("knn", 0)

    @property
    def encoded_width(self) -> int:
        return self.hidden

    def channels(self) -> list[str]:
        """Channel names in column order: ``ego``, then ``<operator><hop>``, ``labels``."""
        names = ["ego"] + [f"{op}{k}" for op, h in self.hops.items() for k in range(1, h + 1)]
        return names + (["labels"] if self.label_inputs else [])

    def encode(self, x: CSRMatrix | torch.Tensor) -> torch.Tensor:
        """``X W_in`` for a batch of documents (rows of X: sparse TF-IDF or dense)."""
        return spmm(x, self.w_in) if isinstance(x, CSRMatrix) else x @ self.w_in

    @property
    def needs_graph(self) -> bool:
        return bool(self.hops) or self.label_inputs

    def propagate(self, h0: torch.Tensor, graph: DocumentGraph | None) -> torch.Tensor:
        """``[H0 | Â_e H0 | ... | Â_e^K H0 (each operator e) | L]``, what the heads read."""
        if self.needs_graph and graph is None:
            raise ValueError("a graph-aware student needs the document graph")
        hs = [h0]
        for op, k in self.hops.items():
            if op not in graph.ops:
                hint = " (ingest with --knn K)" if op == "knn" else ""
                raise ValueError(f"this student propagates over {op} edges; the corpus has "
                                 f"none{hint}")
            hs += _powers(graph.ops[op], h0, k)[1:]
        if self.label_inputs:
            if graph.labels is None or graph.mean is None:
                raise ValueError("this student reads neighbours' teacher labels; none given")
            hs.append(spmm(graph.mean, graph.labels))
        return torch.cat(hs, dim=1)

    def channel_weights(self) -> torch.Tensor:
        """``[categories, channels]``: each head's weights, ``n_channels * softmax``
        (all ones at the start, so an untrained model is the plain concatenation)."""
        return len(self.widths) * torch.softmax(self.mix_logits, dim=1)

    def classify(self, z: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-category logits of (rows of) the propagated representation."""
        z = F.dropout(F.relu(z), self.dropout, self.training)
        widths = torch.tensor(self.widths, device=z.device)
        scales = self.channel_weights().repeat_interleave(widths, dim=1)
        return {c: F.linear(z, head.weight * scale, head.bias)
                for (c, head), scale in zip(self.heads.items(), scales, strict=True)}

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

    def weights_report(self) -> dict[str, dict[str, float]]:
        """Each category's channel weights as shares summing to one."""
        shares = torch.softmax(self.mix_logits.detach(), dim=1)
        return {c: dict(zip(self.channels(), map(float, row), strict=True))
                for c, row in zip(self.heads, shares, strict=True)}


class TextFallback(nn.Module):
    """A graph student and a text-only student whose probabilities are mixed per category,
    ``(1 - alpha_c) p_text + alpha_c p_graph``, with ``alpha_c`` chosen out of fold
    (:data:`ALPHAS`; ``0`` is the text-only student exactly).

    It has the annotation interface of :class:`GraphStudent` (``encode``, ``propagate``,
    ``classify``): the encoding is both students' ``H0`` side by side, and only the graph
    student's half is propagated.
    """

    def __init__(self, text: GraphStudent, graph: GraphStudent) -> None:
        super().__init__()
        self.text, self.graph = text, graph
        self.register_buffer("alpha", torch.ones(len(graph.heads)))

    @property
    def knn_hops(self) -> int:
        return self.graph.knn_hops

    @property
    def label_inputs(self) -> bool:
        return self.graph.label_inputs

    @property
    def needs_graph(self) -> bool:
        return self.graph.needs_graph

    @property
    def encoded_width(self) -> int:
        return self.text.hidden + self.graph.hidden

    def encode(self, x: CSRMatrix | torch.Tensor) -> torch.Tensor:
        return torch.cat([self.text.encode(x), self.graph.encode(x)], dim=1)

    def propagate(self, h0: torch.Tensor, graph: DocumentGraph | None) -> torch.Tensor:
        width = self.text.hidden
        return torch.cat([h0[:, :width], self.graph.propagate(h0[:, width:], graph)], dim=1)

    def classify(self, z: torch.Tensor) -> dict[str, torch.Tensor]:
        """Log of the mixed probabilities (so a softmax of them gives the mixture)."""
        width = self.text.hidden
        text, graph = self.text.classify(z[:, :width]), self.graph.classify(z[:, width:])
        return {c: mix_log_probs(text[c], graph[c], float(a))
                for c, a in zip(text, self.alpha, strict=True)}

    def weights_report(self) -> dict[str, dict[str, float]]:
        """Per category: the graph student's share ``alpha`` and every channel's share of
        the whole annotator (the text-only student counts as the ``ego`` channel)."""
        out = {}
        for (c, shares), a in zip(self.graph.weights_report().items(), self.alpha.tolist(),
                                  strict=True):
            channels = {k: a * v for k, v in shares.items()}
            channels["ego"] += 1.0 - a
            out[c] = {"graph_share": a, **channels}
        return out


def mix_log_probs(text: torch.Tensor, graph: torch.Tensor, alpha: float) -> torch.Tensor:
    """``log((1 - alpha) softmax(text) + alpha softmax(graph))``, exact at both ends."""
    if alpha <= 0.0:
        return F.log_softmax(text, dim=1)
    if alpha >= 1.0:
        return F.log_softmax(graph, dim=1)
    return torch.logaddexp(F.log_softmax(text, dim=1) + torch.tensor(1.0 - alpha).log(),
                           F.log_softmax(graph, dim=1) + torch.tensor(alpha).log())


def _powers(op: CSRMatrix, h0: torch.Tensor, k: int) -> list[torch.Tensor]:
    """``[H0, op H0, ..., op^k H0]``."""
    hs = [h0]
    for _ in range(k):
        hs.append(spmm(op, hs[-1]))
    return hs
