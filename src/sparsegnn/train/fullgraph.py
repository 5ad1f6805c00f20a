"""Full-graph training: one loop for a single process and for partitioned ranks.

The loop only talks to a :class:`Task` (features, operator, loss, accuracy, gradient
synchronisation). :class:`LocalTask` is the single-process task; the distributed
package supplies tasks whose operator communicates and whose loss and accuracy are
reduced over ranks (the validation accuracy and loss in one reduction). Adam with weight
decay and dropout; early stopping on validation accuracy, progress, atomic checkpoints
and exact resume come from :mod:`sparsegnn.train.loop`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

import torch
from torch import nn
from torch.nn import functional as F

from sparsegnn.errors import InvalidValueError
from sparsegnn.names import (
    ATTENTION_MODELS,
    DEFAULT_MASK,
    MASK_KINDS,
    MODEL_KINDS,
    MaskKind,
    ModelKind,
)
from sparsegnn.nn import Operator, graph_operator
from sparsegnn.nn import build_model as build_kind
from sparsegnn.train.checkpoint import Fingerprint, graph_hash
from sparsegnn.train.loop import CheckpointStore, LoopConfig, LoopRole, LoopState, run_epochs
from sparsegnn.train.memory import peak_memory_bytes

Split = Literal["train", "val", "test"]
Precision = Literal["fp32", "bf16"]


@dataclass(kw_only=True)
class TrainConfig(LoopConfig):
    """Everything that decides a full-graph run; defaults are Kipf & Welling's for Cora.

    The loop's settings (epochs, patience, seed, checkpoint, checkpoint_every, resume,
    progress, logdir) are inherited from :class:`~sparsegnn.train.loop.LoopConfig`:
    :func:`~sparsegnn.train.loop.run_epochs` reads this configuration itself.
    """

    model: ModelKind = "gcn"
    hidden: int = 16  # per head for GAT and GATv2 (hidden layers concatenate ``heads``)
    heads: int = 8  # GAT's and GATv2's hidden heads; other models have none
    # GAT's and GATv2's dropout of the attention weights; None: ``dropout``, as the paper.
    # A grid draws its own attention masks, not one process's.
    attention_dropout: float | None = None
    num_layers: int = 2
    dropout: float = 0.5
    # How dropout masks are drawn (sparsegnn.nn.dropout.MaskKind): "bytes" (the default)
    # is about 25x cheaper to draw, "bernoulli" makes F.dropout's very draws.
    dropout_mask: MaskKind = DEFAULT_MASK
    lr: float = 0.01
    weight_decay: float = 5e-4
    epochs: int = 200
    patience: int = 100
    seed: int = 0
    dtype: Literal["float32", "float64"] = "float32"
    # Feature storage: "bf16" keeps the features and activations in bfloat16 (half the
    # bytes) and everything else in float32; see feature_dtype.
    precision: Precision = "fp32"
    checkpoint_every: int = 10
    # Train from epoch 0 on a checkpoint folder that holds saved epochs (deleted once this
    # run's first checkpoint lands); without it or resume such a folder is refused.
    restart: bool = False

    def __post_init__(self) -> None:
        if self.model not in MODEL_KINDS:
            raise InvalidValueError(
                f"unknown model {self.model!r}; choose one of {', '.join(MODEL_KINDS)}")
        if self.heads < 1:
            raise InvalidValueError(f"heads must be at least 1, got {self.heads}")
        if self.resume and self.restart:
            raise InvalidValueError("resume and restart exclude each other: resume "
                                    "continues the saved epochs, restart discards them")
        if self.precision not in ("fp32", "bf16"):
            raise InvalidValueError(f"precision must be 'fp32' or 'bf16', got {self.precision!r}")
        if self.dropout_mask not in MASK_KINDS:
            raise InvalidValueError(
                f"dropout_mask must be one of {MASK_KINDS}, got {self.dropout_mask!r}")
        if self.precision == "bf16" and self.dtype != "float32":
            raise InvalidValueError(
                f"precision 'bf16' stores features in bfloat16 around float32 weights; it "
                f"cannot be combined with dtype {self.dtype!r} (use dtype 'float32')")

    @property
    def torch_dtype(self) -> torch.dtype:
        """The dtype of the weights, the operator's values, the logits and the loss."""
        return torch.float64 if self.dtype == "float64" else torch.float32

    @property
    def feature_dtype(self) -> torch.dtype:
        """The dtype the features (and so every activation) are stored in.

        Why bfloat16 and only there: the features and the activations are the n-sized
        tensors, the memory that grows with the graph and the bytes the SpMM moves, and
        bfloat16 keeps float32's exponent range, so no loss scaling is needed. The
        weights stay float32 (Adam's small updates would round away in bfloat16), the
        operator's values stay float32 (cast per kernel, cached), sums accumulate in
        float32 inside the kernels, and the logits and the loss are float32.
        """
        return torch.bfloat16 if self.precision == "bf16" else self.torch_dtype


