"""Sampled minibatch training (GraphSAGE, LADIES or ShaDow sampling) of GraphSAGE, GAT,
GATv2 or GIN: each layer multiplies by its sampled block as the model kind needs it
(:func:`~sparsegnn.nn.block_operator`).

Each step trains on one sampled minibatch from :class:`~sparsegnn.sampling.loader.
MinibatchLoader`, which samples the next bulk of k minibatches in a background thread.
Validation and test use full-neighbourhood inference (the model on the whole
row-normalised adjacency), so the reported accuracy measures the trained weights, not
the luck of one more sample. Early stopping (best-on-validation weights), checkpoints
and exact resume come from :mod:`sparsegnn.train.loop`; sampling depends only on
``(seed, epoch, batch)``, so a resumed run draws the very minibatches it would have.
The same loop runs on every rank of a distributed run; ``sync`` is the gradient
all-reduce there and a no-op on one process. With a partitioned topology
(:mod:`sparsegnn.train.minibatch_distributed`) ``data.adj`` is a sampling
:class:`~sparsegnn.sampling.Topology` over this rank's rows, ``data.x`` a
:class:`~sparsegnn.sampling.loader.FeatureSource` and ``evaluate`` the distributed
full-neighbourhood inference.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import torch
from torch import nn
from torch.nn import functional as F

from sparsegnn.errors import InvalidValueError
from sparsegnn.nn import block_operator, build_model, operator_for
from sparsegnn.sampling import LadiesSampler, NodeWiseSampler, ShadowSampler
from sparsegnn.sampling.loader import FeatureSource, MinibatchLoader
from sparsegnn.sampling.samplers import Sampler, Topology
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.checkpoint import rank_checkpoint, seed_everything
from sparsegnn.train.fullgraph import TrainConfig, confusion_counts, fingerprint
from sparsegnn.train.loop import LoopRole, run_epochs
from sparsegnn.train.memory import peak_memory_bytes

SamplerKind = Literal["sage", "ladies", "shadow"]
# The model kinds sampled blocks train (GCN needs whole degrees: check_minibatch_model).
MINIBATCH_MODELS = ("sage", "gat", "gatv2", "gin")


@dataclass
class MinibatchConfig:
    """How minibatches are drawn; the model and optimiser come from :class:`TrainConfig`."""

    sampler: SamplerKind = "sage"
    fanouts: tuple[int, ...] = (15, 10, 5)
    batch_size: int = 1024
    bulk: int = 64
    prefetch: bool = True


def make_sampler(
    kind: SamplerKind, adj: CSRMatrix | Topology, fanouts: Sequence[int], batch_size: int
) -> Sampler:
    """The sampler of a kind; LADIES gets ``fanout * batch_size`` vertices per layer.

    That LADIES budget equals the most vertices node-wise sampling with the same
    fan-outs can add per layer, so the two are compared at one sampling budget.
    """
    if kind == "sage":
        return NodeWiseSampler(adj, fanouts)
    if kind == "ladies":
        return LadiesSampler(adj, [f * batch_size for f in fanouts])
    if kind == "shadow":
        return ShadowSampler(adj, fanouts)
    raise InvalidValueError(f"unknown sampler {kind!r}; choose sage, ladies or shadow")


@dataclass
class MinibatchEpoch:
    epoch: int
    loss: float
    val_accuracy: float
    seconds: float
    seeds: int
    val_loss: float | None = None  # full-graph evaluation on this process only


@dataclass
class MinibatchResult:
    """What a minibatch run produced; ``to_dict()`` is the CLI's JSON."""

    epochs_run: int
    best_epoch: int
    best_val_accuracy: float
    test_accuracy: float
    seeds_per_second: float
    minibatches_per_epoch: int
    peak_memory_bytes: int
    stopped_early: bool = False
    history: list[MinibatchEpoch] = field(default_factory=list)
    test_confusion: list[list[int]] | None = None  # whole graph local: rows true, cols predicted

    def to_dict(self) -> dict[str, Any]:
        """Final figures, the per-epoch ``history`` and its ``losses`` (the command line
        keeps the last two for ``--history``)."""
        return {**asdict(self), "losses": [h.loss for h in self.history]}


