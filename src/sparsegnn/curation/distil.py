"""Distil: train an annotator (student or teacher-side model) from teacher labels.

The teacher's labels cover a subset of the corpus; the model sees every document's text
and the whole document graph (transductive, as the student annotates this very corpus),
and learns one head per category from the labelled rows. Hard labels train with cross
entropy, soft labels (probabilities per code) with the cross entropy to that
distribution. Training is :func:`sparsegnn.train.fit` (Adam, early stopping on the mean
validation accuracy over categories) with a task whose loss sums the heads.

A graph student (``mixing="learnt"``) is trained next to a text-only student of the same
size, and each category's mix of the two is then chosen out of fold on every teacher
label (:mod:`sparsegnn.curation.mix_choice`), so the annotator falls back to the text
wherever the labels do not show that the document graph helps.

The student's inputs and network are built by :mod:`sparsegnn.curation.student_build`;
an epoch's task and loss, and the minibatch epoch, are :mod:`sparsegnn.curation.distil_task`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from sparsegnn.curation.distil_task import DistilTask, sampled_epoch
from sparsegnn.curation.document_store import DOCUMENTS_FILE, check_store
from sparsegnn.curation.ingest import iter_texts
from sparsegnn.curation.labels import CategoryLabels, LabelSet
from sparsegnn.curation.mix_choice import (
    MIN_DOCUMENTS,
    MixChoice,
    choose_mix,
    fold_positions,
    share_gains,
    text_only_choice,
)
from sparsegnn.curation.schema import Schema
from sparsegnn.curation.student import (
    DocumentGraph,
    GraphStudent,
    StudentConfig,
    TextFallback,
)
from sparsegnn.curation.student_build import (
    Featurizer,
    as_operand,
    build_model,
    corpus_ids,
    document_graph,
    featurizer_for,
    label_matrix,
    label_targets,
    operator_names,
    operators,
    raw_adjacency,
    resolve_graph,
    text_config,
)
from sparsegnn.data.text import HashedTfidf
from sparsegnn.errors import DataFormatError
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train import EpochStats
from sparsegnn.train.checkpoint import content_hash, read_checkpoint, save_checkpoint
from sparsegnn.train.fullgraph import train_epoch
from sparsegnn.train.loop import LoopConfig, LoopRole, run_epochs

# Layout of a saved annotator's state (2: inside a checksummed sparsegnn checkpoint;
# 3: a channel per edge kind and hop, learnt channel weights, the text-only fallback).
ANNOTATOR_FORMAT = 3
_KIND = "annotator"


@dataclass
class Annotator:
    """A trained model with everything needed to annotate: featurizer, classes, schema."""

    model: GraphStudent | TextFallback
    featurizer: Featurizer
    classes: dict[str, list[str]]
    schema: Schema
    config: StudentConfig
    known: LabelSet | None = None  # teacher labels, read by students with label_inputs

    def save(self, path: str | Path) -> None:
        """Write the annotator as a checkpoint (format header, fingerprint, checksum) via a
        temporary file, so a crash never leaves half a file."""
        state = {
            "config": self.config.to_dict(),
            "schema": self.schema.to_dict(),
            "classes": self.classes,
            "idf": (torch.from_numpy(self.featurizer.idf_)
                    if isinstance(self.featurizer, HashedTfidf) else None),
            "state": self.model.state_dict(),
            "known": None if self.known is None else _known_to_dict(self.known),
        }
        save_checkpoint(path, state, {"kind": _KIND, "annotator_format": ANNOTATOR_FORMAT})

    @classmethod
    def load(cls, path: str | Path) -> Annotator:
        """Read an annotator with ``weights_only=True`` (a file can hold no code); any file
        that is not one of ours, or of another format version, is one clear error."""
        path = Path(path)
        if not path.is_file():
            raise DataFormatError(f"{path}: no such annotator file; train one with "
                                  "`sparsegnn curate distil`")
        saved = read_checkpoint(path, what="annotator file")
        kind = saved.fingerprint.get("kind")
        if kind != _KIND:
            raise DataFormatError(f"{path}: not an annotator saved by `curate distil` (a "
                                  f"{kind or 'sparsegnn'} checkpoint)")
        version = saved.fingerprint.get("annotator_format")
        if version != ANNOTATOR_FORMAT:
            raise DataFormatError(f"{path}: annotator format version {version}, but this "
                                  f"sparsegnn reads version {ANNOTATOR_FORMAT}; re-run "
                                  "`sparsegnn curate distil`")
        ckpt = saved.state
        try:
            return cls._from_checkpoint(ckpt)
        except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as err:
            raise DataFormatError(f"{path}: not a complete annotator ({type(err).__name__}: "
                                  f"{_first_line(err)})") from None

    @classmethod
    def _from_checkpoint(cls, ckpt: dict[str, Any]) -> Annotator:
        cfg = StudentConfig(**ckpt["config"])
        featurizer = featurizer_for(cfg)
        if isinstance(featurizer, HashedTfidf):
            featurizer.idf_ = ckpt["idf"].numpy()
        model = build_model(cfg, {c: len(v) for c, v in ckpt["classes"].items()})
        model.load_state_dict(ckpt["state"])
        known = None if ckpt["known"] is None else _known_from_dict(ckpt["known"])
        return cls(model.eval(), featurizer, ckpt["classes"], Schema.from_dict(ckpt["schema"]), cfg,
                   known)

    def graph(self, store_dir: str | Path, ids: list[str]) -> DocumentGraph | None:
        """The operators (and known labels) this annotator needs on a corpus."""
        if not self.model.needs_graph:
            return None
        graph = document_graph(store_dir, operator_names(self.config))
        if self.model.label_inputs and self.known is not None:
            row_of = {d: i for i, d in enumerate(ids)}
            graph.labels = label_matrix(row_of, self.known, self.classes, len(ids))
        return graph


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else "no message"


def _known_to_dict(labels: LabelSet) -> dict[str, Any]:
    """Primary codes only: what label inputs need, in plain types a safe load accepts."""
    return {"ids": labels.ids, "codes": {c: v.primary for c, v in labels.categories.items()}}


def _known_from_dict(data: dict[str, Any]) -> LabelSet:
    return LabelSet(data["ids"], {c: CategoryLabels(list(v), [None] * len(v))
                                  for c, v in data["codes"].items()})


def _classes(labels: LabelSet, schema: Schema) -> dict[str, list[str]]:
    """Codes each head predicts: those the teacher used, in the schema's order."""
    out = {}
    for cat in schema.categories:
        lab = labels.categories.get(cat.name)
        if lab is None:
            continue
        used = set(lab.primary) | set(lab.classes)
        order = {c.code: i for i, c in enumerate(cat.codes)}
        out[cat.name] = sorted(used, key=lambda c: (order.get(c, len(order)), c))
    return out


