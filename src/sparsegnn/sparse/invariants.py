"""The invariants of a CSR matrix and the input checks that enforce them.

:class:`~sparsegnn.sparse.csr.CSRMatrix` promises int64 indices inside the shape, finite
float32/float64 values and strictly increasing columns within each row; every structural
operation relies on that. This module owns the promise: what is checked and which error of
the hierarchy in :mod:`sparsegnn.errors` each violation raises, with its message. It is
apart from the matrix type so that the rules a user's input must satisfy read in one
place, and the type's module only builds and transforms matrices.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from sparsegnn.errors import (
    DuplicateEntryError,
    IndexOutOfRangeError,
    InvalidValueError,
    ShapeError,
    UnsortedIndicesError,
)

if TYPE_CHECKING:
    from sparsegnn.sparse.csr import CSRMatrix

FLOAT_DTYPES = (torch.float32, torch.float64)


def validate_csr(mat: CSRMatrix) -> None:
    """Check every invariant of ``mat``; raise the documented error on the first violation."""
    rows, cols = mat.shape
    if rows < 0 or cols < 0:
        raise ShapeError(f"shape must be non-negative, got {mat.shape}")
    if mat.crow.dim() != 1 or mat.crow.numel() != rows + 1:
        raise ShapeError(
            f"crow must have {rows + 1} entries for {rows} rows, got {mat.crow.numel()}"
        )
    if mat.col.dim() != 1 or mat.val.shape != mat.col.shape:
        raise ShapeError(
            "col and val must be 1-D of equal length, got "
            f"{tuple(mat.col.shape)} and {tuple(mat.val.shape)}"
        )
    if int(mat.crow[0]) != 0 or int(mat.crow[-1]) != mat.col.numel():
        raise ShapeError(
            f"crow must start at 0 and end at nnz={mat.col.numel()}, "
            f"got {int(mat.crow[0])}..{int(mat.crow[-1])}"
        )
    if rows and bool((mat.crow[1:] < mat.crow[:-1]).any()):
        raise ShapeError("crow must be non-decreasing")
    check_bounds(mat.col, cols, "column")
    check_values(mat.val)
    if mat.col.numel() > 1:
        rows_of = mat.row_indices()
        same_row = rows_of[1:] == rows_of[:-1]
        step = mat.col[1:] - mat.col[:-1]
        if bool((same_row & (step < 0)).any()):
            bad = int(rows_of[1:][same_row & (step < 0)][0])
            raise UnsortedIndicesError(
                f"column indices of row {bad} are not sorted; build with CSRMatrix.from_coo "
                "to sort them"
            )
        if bool((same_row & (step == 0)).any()):
            i = int((same_row & (step == 0)).nonzero()[0, 0])
            raise DuplicateEntryError(
                f"entry ({int(rows_of[i])}, {int(mat.col[i])}) appears more than once; "
                "build with CSRMatrix.from_coo(duplicates='sum') to combine them"
            )


def check_index_pair(row: torch.Tensor, col: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    row, col = torch.as_tensor(row), torch.as_tensor(col)
    for name, idx in (("row", row), ("column", col)):
        if idx.dtype.is_floating_point or idx.dtype == torch.bool or idx.is_complex():
            raise InvalidValueError(f"{name} indices must be an integer tensor, got {idx.dtype}")
        if idx.dim() != 1:
            raise ShapeError(f"{name} indices must be 1-D, got shape {tuple(idx.shape)}")
    if row.numel() != col.numel():
        raise ShapeError(
            f"row and column index lists differ in length: {row.numel()} vs {col.numel()}"
        )
    return row.long(), col.long()


def check_bounds(idx: torch.Tensor, size: int, what: str) -> None:
    if idx.numel() == 0:
        return
    lo, hi = int(idx.min()), int(idx.max())
    if lo < 0:
        raise IndexOutOfRangeError(f"negative {what} index {lo}; indices must lie in [0, {size})")
    if hi >= size:
        raise IndexOutOfRangeError(f"{what} index {hi} out of range for dimension {size}")


def check_values(val: torch.Tensor) -> None:
    if val.dtype not in FLOAT_DTYPES:
        raise InvalidValueError(
            f"values must be float32 or float64, got {val.dtype}; convert with .float()"
        )
    if val.numel() and not bool(torch.isfinite(val).all()):
        bad = int((~torch.isfinite(val)).nonzero()[0, 0])
        raise InvalidValueError(
            f"value at position {bad} is {float(val[bad])}; values must be finite"
        )
