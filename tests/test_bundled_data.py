"""The datasets shipped inside the package, and how a dataset's folder is chosen.

The bundle must be the shared originals exactly (same arrays after loading), and with no
shared data in reach the demos must still run on it; an explicit root lacking a dataset
is an error, never a silent switch to the bundle.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data import load_citeseer_text, load_cora, paths
from sparsegnn.data.graph import GraphData
from sparsegnn.data.paths import BUNDLED, dataset_dir
from sparsegnn.errors import DataFormatError
from sparsegnn.tracking.events import read_events

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def no_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a clone alone: no shared/data anywhere up the tree, no $SPARSEGNN_DATA."""
    monkeypatch.delenv(paths.ENV_VAR, raising=False)
    monkeypatch.setattr(paths, "shared_data", lambda: None)


def _shared(name: str) -> Path:
    folder = SHARED / name
    if not folder.is_dir():
        pytest.skip(f"{folder} not present")
    return folder


def assert_same_graph(a: GraphData, b: GraphData) -> None:
    for key in ("edge_index", "x", "y", "train_mask", "val_mask", "test_mask"):
        left, right = getattr(a, key), getattr(b, key)
        assert (left is None) == (right is None), key
        if left is not None:
            assert torch.equal(left, right), key
    assert (a.num_nodes, a.name, a.class_names) == (b.num_nodes, b.name, b.class_names)
    assert (a.texts, a.node_ids) == (b.texts, b.node_ids)


def test_bundled_cora_equals_shared() -> None:
    assert_same_graph(load_cora(BUNDLED), load_cora(_shared("cora")))


def test_bundled_citeseer_equals_shared() -> None:
    ours = load_citeseer_text(BUNDLED, featurize=False)
    assert_same_graph(ours, load_citeseer_text(_shared("citeseer_text"), featurize=False))
    assert ours.num_nodes == 3186


def test_bundled_trackml_event_equals_shared() -> None:
    (ours,), (theirs,) = read_events(BUNDLED / "trackml_sample"), read_events(
        _shared("trackml_sample"))
    for key in ("hit_id", "position", "volume", "layer", "module", "particle_id",
                "particle_index", "weight"):
        np.testing.assert_array_equal(getattr(ours, key), getattr(theirs, key), err_msg=key)
    assert ours.name == theirs.name


def test_every_bundled_dataset_carries_licence_and_source() -> None:
    for folder in (BUNDLED / "cora", BUNDLED / "citeseer_text", BUNDLED / "trackml_sample"):
        assert (folder / "SOURCE.txt").is_file()
        assert [p.name for p in folder.glob("LICENSE*")], folder


@pytest.mark.usefixtures("no_shared")
def test_without_shared_data_the_bundle_is_used() -> None:
    assert dataset_dir("cora") == BUNDLED / "cora"
    assert paths.data_root() == BUNDLED
    assert load_cora().meta["source"] == str(BUNDLED / "cora")


def test_shared_data_comes_first_then_the_bundle(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Per dataset: a shared/data lacking the TrackML sample still finds the bundled one."""
    monkeypatch.delenv(paths.ENV_VAR, raising=False)
    (tmp_path / "cora").mkdir()
    monkeypatch.setattr(paths, "shared_data", lambda: tmp_path)
    assert dataset_dir("cora") == tmp_path / "cora"
    assert dataset_dir("trackml_sample") == BUNDLED / "trackml_sample"


@pytest.mark.parametrize("how", ["env", "flag"])
def test_explicit_root_without_the_dataset_is_an_error(
        how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(paths.ENV_VAR, str(tmp_path))
    root = tmp_path if how == "flag" else None
    origin = "given data directory" if how == "flag" else r"\$SPARSEGNN_DATA"
    with pytest.raises(DataFormatError, match=rf"{tmp_path}/cora does not exist.*{origin}"):
        load_cora(root)


@pytest.mark.usefixtures("no_shared")
def test_unknown_dataset_names_where_it_looked() -> None:
    with pytest.raises(DataFormatError, match="'ogbn-nowhere' is neither in the bundled"):
        dataset_dir("ogbn-nowhere")


def test_damaged_bundled_file_is_named(tmp_path: Path) -> None:
    folder = shutil.copytree(BUNDLED / "cora", tmp_path / "cora")
    packed = folder / "ind.cora.graph.xz"
    packed.write_bytes(packed.read_bytes()[:500])
    with pytest.raises(DataFormatError, match=r"ind\.cora\.graph"):
        load_cora(folder)


def _run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.usefixtures("no_shared")
def test_demo_trains_bundled_cora(capsys: pytest.CaptureFixture[str]) -> None:
    result = _run_json(capsys, "demo", "--device", "cpu")
    assert result["dataset"] == "cora"
    assert result["test_accuracy"] >= 0.80


@pytest.mark.usefixtures("no_shared")
def test_track_evaluate_defaults_to_the_bundled_event(
        capsys: pytest.CaptureFixture[str]) -> None:
    result = _run_json(capsys, "track", "evaluate", "--oracle")
    assert (result["events"], result["num_reconstructable"]) == (1, 54)
    assert result["tracking_efficiency"] == 1.0
