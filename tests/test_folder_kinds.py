"""Every folder kind the README names, through every command that takes a dataset:
``data info``, ``train``, ``data convert`` and ``data partition`` on an OGB download, a
PyG file and ``InMemoryDataset`` folder, a DGL ``CSVDataset`` whose ``meta.yaml`` renames
its files, our own graph file; a typed DGL folder of several edge and node files; and the
partition folders ``data partition`` writes. Each folder is built in its tool's real
layout, small enough to train in milliseconds."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data import load_any, load_graph
from test_ogb import NODES as OGB_NODES
from test_ogb import write_arxiv_like

pytestmark = pytest.mark.usefixtures("one_thread")
N, CLASSES = 40, 3
KINDS = ("ogb", "pyg_file", "pyg_folder", "dgl", "npz")


def _graph() -> dict[str, torch.Tensor]:
    """A small directed multigraph with features, labels and a split."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.arange(N)
    return {"x": torch.randn(N, 4, generator=gen),
            "edge_index": torch.randint(0, N, (2, 120), generator=gen),
            "y": torch.randint(0, CLASSES, (N,), generator=gen),
            "train_mask": ids < 20, "val_mask": (ids >= 20) & (ids < 30),
            "test_mask": ids >= 30}


def _write_dgl(folder: Path, g: dict[str, torch.Tensor]) -> Path:
    """DGL's CSVDataset with meta.yaml naming its files (``edges_0.csv``, legal in DGL)."""
    folder.mkdir()
    (folder / "meta.yaml").write_text("dataset_name: toy\nedge_data:\n- file_name: "
                                      "edges_0.csv\nnode_data:\n- file_name: nodes_0.csv\n")
    edges = "".join(f"{a},{b}\n" for a, b in g["edge_index"].T.tolist())
    (folder / "edges_0.csv").write_text("src_id,dst_id\n" + edges)
    rows = [f'{i},{int(g["y"][i])},{bool(g["train_mask"][i])},{bool(g["val_mask"][i])},'
            f'{bool(g["test_mask"][i])},"{", ".join(f"{v:.4f}" for v in g["x"][i].tolist())}"'
            for i in range(N)]
    (folder / "nodes_0.csv").write_text(
        "node_id,label,train_mask,val_mask,test_mask,feat\n" + "\n".join(rows) + "\n")
    return folder


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kinds")
    g = _graph()
    out = {"ogb": write_arxiv_like(root), "dgl": _write_dgl(root / "dgl", g)}
    try:
        from torch_geometric.data import Data, InMemoryDataset
    except ImportError:  # the PyG kinds skip, naming it
        pass
    else:
        torch.save(Data(**g), root / "graph.pt")
        (root / "MyGraph" / "processed").mkdir(parents=True)
        InMemoryDataset.save([Data(**g)], str(root / "MyGraph" / "processed" / "data.pt"))
        out |= {"pyg_file": root / "graph.pt", "pyg_folder": root / "MyGraph"}
    assert main(["data", "convert", str(out["dgl"]), str(root / "graph.npz")]) == 0
    out["npz"] = root / "graph.npz"
    return out


def _source(sources: dict[str, Path], kind: str) -> str:
    if kind not in sources:
        pytest.skip("torch_geometric is not installed")
    return str(sources[kind])


def _json(argv: list[str]) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--json"]) == 0
    return json.loads(out.getvalue().strip().splitlines()[-1])


def _nodes(kind: str) -> int:
    return OGB_NODES if kind == "ogb" else N


@pytest.mark.parametrize("kind", KINDS)
def test_data_info(sources: dict[str, Path], kind: str) -> None:
    info = _json(["data", "info", _source(sources, kind)])
    assert info["num_nodes"] == _nodes(kind) and info["num_edges"] > 0


@pytest.mark.parametrize("kind", KINDS)
def test_train(sources: dict[str, Path], kind: str) -> None:
    out = _json(["train", "--dataset", _source(sources, kind), "--epochs", "2", "--device",
                 "cpu"])
    assert out["epochs_run"] == 2 and 0.0 <= out["test_accuracy"] <= 1.0
    assert sum(map(sum, out["test_confusion"])) == (15 if kind == "ogb" else N - 30)


