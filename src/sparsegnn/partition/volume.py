"""Sparsity-aware communication volume of a partition, in rows of H.

With vertex v owned by part ``parts[v]``, part p needs the row of every vertex u of
another part that is a column of p's block row, i.e. a neighbour of one of p's
vertices, and receives it exactly once however many of its rows touch u. The volume is
therefore the partition's connectivity: ``pair[p, q]`` is how many distinct vertices of
part q some vertex of part p is adjacent to, ``recv[p]`` the row sum and ``send[q]`` the
column sum of that P x P matrix.

The count is grouped by column: the parts that receive the row of column c are the
distinct parts of the rows adjacent to c, so distinctness is local to one column and the
pattern is walked a few million nonzeros (whole columns) at a time. Memory is one chunk
of temporaries plus the P x P matrix, whatever the size of the graph, where sorting one
key per nonzero needed several int64 copies of the edge list (a GiB each at 1e8 edges).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sparsegnn.data.edges import sorted_unique

# Nonzeros per step of the column-wise count: its temporaries (a few int64 arrays of this
# length, ~200 MiB) are all the memory it needs besides the P x P result.
CHUNK_NNZ = 1 << 22


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
    ones = np.ones(len(rows), dtype=bool)
    by_col = sp.csc_matrix((ones, (rows, cols)), shape=(len(row_part), len(col_part)))
    return column_pairs(by_col.indptr, by_col.indices, row_part, col_part, nparts)


def column_pairs(
    indptr: np.ndarray, rows: np.ndarray, row_part: np.ndarray, col_part: np.ndarray,
    nparts: int, chunk: int = CHUNK_NNZ,
) -> np.ndarray:
    """:func:`pair_rows` of a pattern stored by column: column c has nonzeros in the rows
    ``rows[indptr[c]:indptr[c + 1]]`` (the CSC arrays, i.e. the CSR of the transpose).

    Columns are taken about ``chunk`` nonzeros at a time (a longer column alone), so no
    array as long as the pattern is allocated.
    """
    pair = np.zeros(nparts * nparts, dtype=np.int64)
    for c0, c1 in _column_chunks(indptr, chunk):
        pair += _chunk_pairs(indptr, rows, row_part, col_part, nparts, c0, c1)
    return pair.reshape(nparts, nparts)


def part_volume(
    indptr: np.ndarray, indices: np.ndarray, parts: np.ndarray, nparts: int
) -> PartVolume:
    """The :class:`PartVolume` of a symmetric pattern under ``parts`` (vertex -> part).

    A symmetric pattern's rows are its columns, so ``(indptr, indices)`` is read as the
    column-wise pattern directly.
    """
    parts = np.asarray(parts, dtype=np.int64)
    return PartVolume(column_pairs(indptr, indices, parts, parts, nparts))


def _column_chunks(indptr: np.ndarray, chunk: int) -> Iterator[tuple[int, int]]:
    """``[c0, c1)`` column ranges of at most ``chunk`` nonzeros, or one column."""
    num_cols = len(indptr) - 1
    c0 = 0
    while c0 < num_cols:
        last = int(np.searchsorted(indptr, int(indptr[c0]) + chunk, side="right")) - 1
        c1 = min(max(last, c0 + 1), num_cols)
        yield c0, c1
        c0 = c1


def _chunk_pairs(
    indptr: np.ndarray, rows: np.ndarray, row_part: np.ndarray, col_part: np.ndarray,
    nparts: int, c0: int, c1: int,
) -> np.ndarray:
    """Flat ``P * P`` counts of columns ``[c0, c1)``: one key ``(c - c0) * P + part(r)``
    per nonzero off the diagonal blocks, each distinct key one row sent."""
    p = row_part[rows[indptr[c0]:indptr[c1]]].astype(np.int64, copy=False)
    col = np.repeat(np.arange(c1 - c0, dtype=np.int64), np.diff(indptr[c0:c1 + 1]))
    cross = p != col_part[c0 + col]
    keys = sorted_unique(col[cross] * nparts + p[cross])
    local, p = np.divmod(keys, nparts)
    flat = p * nparts + col_part[c0 + local]
    return np.bincount(flat, minlength=nparts * nparts)
