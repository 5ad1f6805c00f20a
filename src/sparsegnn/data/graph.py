"""The in-memory graph every loader and generator returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from sparsegnn.errors import DataFormatError, InvalidValueError, NonFiniteError


@dataclass
class GraphData:
    """A graph with optional node features, labels and split masks.

    ``edge_index`` is PyG-style ``[2, E]`` int64 (source, target); undirected graphs store
    both directions and no self-loops. Masks are boolean ``[num_nodes]`` tensors.
    """

    edge_index: torch.Tensor
    num_nodes: int
    x: torch.Tensor | None = None
    y: torch.Tensor | None = None
    train_mask: torch.Tensor | None = None
    val_mask: torch.Tensor | None = None
    test_mask: torch.Tensor | None = None
    name: str = "graph"
    texts: list[str] | None = None
    node_ids: list[str] | None = None
    class_names: list[str] | None = None
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    @property
    def num_features(self) -> int:
        return 0 if self.x is None else int(self.x.shape[1])

    @property
    def num_classes(self) -> int:
        return 0 if self.y is None else int(self.y.max()) + 1

    def counts(self) -> dict[str, object]:
        """Counts a user wants to see first (the `data info` output)."""
        out: dict[str, object] = {
            "name": self.name,
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "num_features": self.num_features,
            "num_classes": self.num_classes,
        }
        for split in ("train", "val", "test"):
            mask = getattr(self, f"{split}_mask")
            if mask is not None:
                out[f"num_{split}"] = int(mask.sum())
        return out

    def check_trainable(self, source: object = None) -> None:
        """Refuse a graph training would run on NaN, with one line naming the graph.

        Features, labels and a train/val/test split must exist; labels must be class ids
        >= 0; features must be finite; no split may be empty (an empty train split is a NaN
        loss, an empty validation split a NaN accuracy that early stopping cannot compare).
        ``source`` is what the user named (``--dataset``), used in the message when given: a
        file's stored name is often just ``'graph'``, which tells nobody which file it was.
        """
        name = f"graph {source}" if source is not None else f"graph {self.name!r}"
        missing = [what for what, v in (("features", self.x), ("labels", self.y),
                                        ("train_mask", self.train_mask),
                                        ("val_mask", self.val_mask),
                                        ("test_mask", self.test_mask)) if v is None]
        if missing:
            raise InvalidValueError(f"{name} has no {', '.join(missing)}; training needs "
                                    "features, labels and train/val/test masks"
                                    + _split_hint(source, missing))
        if self.y.numel() and int(self.y.min()) < 0:
            row = int((self.y < 0).nonzero()[0, 0])
            raise InvalidValueError(f"{name}: label of node {row} is {int(self.y[row])}; labels "
                                    "must be class ids >= 0 (mask out unlabelled nodes instead)")
        if self.x.is_floating_point():
            bad = ~torch.isfinite(self.x).all(dim=1)
            if bool(bad.any()):
                raise NonFiniteError(f"{name}: feature row {int(bad.nonzero()[0, 0])} holds a NaN "
                                     "or infinity; features must be finite")
        for split in ("train", "val", "test"):
            if not bool(getattr(self, f"{split}_mask").any()):
                raise InvalidValueError(f"{name}: the {split} split is empty ({split}_mask is all "
                                        "false); training needs nodes in every split")


def _split_hint(source: object, missing: list[str]) -> str:
    """Where the split is when the user named a dataset's ``processed/*.pt`` file: OGB and
    PyG keep it beside that file, in the dataset folder."""
    if source is None or not any(m.endswith("_mask") for m in missing):
        return ""
    path = Path(str(source))
    if path.suffix != ".pt" or path.parent.name != "processed":
        return ""
    return (f" (OGB and PyG keep a dataset's split beside processed/: give the dataset "
            f"folder {path.parent.parent})")


# Rows per step of the finiteness scan: its boolean temporary stays a few MiB.
_ROWS = 1 << 14


def first_nonfinite_row(x: np.ndarray) -> int | None:
    """Index of the first row of ``x`` holding a NaN or an infinity, or None.

    A loader calls this so that a bad feature is refused, with its row, when the file is
    read; found later it is a NaN loss whose source is anyone's guess. The scan goes a
    block of rows at a time rather than building a mask as large as ``x``.
    """
    if x.dtype.kind != "f":
        return None
    for lo in range(0, x.shape[0], _ROWS):
        block = x[lo:lo + _ROWS].reshape(min(_ROWS, x.shape[0] - lo), -1)
        bad = ~np.isfinite(block).all(axis=1)
        if bad.any():
            return lo + int(np.argmax(bad))
    return None


def check_features(x: np.ndarray, where: object) -> None:
    """Refuse features with a NaN or infinity, naming ``where`` (the file) and the row."""
    row = first_nonfinite_row(x)
    if row is not None:
        values = x[row].reshape(-1)
        col = int(np.argmax(~np.isfinite(values)))
        raise NonFiniteError(
            f"{where}: feature row {row} holds {values[col]} (column {col}); features must "
            "be finite"
        )


def check_labels(y: np.ndarray, where: object) -> None:
    """Refuse a negative class id (e.g. -1 for "unlabelled"), naming the file and row."""
    if y.size and int(y.min()) < 0:
        row = int(np.argmax(y < 0))
        raise DataFormatError(
            f"{where}: label of row {row} is {int(y[row])}; labels must be class ids >= 0 "
            "(mask out unlabelled nodes instead)"
        )


def row_normalize(x: torch.Tensor) -> torch.Tensor:
    """Scale each feature row to sum 1 (rows of zeros stay zero): Planetoid's preprocessing."""
    s = x.sum(1, keepdim=True)
    return x / torch.where(s == 0, torch.ones_like(s), s)
