"""Knowledge-graph link prediction: an R-GCN encoder and a DistMult decoder, one process.

Schlichtkrull et al.'s second task (and PyG's ``rgcn_link_pred.py``): the encoder is a
stack of :class:`~sparsegnn.nn.rgcn.RGCNConv` over the training triples with an inverse
relation per relation (:meth:`~sparsegnn.data.kg.KnowledgeGraph.message_graph`), its
first layer featureless (entities have no features: ``A_r W_r``, each entity's row of
``W_r`` its learnt input, as PyG's ``RGCNConv`` with ``x=None``), weights by basis
decomposition, a root (self-loop) weight and bias. The decoder is
:class:`~sparsegnn.nn.link_decoders.DistMultDecoder` with one diagonal per original
relation. An epoch is one full-graph step: encode, score every training triple and
``neg_ratio`` corruptions of each (head or tail replaced by a uniform entity, from the
``(seed, epoch)`` stream), binary cross-entropy plus ``reg`` times the mean squares of
the embeddings and relation diagonals (PyG's example), one Adam step; then the validation
filtered MRR (:mod:`sparsegnn.train.kg_metrics`), which picks the weights the test is
scored with. The loop is :func:`~sparsegnn.train.loop.run_epochs` (checkpoints, exact
resume, early stopping).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F

from sparsegnn.data.kg import KnowledgeGraph, load_kg
from sparsegnn.errors import InvalidValueError
from sparsegnn.nn.link_decoders import DistMultDecoder, LinkModel
from sparsegnn.nn.operator import Operator
from sparsegnn.nn.rgcn import relation_operators
from sparsegnn.sampling.streams import batch_generator
from sparsegnn.train.kg_metrics import KG_KS, KnownTriples, ScoreRows, rank_metrics, rank_triples
from sparsegnn.train.loop import LoopConfig, run_epochs
from sparsegnn.train.rgcn_task import RelationalClassifier
from sparsegnn.train.task_runs import flat_link_metrics
from sparsegnn.train.train_request import TrainOutcome, plain_config
from sparsegnn.train.train_summary import title


@dataclass(frozen=True)
class KGRequest:
    """One run. Defaults follow PyG's ``rgcn_link_pred.py`` (two layers, dropout 0.2
    between, Adam lr 0.01, ``reg`` 0.01, one corruption per triple) at a width and basis
    count sized to the small packaged graphs (UMLS: 135 entities, 46 relations)."""

    dataset: str = "umls"
    hidden: int = 200
    num_layers: int = 2
    num_bases: int | None = 10
    dropout: float = 0.2
    lr: float = 0.01
    reg: float = 0.01
    epochs: int = 200
    patience: int | None = None
    neg_ratio: int = 1
    seed: int = 0
    ks: tuple[int, ...] = KG_KS
    device: str = "cpu"
    checkpoint: Path | None = None
    checkpoint_every: int = 10
    resume: bool = False
    progress: bool | None = False
    logdir: Path | None = None

    def __post_init__(self) -> None:
        if self.neg_ratio < 1:
            raise InvalidValueError(f"corruptions per triple must be >= 1, got {self.neg_ratio}")
        if self.num_layers < 1:
            raise InvalidValueError(f"R-GCN needs at least 1 layer, got {self.num_layers}")


@dataclass
class KGEpoch:
    """One epoch: training loss, validation filtered MRR, seconds of the training step."""

    epoch: int
    loss: float
    val_mrr: float
    seconds: float


@dataclass
class KGOutcome:
    """What a run produced: filtered MRR and Hits@K of validation and test (both sides
    of every triple) with the best-on-validation weights."""

    graph: str
    num_entities: int
    num_relations: int
    num_train: int
    epochs_run: int
    best_epoch: int
    val: dict[str, float]
    test: dict[str, float]
    epoch_time_s: float
    history: list[KGEpoch] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        shown = "  ".join(f"{k} {v:.4f}" for k, v in self.test.items())
        return (f"test (filtered) {shown}  (best epoch {self.best_epoch} of "
                f"{self.epochs_run}, {1000 * self.epoch_time_s:.1f} ms/epoch)")


def build_kg_model(request: KGRequest, kg: KnowledgeGraph) -> LinkModel:
    """The seeded encoder (over ``2R`` relations: each and its inverse) and DistMult
    decoder (over the ``R`` relations); parameter names are PyG's under ``encoder.``."""
    torch.manual_seed(request.seed)
    encoder = RelationalClassifier(None, kg.num_entities, request.hidden, request.hidden,
                                   2 * kg.num_relations, num_layers=request.num_layers,
                                   num_bases=request.num_bases, dropout=request.dropout)
    return LinkModel(encoder, DistMultDecoder(request.hidden, kg.num_relations))


def message_operators(kg: KnowledgeGraph, device: torch.device | str = "cpu"
                      ) -> list[Operator]:
    """One mean-aggregating operator per relation of the message graph (inverses too)."""
    rel = kg.message_graph()
    return [op.to(device=device) for op in relation_operators(
        rel.edge_index, rel.edge_type, rel.num_relations, rel.num_nodes)]


