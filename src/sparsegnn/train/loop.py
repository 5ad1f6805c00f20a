"""One training loop for every mode: epochs, early stopping, best weights, checkpoints.

Full-graph training (one process or a grid of ranks), sampled minibatch training,
tracking's Interaction Network and curation's distilled annotator differ only in what one
epoch does. :func:`run_epochs` owns everything around that epoch, once:

* the epoch counter, a progress bar on a terminal or summary lines in a log file
  (:mod:`sparsegnn.train.progress`), TensorBoard event files with ``logdir``
  (:mod:`sparsegnn.train.eventlog`), both on one rank only, and ``on_epoch``;
* a NaN or infinite loss stops the run before anything is saved, so the last checkpoint
  stays the last good state;
* early stopping on a validation score, and the best-scoring weights restored at the end;
* atomic checkpoints (model, optimiser, loop state, every RNG stream, and any extra state
  a mode registers) every ``checkpoint_every`` epochs and at the end, each stamped with a
  fingerprint of what must match to resume; where they live is a :class:`CheckpointStore`
  (one file by default, a folder of rank shards for distributed full-graph runs);
* resume: the loop continues from the checkpoint exactly as if it had not stopped (same
  weights, moments, RNG streams, early-stopping state), with this run's learning rate and
  weight decay.

A resumed run is bit-identical to an uninterrupted one in every mode because nothing
random happens outside the restored streams: samplers derive their randomness from
``(seed, epoch, batch)`` alone.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import torch
from torch import nn

from sparsegnn.errors import DataFormatError, NonFiniteError
from sparsegnn.train.checkpoint import (
    Fingerprint,
    check_checkpoint_path,
    load_checkpoint,
    remove_stale_temps,
    rng_state,
    save_checkpoint,
    seed_everything,
    set_rng_state,
)
from sparsegnn.train.eventlog import EventLog
from sparsegnn.train.memory import peak_memory_bytes
from sparsegnn.train.progress import EpochDisplay
from sparsegnn.train.run_lock import RunLock

log = logging.getLogger(__name__)


class EpochRecord(Protocol):
    """What a mode reports per epoch: a dataclass with at least its training loss."""

    loss: float


S = TypeVar("S", bound=EpochRecord)


class Resumable(Protocol):
    """Extra state a mode needs restored on resume (e.g. tracking's positive weight)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class CheckpointStore(Protocol):
    """Where a run's checkpoints are kept and how the one to resume from is chosen.

    The loop decides *when* to save and *what* (the payload of :func:`_save`); a store
    decides where, how atomically and which saved state a resume continues from, so one
    file per process and a folder of per-rank shards with a manifest share the loop.
    """

    def prepare(self) -> None:
        """Check the place before any training; clear what a killed save left behind."""

    def load(self) -> dict[str, Any] | None:
        """The verified payload to resume from, or ``None`` when there is none yet."""

    def save(self, epoch: int, payload: dict[str, Any]) -> None:
        """Keep ``payload``, the state after ``epoch`` epochs."""

    def describe(self) -> str:
        """How messages name the store (``checkpoint run.pt``)."""

    def close(self) -> None:
        """Let go of the place (its lock): the run is over, however it ended."""


@dataclass
class FileStore:
    """One checkpoint file, rewritten atomically; only the main rank writes it, holding
    the file's :class:`~sparsegnn.train.run_lock.RunLock` while the run lasts."""

    path: Path
    stamp: Fingerprint
    is_main: bool = True
    lock: RunLock | None = None

    def prepare(self) -> None:
        if self.is_main:
            check_checkpoint_path(self.path)
            self.lock = RunLock(self.path, folder=False)
            self.lock.acquire()
            remove_stale_temps(self.path)

    def close(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def load(self) -> dict[str, Any] | None:
        return load_checkpoint(self.path, self.stamp) if self.path.exists() else None

    def save(self, epoch: int, payload: dict[str, Any]) -> None:
        if self.is_main:
            save_checkpoint(self.path, payload, self.stamp)

    def describe(self) -> str:
        return f"checkpoint {self.path}"


@dataclass(kw_only=True)
class LoopConfig:
    """How the loop runs; what an epoch does is the mode's business.

    Every mode's configuration embeds these settings by inheriting them
    (:class:`~sparsegnn.train.fullgraph.TrainConfig` is a ``LoopConfig``), so the loop
    reads the mode's own configuration instead of a copy of its fields.
    ``patience=None`` trains every epoch (no validation score); ``seed=None`` leaves the
    RNG streams as the caller set them. ``checkpoint`` is a file (a :class:`FileStore`)
    unless :func:`run_epochs` gets a store. ``progress``: a bar always (True), never
    (False), or on a terminal only (None), with summary lines where there is no bar;
    ``logdir``: TensorBoard event files there.
    """

    epochs: int
    patience: int | None = None
    checkpoint: Path | None = None
    checkpoint_every: int = 1
    resume: bool = False
    progress: bool | None = None
    seed: int | None = None
    logdir: Path | None = None


@dataclass(frozen=True)
class LoopRole:
    """What differs between the processes of one run, so it is no configuration's field.

    ``is_main`` writes a :class:`FileStore`'s file (modes that keep one file per rank
    leave it True everywhere); ``reports`` shows progress and writes event files, on one
    rank; ``reseed``: seed every stream with ``LoopConfig.seed`` on a fresh start (False
    for a mode that seeds before building its model and sampler).
    """

    is_main: bool = True
    reports: bool = True
    desc: str = "train"
    reseed: bool = True


@dataclass
class LoopState(Generic[S]):
    """Where a run stands; checkpoints hold it as plain data."""

    epoch: int = 0  # epochs completed
    best_score: float = -1.0
    best_epoch: int = 0
    best_weights: dict[str, torch.Tensor] | None = None
    bad_epochs: int = 0
    history: list[S] = field(default_factory=list)
    stopped_early: bool = False

    def plain(self) -> dict[str, Any]:
        """Numbers, tensors and lists only: what ``torch.load(weights_only=True)`` reads."""
        plain = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**plain, "history": [asdict(h) for h in self.history]}  # type: ignore[call-overload]

    @classmethod
    def from_plain(cls, d: dict[str, Any], record: type[S]) -> LoopState[S]:
        return cls(**{**d, "history": [record(**h) for h in d["history"]]})


def run_epochs(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    epoch_fn: Callable[[int], S],
    cfg: LoopConfig,
    record: type[S],
    *,
    score: Callable[[S], float] | None = None,
    stamp: Fingerprint | None = None,
    on_epoch: Callable[[S], None] | None = None,
    extra: Resumable | None = None,
    store: CheckpointStore | None = None,
    role: LoopRole = LoopRole(),
) -> LoopState[S]:
    """Run ``epoch_fn(epoch)`` for the remaining epochs of ``cfg``; returns the final state.

    ``score`` (higher is better) drives early stopping and the best weights, which the
    model holds when the run ends (checkpoints keep the last ones, to resume from).
    ``stamp`` is the fingerprint a checkpoint file must match to be resumed, field for
    field; ``store`` replaces the file of ``cfg.checkpoint`` (and brings its own checks).
    """
    if store is None and cfg.checkpoint is not None:
        store = FileStore(Path(cfg.checkpoint), stamp or {}, role.is_main)
    if store is not None:
        store.prepare()
    try:
        state = _run(model, optimizer, epoch_fn, cfg, role, record, score, on_epoch, extra,
                     store)
    finally:
        if store is not None:
            store.close()
    if state.best_weights is not None:  # after the last save: a resume needs the last ones
        model.load_state_dict(state.best_weights)
    return state


def _run(model: nn.Module, optimizer: torch.optim.Optimizer, epoch_fn: Callable[[int], S],
         cfg: LoopConfig, role: LoopRole, record: type[S], score: Callable[[S], float] | None,
         on_epoch: Callable[[S], None] | None, extra: Resumable | None,
         store: CheckpointStore | None) -> LoopState[S]:
    """:func:`run_epochs` once the store (if any) is prepared and locked."""
    state: LoopState[S] = LoopState()
    payload = store.load() if store is not None and cfg.resume else None
    saved: int | None = None  # the epoch whose state the store holds, if any
    if store is not None and payload is not None:
        state = _restore(payload, store.describe(), model, optimizer, record, extra)
        saved = state.epoch
        log.debug("resumed from %s at epoch %d", store.describe(), state.epoch)
    elif cfg.seed is not None and role.reseed:
        seed_everything(cfg.seed)
    display = EpochDisplay(cfg.epochs, state.epoch, role.desc, cfg.progress, role.reports,
                           score)
    events = EventLog(cfg.logdir) if cfg.logdir is not None and role.reports else None
    try:
        while state.epoch < cfg.epochs and not state.stopped_early:
            stats = epoch_fn(state.epoch)
            _check_loss(state.epoch, stats.loss, store)
            state.history.append(stats)
            state.epoch += 1
            if score is not None:
                _track_best(state, model, score(stats), cfg.patience)
            display.update(state.epoch, stats,
                           state.epoch == cfg.epochs or state.stopped_early)
            if events is not None:
                events.epoch(state.epoch - 1, stats, peak_memory_bytes(_device(model)))
            if on_epoch is not None:
                on_epoch(stats)
            if store is not None and state.epoch % cfg.checkpoint_every == 0:
                _save(store, model, optimizer, state, extra)
                saved = state.epoch
    finally:
        display.close()
        if events is not None:
            events.close()
    if store is not None and saved != state.epoch:  # the end, unless just saved
        _save(store, model, optimizer, state, extra)
    return state


def _track_best(state: LoopState[Any], model: nn.Module, value: float,
                patience: int | None) -> None:
    if value > state.best_score:
        state.best_score, state.best_epoch, state.bad_epochs = value, state.epoch - 1, 0
        state.best_weights = copy.deepcopy(model.state_dict())
    else:
        state.bad_epochs += 1
    state.stopped_early = patience is not None and state.bad_epochs >= patience


def _device(model: nn.Module) -> torch.device:
    """Where the model's weights live: the device whose memory the run uses."""
    return next(model.parameters()).device


def _check_loss(epoch: int, loss: float, store: CheckpointStore | None) -> None:
    """Stop at the first NaN or infinite loss: every later epoch would train on it."""
    if not math.isfinite(loss):
        kept = f"; {store.describe()} keeps the last good state" if store else ""
        raise NonFiniteError(
            f"epoch {epoch}: the training loss is {loss}; training stopped{kept} "
            "(try a lower --lr)"
        )


def _save(store: CheckpointStore, model: nn.Module, optimizer: torch.optim.Optimizer,
          state: LoopState[Any], extra: Resumable | None) -> None:
    payload = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
               "loop": state.plain(), "rng": rng_state()}
    if extra is not None:
        payload["extra"] = extra.state_dict()
    store.save(state.epoch, payload)


def _restore(ckpt: dict[str, Any], where: str, model: nn.Module,
             optimizer: torch.optim.Optimizer, record: type[S],
             extra: Resumable | None) -> LoopState[S]:
    """Load a checkpoint into ``model``, ``optimizer`` (and ``extra``); the state to go on from.

    The optimiser keeps its saved moments but takes this run's learning rate and weight
    decay: ``load_state_dict`` would otherwise bring back the saved ones and silently
    ignore ``--lr`` on resume, which the fingerprint allows to change.
    """
    hyper = [{k: g[k] for k in ("lr", "weight_decay") if k in g} for g in optimizer.param_groups]
    try:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        state = LoopState.from_plain(ckpt["loop"], record)
        if extra is not None:
            extra.load_state_dict(ckpt["extra"])
        set_rng_state(ckpt["rng"])
    except (KeyError, TypeError, ValueError, RuntimeError) as err:  # a well-formed file of
        # matching fingerprint whose content is not this mode's training state (hand-made)
        raise DataFormatError(f"{where} holds no usable training state ({err})") from err
    for group, values in zip(optimizer.param_groups, hyper, strict=True):
        group.update(values)
    return state
