"""Homophily: the generator's knob, the student's text fallback, and `curate agreement`
on two files against hand-computed kappas."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.curation import cohen_kappa, essential_web, read_labels
from sparsegnn.curation.annotate import annotate
from sparsegnn.curation.distil import distil
from sparsegnn.curation.ingest import IngestConfig, ingest
from sparsegnn.curation.student import StudentConfig
from sparsegnn.curation.synthetic import (
    FDC,
    SyntheticConfig,
    generate,
    measured_homophily,
    write_corpus,
)

pytest.importorskip("pyarrow")


@pytest.mark.parametrize("level", [0.0, 0.3, 0.7, 1.0])
def test_measured_homophily_equals_the_knob(level: float):
    cfg = SyntheticConfig(num_docs=6000, num_sites=40, seed=3).with_homophily(FDC, level)
    rows = [r for chunk in generate(cfg) for r in chunk]
    assert measured_homophily(rows, FDC) == pytest.approx(level, abs=0.02)
    # the other categories keep their own knobs
    for cat, value in cfg.homophily:
        assert measured_homophily(rows, cat) == pytest.approx(value, abs=0.02)


def _topic_kappa(store: Path, result, held_out, out: Path) -> float:
    annotate(store, result.annotator, out, progress=False)
    got = read_labels(out, essential_web()).subset(held_out.ids).categories[FDC].primary
    return cohen_kappa(held_out.categories[FDC].primary, got).kappa


def test_ego_channel_survives_links_with_only_wrong_codes(tmp_path: Path):
    """Every link joins two documents of different topics: the student must score within
    0.01 of the text-only student on held-out documents."""
    cfg = SyntheticConfig(num_docs=1500, num_sites=20, seed=5).with_homophily(FDC, 0.0)
    write_corpus(tmp_path / "c.jsonl", cfg)
    ingest(tmp_path / "c.jsonl", tmp_path / "store", IngestConfig(batch_rows=512))
    truth = read_labels(tmp_path / "c.jsonl", essential_web())
    teacher, held_out = truth.subset(truth.ids[:600]), truth.subset(truth.ids[600:1200])
    small = StudentConfig(n_features=2**12, hidden=16, epochs=40, patience=40)
    schema, val = essential_web(), teacher.ids[:150]
    student = distil(tmp_path / "store", teacher, schema, small, val_ids=val)
    text = distil(tmp_path / "store", teacher, schema,
                  StudentConfig(n_features=2**12, hidden=16, epochs=40, patience=40, hops=0,
                                knn_hops=0), val_ids=val)
    k_student = _topic_kappa(tmp_path / "store", student, held_out, tmp_path / "s.parquet")
    k_text = _topic_kappa(tmp_path / "store", text, held_out, tmp_path / "t.parquet")
    assert k_student >= k_text - 0.01
    weights = student.annotator.model.weights_report()[FDC]
    assert set(weights) >= {"graph_share", "ego", "link1", "site1"}


A = [{"id": "a", "document_type_v1": "1"}, {"id": "b", "document_type_v1": "2"},
     {"id": "c", "document_type_v1": "2", "document_type_v1_secondary": "1"},
     {"id": "d", "document_type_v1": "3"}]
B = [{"id": "d", "document_type_v1": "3"}, {"id": "c", "document_type_v1": "1"},
     {"id": "b", "document_type_v1": "1"}, {"id": "a", "document_type_v1": "1"}]


def test_agreement_of_two_files_against_hand_computed_kappas(
        tmp_path: Path, capsys: pytest.CaptureFixture):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for path, rows in ((a, A), (b, B)):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["curate", "agreement", str(a), str(b), "--bootstrap", "50", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    # primary: agree on a and d (2/4); chance: A {1:1, 2:2, 3:1}/4, B {1:3, 3:1}/4
    # -> 1/4*3/4 + 1/4*1/4 = 1/4; kappa = (1/2 - 1/4) / (3/4) = 1/3
    assert out["primary_kappa"]["document_type_v1"]["kappa"] == pytest.approx(1 / 3)
    # overlap: c's {2, 1} meets B's 1, so 3/4 agree; chance over all pairs of sets:
    # {1} and {1,2} meet {1} (3/4 each), {3} meets {3} (1/4) -> 7/16; kappa = 5/9
    overlap = out["kappa"]["document_type_v1"]
    assert overlap["kappa"] == pytest.approx(5 / 9)
    assert overlap["low"] <= overlap["high"]
    assert FDC in out["missing_categories"]
    assert main(["curate", "agreement", str(a)]) == 2


def test_text_fallback_is_the_text_only_student_weight_for_weight(tmp_path: Path):
    """The text half of a student is the model `--model text` trains (same seed)."""
    cfg = SyntheticConfig(num_docs=300, num_sites=10, seed=2)
    write_corpus(tmp_path / "c.jsonl", cfg)
    ingest(tmp_path / "c.jsonl", tmp_path / "store", IngestConfig(batch_rows=128))
    labels = read_labels(tmp_path / "c.jsonl", essential_web())
    labels = labels.subset(labels.ids[:150])
    small = StudentConfig(n_features=512, hidden=8, hops=1, epochs=4, patience=4)
    pair = distil(tmp_path / "store", labels, essential_web(), small).annotator.model
    text = distil(tmp_path / "store", labels, essential_web(),
                  replace(small, hops=0, knn_hops=0)).annotator.model
    mine = pair.text.state_dict()
    assert mine.keys() == text.state_dict().keys()
    for name, value in text.state_dict().items():
        assert torch.equal(mine[name], value), name


def test_distil_shows_the_channel_weights(tmp_path: Path, capsys: pytest.CaptureFixture):
    write_corpus(tmp_path / "c.jsonl", SyntheticConfig(num_docs=200, num_sites=8, seed=1))
    ingest(tmp_path / "c.jsonl", tmp_path / "store", IngestConfig(batch_rows=128))
    args = ["curate", "distil", "--corpus", str(tmp_path / "store"), "--labels",
            str(tmp_path / "c.jsonl"), "--epochs", "2"]
    assert main([*args, "--out", str(tmp_path / "a.pt")]) == 0
    text = capsys.readouterr().out
    assert "channel weights per category:" in text and "graph_share" in text
    assert main([*args, "--out", str(tmp_path / "b.pt"), "--json"]) == 0
    weights = json.loads(capsys.readouterr().out.splitlines()[-1])["channel_weights"][FDC]
    assert set(weights) == {"graph_share", "ego", "link1", "link2", "site1", "site2"}
    shares = sum(v for k, v in weights.items() if k != "graph_share")
    assert shares == pytest.approx(1.0)
