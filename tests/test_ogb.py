"""OGB node-property datasets from the folder ``ogb`` downloads, and OGB's Evaluator.

The fixture is written file by file in the layout of ``ogbn-arxiv`` (headerless gzip CSVs,
``split/time``, ``RELEASE_v1.txt``); where ``ogb`` is installed its own reader loads the
same folder and must agree with ours.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data import load_any, paths
from sparsegnn.data.ogb import ogb_evaluate, ogb_evaluate_pairs, read_ogb_folder
from sparsegnn.errors import DataFormatError

pytestmark = pytest.mark.usefixtures("one_thread")

NODES, FEATURES, CLASSES = 60, 5, 4


def _write_csv(path: Path, rows: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = "%d" if rows.dtype.kind in "iu" else "%.6f"
    with gzip.open(path, "wt") as f:
        np.savetxt(f, rows.reshape(rows.shape[0], -1), fmt=fmt, delimiter=",")


def write_arxiv_like(root: Path, seed: int = 0) -> Path:
    """``root/ogbn_arxiv`` as ``NodePropPredDataset('ogbn-arxiv', root)`` leaves it: a
    directed citation graph (with a repeated edge), features, labels, years and the
    official time split (train / valid / test disjoint, some nodes in none)."""
    rng = np.random.default_rng(seed)
    folder = root / "ogbn_arxiv"
    y = rng.integers(0, CLASSES, NODES)
    x = (np.eye(CLASSES)[y] @ rng.normal(size=(CLASSES, FEATURES))
         + 0.3 * rng.normal(size=(NODES, FEATURES))).astype(np.float32)
    edges = rng.integers(0, NODES, (3 * NODES, 2))
    edges = np.vstack([edges, edges[:1]])
    raw = folder / "raw"
    _write_csv(raw / "edge.csv.gz", edges)
    _write_csv(raw / "num-node-list.csv.gz", np.array([NODES]))
    _write_csv(raw / "num-edge-list.csv.gz", np.array([len(edges)]))
    _write_csv(raw / "node-feat.csv.gz", x)
    _write_csv(raw / "node-label.csv.gz", y)
    _write_csv(raw / "node_year.csv.gz", rng.integers(2000, 2020, NODES))
    order = rng.permutation(NODES)
    for split, part in (("train", order[:30]), ("valid", order[30:40]), ("test", order[40:55])):
        _write_csv(folder / "split" / "time" / f"{split}.csv.gz", part)
    (folder / "RELEASE_v1.txt").write_text("")
    (folder / "processed").mkdir()  # the zip ships it empty; ogb saves its cache there
    return folder


@pytest.fixture
def arxiv(tmp_path: Path) -> Path:
    return write_arxiv_like(tmp_path)


def _split(folder: Path, name: str) -> np.ndarray:
    return np.loadtxt(folder / "split" / "time" / f"{name}.csv.gz", dtype=np.int64)


def test_official_split_and_arrays(arxiv: Path) -> None:
    g = load_any("ogbn-arxiv", arxiv.parent)
    assert (g.name, g.num_nodes, g.num_features, g.meta["ogb_name"]) == (
        "ogbn-arxiv", NODES, FEATURES, "ogbn-arxiv")
    for key, stem in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
        mask = getattr(g, key)
        assert sorted(mask.nonzero().flatten().tolist()) == sorted(_split(arxiv, stem).tolist())
    assert int((g.train_mask | g.val_mask | g.test_mask).sum()) == 55  # 5 nodes in no split
    edges = np.loadtxt(arxiv / "raw" / "edge.csv.gz", dtype=np.int64, delimiter=",")
    keys = {(int(a), int(b)) for a, b in edges if a != b}
    got = {tuple(e) for e in g.edge_index.T.tolist()}
    assert got == keys | {(b, a) for a, b in keys}  # symmetrised, loops and repeats dropped
    directed = read_ogb_folder(arxiv, undirected=False)
    assert {tuple(e) for e in directed.edge_index.T.tolist()} == keys


def test_equals_ogbs_own_reader(arxiv: Path) -> None:
    nodeproppred = pytest.importorskip("ogb.nodeproppred")
    dataset = nodeproppred.NodePropPredDataset("ogbn-arxiv", root=str(arxiv.parent))
    graph, labels = dataset[0]
    split = dataset.get_idx_split()
    ours = read_ogb_folder(arxiv, "ogbn-arxiv", undirected=False)
    np.testing.assert_array_equal(ours.x.numpy(), graph["node_feat"])
    np.testing.assert_array_equal(ours.y.numpy(), labels.ravel())
    theirs = {(int(a), int(b)) for a, b in graph["edge_index"].T if a != b}
    assert {tuple(e) for e in ours.edge_index.T.tolist()} == theirs
    for key, name in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
        np.testing.assert_array_equal(getattr(ours, key).nonzero().flatten().numpy(),
                                      np.sort(split[name]))


def test_a_folder_path_is_read_as_ogb(arxiv: Path) -> None:
    assert load_any(arxiv).name == "ogbn-arxiv"


def test_layout_errors_name_the_file(arxiv: Path) -> None:
    (arxiv / "split" / "time" / "valid.csv.gz").unlink()
    with pytest.raises(DataFormatError, match=r"valid\.csv\.gz: file is missing"):
        read_ogb_folder(arxiv)
    shutil.rmtree(arxiv / "split" / "time")
    with pytest.raises(DataFormatError, match="official split folder time"):
        read_ogb_folder(arxiv)


def test_multi_task_labels_are_refused(arxiv: Path) -> None:
    _write_csv(arxiv / "raw" / "node-label.csv.gz", np.zeros((NODES, 3), dtype=np.int64))
    with pytest.raises(DataFormatError, match="multi-task"):
        read_ogb_folder(arxiv)


def test_missing_ogb_dataset_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="ogbn_products"):
        load_any("ogbn-products", tmp_path)


def test_evaluator_equals_our_accuracy() -> None:
    pytest.importorskip("ogb")
    gen = torch.Generator().manual_seed(0)
    y_true = torch.randint(0, 40, (500,), generator=gen)
    y_pred = torch.where(torch.rand(500, generator=gen) < 0.7, y_true,
                         torch.randint(0, 40, (500,), generator=gen))
    result = ogb_evaluate("ogbn-arxiv", y_true, y_pred)
    assert result == {"acc": pytest.approx(float((y_true == y_pred).float().mean()))}
    assert ogb_evaluate("cora", y_true, y_pred) is None
    confusion = torch.zeros(40, 40, dtype=torch.int64)
    confusion.index_put_((y_true, y_pred), torch.ones(500, dtype=torch.int64), accumulate=True)
    assert ogb_evaluate_pairs("ogbn-arxiv", confusion.tolist()) == result


def test_train_reports_ogbs_metric(arxiv: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ogb")
    monkeypatch.delenv(paths.ENV_VAR, raising=False)
    assert main(["train", "--dataset", "ogbn-arxiv", "--data-dir", str(arxiv.parent),
                 "--epochs", "20", "--device", "cpu", "--json"]) == 0
    out: dict[Any, Any] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["ogb_evaluator"]["test"]["acc"] == pytest.approx(out["test_accuracy"])


REAL = [p / "ogbn_arxiv" for p in (paths.shared_data(), Path.home() / "ogb") if p]


@pytest.mark.slow
@pytest.mark.skipif(not any(p.is_dir() for p in REAL), reason="no real ogbn-arxiv on disk")
def test_real_arxiv() -> None:
    g = read_ogb_folder(next(p for p in REAL if p.is_dir()), "ogbn-arxiv")
    assert (g.num_nodes, g.num_features) == (169343, 128)
    counts = [int(m.sum()) for m in (g.train_mask, g.val_mask, g.test_mask)]
    assert counts == [90941, 29799, 48603]


def test_data_info_reads_an_ogb_folder(arxiv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Not taken for a partition folder (no manifest.json there)."""
    assert main(["data", "info", str(arxiv), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["num_nodes"] == NODES
