"""Process grids: how p ranks are arranged for each SpMM algorithm.

Every algorithm uses the same three axes, ``rows x cols x layers``, with rank
``(row * cols + col) * layers + layer``; what the axes mean differs:

* ``1d``   ``p x 1 x 1``: rank i owns vertex block i.
* ``1.5d`` ``(p/c) x c x 1``: the c ranks of a process row own the same vertex block
  (replicas); the col index is the replica index and picks which block columns of A the
  rank multiplies.
* ``2d``   ``q x q x 1`` with ``q = sqrt(p)``: sparse SUMMA inside the square.
* ``3d``   ``q x q x q`` with ``q = cbrt(p)``: split-3D, one SUMMA per layer.

A grid that does not fit p is rejected with a message that says which p would fit:
silently rounding to a smaller grid would leave ranks idle or give wrong answers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sparsegnn.errors import SparseGNNError
from sparsegnn.names import ALGORITHMS, Algorithm, replicates, row_wise, slices_features


class GridError(SparseGNNError, ValueError):
    """A process grid that does not fit the number of ranks or the replication factor."""


@dataclass(frozen=True)
class GridShape:
    """The ``rows x cols x layers`` arrangement of ranks for one algorithm."""

    algo: Algorithm
    rows: int
    cols: int
    layers: int

    @property
    def size(self) -> int:
        return self.rows * self.cols * self.layers

    def coords(self, rank: int) -> tuple[int, int, int]:
        """``(row, col, layer)`` of a rank."""
        if not 0 <= rank < self.size:
            raise GridError(f"rank {rank} is outside a grid of {self.size} ranks")
        rest, layer = divmod(rank, self.layers)
        row, col = divmod(rest, self.cols)
        return row, col, layer

    def rank_of(self, row: int, col: int, layer: int = 0) -> int:
        return (row * self.cols + col) * self.layers + layer

    @property
    def row_blocks(self) -> int:
        """How many vertex blocks the rows of A and H are cut into."""
        return self.rows

    @property
    def row_wise(self) -> bool:
        """Whether the grid cuts rows only (1D, 1.5D): every rank multiplies whole
        feature rows of its block, and the process columns are replicas (1.5D)."""
        return row_wise(self.algo)

    @property
    def replication(self) -> int:
        """How many ranks hold each vertex block: c on 1.5D (the process columns), else 1."""
        return self.cols if replicates(self.algo) else 1

    @property
    def feature_slices(self) -> int:
        """How many column slices the input features are cut into: q on 2D/3D, where rank
        ``(i, j, m)`` holds slice j of its block's rows (the first layer then runs on
        partial products summed over the process row), 1 on 1D/1.5D, whose replicas
        multiply whole rows."""
        return self.cols if slices_features(self.algo) else 1

    def describe(self) -> str:
        return f"{self.algo} grid {self.rows}x{self.cols}x{self.layers}"


def grid_shape(algo: Algorithm, world_size: int, replication: int = 1) -> GridShape:
    """The grid of ``algo`` on ``world_size`` ranks, or a :class:`GridError` saying why not."""
    p = world_size
    if p < 1:
        raise GridError(f"need at least one rank, got {p}")
    if not replicates(algo) and replication != 1:
        raise GridError(f"--replication applies to 1.5d only, got {replication} with {algo}")
    build = _BUILDERS.get(algo)
    if build is None:
        raise GridError(f"unknown algorithm {algo!r}; choose one of {', '.join(ALGORITHMS)}")
    return build(p, replication)


def _one_d(p: int, _c: int) -> GridShape:
    return GridShape("1d", p, 1, 1)


def _two_d(p: int, _c: int) -> GridShape:
    q = math.isqrt(p)
    if q * q != p:
        raise GridError(
            f"2d needs a square number of ranks (1, 4, 9, 16, ...), got {p}; "
            f"use {q * q} or {(q + 1) ** 2} ranks, or --algo 1d / 1.5d"
        )
    return GridShape("2d", q, q, 1)


def _three_d(p: int, _c: int) -> GridShape:
    q = round(p ** (1 / 3))
    if q**3 != p:
        raise GridError(
            f"3d needs a cubic number of ranks (1, 8, 27, ...), got {p}; "
            "use 8 or 27 ranks, or --algo 2d"
        )
    return GridShape("3d", q, q, q)


def _one_and_half(p: int, c: int) -> GridShape:
    if c < 1 or p % c:
        raise GridError(f"1.5d needs a replication factor c that divides p, got c={c}, p={p}")
    if c * c > p:
        raise GridError(
            f"1.5d needs c*c <= p so that every replica has block columns to multiply, "
            f"got c={c}, p={p}"
        )
    return GridShape("1.5d", p // c, c, 1)


_BUILDERS = {"1d": _one_d, "1.5d": _one_and_half, "2d": _two_d, "3d": _three_d}