def corrupt_triples(triples: torch.Tensor, num_entities: int, k: int,
                    generator: torch.Generator) -> torch.Tensor:
    """``k`` corruptions of each triple (``[3, k T]``, corruption ``j`` of triple ``i`` at
    column ``j T + i``): head or tail, with even odds, replaced by a uniform entity."""
    neg = triples.repeat(1, k)
    heads = torch.rand(neg.shape[1], generator=generator) < 0.5
    pick = torch.randint(num_entities, (neg.shape[1],), generator=generator)
    neg[0] = torch.where(heads, pick, neg[0])
    neg[2] = torch.where(heads, neg[2], pick)
    return neg


def triple_loss(z: torch.Tensor, rel_emb: torch.Tensor, logits: torch.Tensor,
                num_pos: int, reg: float) -> torch.Tensor:
    """Binary cross-entropy of positives (the first ``num_pos`` logits) and corruptions,
    plus ``reg`` times the mean squares of the embeddings and relation diagonals."""
    labels = torch.zeros_like(logits)
    labels[:num_pos] = 1
    penalty = z.pow(2).mean() + rel_emb.pow(2).mean()
    return F.binary_cross_entropy_with_logits(logits, labels) + reg * penalty


def decoder_rows(model: LinkModel, z: torch.Tensor) -> ScoreRows:
    """DistMult's scores of every entity as the missing head or tail, one dense product
    per chunk of queries (``(z_a * r) Z^T``; DistMult is symmetric in head and tail)."""
    rel_emb = model.decoder.relations

    def rows(anchor: torch.Tensor, rel: torch.Tensor, side: str) -> torch.Tensor:
        return (z[anchor.to(z.device)] * rel_emb[rel.to(z.device)]) @ z.t()

    return rows


@torch.no_grad()
def evaluate_kg(model: LinkModel, ops: list[Operator], triples: torch.Tensor,
                known: KnownTriples, ks: tuple[int, ...] = KG_KS) -> dict[str, float]:
    """Filtered MRR and Hits@K of ``triples`` with one encoding in eval mode."""
    model.eval()
    z = model.encode(None, ops)  # type: ignore[arg-type]
    return rank_metrics(rank_triples(decoder_rows(model, z), triples, known), ks)


def train_kg_link(request: KGRequest, kg: KnowledgeGraph | None = None
                  ) -> tuple[LinkModel, KGOutcome]:
    """Train on ``kg`` (else ``request.dataset``); the model ends with the
    best-on-validation weights, with which validation and test are scored."""
    kg = kg if kg is not None else load_kg(request.dataset)
    device = torch.device(request.device)
    ops = message_operators(kg, device)
    model = build_kg_model(request, kg).to(device)
    known = KnownTriples(kg.all_triples(), kg.num_entities, kg.num_relations)
    opt = torch.optim.Adam(model.parameters(), lr=request.lr)
    train = kg.train.to(device)

    def epoch_fn(epoch: int) -> KGEpoch:
        start = time.perf_counter()
        model.train()
        opt.zero_grad(set_to_none=True)
        gen = batch_generator(request.seed, epoch, 0)
        neg = corrupt_triples(kg.train, kg.num_entities, request.neg_ratio, gen).to(device)
        batch = torch.cat([train, neg], dim=1)
        z = model.encode(None, ops)  # type: ignore[arg-type]
        logits = model.decode(z, batch[[0, 2]], batch[1])
        loss = triple_loss(z, model.decoder.relations, logits, train.shape[1], request.reg)
        loss.backward()
        opt.step()
        seconds = time.perf_counter() - start
        val = evaluate_kg(model, ops, kg.valid, known, (1,))["mrr"]
        return KGEpoch(epoch, float(loss.detach()), val, seconds)

    loop = LoopConfig(epochs=request.epochs, patience=request.patience,
                      checkpoint=request.checkpoint, checkpoint_every=request.checkpoint_every,
                      resume=request.resume, progress=request.progress, seed=request.seed,
                      logdir=request.logdir)
    state = run_epochs(model, opt, epoch_fn, loop, KGEpoch, score=lambda s: s.val_mrr,
                       stamp={"task": "kg_link", "graph": kg.name, **kg.counts(),
                              "hidden": request.hidden, "num_bases": request.num_bases})
    times = [h.seconds for h in state.history] or [0.0]
    outcome = KGOutcome(
        graph=kg.name, num_entities=kg.num_entities, num_relations=kg.num_relations,
        num_train=int(kg.train.shape[1]), epochs_run=state.epoch, best_epoch=state.best_epoch,
        val=evaluate_kg(model, ops, kg.valid, known, request.ks),
        test=evaluate_kg(model, ops, kg.test, known, request.ks),
        epoch_time_s=statistics.median(times), history=list(state.history))
    return model, outcome


def run_kg_link_task(request: KGRequest) -> TrainOutcome:
    """``sparsegnn train --task link --model rgcn``: the outcome with flat keys
    (``test_mrr``, ``test_hits_at_10``, ``val_mrr``, ...)."""
    _, outcome = train_kg_link(request)
    result = outcome.to_dict()
    flat = flat_link_metrics(result)
    out = {"dataset": outcome.graph, "task": "link", "model": "rgcn", "decoder": "distmult",
           "device": request.device, **flat, **result, "config": plain_config(request)}
    return TrainOutcome(title(outcome.graph, "rgcn", ", link prediction (distmult)"), out,
                        f"rgcn+distmult on {outcome.graph}: {outcome.summary()}")
