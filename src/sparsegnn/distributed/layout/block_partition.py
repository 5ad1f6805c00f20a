"""Vertex blocks and the adjacency tiles each rank of a grid owns.

Block boundaries come from a partition vector (vertex -> block id): vertices are
relabelled so that each block is a contiguous range, in the order of their ids within the
block. The default is contiguous blocks of equal size (sizes differ by at most one), and
any partitioner that returns a vector plugs in unchanged. Blocks may be uneven.

Which tiles a rank holds (``A`` for the forward SpMM, ``A^T`` for the backward one):

* ``1d``/``1.5d``, rank ``(i, k)``: ``A[block i, block j]`` for every block column j in
  :func:`stage_blocks` ``(k)``; 1D is the case ``c = 1``, where that is the whole block row.
* ``2d``/``3d``, rank ``(i, j, m)``: one tile ``A[block i, inner(j, m)]``, where
  ``inner(j, m)`` is the m-th of ``layers`` even sub-ranges of block j.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch

from sparsegnn.distributed.layout.grid import GridShape
from sparsegnn.errors import ShapeError
from sparsegnn.sparse import CSRMatrix


def split_range(start: int, stop: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous sub-ranges of ``[start, stop)`` whose sizes differ by at most one."""
    base, extra = divmod(stop - start, parts)
    sizes = [base + (1 if k < extra else 0) for k in range(parts)]
    bounds = np.cumsum([start, *sizes])
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds)]


def split_sizes(total: int, parts: int) -> list[int]:
    """Sizes of :func:`split_range` ``(0, total, parts)``; used for feature columns too."""
    return [b - a for a, b in split_range(0, total, parts)]


@dataclass(frozen=True)
class BlockPartition:
    """Vertex blocks as contiguous ranges after relabelling by ``order``.

    Attributes:
        offsets: ``blocks + 1`` boundaries; block i is vertices ``offsets[i]:offsets[i+1]``
            of the relabelled graph.
        order: relabelled vertex -> original vertex id (``None``: identity).
    """

    offsets: tuple[int, ...]
    order: torch.Tensor | None = None

    @classmethod
    def even(cls, num_nodes: int, blocks: int) -> BlockPartition:
        """Contiguous blocks of (nearly) equal size, no relabelling."""
        ranges = split_range(0, num_nodes, blocks)
        return cls(tuple([0] + [b for _, b in ranges]))

    @classmethod
    def from_parts(cls, parts: torch.Tensor, blocks: int) -> BlockPartition:
        """Blocks from a partition vector (vertex -> block id in ``[0, blocks)``)."""
        parts = torch.as_tensor(parts).long().flatten()
        if parts.numel() and (int(parts.min()) < 0 or int(parts.max()) >= blocks):
            raise ShapeError(
                f"partition ids must lie in [0, {blocks}) for a grid with {blocks} vertex "
                f"blocks, got ids {int(parts.min())}..{int(parts.max())}"
            )
        order = torch.argsort(parts, stable=True)
        counts = torch.bincount(parts, minlength=blocks)
        offsets = [0, *torch.cumsum(counts, 0).tolist()]
        return cls(tuple(int(o) for o in offsets), order)

    @property
    def blocks(self) -> int:
        return len(self.offsets) - 1

    @property
    def num_nodes(self) -> int:
        return self.offsets[-1]

    def block(self, i: int) -> tuple[int, int]:
        return self.offsets[i], self.offsets[i + 1]

    def size(self, i: int) -> int:
        return self.offsets[i + 1] - self.offsets[i]

    def inner(self, k: int, m: int, layers: int) -> tuple[int, int]:
        """The m-th of ``layers`` sub-ranges of block k (absolute vertex ids)."""
        return split_range(*self.block(k), layers)[m]


def feature_columns(shape: GridShape, col: int, num_features: int) -> tuple[int, int]:
    """The input feature columns a rank of grid column ``col`` holds: slice ``col`` of
    :attr:`GridShape.feature_slices` (all of them when the grid does not slice)."""
    if shape.feature_slices == 1:
        return 0, num_features
    return split_range(0, num_features, shape.feature_slices)[col]


def stage_blocks(shape: GridShape, col: int) -> list[int]:
    """Block columns the 1.5D replica ``col`` multiplies: chunk ``col`` of ``c`` chunks."""
    return list(range(*split_range(0, shape.rows, shape.cols)[col]))


def tile(a: CSRMatrix, rows: tuple[int, int], cols: tuple[int, int]) -> CSRMatrix:
    """``A[r0:r1, c0:c1]`` with columns renumbered from 0 (stays sorted within rows)."""
    (r0, r1), (c0, c1) = rows, cols
    band = a.select_rows(torch.arange(r0, r1, device=a.device))
    keep = (band.col >= c0) & (band.col < c1)
    row_of = band.row_indices()[keep]
    crow = torch.zeros(r1 - r0 + 1, dtype=torch.long, device=a.device)
    torch.cumsum(torch.bincount(row_of, minlength=r1 - r0), 0, out=crow[1:])
    return CSRMatrix(crow, band.col[keep] - c0, band.val[keep], (r1 - r0, c1 - c0))


@dataclass
class LocalBlocks:
    """The tiles of A (forward) and A^T (backward) one rank owns, keyed by block column.

    For 1D/1.5D the key is the block column j; for 2D/3D there is one tile, keyed by the
    rank's own col coordinate.
    """

    forward: dict[int, CSRMatrix]
    backward: dict[int, CSRMatrix]


Range = tuple[int, int]


def tile_ranges(
    part: BlockPartition, shape: GridShape, rank: int
) -> dict[int, tuple[Range, Range]]:
    """``{key: (row range, column range)}`` of the tiles ``rank`` owns."""
    i, j, m = shape.coords(rank)
    rows = part.block(i)
    if shape.row_wise:
        return {b: (rows, part.block(b)) for b in stage_blocks(shape, j)}
    return {j: (rows, part.inner(j, m, shape.layers))}


def local_blocks(a: CSRMatrix, part: BlockPartition, shape: GridShape, rank: int) -> LocalBlocks:
    """Cut this rank's tiles out of the whole (relabelled) operator held in memory."""
    at = a.t()
    ranges = tile_ranges(part, shape, rank)
    fwd = {k: tile(a, r, c) for k, (r, c) in ranges.items()}
    bwd = fwd if at is a else {k: tile(at, r, c) for k, (r, c) in ranges.items()}
    return LocalBlocks(fwd, bwd)
