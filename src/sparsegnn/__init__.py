"""sparsegnn: graph neural networks at any scale, written as sparse linear algebra on torch.

Message passing is a sparse-dense product (SpMM), neighbour sampling a sparse-sparse
product (SpGEMM), and distribution a partitioning of those matrices over ranks.
"""

from sparsegnn.hugepages import request_huge_pages

# Before any tensor exists: torch reads the setting at its first allocation (hugepages.py).
request_huge_pages()

from sparsegnn.errors import (  # noqa: E402
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
