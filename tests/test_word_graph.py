"""The paper-word typed graphs of Cora and CiteSeer (``sparsegnn.data.word_graph``): one
paper per node of the source, one word per used feature column, one ``has`` edge per
feature nonzero with its reverse, the citations unchanged, the source's labels and split;
reachable by name from ``load_hetero``, ``data info`` and ``train --model rgcn``."""

from __future__ import annotations

import json

import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data import GraphData, is_hetero_source, load_any, load_hetero
from sparsegnn.data.word_graph import load_word_graph, paper_word_graph
from sparsegnn.errors import DataFormatError


@pytest.mark.parametrize(("name", "source"), [("cora_words", "cora"),
                                              ("citeseer_words", "citeseer")])
def test_counts_labels_and_split_are_the_source_data_sets(name, source):
    base, typed = load_any(source), load_hetero(name)
    assert is_hetero_source(name) and typed.name == name and typed.target == "paper"
    used = (base.x != 0).any(0)
    assert typed.num_nodes == {"paper": base.num_nodes, "word": int(used.sum())}
    assert typed.meta["word_columns"] == used.nonzero().flatten().tolist()
    assert typed.meta["derived_from"] == base.name and typed.meta["reverse_edges"]
    assert torch.equal(typed.edge_index[("paper", "cites", "paper")], base.edge_index)
    has = typed.edge_index[("paper", "has", "word")]
    assert has.shape[1] == int((base.x != 0).sum())
    assert torch.equal(typed.edge_index[("word", "rev_has", "paper")], has.flip(0))
    for attr in ("y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(typed, attr), getattr(base, attr))
    assert typed.x == {}  # featureless: R-GCN learns an input per node


def test_words_map_to_the_columns_papers_use():
    x = torch.tensor([[0.0, 1.0, 0.0, 2.0], [0.0, 0.0, 0.0, 1.0], [0.0, 3.0, 0.0, 0.0]])
    g = GraphData(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=3, x=x,
                  y=torch.tensor([0, 1, 0]), name="toy")
    typed = paper_word_graph(g, name="toy_words")
    assert typed.num_nodes == {"paper": 3, "word": 2} and typed.meta["word_columns"] == [1, 3]
    has = typed.edge_index[("paper", "has", "word")]
    assert sorted(map(tuple, has.T.tolist())) == [(0, 0), (0, 1), (1, 1), (2, 0)]
    rel = typed.to_relational(inverse=False)
    assert rel.num_relations == 3 and rel.x is None and rel.num_nodes == 5


def test_refuses_a_graph_without_features_or_an_unknown_name():
    g = GraphData(edge_index=torch.zeros(2, 0, dtype=torch.int64), num_nodes=2,
                  y=torch.tensor([0, 1]))
    with pytest.raises(DataFormatError, match="bag-of-words"):
        paper_word_graph(g, name="x")
    with pytest.raises(DataFormatError, match="cora_words"):
        load_word_graph("pubmed_words")


def test_data_info_shows_the_node_and_edge_types(capsys):
    assert main(["data", "info", "cora_words"]) == 0
    out = capsys.readouterr().out
    assert "node type paper: 2708 nodes" in out and "node type word:" in out
    assert "edge type paper__has__word" in out and "edge type word__rev_has__paper" in out


def test_rgcn_trains_on_cora_words(capsys):
    assert main(["train", "--model", "rgcn", "--dataset", "cora_words", "--epochs", "3",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["model"] == "rgcn" and result["graph"] == "cora_words"
    assert result["num_relations"] == 3 and result["featureless"]
    assert result["num_nodes"] == load_hetero("cora_words").counts()["num_nodes"]
    assert result["epochs_run"] == 3 and 0.0 <= result["test_accuracy"] <= 1.0
