"""sparsegnn: graph neural networks at any scale, written as sparse linear algebra on torch.

Message passing is a sparse-dense product (SpMM), neighbour sampling a sparse-sparse
product (SpGEMM), and distribution a partitioning of those matrices over ranks.
"""

from sparsegnn.errors import (
    DataFormatError,
    DuplicateEntryError,
    IndexOutOfRangeError,
    InvalidValueError,
    ShapeError,
    SparseGNNError,
    UnsortedIndicesError,
)

__version__ = "0.1.0"

__all__ = [
    "DataFormatError",
    "DuplicateEntryError",
    "IndexOutOfRangeError",
    "InvalidValueError",
    "ShapeError",
    "SparseGNNError",
    "UnsortedIndicesError",
    "__version__",
]
