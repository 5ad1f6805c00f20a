"""Sparsity-aware communication volume of a partition, in rows of H.

With vertex v owned by part ``parts[v]``, part p needs the row of every vertex u of
another part that is a column of p's block row, i.e. a neighbour of one of p's
vertices, and receives it exactly once however many of its rows touch u. The volume is
therefore the partition's connectivity: ``pair[p, q]`` is how many distinct vertices of
part q some vertex of part p is adjacent to, ``recv[p]`` the row sum and ``send[q]`` the
column sum of that P x P matrix. Everything is a sort of edge keys, no Python loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PartVolume:
    """Rows each part receives and sends in one sparsity-aware 1D SpMM."""

    pair: np.ndarray  # P x P: pair[p, q] rows part p receives from part q (diagonal 0)

    @property
    def recv(self) -> np.ndarray:
        return self.pair.sum(1)

    @property
    def send(self) -> np.ndarray:
        return self.pair.sum(0)

    @property
    def total(self) -> int:
        return int(self.pair.sum())

    @property
    def max_per_rank(self) -> int:
        """The bottleneck: the most rows any part sends or receives."""
        if not self.pair.size:
            return 0
        return int(max(self.recv.max(), self.send.max()))


def pair_rows(
    rows: np.ndarray, cols: np.ndarray, row_part: np.ndarray, col_part: np.ndarray, nparts: int
) -> np.ndarray:
    """``pair[p, q]``: distinct columns of part q among the nonzeros of part p's rows.

    ``rows``/``cols`` are the nonzeros (any order, duplicates allowed), ``row_part`` and
    ``col_part`` the owning part of every row and column id (they differ only when the
    operator is not square, never here, but keeping them apart makes the transpose free).
    """
    rp = row_part[rows]
    cp = col_part[cols]
    cross = rp != cp
    num_cols = len(col_part)
    keys = np.unique(rp[cross].astype(np.int64) * num_cols + cols[cross])
    p, c = np.divmod(keys, num_cols)
    flat = p * nparts + col_part[c]
    return np.bincount(flat, minlength=nparts * nparts).reshape(nparts, nparts)


def part_volume(
    indptr: np.ndarray, indices: np.ndarray, parts: np.ndarray, nparts: int
) -> PartVolume:
    """The :class:`PartVolume` of a symmetric pattern under ``parts`` (vertex -> part)."""
    parts = np.asarray(parts, dtype=np.int64)
    rows = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
    return PartVolume(pair_rows(rows, np.asarray(indices, np.int64), parts, parts, nparts))
