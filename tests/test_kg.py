"""Knowledge-graph link prediction: the triple-folder reader (counts against the files, bad
input as one line), filtered ranking on a hand-made graph with known ranks, and a few
epochs of R-GCN + DistMult on the packaged UMLS beating an untrained model."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data.kg import load_kg, read_kg_folder
from sparsegnn.data.packaged import packaged_available, packaged_dataset
from sparsegnn.errors import DataFormatError
from sparsegnn.train.kg_link import (
    KGRequest,
    build_kg_model,
    evaluate_kg,
    message_operators,
    train_kg_link,
)
from sparsegnn.train.kg_metrics import KnownTriples, filtered_rank, rank_metrics, rank_triples

needs_umls = pytest.mark.skipif(not packaged_available("UMLS"),
                                reason="UMLS comes with pykeen: pip install 'sparsegnn[datasets]'")


def _write(folder: Path, train: str, valid: str = "a\tr\tb\n", test: str = "b\tr\tc\n") -> Path:
    folder.mkdir(exist_ok=True)
    for name, text in (("train.txt", train), ("valid.txt", valid), ("test.txt", test)):
        (folder / name).write_text(text)
    return folder


@needs_umls
def test_umls_counts_match_its_files():
    folder = packaged_dataset("UMLS")
    lines = {s: [ln.split("\t") for ln in (folder / f"{s}.txt").read_text().splitlines()
                 if ln.strip()] for s in ("train", "valid", "test")}
    kg = load_kg("umls")
    assert kg.counts() == {"name": "umls", "num_entities": 135, "num_relations": 46,
                           "num_train": len(lines["train"]), "num_valid": len(lines["valid"]),
                           "num_test": len(lines["test"])}
    assert (kg.num_entities == len({p[i].strip() for rows in lines.values()
                                    for p in rows for i in (0, 2)}))
    head, rel, tail = lines["train"][0]
    first = kg.train[:, 0].tolist()
    assert [kg.entities[first[0]], kg.relations[first[1]], kg.entities[first[2]]] == \
        [head, rel, tail.strip()]


def test_message_graph_adds_an_inverse_per_relation(tmp_path):
    kg = read_kg_folder(_write(tmp_path / "kg", "a\tr\tb\nb\ts\tc\na\tr\tc\n"))
    assert kg.entities == ["a", "b", "c"] and kg.relations == ["r", "s"]
    rel = kg.message_graph()
    assert rel.num_relations == 4 and rel.num_nodes == 3
    edges = {(int(s), int(t), int(r)) for (s, t), r in zip(rel.edge_index.t(), rel.edge_type,
                                                           strict=True)}
    assert edges == {(0, 1, 0), (1, 0, 1), (0, 2, 0), (2, 0, 1), (1, 2, 2), (2, 1, 3)}


@pytest.mark.parametrize(("train", "test", "words"), [
    ("a\tr\tb\nb\ts\n", "b\tr\tc\n", "train.txt:2: expected 3 tab-separated columns"),
    ("a\tr\tb\n", "b\tr\tc\textra\n", "test.txt:1: expected 3 tab-separated columns"),
    ("a\tr\tb\n", "b\tr\tc\nb\tq\ta\n", "test.txt:2: relation 'q' appears in no training"),
    ("a\tr\tb\n", "\n", "test.txt: no triples"),
])
def test_bad_triples_are_one_line(tmp_path, train, test, words):
    with pytest.raises(DataFormatError, match=words) as err:
        read_kg_folder(_write(tmp_path / "kg", train, test=test))
    assert "\n" not in str(err.value)


def test_not_a_knowledge_graph(tmp_path):
    with pytest.raises(DataFormatError, match="not a knowledge graph"):
        load_kg(tmp_path)


def test_filtered_rank_counts_ties_half_and_skips_known():
    scores = torch.tensor([[0.5, 0.9, 1.0, 0.2], [0.3, 0.1, 0.3, 0.3]])
    known = torch.tensor([[False, True, True, False], [True, False, False, False]])
    # row 0: entity 2 scores higher but is known: rank 1; row 1: two others tie: 1 + 2/2
    assert filtered_rank(scores, torch.tensor([1, 0]), known).tolist() == [1.0, 2.0]
    assert filtered_rank(scores, torch.tensor([1, 0]), torch.zeros_like(known)).tolist() \
        == [2.0, 2.0]


def test_rank_triples_on_a_hand_made_graph():
    # entities 0..3, one relation; true triples (0,0,1), (0,0,2), (3,0,1); test (0,0,1)
    known = KnownTriples(torch.tensor([[0, 0, 3], [0, 0, 0], [1, 2, 1]]), 4, 1)
    tails = torch.tensor([[0.5, 0.9, 1.0, 0.2]])  # (0, 0, e): 2 is filtered, rank 1
    heads = torch.tensor([[0.3, 0.1, 0.8, 0.9]])  # (e, 0, 1): 3 is filtered, 2 above: rank 2

    def rows(anchor, rel, side):
        return tails if side == "tail" else heads

    ranks = rank_triples(rows, torch.tensor([[0], [0], [1]]), known)
    assert ranks.tolist() == [1.0, 2.0]
    assert rank_metrics(ranks) == {"mrr": 0.75, "hits@1": 0.5, "hits@3": 1.0, "hits@10": 1.0}


@needs_umls
def test_a_few_epochs_beat_an_untrained_model():
    kg = load_kg("umls")
    request = KGRequest(hidden=32, num_bases=4, epochs=6, seed=1)
    untrained = build_kg_model(request, kg)
    known = KnownTriples(kg.all_triples(), kg.num_entities, kg.num_relations)
    before = evaluate_kg(untrained, message_operators(kg), kg.test, known)["mrr"]
    _, outcome = train_kg_link(request, kg)
    assert outcome.epochs_run == 6 and 1 <= outcome.best_epoch <= 6
    assert outcome.test["mrr"] > max(2 * before, 0.2), (before, outcome.test)
    assert 0 < outcome.test["hits@1"] <= outcome.test["hits@3"] <= outcome.test["hits@10"] <= 1


@needs_umls
def test_resume_continues_bit_identically(tmp_path):
    kg = load_kg("umls")
    request = KGRequest(hidden=16, num_bases=2, epochs=4, seed=3)
    whole, _ = train_kg_link(request, kg)
    ckpt = tmp_path / "kg.ckpt"
    train_kg_link(replace(request, epochs=2, checkpoint=ckpt), kg)
    resumed, outcome = train_kg_link(replace(request, checkpoint=ckpt, resume=True), kg)
    assert outcome.epochs_run == 4
    for (name, a), b in zip(whole.state_dict().items(), resumed.state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name


@needs_umls
def test_cli_reports_filtered_metrics(capsys):
    code = main(["train", "--task", "link", "--dataset", "umls", "--model", "rgcn",
                 "--decoder", "distmult", "--hidden", "16", "--num-bases", "2",
                 "--epochs", "2", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["model"] == "rgcn" and result["decoder"] == "distmult"
    for key in ("test_mrr", "test_hits_at_1", "test_hits_at_3", "test_hits_at_10"):
        assert 0 < result[key] <= 1


@pytest.mark.parametrize(("flags", "words"), [
    (["--dataset", "umls", "--decoder", "dot"], "drop --decoder dot"),
    (["--dataset", "umls", "--num-blocks", "2"], "drop --num-blocks"),
    (["--dataset", "umls", "--neg-ratio", "1.5"], "drop --neg-ratio"),
    (["--dataset", "cora"], "not a knowledge graph"),
])
def test_cli_refusals_are_one_line(capsys, flags, words):
    assert main(["train", "--task", "link", "--model", "rgcn", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sparsegnn train: error:"), err
    assert words in err[0]
