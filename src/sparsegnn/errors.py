"""One exception hierarchy for the whole library.

Every error names what was received, what was expected and, where there is one, what to
do instead. Each class also derives from the builtin a caller would naturally catch
(ValueError, IndexError), so generic handlers keep working.
"""


class SparseGNNError(Exception):
    """Base class of every error raised on purpose by sparsegnn."""


class ShapeError(SparseGNNError, ValueError):
    """Operands whose shapes do not fit together."""


class IndexOutOfRangeError(SparseGNNError, IndexError):
    """An index that is negative or not below the dimension it indexes."""


class InvalidValueError(SparseGNNError, ValueError):
    """A NaN or infinite value, or a dtype we do not support."""


class UnsortedIndicesError(SparseGNNError, ValueError):
    """CSR column indices that are not sorted within a row, given where sorted were promised."""


class DuplicateEntryError(SparseGNNError, ValueError):
    """The same (row, column) entry given twice where duplicates were declared an error."""


class DataFormatError(SparseGNNError, ValueError):
    """A data file that is missing, truncated or inconsistent; the message names the file."""


class ResourceError(SparseGNNError, MemoryError):
    """A size the machine cannot hold, refused before allocating; names the bytes needed."""


class DiskFullError(SparseGNNError, OSError):
    """A write that ran out of space (ENOSPC, EDQUOT); names the output as the user gave it
    and the bytes it needed where known. An OSError too, so ``except OSError`` still works."""


class NonFiniteError(InvalidValueError):
    """A NaN or infinite value where training needs finite numbers (inputs, loss, weights)."""


class MissingDependencyError(SparseGNNError, ImportError):
    """An optional package that a feature needs is not installed; the message gives the
    ``pip install 'sparsegnn[extra]'`` that provides it (see :mod:`sparsegnn.optional`)."""
