"""Edge splits for link prediction: PyG's RandomLinkSplit positives, pairs kept together,
fixed negatives, seeding, saving with a run, and one-line refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sparsegnn.data.generators import sbm
from sparsegnn.data.link_edges import load_split, save_split
from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.sampling.link_split import random_link_split

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def graph():
    return sbm(300, 4, 8.0, seed=1, num_features=8)


def _keys(pairs: torch.Tensor, n: int) -> set[int]:
    return set((pairs[0] * n + pairs[1]).tolist())


def _both(pairs: torch.Tensor, n: int) -> set[int]:
    return _keys(pairs, n) | _keys(pairs.flip(0), n)


def test_positives_and_messages_equal_pygs_random_link_split(graph) -> None:
    transforms = pytest.importorskip("torch_geometric.transforms")
    data_mod = pytest.importorskip("torch_geometric.data")
    torch.manual_seed(5)
    data = data_mod.Data(edge_index=graph.edge_index, num_nodes=graph.num_nodes)
    train, val, test = transforms.RandomLinkSplit(
        num_val=0.05, num_test=0.1, is_undirected=True,
        add_negative_train_samples=False)(data)
    ours = random_link_split(graph.edge_index, graph.num_nodes, seed=5)
    n = graph.num_nodes
    assert torch.equal(ours.train.pos, train.edge_label_index)
    p_val = val.edge_label_index[:, val.edge_label == 1]
    p_test = test.edge_label_index[:, test.edge_label == 1]
    assert torch.equal(ours.val.pos, p_val) and torch.equal(ours.test.pos, p_test)
    assert _keys(ours.train_message, n) == _keys(train.edge_index, n)
    assert _keys(ours.test_message, n) == _keys(test.edge_index, n)
    assert ours.val.num_neg == int((val.edge_label == 0).sum())


def test_pairs_stay_together_and_negatives_are_non_edges(graph) -> None:
    n = graph.num_nodes
    split = random_link_split(graph.edge_index, n, seed=0)
    train_msg = _keys(split.train_message, n)
    assert train_msg == _both(split.train.pos, n)  # both directions, nothing else
    for held in (split.val.pos, split.test.pos):
        assert not _both(held, n) & train_msg
    assert not _both(split.test.pos, n) & _keys(split.test_message, n)
    assert _keys(split.test_message, n) == train_msg | _both(split.val.pos, n)
    edges = _keys(graph.edge_index, n)
    negs = torch.cat([split.val.neg, split.test.neg], dim=1)
    assert not _keys(negs, n) & edges
    assert bool((negs[0] != negs[1]).all())
    assert len(_keys(negs, n)) == negs.shape[1]  # distinct, val and test disjoint
    assert split.val.num_neg == split.val.num_pos
    assert split.train.num_neg == 0


def test_train_negatives_and_ratio(graph) -> None:
    split = random_link_split(graph.edge_index, graph.num_nodes, neg_ratio=2.0,
                              train_negatives=True, seed=3)
    assert split.train.num_neg == 2 * split.train.num_pos
    assert split.test.num_neg == 2 * split.test.num_pos


def test_seeded(graph) -> None:
    a = random_link_split(graph.edge_index, graph.num_nodes, seed=7)
    b = random_link_split(graph.edge_index, graph.num_nodes, seed=7)
    c = random_link_split(graph.edge_index, graph.num_nodes, seed=8)
    assert torch.equal(a.test.pos, b.test.pos) and torch.equal(a.test.neg, b.test.neg)
    assert not torch.equal(a.test.pos, c.test.pos)


def test_saved_and_read_back(graph, tmp_path: Path) -> None:
    types = torch.arange(graph.num_edges) % 3
    split = random_link_split(graph.edge_index, graph.num_nodes, seed=2, edge_type=types)
    save_split(split, tmp_path / "split.pt")
    back = load_split(tmp_path / "split.pt")
    assert back.settings == split.settings and back.num_nodes == split.num_nodes
    for name in ("train", "val", "test"):
        a, b = getattr(split, name), getattr(back, name)
        assert torch.equal(a.pos, b.pos) and torch.equal(a.neg, b.neg)
        assert torch.equal(a.pos_type, b.pos_type)
    assert split.val.neg_type.shape == (split.val.num_neg,)
    torch.save({"format": "other"}, tmp_path / "bad.pt")
    with pytest.raises(DataFormatError, match="not a sparsegnn link split"):
        load_split(tmp_path / "bad.pt")


def test_one_line_refusals() -> None:
    tiny = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    with pytest.raises(InvalidValueError, match="no training edges") as err:
        random_link_split(tiny, 3, val=1, test=1)
    assert "\n" not in str(err.value)
    with pytest.raises(InvalidValueError, match="no validation edges"):
        random_link_split(tiny, 3, val=0.2, test=0.2)
    with pytest.raises(InvalidValueError, match="negative ratio must be above 0"):
        random_link_split(tiny, 3, neg_ratio=0)
