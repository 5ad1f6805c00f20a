"""Every name a benchmark imports from sparsegnn exists: a refactor that renames or
removes one fails here, not the next time someone runs the benchmark by hand."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).parent.parent / "benchmarks").glob("*.py"))


def _imported(path: Path) -> list[tuple[str, str]]:
    """(module, name) of every ``from sparsegnn... import name`` in ``path``, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sparsegnn"):
            found += [(node.module, alias.name) for alias in node.names]
        if isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names
                      if alias.name.startswith("sparsegnn")]
    return found


@pytest.mark.parametrize("path", BENCHMARKS, ids=[p.name for p in BENCHMARKS])
def test_benchmark_imports_resolve(path: Path) -> None:
    for module, name in _imported(path):
        mod = importlib.import_module(module)
        if name and not hasattr(mod, name):
            importlib.import_module(f"{module}.{name}")  # a submodule, or ImportError
