"""``train --task link|graph`` end to end through ``main``: bad input refused in one line,
checkpoints that resume bit-identically, TensorBoard scalars, the HTML report's sections
and the standard metric names of ``--json`` (issue 47.4)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.test_task_cli import _refused, _write_tu

from sparsegnn.cli.main import main

pytestmark = pytest.mark.usefixtures("one_thread")

LINK = ["train", "--task", "link", "--dataset", "cora", "--hidden", "16",
        "--out-channels", "8", "--checkpoint-every", "1"]


def _graph(folder: Path) -> list[str]:
    return ["train", "--task", "graph", "--dataset", str(folder), "--folds", "3",
            "--hidden", "8", "--layers", "3", "--batch-size", "8", "--lr-step", "2",
            "--checkpoint-every", "1"]


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    assert main([*argv, "--json", "--history"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["state"]["model"]


def _same_weights(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for key, value in wa.items():
        assert torch.equal(value, wb[key]), key


def _without_times(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in h.items() if "seconds" not in k} for h in history]


# ---------------------------------------------------------------------- bad input
def _ogbg_with_label(folder: Path, label: str) -> Path:
    raw = folder / "raw"
    raw.mkdir(parents=True)
    for name, rows in (("edge", ["0,1", "1,2", "0,1"]), ("num-node-list", ["3", "2"]),
                       ("num-edge-list", ["2", "1"]), ("graph-label", ["1", label])):
        with gzip.open(raw / f"{name}.csv.gz", "wt") as f:
            f.write("".join(r + "\n" for r in rows))
    return folder


def _mixed_widths(folder: Path) -> Path:
    _write_tu(folder)
    labels = folder / "TOY_node_labels.txt"
    lines = labels.read_text().splitlines()
    lines[3] += ", 1"  # node 4 has two label columns, the others one
    labels.write_text("\n".join(lines) + "\n")
    return folder


@pytest.mark.parametrize(("argv", "words"), [
    (["--val-ratio", "0.5", "--test-ratio", "0.5"], "leaves no training edges"),
    (["--val-ratio", "0"], "no validation edges left"),
    (["--neg-ratio", "0"], "negative ratio must be a finite number above 0, got 0.0"),
    (["--neg-ratio", "-2"], "above 0, got -2.0"),
    (["--neg-ratio", "inf"], "above 0, got inf"),
    (["--neg-ratio", "nan"], "above 0, got nan"),
])
def test_bad_link_input_is_one_line(capsys, argv, words):
    line = _refused(capsys, ["train", "--task", "link", "--dataset", "cora", "--epochs", "1",
                             *argv])
    assert line.startswith("sparsegnn train: error:") and words in line


def test_link_prediction_on_a_featureless_graph_is_one_line(capsys, tmp_path):
    edges = tmp_path / "ring.txt"
    edges.write_text("".join(f"{i} {(i + 1) % 20}\n" for i in range(20)))
    line = _refused(capsys, ["train", "--task", "link", "--dataset", str(edges)])
    assert "needs node features" in line


def test_bad_graph_sets_are_one_line(capsys, tmp_path):
    line = _refused(capsys, ["train", "--task", "graph", "--dataset",
                             str(_mixed_widths(tmp_path / "MIX"))])
    assert "mixed feature widths" in line and "TOY_node_labels.txt" in line
    line = _refused(capsys, ["train", "--task", "graph", "--dataset",
                             str(_ogbg_with_label(tmp_path / "ogbg_bad", "-1"))])
    assert "graph 1 has label -1" in line and "class ids" in line
    line = _refused(capsys, [*_graph(_write_tu(tmp_path / "TOY")), "--folds", "30"])
    assert "30 folds for 24 graphs" in line


# ---------------------------------------------------------------------- resume
def test_link_resume_is_bit_identical(capsys, tmp_path):
    whole = _run(capsys, [*LINK, "--epochs", "4", "--checkpoint", str(tmp_path / "a.pt")])
    _run(capsys, [*LINK, "--epochs", "2", "--checkpoint", str(tmp_path / "b.pt")])
    resumed = _run(capsys, [*LINK, "--epochs", "4", "--checkpoint", str(tmp_path / "b.pt"),
                            "--resume"])
    _same_weights(tmp_path / "a.pt", tmp_path / "b.pt")
    assert _without_times(resumed["history"]) == _without_times(whole["history"])
    for key in ("test_auc", "test_ap", "test_hits_at_10", "test_mrr", "val_auc"):
        assert resumed[key] == whole[key], key


def test_graph_resume_is_bit_identical(capsys, tmp_path):
    argv = _graph(_write_tu(tmp_path / "TOY"))
    whole = _run(capsys, [*argv, "--epochs", "4", "--checkpoint", str(tmp_path / "a.pt")])
    _run(capsys, [*argv, "--epochs", "2", "--checkpoint", str(tmp_path / "b.pt")])
    resumed = _run(capsys, [*argv, "--epochs", "4", "--checkpoint", str(tmp_path / "b.pt"),
                            "--resume"])
    for fold in range(3):
        _same_weights(tmp_path / f"a.fold{fold}.pt", tmp_path / f"b.fold{fold}.pt")
    assert [_without_times(f) for f in resumed["fold_history"]] == \
        [_without_times(f) for f in whole["fold_history"]]
    assert resumed["test_confusion"] == whole["test_confusion"]
    assert resumed["test_accuracy"] == whole["test_accuracy"]


# ---------------------------------------------------------------------- outputs
def _scalars(logdir: Path) -> dict[str, list[float]]:
    accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator",
        reason="tensorboard is not installed (pip install 'sparsegnn[tensorboard]')")
    acc = accumulator.EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _plot_ids(page: Path) -> set[str]:
    text = page.read_text()
    assert "<h2>Metrics</h2>" in text and "<h2>Configuration</h2>" in text
    return {part.split('"')[0] for part in text.split('id="plot-')[1:]}


def test_link_json_logdir_and_report(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    result = _run(capsys, [*LINK, "--epochs", "3", "--logdir", str(tmp_path / "tb"),
                           "--report", str(tmp_path / "link.html")])
    for key in ("test_auc", "test_ap", "test_hits_at_10", "test_hits_at_50",
                "test_hits_at_100", "test_mrr"):
        assert 0.0 <= result[key] <= 1.0, key
    roc = result["test_roc"]
    assert roc["fpr"][0] == roc["tpr"][0] == 0.0 and roc["fpr"][-1] == roc["tpr"][-1] == 1.0
    series = _scalars(tmp_path / "tb" / "version_0")
    assert series["epoch/val_auc"] == pytest.approx([h["val_auc"] for h in result["history"]])
    assert series["final/test_auc"] == pytest.approx([result["test_auc"]])
    assert series["final/test_hits_at_50"] == pytest.approx([result["test_hits_at_50"]])
    assert {"loss", "auc", "roc", "hits"} <= _plot_ids(tmp_path / "link.html")


def test_graph_json_logdir_and_report(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    argv = _graph(_write_tu(tmp_path / "TOY"))
    result = _run(capsys, [*argv, "--epochs", "3", "--logdir", str(tmp_path / "tb"),
                           "--report", str(tmp_path / "graph.html")])
    accs = torch.tensor(result["fold_test_accuracies"])
    assert result["test_accuracy"] == pytest.approx(float(accs.mean()))
    assert result["test_accuracy_std"] == pytest.approx(float(accs.std()))
    assert sum(map(sum, result["test_confusion"])) == 24
    assert [h["test_accuracy"] for h in result["history"]] == \
        pytest.approx(result["mean_curve"])
    assert _scalars(tmp_path / "tb" / "version_0")["final/test_accuracy"] == \
        pytest.approx([result["test_accuracy"]])
    fold = result["fold_history"][1]
    assert _scalars(tmp_path / "tb" / "version_0" / "fold1")["epoch/test_accuracy"] == \
        pytest.approx([h["test_accuracy"] for h in fold])
    assert {"loss", "accuracy", "confusion"} <= _plot_ids(tmp_path / "graph.html")


def test_json_leaves_curves_to_history(capsys, tmp_path):
    assert main([*_graph(_write_tu(tmp_path / "TOY")), "--epochs", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "fold_history" not in result and "history" not in result
    assert {"test_accuracy", "test_accuracy_std", "test_confusion"} <= result.keys()


def test_graph_task_on_two_ranks(capsys, tmp_path):
    argv = [*_graph(_write_tu(tmp_path / "TOY")), "--folds", "2", "--epochs", "1",
            "--nprocs", "2"]
    result = _run(capsys, argv)
    assert result["ranks"] == 2 and len(result["bytes_sent_per_rank"]) == 2
    assert all(b > 0 for b in result["bytes_sent_per_rank"])
    assert sum(map(sum, result["test_confusion"])) == 24
    line = _refused(capsys, [*argv, "--algo", "2d"])
    assert "drop --algo" in line
