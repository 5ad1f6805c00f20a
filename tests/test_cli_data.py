"""`sparsegnn data info|convert|generate`, driven through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparsegnn.cli.main import main
from sparsegnn.data import load_graph


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    """Run the CLI with --json; the result is the last stdout line."""
    assert main([*argv, "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    return json.loads(lines[-1])


def test_info_cora(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "data", "info", "cora")
    assert (result["num_nodes"], result["num_edges"]) == (2708, 10556)
    assert (result["num_features"], result["num_classes"]) == (1433, 7)
    assert (result["num_train"], result["num_val"], result["num_test"]) == (140, 500, 1000)
    assert result["degree_max"] == 168 and result["num_isolated"] == 0


def test_info_with_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "info", "cora", "--data-dir", str(tmp_path / "none")]) == 2
    assert "none" in capsys.readouterr().err


def test_generate_then_info(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sbm.npz"
    made = run_json(capsys, "data", "generate", "sbm:nodes=600,blocks=3,degree=6",
                    "--out", str(out), "--seed", "4")
    assert made["out"] == str(out) and made["num_nodes"] == 600 and made["num_classes"] == 3
    assert "seed=4" in made["name"]
    info = run_json(capsys, "data", "info", str(out))
    assert info["num_edges"] == made["num_edges"] == load_graph(out).num_edges
    assert info["num_train"] == 360


def test_info_on_spec(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "data", "info", "rmat:7", "--seed", "2")
    assert result["num_nodes"] == 128 and result["name"].endswith("seed=2")


def test_convert_edge_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "edges.txt"
    src.write_text("# toy\n0 1\n1 2\n")
    out = tmp_path / "toy.npz"
    result = run_json(capsys, "data", "convert", str(src), str(out), "--directed")
    assert (result["num_nodes"], result["num_edges"]) == (3, 2)
    assert load_graph(out).edge_index.tolist() == [[0, 1], [1, 2]]


def test_errors_exit_2_with_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "info", str(tmp_path / "missing.npz")]) == 2
    assert "missing.npz" in capsys.readouterr().err
    assert main(["data", "generate", "rmat:bogus=1", "--out", str(tmp_path / "x.npz")]) == 2
    assert "bogus" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["data"])