# Each model's settings from its paper, for what a run does not set: Kipf & Welling's
# (GCN; GraphSAGE shares them), Veličković et al.'s Cora GAT (8 heads of 8 channels,
# dropout 0.6 on every layer's input and on the attention, lr 0.005; PyG's example too,
# and Brody et al. keep them for GATv2), Xu et al.'s GIN (64 hidden, lr 0.01, dropout
# 0.5, no weight decay).
_KIPF = {"hidden": 16, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4}
_GAT = {"hidden": 8, "dropout": 0.6, "lr": 0.005, "weight_decay": 5e-4}
PAPER_DEFAULTS: dict[str, dict[str, float | int]] = {
    "gcn": _KIPF, "sage": _KIPF, "gat": _GAT, "gatv2": _GAT,
    "gin": {"hidden": 64, "dropout": 0.5, "lr": 0.01, "weight_decay": 0.0},
}


def config_for(model: str, **given: Any) -> TrainConfig:
    """A :class:`TrainConfig` of ``model`` whose hidden width, dropout, learning rate and
    weight decay are the paper's (:data:`PAPER_DEFAULTS`) unless given (a None counts as
    not given): ``--model gat`` alone trains the paper's GAT, and a flag the user passed
    always wins."""
    if model not in PAPER_DEFAULTS:
        raise InvalidValueError(
            f"unknown model {model!r}; choose one of {', '.join(MODEL_KINDS)}")
    chosen = {k: v for k, v in given.items() if v is not None}
    return TrainConfig(model=model, **{**PAPER_DEFAULTS[model], **chosen})  # type: ignore[arg-type]


class Task(Protocol):
    """What the loop needs from a problem: local data plus (possibly collective) reductions."""

    x: torch.Tensor
    adj: Operator

    def loss(self, logits: torch.Tensor, split: Split) -> torch.Tensor: ...

    def accuracy(self, logits: torch.Tensor, split: Split) -> float: ...

    def scores(self, logits: torch.Tensor, split: Split) -> tuple[float, float]: ...

    def sync_gradients(self, model: nn.Module) -> None: ...


@dataclass
class LocalTask:
    """The whole graph on one process."""

    x: torch.Tensor
    adj: Operator
    y: torch.Tensor
    masks: dict[str, torch.Tensor]

    def loss(self, logits: torch.Tensor, split: Split) -> torch.Tensor:
        m = self.masks[split]
        return F.cross_entropy(logits[m], self.y[m])

    def accuracy(self, logits: torch.Tensor, split: Split) -> float:
        m = self.masks[split]
        return float((logits[m].argmax(1) == self.y[m]).float().mean())

    def scores(self, logits: torch.Tensor, split: Split) -> tuple[float, float]:
        """Accuracy and mean cross-entropy on ``split`` (one evaluation pass gives both)."""
        return self.accuracy(logits, split), float(self.loss(logits, split))

    def sync_gradients(self, model: nn.Module) -> None:
        """Nothing to synchronise on one process."""

    def confusion(self, logits: torch.Tensor, split: Split) -> list[list[int]]:
        m = self.masks[split]
        return confusion_counts(logits[m], self.y[m])


