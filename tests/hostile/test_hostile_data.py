"""Hostile and careless input to the data commands (issue 27): ids, sizes, loaders, outputs.

Every case runs the real CLI's entry point (``run_cli`` in conftest). A refusal must be
exit 2 with one stderr line that names the input, no traceback, no output or temp file left
behind and the inputs unchanged; an accepted input must give exactly the graph it describes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_user_error, run_cli, snapshot
from sparsegnn.data import load_graph

# Ids whose product key u * num_nodes + v overflowed int64 (num_nodes above ~3.04e9).
_BIG = 4_000_000_000
_HUGE = 2**62


def _expected(pairs: list[tuple[int, int]], directed: bool) -> list[tuple[int, int]]:
    """The edge set the converter must store: loops and repeats dropped, both directions
    when undirected, sorted by source then target."""
    edges = {(u, v) for u, v in pairs if u != v}
    if not directed:
        edges |= {(v, u) for u, v in edges}
    return sorted(edges)


@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
def test_large_ids_convert_exactly(workdir: Path, directed: bool) -> None:
    """Serious case 3: ids near 4e9 and 2**62 were converted (exit 0) into wrong edges."""
    pairs = [(_BIG, _BIG + 1), (_BIG + 1, _BIG - 1), (5, _BIG + 2), (_BIG + 2, 5),
             (_HUGE, 7), (_HUGE + 3, _HUGE), (_BIG, _BIG), (0, _HUGE + 3)]
    src = workdir / "edges.txt"
    src.write_text("".join(f"{u} {v}\n" for u, v in pairs))
    out = workdir / "out.npz"
    proc = run_cli("data", "convert", src, out, *(["--directed"] if directed else []))
    assert proc.returncode == 0, proc.stderr
    g = load_graph(out)
    assert g.num_nodes == _HUGE + 4
    assert list(map(tuple, g.edge_index.T.tolist())) == _expected(pairs, directed)


def refused(proc: subprocess.CompletedProcess[str], before: dict[str, str], root: Path,
            *names: str) -> str:
    """One-line user error naming ``names``, and ``root`` exactly as it was ``before``
    (inputs unchanged, no output, ``.tmp`` or partial file left)."""
    line = assert_user_error(proc, *names)
    assert snapshot(root) == before
    return line


def _edges(workdir: Path, text: str, name: str = "edges.txt") -> Path:
    path = workdir / name
    path.write_text(text)
    return path


def test_data_info_on_a_sparse_id_space(workdir: Path) -> None:
    """`data info` on ids near 3e9 tried a 24 GB dense degree count; now it counts the
    ids that occur (and a partition of them, which would need one, is refused up front)."""
    src = _edges(workdir, f"{3 * 10**9} {3 * 10**9 + 1}\n7 {3 * 10**9}\n")
    proc = run_cli("data", "info", src, "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (info["num_nodes"], info["num_edges"]) == (3 * 10**9 + 2, 4)
    assert (info["num_isolated"], info["degree_max"], info["degree_median"]) == (
        3 * 10**9 - 1, 2, 0.0)
    before = snapshot(workdir)
    proc = run_cli("data", "partition", src, workdir / "parts", "--algo", "1d", "--nprocs", "2")
    assert "needs about" in refused(proc, before, workdir, "edges.txt", "GiB")


@pytest.mark.parametrize(("text", "where"), [
    ("1.5 2\n0 1\n", "line 1"),            # was dropped as a "header"
    ("# ids\n0 1\n\n2 3.0\n", "line 4"),
    ("src dst\n0 1\n7\n", "line 3"),
], ids=["float-first-line", "float-later", "one-column"])
def test_edge_list_bad_line_is_named(workdir: Path, text: str, where: str) -> None:
    src = _edges(workdir, text)
    before = snapshot(workdir)
    refused(run_cli("data", "convert", src, workdir / "out.npz"), before, workdir,
            "edges.txt", where)


def test_convert_to_a_name_without_npz_reads_back(workdir: Path) -> None:
    """`data convert` to `out.graph` wrote a zip the tool then parsed as text."""
    src = _edges(workdir, "0 1\n1 2\n2 0\n")
    out = workdir / "out.graph"
    assert run_cli("data", "convert", src, out).returncode == 0
    proc = run_cli("data", "info", out, "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (info["num_nodes"], info["num_edges"]) == (3, 6)
    assert load_graph(out).edge_index.tolist() == [[0, 0, 1, 1, 2, 2], [1, 2, 0, 2, 0, 1]]


def _graph_file(workdir: Path, **change: np.ndarray) -> Path:
    """A valid 5-node graph file with the arrays in ``change`` replaced."""
    arrays = {"edge_index": np.array([[0, 1], [1, 0]]), "num_nodes": np.asarray(5),
              "x": np.ones((5, 2), np.float32), "y": np.zeros(5, np.int64), **change}
    path = workdir / "graph.npz"
    np.savez(path, **arrays)
    return path


_X_NAN = np.ones((5, 2), np.float32)
_X_NAN[3, 1] = np.nan
_X_INF = np.ones((5, 2), np.float64)
_X_INF[4, 0] = -np.inf


@pytest.mark.parametrize(("change", "where"), [
    ({"x": _X_NAN}, "row 3"), ({"x": _X_INF}, "row 4"),
    ({"y": np.array([0, 1, -1, 0, 1])}, "row 2"),
], ids=["nan", "inf", "label-minus-1"])
def test_bad_values_refused_at_load(workdir: Path, change: dict[str, np.ndarray],
                                    where: str) -> None:
    src = _graph_file(workdir, **change)
    before = snapshot(workdir)
    refused(run_cli("data", "convert", src, workdir / "out.npz"), before, workdir,
            "graph.npz", where)


@pytest.mark.parametrize("target", ["dir", "/proc/x.npz", "generate-dir", "partition-file"])
def test_unwritable_outputs(workdir: Path, target: str) -> None:
    src = _edges(workdir, "0 1\n")
    (workdir / "dir").mkdir()
    before = snapshot(workdir)
    args: tuple[str | Path, ...] = {
        "dir": ("data", "convert", src, workdir / "dir"),
        "/proc/x.npz": ("data", "convert", src, "/proc/x.npz"),
        "generate-dir": ("data", "generate", "rmat:4", "--out", workdir / "dir"),
        "partition-file": ("data", "partition", "rmat:4", src, "--algo", "1d", "--nprocs", "1"),
    }[target]
    named = {"dir": "dir", "/proc/x.npz": "/proc", "generate-dir": "dir",
             "partition-file": "edges.txt"}[target]
    refused(run_cli(*args), before, workdir, named)


_SBM = "sbm:nodes=60,blocks=2,degree=4,features=3"


@pytest.mark.parametrize("argv", [
    ("data", "partition", _SBM, "OUT", "--algo", "1d", "--nprocs", "0"),
    ("data", "partition", _SBM, "OUT", "--algo", "1.5d", "--nprocs", "4", "--replication", "0"),
    ("data", "partition", _SBM, "OUT", "--algo", "1d", "--nprocs", "-2"),
    ("data", "info", "rmat:4", "--seed", "-1"),
    ("plan", "--graph", "rmat:4", "--parts", "0"),
    ("plan", "--graph", "rmat:4", "--parts", "2", "--hidden", "0"),
    ("plan", "--graph", "rmat:4", "--parts", "2", "--num-layers", "-1"),
    ("plan", "--graph", "rmat:4", "--parts", "2", "--replication", "0"),
], ids=["nprocs-0", "replication-0", "nprocs-neg", "seed-neg", "parts-0", "hidden-0",
        "layers-neg", "plan-replication-0"])
def test_numeric_options_are_range_checked(workdir: Path, argv: tuple[str, ...]) -> None:
    option = next(a for a in reversed(argv) if a.startswith("--"))
    before = snapshot(workdir)
    args = [str(workdir / "out") if a == "OUT" else a for a in argv]
    refused(run_cli(*args), before, workdir, option)


@pytest.mark.parametrize(("argv", "name"), [
    (("data", "info", "rmat:40"), "rmat"),
    (("data", "generate", "sbm:nodes=10**12,blocks=2,degree=2", "--out", "OUT"), "sbm"),
    (("data", "convert", "uniform:nodes=2**50,degree=4", "OUT"), "uniform"),
], ids=["rmat-40", "sbm-1e12", "uniform-2^50"])
def test_oversized_specs_refused_with_the_size(workdir: Path, argv: tuple[str, ...],
                                               name: str) -> None:
    before = snapshot(workdir)
    args = [str(workdir / "out.npz") if a == "OUT" else a for a in argv]
    line = refused(run_cli(*args), before, workdir, name, "needs about")
    assert "TiB" in line or "PiB" in line


# ---------------------------------------------------------------------- partitions
@pytest.fixture(scope="module")
def two_partitions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two different graphs partitioned for the same 1d grid of 2 ranks."""
    root = tmp_path_factory.mktemp("partitions")
    for name, seed in (("A", "1"), ("B", "2")):
        proc = run_cli("data", "partition", _SBM, root / name, "--algo", "1d", "--nprocs", "2",
                       "--seed", seed)
        assert proc.returncode == 0, proc.stderr
    return root / "A", root / "B"


