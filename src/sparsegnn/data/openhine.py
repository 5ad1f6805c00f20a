"""OpenHINE's heterogeneous-network folders (``edge.txt``, ``label.txt``), e.g. its ACM.

BUPT-GAMMA/OpenHINE ships ACM (papers, authors, subjects; 3 paper classes), DBLP and Yelp
as two tab-separated text files: ``edge.txt`` lines ``src dst relation weight`` where the
relation is ``x-y`` (the one-letter source and destination node types, ids local to each
type, both directions listed), and ``label.txt`` lines ``<type letter><id> label`` for the
labelled type. No split ships with them: a seeded stratified one is drawn
(:func:`~sparsegnn.data.splits.stratified_split`), its fractions and seed in ``meta``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from sparsegnn.data.graph import check_labels
from sparsegnn.data.hetero import EdgeType, HeteroGraph
from sparsegnn.data.paths import read_data_bytes
from sparsegnn.data.splits import stratified_split
from sparsegnn.errors import DataFormatError

EDGES, LABELS = "edge.txt", "label.txt"
SPLIT = (0.2, 0.1, 0.7)


def is_openhine_dir(path: Path) -> bool:
    return all((path / f).is_file() or (path / f"{f}.xz").is_file() for f in (EDGES, LABELS))


def read_openhine(folder: str | os.PathLike[str], *, split: Sequence[float] = SPLIT,
                  seed: int = 0) -> HeteroGraph:
    """The typed graph of an OpenHINE folder (``.xz``-compressed files are read too)."""
    folder = Path(folder)
    edges = _edges(folder / EDGES)
    ids, labels, target = _labels(folder / LABELS)
    counts: dict[str, int] = {}
    for (s, _, d), ei in edges.items():
        for ntype, row in ((s, ei[0]), (d, ei[1])):
            counts[ntype] = max(counts.get(ntype, 0), int(row.max(initial=-1)) + 1)
    counts[target] = max(counts.get(target, 0), int(ids.max(initial=-1)) + 1)
    y = np.zeros(counts[target], np.int64)
    y[ids] = labels
    labelled = np.zeros(counts[target], bool)
    labelled[ids] = True
    masks = [m & torch.from_numpy(labelled) for m in stratified_split(y, split, seed=seed)]
    g = HeteroGraph(num_nodes=counts, edge_index={et: torch.from_numpy(ei)
                                                  for et, ei in edges.items()},
                    target=target, y=torch.from_numpy(y), train_mask=masks[0],
                    val_mask=masks[1], test_mask=masks[2], name=folder.name,
                    meta={"source": str(folder), "reverse_edges": True,
                          "split": list(split), "split_seed": seed})
    return g.validate()


def _lines(path: Path) -> list[list[str]]:
    try:
        text = read_data_bytes(path).decode("utf-8")
    except FileNotFoundError as err:
        raise DataFormatError(f"{path}: no such file") from err
    except UnicodeDecodeError as err:
        raise DataFormatError(f"{path}: not UTF-8 text ({err})") from err
    return [line.split() for line in text.splitlines() if line.strip()]


def _edges(path: Path) -> dict[EdgeType, np.ndarray]:
    """Edges grouped by relation, as ``(src letter, relation, dst letter)`` types."""
    groups: dict[str, list[tuple[int, int]]] = {}
    for number, fields in enumerate(_lines(path), 1):
        if len(fields) < 3 or fields[2].count("-") != 1:
            raise DataFormatError(f"{path}: line {number} is not 'src dst x-y [weight]'")
        try:
            groups.setdefault(fields[2], []).append((int(fields[0]), int(fields[1])))
        except ValueError:
            raise DataFormatError(f"{path}: line {number}: ids must be integers") from None
    out = {}
    for rel, pairs in groups.items():
        s, d = rel.split("-")
        out[(s, rel, d)] = np.asarray(pairs, dtype=np.int64).reshape(-1, 2).T.copy()
    return out


def _labels(path: Path) -> tuple[np.ndarray, np.ndarray, str]:
    ids, labels, types = [], [], set()
    for number, fields in enumerate(_lines(path), 1):
        node = fields[0] if fields else ""
        letter = node.rstrip("0123456789")
        try:
            ids.append(int(node[len(letter):]))
            labels.append(int(fields[1]))
        except (ValueError, IndexError):
            raise DataFormatError(f"{path}: line {number} is not '<type><id> label'") from None
        types.add(letter)
    if len(types) != 1:
        raise DataFormatError(f"{path}: labels must name one node type, found "
                              f"{sorted(types) or 'none'}")
    y = np.asarray(labels, dtype=np.int64)
    check_labels(y, path)
    return np.asarray(ids, dtype=np.int64), y, types.pop()