@dataclass
class DistilResult:
    annotator: Annotator
    best_val_accuracy: float
    epochs_run: int
    train_seconds: float
    history: list[EpochStats]
    mix: dict[str, MixChoice]  # per category, a graph student's share; empty for one model


def distil(
    store_dir: str | Path,
    labels: LabelSet,
    schema: Schema,
    cfg: StudentConfig | None = None,
    *,
    val_ids: list[str] | None = None,
    val_fraction: float = 0.2,
    progress: bool | None = False,
    checkpoint: str | Path | None = None,
    resume: bool = False,
    logdir: str | Path | None = None,
) -> DistilResult:
    """Train an annotator on the corpus in ``store_dir`` from teacher ``labels``.

    Validation rows (early stopping) are ``val_ids`` when given, else a random
    ``val_fraction`` of the labelled documents. Training runs on
    :func:`sparsegnn.train.loop.run_epochs`: ``checkpoint`` is rewritten after every
    epoch, and ``resume`` continues from it bit-identically (same corpus, labels and
    student sizes, which its fingerprint checks). ``progress`` is the loop's bar (None: on
    a terminal only); ``logdir`` receives TensorBoard event files.
    """
    start = time.perf_counter()
    check_store(store_dir)
    cfg = resolve_graph(cfg or StudentConfig(), store_dir)
    ids = corpus_ids(store_dir)
    row_of = {d: i for i, d in enumerate(ids)}
    unknown = [d for d in labels.ids if d not in row_of]
    if unknown:
        raise DataFormatError(f"{len(unknown)} labelled ids are not in the corpus, "
                              f"e.g. {unknown[:3]}")
    train_ids, val = _split_ids(labels.ids, val_ids, val_fraction, cfg.seed)
    classes = _classes(labels, schema)
    featurizer = featurizer_for(cfg)
    store = Path(store_dir) / DOCUMENTS_FILE
    if isinstance(featurizer, HashedTfidf):  # embeddings have nothing to fit
        featurizer.fit(t for chunk in iter_texts(store, 8192) for t in chunk)
    blocks = list(featurizer.transform_iter(iter_texts(store, 8192)))
    features = (sp.vstack(blocks, format="csr") if sp.issparse(blocks[0])
                else np.concatenate(blocks))
    model = build_model(cfg, {c: len(v) for c, v in classes.items()}, cfg.seed)
    raw = raw_adjacency(store_dir, operator_names(cfg)) if cfg.uses_graph else None
    graph = operators(raw) if raw is not None else None
    if graph is not None and cfg.label_inputs:
        graph.labels = label_matrix(row_of, labels.subset(train_ids), classes, len(ids))
    task = DistilTask(as_operand(features), graph, _heads(model), {}, {})
    for split, split_ids in (("train", train_ids), ("val", val)):
        task.rows[split] = torch.tensor([row_of[d] for d in split_ids], dtype=torch.long)
        task.targets[split] = label_targets(labels.subset(split_ids), classes)
    stamp = {"classes": content_hash(classes)[:16], "documents": len(ids),
             "labels": content_hash([train_ids, val])[:16]}
    fit = partial(_fit, features=features, stamp=stamp, progress=progress, resume=resume,
                  logdir=logdir)
    if isinstance(model, TextFallback):
        text_ckpt = None if checkpoint is None else Path(f"{checkpoint}.text")
        text_state = fit(model.text, replace(task, adj=None), None, text_config(cfg),
                         text_ckpt)
        state = fit(model.graph, task, raw, cfg, checkpoint)
        mix = _cross_fit(model, task, raw, cfg,
                         (text_state.best_epoch + 1, state.best_epoch + 1), fit)
        best = _mixed_val_accuracy(model, task)
    else:
        state = fit(model, task, raw, cfg, checkpoint)
        best, mix = state.best_score, {}
    annotator = Annotator(model.eval(), featurizer, classes, schema, cfg, labels)
    return DistilResult(annotator, best, state.epoch, time.perf_counter() - start,
                        state.history, mix)


