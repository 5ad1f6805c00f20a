"""Guards on the shape of the tree: imports flow one way and no file grows past 500 lines.

Data flows data -> sparse -> nn / sampling / partition -> distributed -> train ->
tracking / curation -> cli; a module may import its own layer and the layers below it,
never one above (a ``distributed`` module importing ``train`` would make the runtime
depend on a training mode). Function-local imports count too: they defer a cost, not a
dependency. The top-level helpers (errors, names, optional, hugepages) sit below all, and
so does ``torchrun`` (the launch supervisor imports nothing of the library: it must start
without torch).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "sparsegnn"
LAYERS: dict[str, int] = {
    "errors": 0, "names": 0, "optional": 0, "hugepages": 0, "torchrun": 0,
    "data": 1, "sparse": 2, "nn": 3, "sampling": 3, "partition": 3, "distributed": 4,
    "train": 5, "tracking": 6, "curation": 6, "cli": 7, "__main__": 8, "__init__": 8,
}
MAX_LINES = 500


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _layer_of(path: Path) -> str:
    return path.relative_to(SRC).parts[0].removesuffix(".py")


def _imported(path: Path) -> set[str]:
    """The sparsegnn sub-packages ``path`` imports, at any depth of the module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "sparsegnn" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_every_package_has_a_layer() -> None:
    assert {_layer_of(p) for p in _modules()} <= set(LAYERS)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_flow_one_way(path: Path) -> None:
    own = _layer_of(path)
    upward = sorted(p for p in _imported(path)
                    if p in LAYERS and LAYERS[p] > LAYERS[own] and p != own)
    assert not upward, f"{path.relative_to(SRC)} ({own}) imports {upward} from above it"


def test_no_source_file_over_500_lines() -> None:
    long = {str(p.relative_to(SRC)): n for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines: {long}"


@pytest.mark.parametrize("folder", ["tests", "benchmarks", "testbed"])
def test_no_test_benchmark_or_testbed_file_over_500_lines(folder: str) -> None:
    """The limit holds outside the library too: a test module, benchmark or shared helper
    past it is split by concern, not grown."""
    root = SRC.parents[1]
    long = {str(p.relative_to(root)): n for p in sorted((root / folder).rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines: {long}"


def test_module_names_are_unique() -> None:
    """One ``partition.py`` in the tree: a name says which module it is."""
    names: dict[str, list[str]] = {}
    for p in _modules():
        if p.name != "__init__.py":
            names.setdefault(p.name, []).append(str(p.relative_to(SRC)))
    assert not {k: v for k, v in names.items() if len(v) > 1}


def test_no_benchmark_imports_another_or_the_tests() -> None:
    """Benchmarks share code through ``benchmarks/_*.py`` and ``testbed``, never by
    importing one another or the tests."""
    bench = SRC.parents[1] / "benchmarks"
    own = {p.stem for p in bench.glob("*.py")}
    wrong = {}
    for path in sorted(bench.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            top = (module or "").split(".")[0]
            if top == "tests" or (top in own and not top.startswith("_")):
                wrong.setdefault(path.name, []).append(module)
    assert not wrong