@pytest.mark.parametrize("kind", KINDS)
def test_convert(sources: dict[str, Path], kind: str, tmp_path: Path) -> None:
    source = _source(sources, kind)
    out = _json(["data", "convert", source, str(tmp_path / "g.npz")])
    saved, read = load_graph(tmp_path / "g.npz"), load_any(source)
    assert (out["num_nodes"], out["num_edges"]) == (read.num_nodes, read.num_edges)
    assert torch.equal(saved.edge_index, read.edge_index) and torch.equal(saved.y, read.y)
    assert torch.equal(saved.train_mask, read.train_mask)


@pytest.mark.parametrize("kind", KINDS)
def test_partition(sources: dict[str, Path], kind: str, tmp_path: Path) -> None:
    source = _source(sources, kind)
    _json(["data", "partition", source, str(tmp_path / "p"), "--algo", "1d", "--nprocs", "2"])
    assert _json(["data", "info", str(tmp_path / "p")])["num_nodes"] == _nodes(kind)
    _json(["data", "partition", source, str(tmp_path / "rows"), "--mode", "minibatch",
           "--nprocs", "2"])
    assert _json(["data", "info", str(tmp_path / "rows")])["blocks"] == 2


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_typed_dgl_folder_of_several_files(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Two node and two edge files, renamed in meta.yaml: a typed graph that ``data info``
    describes and R-GCN trains; convert and partition refuse it naming what trains it."""
    folder = tmp_path / "typed"
    folder.mkdir()
    (folder / "meta.yaml").write_text(
        "dataset_name: typed\nedge_data:\n- file_name: writes_0.csv\n  etype: [author, "
        "writes, paper]\n- file_name: cites_0.csv\n  etype: [paper, cites, paper]\n"
        "node_data:\n- file_name: papers_0.csv\n  ntype: paper\n- file_name: authors_0.csv"
        "\n  ntype: author\n")
    gen = torch.Generator().manual_seed(1)
    papers = [f"{i},{i % 3},{i < 15},{15 <= i < 22},{i >= 22}" for i in range(30)]
    (folder / "papers_0.csv").write_text(
        "node_id,label,train_mask,val_mask,test_mask\n" + "\n".join(papers) + "\n")
    (folder / "authors_0.csv").write_text("node_id\n" + "".join(f"{i}\n" for i in range(12)))
    for name, (src, dst, count) in {"writes_0": (12, 30, 50), "cites_0": (30, 30, 60)}.items():
        pairs = zip(torch.randint(0, src, (count,), generator=gen).tolist(),
                    torch.randint(0, dst, (count,), generator=gen).tolist(), strict=True)
        (folder / f"{name}.csv").write_text("src_id,dst_id\n" + "".join(
            f"{a},{b}\n" for a, b in pairs))
    info = _json(["data", "info", str(folder)])
    assert info["num_nodes"] == 42 and set(info["edge_types"]) == {
        "author__writes__paper", "paper__cites__paper"}
    out = _json(["train", "--dataset", str(folder), "--model", "rgcn", "--epochs", "2"])
    assert out["epochs_run"] == 2
    for argv in (["convert", str(folder), str(tmp_path / "g.npz")],
                 ["partition", str(folder), str(tmp_path / "p"), "--algo", "1d", "--nprocs",
                  "2"]):
        assert "--model rgcn" in _refused(["data", *argv], capsys)


def test_partition_folders_are_described_not_reconverted(
        sources: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A partition folder is per-rank blocks of a normalised operator, not the graph:
    ``data info`` checks and describes it (``train --dataset`` runs it: tests of the
    distributed runs), convert and partition say so instead of "no such file"."""
    dgl = str(sources["dgl"])
    _json(["data", "partition", dgl, str(tmp_path / "p"), "--algo", "2d", "--nprocs", "4"])
    assert _json(["data", "info", str(tmp_path / "p")])["ranks"] == 4
    for argv in (["convert", str(tmp_path / "p"), str(tmp_path / "g.npz")],
                 ["partition", str(tmp_path / "p"), str(tmp_path / "q"), "--algo", "1d",
                  "--nprocs", "2"]):
        assert "a partition folder written by `sparsegnn data partition`" in _refused(
            ["data", *argv], capsys)
    (tmp_path / "empty").mkdir()
    assert "a folder of no layout sparsegnn reads" in _refused(
        ["data", "convert", str(tmp_path / "empty"), str(tmp_path / "g.npz")], capsys)