def confusion_counts(logits: torch.Tensor, y: torch.Tensor) -> list[list[int]]:
    """Counts of (true class, predicted class): where the errors go, which accuracy
    alone hides (the run report draws it)."""
    classes = logits.shape[1]
    pairs = y * classes + logits.argmax(1)
    return torch.bincount(pairs, minlength=classes * classes).view(classes, classes).tolist()


@dataclass
class EpochStats:
    epoch: int
    loss: float
    train_accuracy: float
    val_accuracy: float
    seconds: float
    val_loss: float | None = None  # None where the epochs do not evaluate it (R-GCN)


@dataclass
class TrainResult:
    """What a run produced; ``asdict``-able into the CLI's JSON."""

    epochs_run: int
    best_epoch: int
    best_val_accuracy: float
    test_accuracy: float
    epoch_time_s: float
    peak_memory_bytes: int
    history: list[EpochStats] = field(default_factory=list)
    stopped_early: bool = False
    test_confusion: list[list[int]] | None = None  # one process only: rows true, cols predicted
    precision: str = "fp32"  # TrainConfig.precision of the run
    feature_bytes: int = 0  # bytes of this process's feature tensor, as stored

    def to_dict(self) -> dict[str, Any]:
        """Final figures, the per-epoch ``history`` and its ``losses`` (the command line
        keeps the last two for ``--history``)."""
        return {**asdict(self), "losses": [h.loss for h in self.history]}


def build_model(cfg: TrainConfig, in_channels: int, out_channels: int) -> nn.Module:
    """A fresh model of the configured kind, seeded for reproducible initial weights."""
    torch.manual_seed(cfg.seed)
    return build_kind(cfg.model, in_channels, cfg.hidden, out_channels, cfg.num_layers,
                      cfg.dropout, heads=cfg.heads, dropout_mask=cfg.dropout_mask,
                      attention_dropout=cfg.attention_dropout)


def fingerprint(cfg: TrainConfig, **data: str | int) -> dict[str, str | int]:
    """What a checkpoint of a run with ``cfg`` on ``data`` must match to be resumed.

    ``data`` names the graph (its hash and sizes) and how the run is distributed; the
    model's kind, sizes and dtype come from ``cfg``. Epochs, learning rate and seed may
    change on resume, so they are not part of it; nor is ``precision``, since weights
    and Adam's state are float32 at either precision.
    """
    heads = {"heads": cfg.heads} if cfg.model in ATTENTION_MODELS else {}
    return {"kind": "fullgraph", "model": cfg.model, "hidden": cfg.hidden, **heads,
            "layers": cfg.num_layers, "dtype": cfg.dtype, **data}


