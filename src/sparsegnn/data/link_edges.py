"""The typed edge split of link prediction, and saving it with a run.

A :class:`LinkSplit` says which edges the encoder passes messages over and which pairs
each split is scored on (:class:`LabeledEdges`); it is made by
:func:`sparsegnn.sampling.link_split.random_link_split` or read from an OGB ``ogbl-*``
folder (:mod:`sparsegnn.data.ogbl`). It is plain tensors, numbers and strings, so
:func:`save_split` writes it next to a run and :func:`load_split` reads it back with
``torch.load(weights_only=True)``, without running pickled code.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

import torch

from sparsegnn.data.io import atomic_write
from sparsegnn.errors import DataFormatError

_FORMAT = "sparsegnn-link-split-1"


@dataclass(frozen=True)
class LabeledEdges:
    """The supervision edges of one split: positive pairs and their negatives.

    ``neg`` are shared negatives ``[2, Q]`` (AUC, AP, Hits@K rank positives against all of
    them); ``neg_tails`` ``[P, K]`` are per-positive corrupted tails (``ogbl-citation2``:
    MRR ranks positive ``i`` against its own row). ``pos_type``/``neg_type`` are relation
    ids for typed edges (DistMult), else None.
    """

    pos: torch.Tensor
    neg: torch.Tensor
    neg_tails: torch.Tensor | None = None
    pos_type: torch.Tensor | None = None
    neg_type: torch.Tensor | None = None

    @property
    def num_pos(self) -> int:
        return int(self.pos.shape[1])

    @property
    def num_neg(self) -> int:
        return int(self.neg.shape[1])


@dataclass(frozen=True)
class LinkSplit:
    """Message edges and labelled edges of a link-prediction run (see the module doc).

    ``train_message`` is the graph the encoder sees while training and validating,
    ``test_message`` the one it sees when testing (both directions of every undirected
    pair). ``settings`` records how the split was made, for the run's report.
    """

    num_nodes: int
    undirected: bool
    train_message: torch.Tensor
    test_message: torch.Tensor
    train: LabeledEdges
    val: LabeledEdges
    test: LabeledEdges
    settings: dict[str, float | int | str | bool]


# ---------------------------------------------------------------------- saving
def split_state(split: LinkSplit) -> dict[str, Any]:
    """The split as plain tensors, numbers and strings (what ``weights_only`` reads)."""
    state: dict[str, Any] = {"format": _FORMAT}
    for f in fields(split):
        value = getattr(split, f.name)
        state[f.name] = _edges_state(value) if isinstance(value, LabeledEdges) else value
    return state


def split_from_state(state: dict[str, Any], where: str = "split") -> LinkSplit:
    """Inverse of :func:`split_state`; a state of another format is refused."""
    if not isinstance(state, dict) or state.get("format") != _FORMAT:
        raise DataFormatError(f"{where}: not a sparsegnn link split (expected {_FORMAT})")
    try:
        parts = {f.name: state[f.name] for f in fields(LinkSplit)}
        for name in ("train", "val", "test"):
            parts[name] = LabeledEdges(**parts[name])
        return LinkSplit(**parts)
    except (KeyError, TypeError) as err:
        raise DataFormatError(f"{where}: incomplete link split ({err})") from err


def save_split(split: LinkSplit, path: str | os.PathLike[str]) -> None:
    """Write the split atomically (``torch.save`` of :func:`split_state`)."""
    atomic_write(path, lambda f: torch.save(split_state(split), f))


def load_split(path: str | os.PathLike[str]) -> LinkSplit:
    """A split written by :func:`save_split`, read with ``weights_only=True``."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError) as err:
        raise DataFormatError(f"{path}: not a readable link split "
                              f"({str(err).splitlines()[0]})") from err
    return split_from_state(state, str(path))


def _edges_state(edges: LabeledEdges) -> dict[str, torch.Tensor | None]:
    return {f.name: getattr(edges, f.name) for f in fields(edges)}