@dataclass
class MinibatchData:
    """Everything a rank needs: adjacency (for sampling), features, labels, split masks.

    A partitioned rank holds a :class:`Topology` over its rows and a
    :class:`FeatureSource` over its feature rows instead of the whole ``adj`` and ``x``.
    """

    adj: CSRMatrix | Topology
    x: torch.Tensor | FeatureSource
    y: torch.Tensor
    masks: dict[str, torch.Tensor]

    @classmethod
    def from_graph(cls, graph: Any, dtype: torch.dtype = torch.float32) -> MinibatchData:
        graph.check_trainable()
        adj = CSRMatrix.from_edge_index(graph.edge_index, graph.num_nodes).to(dtype=dtype)
        masks = {"train": graph.train_mask, "val": graph.val_mask, "test": graph.test_mask}
        return cls(adj, graph.x.to(dtype), graph.y, masks)

    @property
    def num_features(self) -> int:
        x = self.x
        return int(x.shape[1]) if isinstance(x, torch.Tensor) else x.num_features


class _Evaluator:
    """Full-neighbourhood inference: every layer multiplies by the model kind's operator
    of A (:func:`~sparsegnn.nn.operator_for`)."""

    def __init__(self, data: MinibatchData, device: torch.device, model: str):
        if not isinstance(data.adj, CSRMatrix) or not isinstance(data.x, torch.Tensor):
            raise InvalidValueError("partitioned data needs a distributed evaluate()")
        self.op = operator_for(model, data.adj).to(device)
        self.x, self.y = data.x.to(device), data.y.to(device)
        self.masks = {k: v.to(device) for k, v in data.masks.items()}

    @torch.no_grad()
    def accuracy(self, model: nn.Module, split: str) -> float:
        return self.scores(model, split)[0]

    @torch.no_grad()
    def scores(self, model: nn.Module, split: str) -> tuple[float, float]:
        """Accuracy and cross-entropy on ``split``, from one full-neighbourhood pass."""
        model.eval()
        logits = model(self.x, self.op)
        m = self.masks[split]
        return (float((logits[m].argmax(1) == self.y[m]).float().mean()),
                float(F.cross_entropy(logits[m], self.y[m])))

    @torch.no_grad()
    def confusion(self, model: nn.Module, split: str) -> list[list[int]]:
        model.eval()
        m = self.masks[split]
        return confusion_counts(model(self.x, self.op)[m], self.y[m])