def _copy_partition(src: Path, workdir: Path) -> Path:
    out = workdir / "part"
    shutil.copytree(src, out)
    return out


def test_partition_mixing_two_graphs_is_refused(workdir: Path,
                                                two_partitions: tuple[Path, Path]) -> None:
    """A folder holding rank1 of another graph trained before; now every reader refuses it."""
    a, b = two_partitions
    mixed = _copy_partition(a, workdir)
    shutil.copy(b / "rank1.npz", mixed / "rank1.npz")
    before = snapshot(workdir)
    refused(run_cli("data", "info", mixed), before, workdir, "rank1.npz", "fingerprint")
    proc = run_cli("train", "--dataset", mixed, "--algo", "1d", "--nprocs", "2",
                   "--epochs", "1", cwd=workdir)
    refused(proc, before, workdir, "rank1.npz", "fingerprint")


@pytest.mark.parametrize("damage", ["missing-rank", "truncated-manifest"])
def test_damaged_partition_is_refused(workdir: Path, two_partitions: tuple[Path, Path],
                                      damage: str) -> None:
    part = _copy_partition(two_partitions[0], workdir)
    if damage == "missing-rank":
        (part / "rank0.npz").unlink()
        named = "rank0.npz"
    else:
        manifest = part / "manifest.json"
        manifest.write_bytes(manifest.read_bytes()[:40])
        named = "manifest.json"
    before = snapshot(workdir)
    refused(run_cli("data", "info", part), before, workdir, named)


def test_partition_never_replaces_a_folder_of_other_files(workdir: Path) -> None:
    out = workdir / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    before = snapshot(workdir)
    proc = run_cli("data", "partition", _SBM, out, "--algo", "1d", "--nprocs", "2")
    refused(proc, before, workdir, "mine")
