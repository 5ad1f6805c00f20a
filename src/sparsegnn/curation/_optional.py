"""Optional dependencies of the curation package, imported on first use.

Only sparsegnn.curation may import duckdb (a ruff banned-api rule); every import of an
optional package goes through :func:`require`, whose error says what to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from sparsegnn.errors import SparseGNNError

_EXTRA_OF = {"duckdb": "curation", "pyarrow": "curation", "yaml": "curation",
             "matplotlib": "plot"}


class MissingDependencyError(SparseGNNError, ImportError):
    """An optional package that a feature needs is not installed."""


def require(name: str) -> ModuleType:
    """Import ``name`` or fail with the pip command that provides it."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name != name.split(".")[0]:
            raise
        extra = _EXTRA_OF.get(name.split(".")[0], "all")
        raise MissingDependencyError(
            f"{name} is needed here but not installed; run: pip install 'sparsegnn[{extra}]'"
        ) from None