def fit_minibatch(
    data: MinibatchData,
    cfg: TrainConfig,
    mb: MinibatchConfig,
    device: torch.device | str = "cpu",
    *,
    rank: int = 0,
    world_size: int = 1,
    sync: Callable[[nn.Module], None] | None = None,
    evaluate: Callable[[nn.Module, str], float] | None = None,
) -> tuple[nn.Module, MinibatchResult]:
    """Train ``cfg.model`` (:data:`MINIBATCH_MODELS`) on sampled minibatches; returns the
    best-on-validation model.

    ``evaluate(model, split)`` replaces the local full-neighbourhood accuracy (needed
    when ``data`` is partitioned; collective there, so every rank calls it alike).
    """
    check_minibatch_model(cfg.model)
    device = torch.device(device)
    seed_everything(cfg.seed)
    model = build_model(cfg.model, data.num_features, cfg.hidden, int(data.y.max()) + 1,
                        cfg.num_layers, cfg.dropout, heads=cfg.heads,
                        dropout_mask=cfg.dropout_mask, attention_dropout=cfg.attention_dropout)
    model = model.to(device=device, dtype=cfg.torch_dtype)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sampler = make_sampler(mb.sampler, data.adj, mb.fanouts, mb.batch_size)
    _check_depth(sampler, cfg.num_layers)
    loader = MinibatchLoader(
        sampler,
        data.masks["train"].nonzero().flatten(),
        data.x,
        data.y,
        batch_size=mb.batch_size,
        bulk=mb.bulk,
        seed=cfg.seed,
        prefetch=mb.prefetch,
        rank=rank,
        world_size=world_size,
        device=device,
    )
    local = _Evaluator(data, device, cfg.model) if evaluate is None else None
    accuracy = evaluate if local is None else local.accuracy

    def epoch_fn(epoch: int) -> MinibatchEpoch:
        stats = _train_epoch(model, optimizer, loader, epoch, cfg, sync)
        if local is None:
            stats.val_accuracy = accuracy(model, "val")
        else:
            stats.val_accuracy, stats.val_loss = local.scores(model, "val")
        return stats

    stamp = {**fingerprint(cfg, kind="minibatch", world_size=world_size, rank=rank),
             "sampler": mb.sampler, "fanouts": ",".join(map(str, mb.fanouts)),
             "batch_size": mb.batch_size, "seed": cfg.seed}  # the seed draws the minibatches
    rank_cfg = replace(cfg, checkpoint=rank_checkpoint(cfg.checkpoint, rank, world_size))
    state = run_epochs(model, optimizer, epoch_fn, rank_cfg, MinibatchEpoch,
                       score=lambda s: s.val_accuracy, stamp=stamp,
                       role=LoopRole(reports=rank == 0, reseed=False))
    history = state.history
    seconds = sum(h.seconds for h in history)
    result = MinibatchResult(
        epochs_run=state.epoch,
        best_epoch=state.best_epoch,
        best_val_accuracy=state.best_score,
        test_accuracy=accuracy(model, "test"),
        seeds_per_second=sum(h.seeds for h in history) / seconds if seconds else 0.0,
        minibatches_per_epoch=len(loader),
        peak_memory_bytes=peak_memory_bytes(device),
        stopped_early=state.stopped_early,
        history=history,
        test_confusion=None if local is None else local.confusion(model, "test"),
    )
    return model, result


def check_minibatch_model(model: str) -> None:
    """Refuse GCN: its symmetric normalisation needs every vertex's whole degree, which a
    sampled block does not have (the sampled models aggregate a mean, a sum or
    attention over the drawn edges)."""
    if model not in MINIBATCH_MODELS:
        raise InvalidValueError(f"--mode minibatch trains {', '.join(MINIBATCH_MODELS)}, "
                                f"not {model!r}")


def _check_depth(sampler: Sampler, num_layers: int) -> None:
    """Node-wise and layer-wise blocks are per layer; ShaDow's subgraph serves any depth."""
    if not isinstance(sampler, ShadowSampler) and sampler.num_layers != num_layers:
        raise InvalidValueError(
            f"{sampler.num_layers} fan-outs for a {num_layers}-layer model; "
            "give one fan-out per layer (--fanouts) or change --layers"
        )


def _train_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loader: MinibatchLoader,
    epoch: int,
    cfg: TrainConfig,
    sync: Callable[[nn.Module], None] | None,
) -> MinibatchEpoch:
    """One pass over the training seeds; time includes waiting for the sampler."""
    model.train()
    start = time.perf_counter()
    total_loss, seeds = 0.0, 0
    for item in loader.epoch(epoch):
        optimizer.zero_grad(set_to_none=True)
        b = item.num_seeds
        logits = model(item.x, _block_operators(item.batch, cfg))[:b]
        # Summed over this rank's seeds, divided by the whole minibatch: after the gradient
        # all-reduce (a sum) every rank holds the whole minibatch's mean-loss gradient.
        loss = F.cross_entropy(logits, item.y, reduction="sum") / item.global_seeds
        loss.backward()
        if sync is not None:
            sync(model)
        optimizer.step()
        total_loss += float(loss.detach()) * item.global_seeds
        seeds += b
    return MinibatchEpoch(
        epoch, total_loss / max(seeds, 1), 0.0, time.perf_counter() - start, seeds
    )


def _block_operators(batch: Any, cfg: TrainConfig) -> list[CSRMatrix]:
    """The model kind's operator of each sampled block (ShaDow's one subgraph, shared by
    every layer, is converted once)."""
    blocks = batch.operators(cfg.num_layers)
    converted = {id(b): block_operator(cfg.model, b) for b in blocks}
    return [converted[id(b)] for b in blocks]
