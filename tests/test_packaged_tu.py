"""Graph sets read by name from the TU folders an installed package ships (GraKeL's MUTAG
and Cuneiform) when no data root holds them; an explicit root stays strict."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data import packaged, paths
from sparsegnn.data.graph_set_io import load_graph_set, read_packaged_tu
from sparsegnn.data.tu import read_tu_folder
from sparsegnn.errors import DataFormatError

pytestmark = pytest.mark.usefixtures("one_thread")

needs_mutag = pytest.mark.skipif(not packaged.packaged_available("MUTAG"),
                                 reason="grakel is not installed (the datasets extra)")


@pytest.fixture
def no_data_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No --data-dir, no $SPARSEGNN_DATA, and a shared/data without the TU sets."""
    monkeypatch.delenv(paths.ENV_VAR, raising=False)
    monkeypatch.setattr(paths, "shared_data", lambda: tmp_path)
    return tmp_path


def _lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.strip()]


@needs_mutag
def test_packaged_mutag_matches_its_files() -> None:
    """The counts of the published MUTAG, each checked against the files themselves."""
    folder = packaged.packaged_dataset("MUTAG")
    s = read_tu_folder(folder)
    labels = _lines(folder / "MUTAG_graph_labels.txt")
    pairs = {tuple(int(v) for v in ln.split(",")) for ln in _lines(folder / "MUTAG_A.txt")}
    assert s.num_graphs == len(labels) == 188
    assert s.num_nodes == len(_lines(folder / "MUTAG_graph_indicator.txt")) == 3371
    assert s.num_edges == len({p for p in pairs if p[0] != p[1]}) == 7442
    assert s.undirected and s.num_classes == 2
    assert torch.bincount(s.y).tolist() == [labels.count("-1"), labels.count("1")] == [63, 125]
    assert s.num_features == 7 and torch.equal(s.x.sum(1), torch.ones(s.num_nodes))


@needs_mutag
def test_packaged_mutag_equals_pyg_tudataset(tmp_path: Path) -> None:
    pytest.importorskip("torch_geometric")
    from torch_geometric.datasets import TUDataset

    raw = tmp_path / "MUTAG" / "raw"
    shutil.copytree(packaged.packaged_dataset("MUTAG"), raw)
    theirs = TUDataset(str(tmp_path), "MUTAG")
    ours = read_tu_folder(raw)
    assert len(theirs) == ours.num_graphs and theirs.num_classes == ours.num_classes
    assert torch.equal(ours.x, theirs._data.x) and torch.equal(ours.y, theirs._data.y)
    assert theirs._data.edge_index.shape[1] == ours.num_edges
    assert torch.equal(ours.node_ptr, theirs.slices["x"])


@needs_mutag
def test_name_falls_back_to_the_packaged_copy_and_says_so(no_data_root: Path) -> None:
    s = load_graph_set("mutag")
    assert s.num_graphs == 188
    assert Path(str(s.meta["folder"])) == packaged.packaged_dataset("MUTAG")
    assert "GraKeL" in str(s.counts()["read_from"])


@needs_mutag
def test_data_root_copy_comes_first(no_data_root: Path) -> None:
    shutil.copytree(packaged.packaged_dataset("MUTAG"), no_data_root / "MUTAG")
    s = load_graph_set("mutag")
    assert s.read_from() == str(no_data_root / "MUTAG") and "origin" not in s.meta


def test_explicit_data_root_stays_strict(tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(DataFormatError, match=f"{tmp_path / 'MUTAG'} does not exist"):
        load_graph_set("mutag", tmp_path)
    monkeypatch.setenv(paths.ENV_VAR, str(tmp_path))
    with pytest.raises(DataFormatError, match=r"MUTAG does not exist.*\$SPARSEGNN_DATA"):
        load_graph_set("mutag")


@needs_mutag
def test_read_packaged_tu_whatever_the_root_holds() -> None:
    s = read_packaged_tu("mutag")
    assert s.num_graphs == 188 and "GraKeL" in str(s.read_from())
    with pytest.raises(DataFormatError, match="those that do: MUTAG, Cuneiform"):
        read_packaged_tu("proteins")


def test_missing_grakel_is_one_line_naming_the_extra(no_data_root: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    monkeypatch.setattr(packaged, "_package_root", lambda package: None)
    with pytest.raises(DataFormatError, match=r"'grakel'.*sparsegnn\[datasets\]") as err:
        load_graph_set("mutag")
    assert "\n" not in str(err.value) and str(no_data_root / "MUTAG") in str(err.value)
    assert main(["train", "--task", "graph", "--dataset", "mutag", "--epochs", "1"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "sparsegnn[datasets]" in lines[0], lines


def test_set_no_package_ships_is_refused_as_before(no_data_root: Path) -> None:
    with pytest.raises(DataFormatError, match="PROTEINS") as err:
        load_graph_set("proteins")
    assert "sparsegnn[datasets]" not in str(err.value)


@needs_mutag
def test_cli_trains_and_describes_packaged_mutag(no_data_root: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--task", "graph", "--dataset", "mutag", "--epochs", "2",
                 "--json"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out.strip().splitlines()[-1])
    assert result["dataset"] == "MUTAG" and result["folds"] == 10
    assert 0.0 <= result["test_accuracy"] <= 1.0 and len(result["fold_test_accuracies"]) == 10
    assert str(packaged.packaged_dataset("MUTAG")) in result["read_from"]
    assert "read from" in captured.err and "GraKeL" in captured.err
    assert main(["data", "info", "mutag"]) == 0
    assert "read from" in capsys.readouterr().out