def _heads(model: GraphStudent | TextFallback) -> dict[str, slice]:
    return (model.graph if isinstance(model, TextFallback) else model).head_slices()


def _fit(model: GraphStudent, task: DistilTask, raw: dict[str, CSRMatrix] | None,
         cfg: StudentConfig, checkpoint: str | Path | None, *,
         features: sp.csr_matrix | np.ndarray, stamp: dict[str, Any], progress: bool | None,
         resume: bool, logdir: str | Path | None, reports: bool = True) -> Any:
    """Train one student with early stopping and restore its best weights; the loop's
    final state (``reports=False``: no progress lines, as for the cross-fitted folds)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                                 fused=True)  # one kernel per step: the steps are tiny
    epoch_fn = (sampled_epoch(model, task, features, raw, cfg, optimizer) if cfg.batch_size
                else partial(train_epoch, model, task, optimizer))
    # Every student reseeds after its model is built (as full-graph training does), so
    # each one's dropout stream is its own: the text student of a fallback pair trains
    # as a text-only run would, and a resumed pair as an uninterrupted one.
    loop = LoopConfig(epochs=cfg.epochs, patience=cfg.patience,
                      checkpoint=None if checkpoint is None else Path(checkpoint),
                      resume=resume, progress=progress, seed=cfg.seed,
                      logdir=None if logdir is None else Path(logdir))
    stamp = {"kind": "distil", "student": content_hash(_model_fields(cfg))[:16], **stamp}
    return run_epochs(model, optimizer, epoch_fn, loop, EpochStats,
                      score=lambda s: s.val_accuracy, stamp=stamp,
                      role=LoopRole(desc="distil", reports=reports))


def _cross_fit(model: TextFallback, task: DistilTask, raw: dict[str, CSRMatrix] | None,
               cfg: StudentConfig, epochs: tuple[int, int], fit: Any) -> dict[str, MixChoice]:
    """Set each category's graph share from out-of-fold predictions on every teacher label
    (:mod:`sparsegnn.curation.mix_choice`); the choices, with their measured gains."""
    rows = torch.cat([task.rows["train"], task.rows["val"]])
    targets = {c: torch.cat([task.targets["train"][c], task.targets["val"][c]])
               for c in task.heads}
    if len(rows) < MIN_DOCUMENTS:
        choices = {c: text_only_choice(c, len(rows)) for c in task.heads}
    else:
        text, graph = _out_of_fold(task, raw, cfg, epochs, fit, rows, targets)
        choices = {c: choose_mix(c, share_gains(text[:, cols], graph[:, cols],
                                                targets[c].argmax(1)), len(rows), cfg.share_z)
                   for c, cols in task.heads.items()}
    for i, c in enumerate(task.heads):
        model.alpha[i] = choices[c].graph_share
    return choices


def _out_of_fold(task: DistilTask, raw: dict[str, CSRMatrix] | None, cfg: StudentConfig,
                 epochs: tuple[int, int], fit: Any, rows: torch.Tensor,
                 targets: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Text and graph logits of each labelled row from a pair trained without its fold,
    for the epochs early stopping chose in the main run (no fold sees its own labels)."""
    width = sum(s.stop - s.start for s in task.heads.values())
    text, graph = torch.empty(len(rows), width), torch.empty(len(rows), width)
    heads = {c: s.stop - s.start for c, s in task.heads.items()}
    quiet = {"progress": False, "logdir": None, "resume": False, "reports": False}
    for fold in fold_positions(len(rows), cfg.share_folds, cfg.seed):
        keep = np.setdiff1d(np.arange(len(rows)), fold)
        sub = replace(task, adj=_without_labels_of(task.adj, rows[fold]),
                      rows={"train": rows[keep]},
                      targets={"train": {c: t[keep] for c, t in targets.items()}})
        pair = build_model(cfg, heads, cfg.seed)
        assert isinstance(pair, TextFallback)
        fit(pair.text, replace(sub, adj=None), None,
            replace(text_config(cfg), epochs=epochs[0], patience=epochs[0]), None, **quiet)
        fit(pair.graph, sub, raw, replace(cfg, epochs=epochs[1], patience=epochs[1]), None,
            **quiet)
        pair.eval()
        with torch.no_grad():
            text[fold] = pair.text(task.x, None)[rows[fold]]
            graph[fold] = pair.graph(task.x, sub.adj)[rows[fold]]
    return text, graph


