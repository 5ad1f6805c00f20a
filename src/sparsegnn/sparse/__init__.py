"""Sparse matrices on torch and the kernels message passing and sampling are made of."""

from sparsegnn.sparse.csr import CSRMatrix
from sparsegnn.sparse.ops import (
    add_self_loops,
    gcn_norm,
    is_symmetric,
    row_norm,
    sddmm,
    spgemm,
    spmm,
)

__all__ = [
    "CSRMatrix",
    "add_self_loops",
    "gcn_norm",
    "is_symmetric",
    "row_norm",
    "sddmm",
    "spgemm",
    "spmm",
]
