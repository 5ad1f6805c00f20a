"""Per-vertex integer vectors from files a user gives (a partition vector: ``--partition``,
``data partition --parts``).

Why a reader of its own: ``np.load`` refuses an object array (it would need pickle) with
a ValueError, ``np.loadtxt`` a non-integer token with another, and neither names the
file; on a rank either one ended in a traceback. Here every way of being unreadable is
one :class:`~sparsegnn.errors.DataFormatError` naming the file, and nothing is unpickled.
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import numpy as np

from sparsegnn.errors import DataFormatError

# How reading a damaged or hostile .npy or text file fails.
_READ_ERRORS: tuple[type[BaseException], ...] = (
    OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, MemoryError,
    OverflowError,
)


def read_int_vector(path: str | Path) -> np.ndarray:
    """The int64 values of a 1-d ``.npy`` array (integers, or floats that are whole
    numbers) or of a text file of whitespace-separated integers."""
    path = Path(path)
    try:
        values = _npy(path) if path.suffix == ".npy" else np.loadtxt(path, dtype=np.int64,
                                                                      ndmin=1)
    except DataFormatError:
        raise
    except _READ_ERRORS as err:
        raise DataFormatError(f"{path}: not a vector of integers ({_reason(err)})") from None
    return _as_int64(values, path)


def _npy(path: Path) -> np.ndarray:
    """The array of a ``.npy`` file, never unpickled; an ``.npz`` archive is refused."""
    with path.open("rb") as f:
        loaded = np.load(f, allow_pickle=False)
        if not isinstance(loaded, np.ndarray):
            loaded.close()
            raise DataFormatError(f"{path}: an .npz archive, not one .npy array")
        return loaded


def _as_int64(values: np.ndarray, path: Path) -> np.ndarray:
    """``values`` as int64, refusing other shapes and kinds rather than truncating them."""
    kind = values.dtype.kind
    whole = kind in "iu" or (kind == "f" and bool(np.all(np.isfinite(values)))
                             and bool(np.all(values == np.round(values))))
    if values.ndim != 1 or not whole:
        raise DataFormatError(
            f"{path}: holds a {values.ndim}-d {values.dtype} array; expected one whole "
            "number per vertex (a 1-d integer array)")
    return values.astype(np.int64)


def _reason(err: BaseException) -> str:
    """numpy's words for a pickled array, in the user's terms."""
    text = str(err)
    if "allow_pickle" in text:
        return "an object array, which only pickle could load; save integers instead"
    return text
