"""``sparsegnn runs compare``: runs of one --logdir side by side (figures equal to each
run's run.json, only the settings that differ, one PNG of the curves); refusals in one
line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sparsegnn.cli.main import main

pytestmark = pytest.mark.usefixtures("one_thread")
GRAPH = "sbm:nodes=200,blocks=2,degree=6"


def _last_json(capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_two_runs_side_by_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tensorboard")
    image = pytest.importorskip("PIL.Image", reason="Pillow (with matplotlib) is missing")
    for lr in ("0.01", "0.05"):
        assert main(["train", "--dataset", GRAPH, "--epochs", "3", "--lr", lr, "--logdir",
                     str(tmp_path / "runs")]) == 0
    saved = [json.loads((tmp_path / "runs" / f"version_{i}" / "run.json").read_text())
             for i in (0, 1)]
    capsys.readouterr()
    plot = tmp_path / "curves.png"
    assert main(["runs", "compare", str(tmp_path / "runs"), "--plot", str(plot),
                 "--json"]) == 0
    out = _last_json(capsys)
    assert out["runs"] == ["version_0", "version_1"]
    assert out["figures"]["test_accuracy"] == [r["test_accuracy"] for r in saved]
    assert out["settings_that_differ"] == {"lr": [0.01, 0.05]}
    with image.open(plot) as png:
        assert png.size[0] > 500
    # one run's folder, and a run of each folder named: the same runs, by their paths
    assert main(["runs", "compare", str(tmp_path / "runs" / "version_1"),
                 str(tmp_path / "runs" / "version_0")]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].split() == ["version_1", "version_0"]
    # byte figures in human units (peak memory: KiB to GiB, by what this process ran)
    assert "  lr " in text and re.search(r"peak_memory_bytes +[0-9.,]+ [KMG]iB", text), text


def test_folders_without_runs_are_refused(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "compare", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds no run (run.json)" in err[0]
    (tmp_path / "run.json").write_text("[1, 2")
    assert main(["runs", "compare", str(tmp_path)]) == 2
    assert "run.json: not JSON" in capsys.readouterr().err
