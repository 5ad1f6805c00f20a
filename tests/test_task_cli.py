"""``sparsegnn train --task link|graph``, ``--model rgcn`` and ``data info`` on typed graphs
and graph sets, run in-process through ``main`` on tiny data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparsegnn.cli.main import main

HSBM = "hsbm:nodes=300,blocks=3,degree=6,features=8"


def _json(capsys: pytest.CaptureFixture[str]) -> dict:
    out = capsys.readouterr().out.strip().splitlines()
    return json.loads(out[-1])


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def _write_tu(folder: Path, graphs: int = 24) -> Path:
    """A TU folder of two classes: cycles (0) and complete graphs (1), 4 to 6 nodes each,
    with node labels."""
    folder.mkdir(parents=True)
    edges, indicator, labels, node_labels = [], [], [], []
    first = 1
    for g in range(graphs):
        cls, n = g % 2, 4 + g % 3
        ids = range(first, first + n)
        pairs = [(a, b) for a in ids for b in ids if a != b] if cls else \
            [p for i in range(n) for p in ((first + i, first + (i + 1) % n),
                                            (first + (i + 1) % n, first + i))]
        edges += pairs
        indicator += [g + 1] * n
        labels.append(cls)
        node_labels += [cls] * n
        first += n
    (folder / "TOY_A.txt").write_text("".join(f"{a}, {b}\n" for a, b in edges))
    (folder / "TOY_graph_indicator.txt").write_text("".join(f"{g}\n" for g in indicator))
    (folder / "TOY_graph_labels.txt").write_text("".join(f"{y}\n" for y in labels))
    (folder / "TOY_node_labels.txt").write_text("".join(f"{v}\n" for v in node_labels))
    return folder


def test_link_task_reports_test_auc_and_ap(capsys, tmp_path):
    split = tmp_path / "split.pt"
    code = main(["train", "--task", "link", "--dataset", "cora", "--epochs", "3",
                 "--hidden", "16", "--out-channels", "8", "--decoder", "mlp",
                 "--negatives", "degree", "--split-out", str(split), "--json"])
    assert code == 0
    result = _json(capsys)
    assert result["task"] == "link" and result["decoder"] == "mlp"
    for key in ("test_auc", "test_ap", "test_mrr", "val_auc", "epochs_run", "best_epoch",
                "split_hash"):
        assert key in result, key
    assert result["epochs_run"] == 3 and "history" not in result
    assert result["config"]["out_channels"] == 8 and result["config"]["dropout"] == 0.0
    assert split.is_file()


def test_link_defaults_are_the_link_examples():
    from sparsegnn.cli.main import build_parser
    from sparsegnn.cli.train_tasks import link_request

    req = link_request(build_parser().parse_args(["train", "--task", "link"]))
    assert (req.hidden, req.out_channels, req.dropout, req.weight_decay, req.epochs) == \
        (128, 64, 0.0, 0.0, 100)
    req = link_request(build_parser().parse_args(["train", "--task", "link", "--hidden",
                                                  "32", "--dropout", "0.2"]))
    assert (req.hidden, req.dropout) == (32, 0.2)


def test_graph_task_cross_validates_a_tu_folder(capsys, tmp_path):
    folder = _write_tu(tmp_path / "TOY")
    code = main(["train", "--task", "graph", "--dataset", str(folder), "--epochs", "3",
                 "--folds", "3", "--hidden", "8", "--layers", "2", "--batch-size", "8",
                 "--pool", "mean", "--lr-step", "2", "--json"])
    assert code == 0
    result = _json(capsys)
    assert result["task"] == "graph" and result["model"] == "gin" and result["folds"] == 3
    for key in ("test_accuracy", "test_accuracy_std", "fold_test_accuracies", "best_epoch"):
        assert key in result, key
    assert "history" not in result and result["config"]["pool"] == "mean"


def test_data_info_of_a_graph_set_and_a_typed_graph(capsys, tmp_path):
    folder = _write_tu(tmp_path / "TOY")
    assert main(["data", "info", str(folder), "--json"]) == 0
    result = _json(capsys)
    assert result["graphs"] == 24 and result["classes"] == 2
    assert result["class_counts"] == [12, 12]
    assert main(["data", "info", HSBM, "--json"]) == 0
    result = _json(capsys)
    assert result["num_nodes"] == 300 and set(result["node_types"]) == {"a", "b", "c"}
    assert result["edge_types"] and all(v > 0 for v in result["edge_types"].values())


def test_rgcn_on_a_typed_graph(capsys):
    code = main(["train", "--dataset", HSBM, "--model", "rgcn", "--epochs", "5",
                 "--num-bases", "2", "--json"])
    assert code == 0
    result = _json(capsys)
    assert result["model"] == "rgcn" and result["num_relations"] > 1
    for key in ("test_accuracy", "val_accuracy", "train_accuracy", "epochs_run"):
        assert key in result, key
    assert result["epochs_run"] == 5 and result["config"]["num_bases"] == 2


@pytest.mark.parametrize(("argv", "words"), [
    (["train", "--task", "link", "--neg-ratio", "0"],
     "negative ratio must be a finite number above 0"),
    (["train", "--task", "graph", "--dataset", "cora"], "graph set"),
    (["train", "--model", "rgcn", "--dataset", "cora"], "typed graph"),
    (["train", "--dataset", HSBM], "--model rgcn"),
    (["train", "--task", "link", "--dataset", HSBM], "triples instead: --model rgcn"),
    (["train", "--task", "graph", "--mode", "minibatch"], "drop --mode minibatch"),
    (["train", "--model", "rgcn", "--dataset", HSBM, "--nprocs", "2", "--topology",
      "partitioned"], "drop --topology partitioned"),
])
def test_refusals_are_one_line(capsys, argv, words):
    line = _refused(capsys, argv)
    assert line.startswith("sparsegnn train: error:") and words in line
