"""Sparse matrices on torch and the kernels message passing and sampling are made of."""

from sparsegnn.sparse.csr import CSRMatrix, hstack, run_positions
from sparsegnn.sparse.ops import (
    REDUCED_DTYPES,
    add_self_loops,
    column_slices_exact,
    gcn_norm,
    is_symmetric,
    row_norm,
    sddmm,
    spgemm,
    spmm,
)

__all__ = [
    "REDUCED_DTYPES",
    "CSRMatrix",
    "add_self_loops",
    "column_slices_exact",
    "gcn_norm",
    "hstack",
    "is_symmetric",
    "row_norm",
    "run_positions",
    "sddmm",
    "spgemm",
    "spmm",
]