def _without_labels_of(graph: DocumentGraph | None, rows: torch.Tensor
                       ) -> DocumentGraph | None:
    """The operators with the label inputs of ``rows`` removed (a held-out fold)."""
    if graph is None or graph.labels is None:
        return graph
    labels = graph.labels.clone()
    labels[rows] = 0.0
    return replace(graph, labels=labels)


@torch.no_grad()
def _mixed_val_accuracy(model: TextFallback, task: DistilTask) -> float:
    """Mean validation accuracy over categories at the chosen shares."""
    model.eval()
    out = model.classify(model.propagate(model.encode(task.x), task.adj))
    return task.accuracy(torch.cat(list(out.values()), dim=1), "val")


def _model_fields(cfg: StudentConfig) -> dict[str, Any]:
    """The student's settings a checkpoint must match (not epochs, rates or patience)."""
    free = {"epochs", "lr", "weight_decay", "patience", "share_folds", "share_z"}
    return {k: v for k, v in cfg.to_dict().items() if k not in free}


def _split_ids(ids: list[str], val_ids: list[str] | None, fraction: float, seed: int
               ) -> tuple[list[str], list[str]]:
    if val_ids is not None:
        held = set(val_ids)
        return [d for d in ids if d not in held], [d for d in ids if d in held]
    order = np.random.default_rng(seed).permutation(len(ids))
    n_val = max(1, round(fraction * len(ids)))
    if n_val >= len(ids):
        raise DataFormatError(f"{len(ids)} labelled documents are too few to hold out "
                              "a validation set")
    return [ids[i] for i in sorted(order[n_val:])], [ids[i] for i in sorted(order[:n_val])]
