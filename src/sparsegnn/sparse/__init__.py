"""Sparse matrices on torch and the kernels message passing and sampling are made of."""

from sparsegnn.sparse.csr import CSRMatrix, hstack, run_positions
from sparsegnn.sparse.edge_kernels import (
    heads_mm,
    pattern_transpose,
    sddmm_add,
    sddmm_dot,
    sddmm_leaky,
    spmm_values,
)
from sparsegnn.sparse.edge_softmax import edge_softmax, row_max, row_sum
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
    "edge_softmax",
    "gcn_norm",
    "heads_mm",
    "hstack",
    "is_symmetric",
    "pattern_transpose",
    "row_max",
    "row_norm",
    "row_sum",
    "run_positions",
    "sddmm",
    "sddmm_add",
    "sddmm_dot",
    "sddmm_leaky",
    "spgemm",
    "spmm",
    "spmm_values",
]
