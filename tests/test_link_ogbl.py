"""OGB link-property folders (collab, ddi, ppa, citation2 layouts) read offline.

Each fixture is written file by file as ``LinkPropPredDataset`` leaves it: headerless
gzip CSVs under ``raw/`` (the graph of training edges, listed once per undirected pair)
and ``split/<kind>/{train,valid,test}.pt`` dictionaries of numpy arrays.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from sparsegnn.data.ogbl import load_ogbl, read_ogbl_folder
from sparsegnn.errors import DataFormatError
from sparsegnn.train.link_task import LinkRequest, link_data, train_link

pytestmark = pytest.mark.usefixtures("one_thread")

NODES = 50


def _csv(path: Path, rows: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = "%d" if rows.dtype.kind in "iu" else "%.6f"
    with gzip.open(path, "wt") as f:
        np.savetxt(f, rows.reshape(rows.shape[0], -1), fmt=fmt, delimiter=",")


def _graph(folder: Path, edges: np.ndarray, features: int | None) -> None:
    raw = folder / "raw"
    _csv(raw / "edge.csv.gz", edges)
    _csv(raw / "num-node-list.csv.gz", np.array([NODES]))
    _csv(raw / "num-edge-list.csv.gz", np.array([len(edges)]))
    if features:
        _csv(raw / "node-feat.csv.gz", np.random.default_rng(0).normal(
            size=(NODES, features)).astype(np.float32))
    (folder / "RELEASE_v1.txt").write_text("")


def write_pairs_dataset(root: Path, name: str, kind: str, features: int | None,
                        extra: bool = False) -> Path:
    """collab / ddi / ppa: ``edge`` [P, 2], ``edge_neg`` [Q, 2] for valid and test."""
    rng = np.random.default_rng(1)
    folder = root / name.replace("-", "_")
    pairs = rng.integers(0, NODES, (120, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    train, valid, test = pairs[:80], pairs[80:95], pairs[95:]
    _graph(folder, train, features)
    if extra:  # collab: a weight and a year per edge, in the files and the split
        _csv(folder / "raw" / "edge_weight.csv.gz", np.ones(len(train), dtype=np.int64))
        _csv(folder / "raw" / "edge_year.csv.gz", np.full(len(train), 2010))
    for stem, part in (("train", train), ("valid", valid), ("test", test)):
        content = {"edge": part}
        if extra:
            content.update(weight=np.ones(len(part)), year=np.full(len(part), 2015))
        if stem != "train":
            content["edge_neg"] = rng.integers(0, NODES, (30, 2))
        (folder / "split" / kind).mkdir(parents=True, exist_ok=True)
        torch.save(content, folder / "split" / kind / f"{stem}.pt")
    return folder


def write_citation2_like(root: Path) -> Path:
    """citation2: directed; ``source_node``/``target_node`` and ``target_node_neg``."""
    rng = np.random.default_rng(2)
    folder = root / "ogbl_citation2"
    edges = rng.integers(0, NODES, (100, 2))
    _graph(folder, edges, 6)
    _csv(folder / "raw" / "node_year.csv.gz", rng.integers(2000, 2020, NODES))
    for stem, size in (("train", 60), ("valid", 10), ("test", 12)):
        content = {"source_node": rng.integers(0, NODES, size),
                   "target_node": rng.integers(0, NODES, size)}
        if stem != "train":
            content["target_node_neg"] = rng.integers(0, NODES, (size, 20))
        (folder / "split" / "time").mkdir(parents=True, exist_ok=True)
        torch.save(content, folder / "split" / "time" / f"{stem}.pt")
    return folder


@pytest.mark.parametrize(("name", "kind", "features", "extra"), [
    ("ogbl-ddi", "target", None, False), ("ogbl-collab", "time", 4, True),
    ("ogbl-ppa", "throughput", 58, False)])
def test_pair_layouts(tmp_path: Path, name: str, kind: str, features: int | None,
                      extra: bool) -> None:
    write_pairs_dataset(tmp_path, name, kind, features, extra)
    data = load_ogbl(name, tmp_path)
    g, split = data.graph, data.split
    assert g.num_nodes == NODES and split.undirected
    assert (g.x is None) == (features is None)
    train = torch.load(tmp_path / name.replace("-", "_") / "split" / kind / "train.pt",
                       weights_only=False)["edge"]
    assert torch.equal(split.train.pos, torch.from_numpy(train).T)
    keys = set((g.edge_index[0] * NODES + g.edge_index[1]).tolist())
    assert keys == {int(a) * NODES + int(b) for a, b in train} | {
        int(b) * NODES + int(a) for a, b in train}  # both directions of the graph
    assert torch.equal(split.train_message, g.edge_index)
    assert split.val.num_pos == 15 and split.val.num_neg == 30
    assert split.test.neg_tails is None and split.train.num_neg == 0


def test_citation2_layout(tmp_path: Path) -> None:
    folder = write_citation2_like(tmp_path)
    data = read_ogbl_folder(folder)
    split = data.split
    assert data.graph.name == "ogbl-citation2" and not split.undirected
    assert data.graph.num_edges <= 100  # directed: listed once
    assert split.test.neg_tails.shape == (12, 20)
    assert split.test.num_neg == 12 * 20  # the tails as pairs, for AUC and AP
    assert torch.equal(split.test.neg[0, :20], split.test.pos[0, :1].expand(20))


def test_refusals_name_the_file(tmp_path: Path) -> None:
    folder = write_pairs_dataset(tmp_path, "ogbl-ddi", "target", None)
    torch.save({"edge": np.array([[0, NODES]])}, folder / "split" / "target" / "test.pt")
    with pytest.raises(DataFormatError, match=r"test\.pt: positive ids span"):
        load_ogbl("ogbl-ddi", tmp_path)
    (folder / "split" / "target" / "valid.pt").unlink()
    with pytest.raises(DataFormatError, match=r"valid\.pt: file is missing"):
        load_ogbl("ogbl-ddi", tmp_path)
    torch.save({"nodes": np.arange(3)}, folder / "split" / "target" / "valid.pt")
    with pytest.raises(DataFormatError, match="expected 'edge'"):
        load_ogbl("ogbl-ddi", tmp_path)
    (folder / "split" / "target" / "valid.pt").write_bytes(b"not a pickle")
    with pytest.raises(DataFormatError, match="readable without running code"):
        load_ogbl("ogbl-ddi", tmp_path)


def test_citation2_trains_and_ranks_each_positive_against_its_tails(tmp_path: Path) -> None:
    data = read_ogbl_folder(write_citation2_like(tmp_path))
    request = LinkRequest(hidden=8, out_channels=4, epochs=3, ks=(20,))
    _, out = train_link(data.graph, request, data.split)
    assert set(out.test) == {"auc", "ap", "hits@20", "mrr"}
    assert 1 / 21 <= out.test["mrr"] <= 1.0


def test_link_data_finds_ogbl_by_name_or_folder(tmp_path: Path) -> None:
    folder = write_pairs_dataset(tmp_path, "ogbl-ddi", "target", None)
    by_name = link_data("ogbl-ddi", tmp_path)
    by_folder = link_data(str(folder))
    assert by_name[1] is not None and by_folder[1] is not None
    assert torch.equal(by_name[1].test.neg, by_folder[1].test.neg)
    graph, split = link_data("cora")
    assert split is None and graph.num_nodes == 2708
