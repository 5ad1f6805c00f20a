"""Link prediction on one process: an encoder of the engine plus an edge decoder.

:func:`train_link` takes a graph with features (and optionally a ready
:class:`~sparsegnn.sampling.link_split.LinkSplit`, such as an OGB ``ogbl-*`` split) and a
:class:`LinkRequest`, and returns a :class:`LinkOutcome` with validation and test AUC,
AP, Hits@K and MRR (:mod:`sparsegnn.train.link_metrics`). An epoch is PyG's
link-prediction example step: encode over the training message edges, draw fresh
negatives as many as ``neg_ratio`` times the training positives, binary cross-entropy on
the decoder's logits, one Adam step; then the validation AUC, which picks the
best-on-validation weights the test is scored with.

The loop is :func:`sparsegnn.train.loop.run_epochs`, so early stopping, checkpoints and
exact resume come with it: an epoch's negatives are drawn from the stream of
``(seed, epoch)`` alone, and the checkpoint's fingerprint holds the split's hash, so a
resume on another split is refused.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import torch
from torch.nn import functional as F

from sparsegnn.data.graph import GraphData, row_normalize
from sparsegnn.data.io import load_any
from sparsegnn.data.link_edges import LabeledEdges, LinkSplit, save_split, split_state
from sparsegnn.data.ogbl import is_ogbl_name, load_ogbl, read_ogbl_folder
from sparsegnn.errors import InvalidValueError
from sparsegnn.nn import GCN, GraphSAGE, graph_operator
from sparsegnn.nn.link_decoders import DecoderKind, LinkModel, make_decoder
from sparsegnn.nn.operator import Operator
from sparsegnn.nn.sparse_input import sparsify_input
from sparsegnn.sampling.link_split import random_link_split
from sparsegnn.sampling.negatives import (
    EdgeLookup,
    degree_negatives,
    tail_negatives,
    uniform_negatives,
)
from sparsegnn.sampling.streams import batch_generator
from sparsegnn.train.checkpoint import content_hash
from sparsegnn.train.link_metrics import DEFAULT_KS, link_metrics, roc_auc, roc_curve
from sparsegnn.train.loop import LoopConfig, LoopState, run_epochs
from sparsegnn.train.memory import peak_memory_bytes

NegativeKind = Literal["uniform", "degree", "tail"]


@dataclass(frozen=True)
class LinkRequest:
    """Everything that decides a link-prediction run; defaults are PyG's example's (GCN
    128 -> 64, dot decoder, no dropout, Adam 0.01, 100 epochs, features row-normalised,
    5% / 10% of the pairs for validation / test)."""

    model: Literal["gcn", "sage"] = "gcn"
    decoder: DecoderKind = "dot"
    hidden: int = 128
    out_channels: int = 64
    num_layers: int = 2
    dropout: float = 0.0
    lr: float = 0.01
    weight_decay: float = 0.0
    epochs: int = 100
    patience: int | None = None
    seed: int = 0
    split_seed: int | None = None  # None: the training seed
    val: float = 0.05
    test: float = 0.1
    negatives: NegativeKind = "uniform"
    neg_ratio: float = 1.0
    normalize_features: bool = True
    sparse_features: bool = True  # mostly-zero features: the first layer's product as SpMM
    ks: tuple[int, ...] = DEFAULT_KS
    checkpoint: Path | None = None
    checkpoint_every: int = 10
    resume: bool = False
    split_out: Path | None = None  # where the split is saved with the run
    progress: bool | None = False
    logdir: Path | None = None

    def __post_init__(self) -> None:
        if not 0 < self.neg_ratio < math.inf:
            raise InvalidValueError(f"negative ratio must be a finite number above 0, got "
                                    f"{self.neg_ratio}")
        if self.negatives not in ("uniform", "degree", "tail"):
            raise InvalidValueError(f"unknown negatives {self.negatives!r}; choose uniform, "
                                    "degree or tail")


@dataclass
class LinkEpoch:
    """One epoch: training loss, validation AUC (the early-stopping score), seconds."""

    epoch: int
    loss: float
    val_auc: float
    seconds: float


@dataclass
class LinkOutcome:
    """What a run produced; ``to_dict`` is JSON-ready (metric names as ``ogb``'s).
    ``test_roc``: the test split's ROC curve (``fpr``, ``tpr``), thinned, for reports."""

    epochs_run: int
    best_epoch: int
    val: dict[str, float]
    test: dict[str, float]
    epoch_time_s: float
    peak_memory_bytes: int
    split_hash: str
    history: list[LinkEpoch] = field(default_factory=list)
    stopped_early: bool = False
    test_roc: dict[str, list[float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """The line a command prints: the test metrics and the epoch they come from."""
        shown = "  ".join(f"{k} {v:.4f}" for k, v in self.test.items())
        return (f"test {shown}  (best epoch {self.best_epoch} of {self.epochs_run}, "
                f"{1000 * self.epoch_time_s:.1f} ms/epoch)")


@dataclass
class _Setup:
    """The tensors an epoch uses, built once."""

    x: torch.Tensor
    train_op: Operator
    test_op: Operator
    split: LinkSplit
    train_lookup: EdgeLookup


def train_link(graph: GraphData, request: LinkRequest, split: LinkSplit | None = None,
               device: torch.device | str = "cpu") -> tuple[LinkModel, LinkOutcome]:
    """Split ``graph`` (unless ``split`` is given), train, and score val and test."""
    device = torch.device(device)
    if graph.x is None:
        raise InvalidValueError(f"{graph.name}: link training needs node features; this "
                                "graph has none")
    split = split or random_link_split(
        graph.edge_index, graph.num_nodes, val=request.val, test=request.test,
        neg_ratio=request.neg_ratio, seed=split_seed(request))
    require_labels(split)
    if request.split_out is not None:
        save_split(split, request.split_out)
    setup = link_setup(graph, split, request, device)
    model = build_link_model(request, graph.num_features, relation_count(split)).to(device)
    if request.sparse_features:
        sparsify_input(model.encoder, setup.x)
    optimizer = torch.optim.Adam(model.parameters(), lr=request.lr,
                                 weight_decay=request.weight_decay)
    split_hash = content_hash(split_state(split))[:16]
    loop = LoopConfig(epochs=request.epochs, patience=request.patience,
                      checkpoint=request.checkpoint, checkpoint_every=request.checkpoint_every,
                      resume=request.resume, progress=request.progress, seed=request.seed,
                      logdir=request.logdir)
    state = run_epochs(model, optimizer,
                       lambda epoch: link_epoch(model, setup, optimizer, request, epoch),
                       loop, LinkEpoch, score=lambda s: s.val_auc,
                       stamp=_fingerprint(request, split_hash))
    return model, _finish(model, setup, state, request.ks, split_hash)


def link_data(dataset: str, data_dir: str | Path | None = None
              ) -> tuple[GraphData, LinkSplit | None]:
    """The graph of ``dataset`` and its official split where it has one: an ``ogbl-*``
    name or folder brings OGB's; any other graph (:func:`~sparsegnn.data.load_any`) is
    split by :func:`train_link` from the request's ratios and seed."""
    if is_ogbl_name(dataset) and not Path(dataset).exists():
        found = load_ogbl(dataset, data_dir)
        return found.graph, found.split
    if is_ogbl_name(Path(dataset).name.replace("_", "-")) and Path(dataset).is_dir():
        found = read_ogbl_folder(dataset)
        return found.graph, found.split
    return load_any(dataset, data_dir), None


def build_link_model(request: LinkRequest, in_channels: int, num_relations: int = 1
                     ) -> LinkModel:
    """The encoder of ``request.model`` and its decoder, seeded for reproducible weights."""
    if request.model not in ("gcn", "sage"):
        raise InvalidValueError(f"unknown model {request.model!r}; choose 'gcn' or 'sage'")
    torch.manual_seed(request.seed)
    kind = GCN if request.model == "gcn" else GraphSAGE
    encoder = kind(in_channels, request.hidden, request.out_channels, request.num_layers,
                   request.dropout)
    decoder = make_decoder(request.decoder, request.out_channels, hidden=request.hidden,
                           num_relations=num_relations)
    return LinkModel(encoder, decoder)


def link_epoch(model: LinkModel, setup: _Setup, optimizer: torch.optim.Optimizer,
               request: LinkRequest, epoch: int) -> LinkEpoch:
    """One full-graph step on fresh negatives, then the validation AUC."""
    start = time.perf_counter()
    model.train()
    optimizer.zero_grad(set_to_none=True)
    train = setup.split.train
    neg = epoch_negatives(setup.split, setup.train_lookup, request,
                          batch_generator(request.seed, epoch, 0))
    pairs = torch.cat([train.pos, neg], dim=1).to(setup.x.device)
    relation = _on(pair_relations(train, neg.shape[1]), setup.x.device)
    labels = torch.cat([torch.ones(train.num_pos), torch.zeros(neg.shape[1])])
    logits = model(setup.x, setup.train_op, pairs, relation)
    loss = F.binary_cross_entropy_with_logits(logits, labels.to(logits))
    loss.backward()
    optimizer.step()
    val = replace(setup.split.val, neg_tails=None)  # the AUC needs no per-positive rows
    val_pos, val_neg, _ = score_split(model, setup.x, setup.train_op, val)
    return LinkEpoch(epoch, float(loss.detach()), roc_auc(val_pos, val_neg),
                     time.perf_counter() - start)


def epoch_negatives(split: LinkSplit, lookup: EdgeLookup, request: LinkRequest,
                    gen: torch.Generator) -> torch.Tensor:
    """Training negatives ``[2, Q]``: the split's own when it fixed them, else drawn
    against ``lookup`` (the training message edges, which no negative may be)."""
    train, n = split.train, split.num_nodes
    if train.num_neg:
        return train.neg
    count = max(1, int(train.num_pos * request.neg_ratio))
    if request.negatives == "uniform":
        return uniform_negatives(lookup, n, count, gen)
    if request.negatives == "degree":
        return degree_negatives(lookup, n, count, gen)
    k = max(1, round(request.neg_ratio))
    tails = tail_negatives(train.pos[0], n, k, gen, edge_index=lookup)
    # column-major, so negative j corrupts positive j mod P (and takes its relation)
    return torch.stack([train.pos[0].repeat(k), tails.t().reshape(-1)])


@torch.no_grad()
def score_split(model: LinkModel, x: torch.Tensor, adj: Operator, edges: LabeledEdges
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Decoder logits of a split's positives, its shared negatives and its per-positive
    negative tails (``[P, K]``, None where it has none), from one encoding in eval mode."""
    model.eval()
    z = model.encode(x, adj)
    pos = model.decode(z, edges.pos.to(x.device), _on(edges.pos_type, x.device))
    neg = model.decode(z, edges.neg.to(x.device), _on(edges.neg_type, x.device))
    if edges.neg_tails is None:
        return pos, neg, None
    k = edges.neg_tails.shape[1]
    pairs = torch.stack([edges.pos[0].repeat_interleave(k), edges.neg_tails.reshape(-1)])
    rel = None if edges.pos_type is None else edges.pos_type.repeat_interleave(k)
    rows = model.decode(z, pairs.to(x.device), _on(rel, x.device))
    return pos, neg, rows.view(edges.neg_tails.shape)


def evaluate_split(model: LinkModel, x: torch.Tensor, adj: Operator, edges: LabeledEdges,
                   ks: tuple[int, ...] = DEFAULT_KS) -> dict[str, float]:
    """Every metric of one split; per-positive negative tails, where the split has them
    (``ogbl-citation2``), are what MRR ranks against."""
    pos, neg, rows = score_split(model, x, adj, edges)
    return link_metrics(pos, neg, ks, rows)


def _finish(model: LinkModel, setup: _Setup, state: LoopState[LinkEpoch],
            ks: tuple[int, ...], split_hash: str) -> LinkOutcome:
    """Score val (training graph) and test (training + validation graph) with the
    best-on-validation weights; the model keeps the weights the loop left it."""
    final = copy.deepcopy(model.state_dict())
    if state.best_weights is not None:
        model.load_state_dict(state.best_weights)
    val = evaluate_split(model, setup.x, setup.train_op, setup.split.val, ks)
    pos, neg, rows = score_split(model, setup.x, setup.test_op, setup.split.test)
    model.load_state_dict(final)
    times = sorted(h.seconds for h in state.history)
    return LinkOutcome(
        epochs_run=state.epoch, best_epoch=state.best_epoch, val=val,
        epoch_time_s=times[len(times) // 2] if times else 0.0,
        peak_memory_bytes=peak_memory_bytes(setup.x.device), split_hash=split_hash,
        history=state.history, stopped_early=state.stopped_early,
        test=link_metrics(pos, neg, ks, rows), test_roc=roc_curve(pos, neg))


def link_setup(graph: GraphData, split: LinkSplit, request: LinkRequest,
           device: torch.device) -> _Setup:
    if split.num_nodes != graph.num_nodes:
        raise InvalidValueError(f"the split is of {split.num_nodes} nodes, the graph has "
                                f"{graph.num_nodes}")
    assert graph.x is not None
    x = row_normalize(graph.x) if request.normalize_features else graph.x
    n = graph.num_nodes
    return _Setup(
        x=x.to(device=device, dtype=torch.float32),
        train_op=graph_operator(split.train_message, n, request.model).to(device=device),
        test_op=graph_operator(split.test_message, n, request.model).to(device=device),
        split=split, train_lookup=EdgeLookup.of(split.train_message, n))


def require_labels(split: LinkSplit) -> None:
    """Refuse a split that cannot train or be scored, in one line."""
    for name, edges in (("training", split.train), ("validation", split.val),
                        ("test", split.test)):
        if edges.num_pos == 0:
            raise InvalidValueError(f"the split has no {name} edges left")
        if name != "training" and edges.num_neg == 0:
            raise InvalidValueError(f"the split has no {name} negatives to score against")


def relation_count(split: LinkSplit) -> int:
    types = [t for e in (split.train, split.val, split.test)
             for t in (e.pos_type, e.neg_type) if t is not None and t.numel()]
    return int(max(int(t.max()) for t in types)) + 1 if types else 1


def pair_relations(train: LabeledEdges, num_neg: int) -> torch.Tensor | None:
    """Relations of a training batch: the negatives take their positives' (``j mod P``)."""
    if train.pos_type is None:
        return None
    neg_type = train.pos_type[torch.arange(num_neg) % max(1, train.num_pos)]
    return torch.cat([train.pos_type, neg_type])


def _on(t: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    return None if t is None else t.to(device)


def split_seed(request: LinkRequest) -> int:
    return request.seed if request.split_seed is None else request.split_seed


def _fingerprint(request: LinkRequest, split_hash: str) -> dict[str, str | int]:
    """What a checkpoint must match to be resumed: the model's shape and the split."""
    return {"kind": "link", "model": request.model, "decoder": request.decoder,
            "hidden": request.hidden, "out": request.out_channels,
            "layers": request.num_layers, "split": split_hash}