def fit(
    model: nn.Module,
    task: Task,
    cfg: TrainConfig,
    *,
    is_main: bool = True,
    on_epoch: Callable[[EpochStats], None] | None = None,
    stamp: Fingerprint | None = None,
    store: CheckpointStore | None = None,
) -> TrainResult:
    """Train ``model`` on ``task``; only the main rank writes checkpoints, progress and
    event files.

    ``stamp`` is the checkpoint fingerprint (default: :func:`fingerprint` of ``cfg``
    alone); a checkpoint resumes only if its own matches it field for field. ``store``
    replaces the checkpoint file of ``cfg`` (distributed runs keep one shard per rank).
    A non-finite loss stops the run before anything is saved, so the last checkpoint
    stays the last good state.
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    state = run_epochs(model, optimizer, lambda epoch: train_epoch(model, task, optimizer, epoch),
                       cfg, EpochStats, score=lambda s: s.val_accuracy,
                       stamp=fingerprint(cfg) if stamp is None else stamp, on_epoch=on_epoch,
                       store=store, role=LoopRole(is_main=is_main, reports=is_main))
    return _finish(model, task, state, cfg.precision)


def train_epoch(
    model: nn.Module, task: Task, optimizer: torch.optim.Optimizer, epoch: int
) -> EpochStats:
    """One full-batch step on ``task`` and the accuracies it gives (an epoch of the loop)."""
    start = time.perf_counter()
    model.train()
    optimizer.zero_grad(set_to_none=True)
    logits = model(task.x, task.adj)
    loss = task.loss(logits, "train")
    loss.backward()
    task.sync_gradients(model)
    optimizer.step()
    train_acc = task.accuracy(logits.detach(), "train")
    model.eval()
    with torch.no_grad():
        val_acc, val_loss = task.scores(model(task.x, task.adj), "val")
    return EpochStats(epoch, float(loss.detach()), train_acc, val_acc,
                      time.perf_counter() - start, val_loss)


def _finish(
    model: nn.Module, task: Task, state: LoopState[EpochStats], precision: str = "fp32"
) -> TrainResult:
    """Evaluate the best-on-validation weights (the loop restored them) on the test split."""
    model.eval()
    with torch.no_grad():
        logits = model(task.x, task.adj)
    test_acc = task.accuracy(logits, "test")
    confusion = task.confusion(logits, "test") if isinstance(task, LocalTask) else None
    times = sorted(h.seconds for h in state.history)
    return TrainResult(
        epochs_run=state.epoch,
        best_epoch=state.best_epoch,
        best_val_accuracy=state.best_score,
        test_accuracy=test_acc,
        epoch_time_s=times[len(times) // 2] if times else 0.0,
        peak_memory_bytes=peak_memory_bytes(task.x.device),
        history=state.history,
        stopped_early=state.stopped_early,
        test_confusion=confusion,
        precision=precision,
        feature_bytes=task.x.numel() * task.x.element_size(),
    )


def local_task(
    graph: Any, model: str, device: torch.device, dtype: torch.dtype,
    feature_dtype: torch.dtype | None = None,
) -> LocalTask:
    """The single-process task of a :class:`~sparsegnn.data.GraphData` with labels and masks.

    The operator has ``dtype``; the features ``feature_dtype`` (default ``dtype``), which
    may be 16-bit around a float32 operator (:attr:`TrainConfig.feature_dtype`).
    """
    graph.check_trainable()
    op = graph_operator(graph.edge_index, graph.num_nodes, model).to(device=device, dtype=dtype)
    masks = {
        "train": graph.train_mask.to(device),
        "val": graph.val_mask.to(device),
        "test": graph.test_mask.to(device),
    }
    x = graph.x.to(device=device, dtype=dtype if feature_dtype is None else feature_dtype)
    return LocalTask(x, op, graph.y.to(device), masks)


def train_single(
    graph: Any, cfg: TrainConfig, device: torch.device | str = "cpu"
) -> tuple[nn.Module, TrainResult]:
    """Build the operator, model and task for ``graph`` and train on one process."""
    device = torch.device(device)
    task = local_task(graph, cfg.model, device, cfg.torch_dtype, cfg.feature_dtype)
    model = build_model(cfg, graph.num_features, graph.num_classes).to(
        device=device, dtype=cfg.torch_dtype
    )
    return model, fit(model, task, cfg, stamp=graph_fingerprint(graph, cfg))


def graph_fingerprint(graph: Any, cfg: TrainConfig, world_size: int = 1,
                      algo: str = "single") -> dict[str, str | int]:
    """:func:`fingerprint` of a run on a whole in-memory graph (hashed only when saving)."""
    if cfg.checkpoint is None:
        return fingerprint(cfg)
    return fingerprint(
        cfg, graph=graph_hash(graph.num_nodes, graph.edge_index, tuple(graph.x.shape)),
        classes=graph.num_classes, world_size=world_size, algo=algo,
    )
