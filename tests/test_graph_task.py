"""Whole-graph classification: graph-set readers, block-diagonal batches, pooling, the
GIN model, k-fold training and exact resume (issue 47.3)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from sparsegnn.data.graph_set import (
    from_graph_list,
    random_graph_set,
    stratified_folds,
)
from sparsegnn.data.graph_set_io import load_graph_set, read_ogbg_folder, read_pyg_graph_set
from sparsegnn.data.tu import read_tu_folder
from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.nn.graph_models import GraphGCN, GraphGIN
from sparsegnn.nn.graph_pool import global_pool
from sparsegnn.sparse.graph_batch import collate_graphs
from sparsegnn.train.graph_task import GraphRequest, cross_validate, train_fold

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: threads only contend


def _dense(s):
    a = torch.zeros(s.num_nodes, s.num_nodes, dtype=torch.float64)
    rows = torch.repeat_interleave(torch.arange(s.num_nodes), s.crow[1:] - s.crow[:-1])
    a[rows, s.col] = 1.0
    return a


def _write_tu(folder: Path, name: str, edges, indicator, labels, node_labels=None,
              attributes=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}_A.txt").write_text("".join(f"{a}, {b}\n" for a, b in edges))
    (folder / f"{name}_graph_indicator.txt").write_text("".join(f"{g}\n" for g in indicator))
    (folder / f"{name}_graph_labels.txt").write_text("".join(f"{y}\n" for y in labels))
    if node_labels is not None:
        (folder / f"{name}_node_labels.txt").write_text("".join(f"{v}\n" for v in node_labels))
    if attributes is not None:
        (folder / f"{name}_node_attributes.txt").write_text("\n".join(attributes) + "\n")
    return folder


# ---------------------------------------------------------------------- readers
def test_shared_mutag_has_the_published_counts():
    """MUTAG as shared/data holds it (not bundled), read by name."""
    from sparsegnn.data.paths import shared_data

    shared = shared_data()
    if shared is None or not (shared / "MUTAG").is_dir():
        pytest.skip("no shared/data/MUTAG beside this clone")
    s = load_graph_set("mutag")
    assert (s.num_graphs, s.num_nodes, s.num_edges, s.num_features) == (188, 3371, 7442, 7)
    assert s.num_classes == 2 and s.undirected
    assert torch.bincount(s.y).tolist() == [63, 125]


def test_tu_reader_equals_pyg_tudataset(tmp_path):
    pytest.importorskip("torch_geometric")
    from torch_geometric.datasets import TUDataset

    edges = [(1, 2), (2, 1), (2, 3), (3, 2), (4, 5), (5, 4), (5, 5), (6, 4), (4, 6)]
    _write_tu(tmp_path / "TOY" / "raw", "TOY", edges, [1, 1, 1, 2, 2, 2], [3, -1],
              node_labels=[1, 3, 2, 1, 1, 3])
    ours = read_tu_folder(tmp_path / "TOY")
    theirs = TUDataset(str(tmp_path), "TOY")
    assert ours.y.tolist() == [int(d.y) for d in theirs]
    for g, data in enumerate(theirs):
        lo, hi = int(ours.node_ptr[g]), int(ours.node_ptr[g + 1])
        assert torch.equal(ours.x[lo:hi], data.x)
        dense = torch.zeros(hi - lo, hi - lo)
        dense[data.edge_index[1], data.edge_index[0]] = 1
        assert torch.equal(_dense(ours)[lo:hi, lo:hi].float(), dense)


def test_pyg_in_memory_dataset_file(tmp_path):
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Data, InMemoryDataset

    s = random_graph_set(12, seed=3)
    graphs = []
    for g in range(s.num_graphs):
        lo, hi = int(s.node_ptr[g]), int(s.node_ptr[g + 1])
        rows = torch.repeat_interleave(torch.arange(lo, hi), s.crow[lo + 1:hi + 1] - s.crow[lo:hi])
        cols = s.col[s.crow[lo]:s.crow[hi]]
        graphs.append(Data(x=s.x[lo:hi], edge_index=torch.stack([cols, rows]) - lo,
                           y=s.y[g:g + 1]))
    (tmp_path / "toy" / "processed").mkdir(parents=True)
    InMemoryDataset.save(graphs, str(tmp_path / "toy" / "processed" / "data.pt"))
    back = read_pyg_graph_set(tmp_path / "toy")
    for field in ("crow", "col", "node_ptr", "x", "y"):
        assert torch.equal(getattr(back, field), getattr(s, field)), field


def _gz(path: Path, rows: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write("".join(r + "\n" for r in rows))


def test_ogbg_folder(tmp_path):
    raw = tmp_path / "ogbg_toy" / "raw"
    _gz(raw / "edge.csv.gz", ["0,1", "1,2", "0,1"])
    _gz(raw / "num-node-list.csv.gz", ["3", "2"])
    _gz(raw / "num-edge-list.csv.gz", ["2", "1"])
    _gz(raw / "node-feat.csv.gz", ["1,0", "0,1", "1,1", "0,0", "2,2"])
    _gz(raw / "graph-label.csv.gz", ["1", "0"])
    for part in ("train", "valid", "test"):
        _gz(tmp_path / "ogbg_toy" / "split" / "scaffold" / f"{part}.csv.gz", ["0"])
    s = read_ogbg_folder(tmp_path / "ogbg_toy")
    assert s.node_ptr.tolist() == [0, 3, 5] and s.num_edges == 6 and s.undirected
    assert s.meta["split"] == {"train": [0], "val": [0], "test": [0]}
    _gz(raw / "graph-label.csv.gz", ["1,0", "0,1"])
    with pytest.raises(DataFormatError, match="multi-task"):
        read_ogbg_folder(tmp_path / "ogbg_toy")


# ---------------------------------------------------------------------- bad input
def test_mixed_feature_widths_are_one_line():
    graphs = [(np.array([[0], [1]]), np.ones((2, 3)), 0), (np.zeros((2, 0)), np.ones((1, 4)), 1)]
    with pytest.raises(DataFormatError, match="graph 1 has 4 node features, graph 0 has 3"):
        from_graph_list(graphs, name="toy")


def test_mixed_attribute_widths_in_a_tu_file(tmp_path):
    folder = _write_tu(tmp_path / "T", "T", [(1, 2), (2, 1)], [1, 1], [0],
                       attributes=["1.0, 2.0", "3.0"])
    with pytest.raises(DataFormatError, match="mixed feature widths"):
        read_tu_folder(folder, use_node_attr=True)


def test_label_outside_the_classes():
    graphs = [(np.zeros((2, 0)), np.ones((1, 2)), 0), (np.zeros((2, 0)), np.ones((1, 2)), 3)]
    with pytest.raises(InvalidValueError, match="graph 1 has label 3, outside the 2 classes"):
        from_graph_list(graphs, name="toy", num_classes=2)


def test_empty_graph_refused_unless_allowed(tmp_path):
    folder = _write_tu(tmp_path / "E", "E", [(1, 2), (2, 1)], [1, 1, 3], [0, 1, 0])
    with pytest.raises(DataFormatError, match=r"graph 1 \(of 3\) has no nodes"):
        read_tu_folder(folder)
    assert read_tu_folder(folder, allow_empty=True).graph_sizes().tolist() == [2, 0, 1]


# ---------------------------------------------------------------------- batching, pooling
def test_batch_is_the_block_diagonal_submatrix_and_pools_match_dense():
    s = random_graph_set(40, seed=1)
    ids = torch.tensor([7, 3, 39, 0, 12])
    b = collate_graphs(s.crow, s.col, s.node_ptr, ids, symmetric=True, dtype=torch.float64)
    assert torch.equal(b.adj.to_dense(), _dense(s)[b.nodes][:, b.nodes])
    h = torch.randn(b.num_nodes, 5, dtype=torch.float64, requires_grad=True)
    sizes = (s.node_ptr[ids + 1] - s.node_ptr[ids]).tolist()
    parts = h.split(sizes)
    want = {"sum": torch.stack([p.sum(0) for p in parts]),
            "mean": torch.stack([p.mean(0) for p in parts]),
            "max": torch.stack([p.max(0).values for p in parts])}
    for kind, ref in want.items():
        got = global_pool(h, b, kind)
        assert torch.allclose(got, ref), kind
        g1, = torch.autograd.grad(got.square().sum(), h)
        g2, = torch.autograd.grad(ref.square().sum(), h)
        assert torch.allclose(g1, g2), kind


@pytest.mark.parametrize("model_cls", [GraphGIN, GraphGCN])
def test_a_batch_scores_each_graph_as_alone(model_cls):
    s = random_graph_set(6, seed=2)
    torch.manual_seed(0)
    model = model_cls(s.num_features, 16, 2).double().eval()
    ids = torch.arange(6)
    whole = collate_graphs(s.crow, s.col, s.node_ptr, ids, symmetric=True, dtype=torch.float64)
    together = model(s.x[whole.nodes].double(), whole)
    for g in range(6):
        one = collate_graphs(s.crow, s.col, s.node_ptr, ids[g:g + 1], symmetric=True,
                             dtype=torch.float64)
        assert torch.allclose(model(s.x[one.nodes].double(), one), together[g:g + 1])


def test_stratified_folds_partition_and_balance():
    y = torch.tensor([0] * 63 + [1] * 125)
    folds = stratified_folds(y, 10, seed=0)
    assert sorted(torch.cat(folds).tolist()) == list(range(188))
    for f in folds:
        assert abs(int((y[f] == 0).sum()) - 6.3) < 1 and abs(int((y[f] == 1).sum()) - 12.5) < 1


# ---------------------------------------------------------------------- training
def test_cross_validation_learns_and_reports_the_gin_protocol():
    s = random_graph_set(120, seed=4)
    out = cross_validate(s, GraphRequest(epochs=6, folds=3, hidden=16, batch_size=16))
    curve = torch.tensor([[h.test_accuracy for h in fold] for fold in out.history])
    assert out.best_epoch == int(curve.mean(0).argmax())
    assert out.fold_test_accuracies == pytest.approx(curve[:, out.best_epoch].tolist())
    assert out.test_accuracy > 0.7  # the classes differ in density and node labels
    assert sum(map(sum, out.test_confusion)) == 120
    assert "3-fold test accuracy" in out.summary()


def test_resume_is_bit_identical(tmp_path):
    s = random_graph_set(60, seed=5)
    folds = stratified_folds(s.y, 3)
    req = GraphRequest(epochs=4, folds=3, hidden=8, batch_size=8, lr_step=2,
                       checkpoint=tmp_path / "run.pt", checkpoint_every=1)
    whole = train_fold(s, GraphRequest(**{**req.__dict__, "checkpoint": None}), folds, 1)
    train_fold(s, GraphRequest(**{**req.__dict__, "epochs": 2}), folds, 1)
    assert (tmp_path / "run.fold1.pt").is_file()
    resumed = train_fold(s, GraphRequest(**{**req.__dict__, "resume": True}), folds, 1)
    for key, value in whole.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[key]), key
    assert [h.test_accuracy for h in whole.state.history] == \
        [h.test_accuracy for h in resumed.state.history]


def test_request_refuses_bad_settings():
    with pytest.raises(InvalidValueError, match="unknown graph model"):
        GraphRequest(model="sage")  # type: ignore[arg-type]
    with pytest.raises(InvalidValueError, match="folds must be at least 2"):
        GraphRequest(folds=1)
