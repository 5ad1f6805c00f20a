"""The model the package ships: packed with its provenance, unpacked once into the user
cache, checked against its digest, and refused clearly when missing or damaged."""

from __future__ import annotations

import fnmatch
import lzma
import tomllib
from pathlib import Path

import pytest

from sparsegnn.data.paths import CACHE_ENV
from sparsegnn.errors import DataFormatError
from sparsegnn.tracking import shipped
from sparsegnn.tracking.infer import load_track_model, save_model
from sparsegnn.tracking.model import INConfig, InteractionNetwork
from sparsegnn.tracking.train import TrainReport

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def packed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A toy model shipped into its own folder, with the cache in ``tmp_path/cache``."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    model = tmp_path / "toy.pt"
    save_model(model, InteractionNetwork(INConfig(hidden=4, iterations=1)), TrainReport(1.0))
    record = shipped.describe(model, "toy", "abc", {"train": [{"seed": 1}]}, {})
    folder = tmp_path / "trained"
    folder.mkdir()
    shipped.ship(model, record, folder, "toy")
    return model, folder


def test_a_shipped_model_unpacks_once_into_the_cache(packed: tuple[Path, Path],
                                                     tmp_path: Path) -> None:
    model, folder = packed
    record = shipped.provenance(folder, "toy")
    assert record["size_bytes"] == model.stat().st_size
    assert 0 < record["packed_bytes"] == (folder / "toy.pt.xz").stat().st_size
    first = shipped.shipped_model(folder, "toy")
    assert first.parent == tmp_path / "cache" / "trained"
    assert first.read_bytes() == model.read_bytes()
    stamp = first.stat().st_mtime_ns
    assert shipped.shipped_model(folder, "toy") == first and first.stat().st_mtime_ns == stamp
    assert load_track_model(first).model.cfg.hidden == 4


def test_a_damaged_cached_copy_is_unpacked_again(packed: tuple[Path, Path]) -> None:
    model, folder = packed
    first = shipped.shipped_model(folder, "toy")
    first.write_bytes(b"not a model")
    assert shipped.shipped_model(folder, "toy").read_bytes() == model.read_bytes()


def test_a_damaged_package_file_is_refused_and_leaves_nothing(packed: tuple[Path, Path],
                                                              tmp_path: Path) -> None:
    _, folder = packed
    xz = folder / "toy.pt.xz"
    xz.write_bytes(xz.read_bytes()[: xz.stat().st_size // 2])
    with pytest.raises(DataFormatError, match="is damaged"):
        shipped.shipped_model(folder, "toy")
    with lzma.open(xz, "wb") as out:  # whole, but another file's bytes
        out.write(b"another file")
    with pytest.raises(DataFormatError, match="digest its provenance records"):
        shipped.shipped_model(folder, "toy")
    assert not any((tmp_path / "cache" / "trained").iterdir())


def test_missing_files_and_a_foreign_record_are_refused(packed: tuple[Path, Path],
                                                        tmp_path: Path) -> None:
    model, folder = packed
    with pytest.raises(DataFormatError, match="pass --model FILE"):
        shipped.shipped_model(folder, "absent")
    (folder / "toy.json").write_text("[1]")
    with pytest.raises(DataFormatError, match="not a provenance record"):
        shipped.provenance(folder, "toy")
    other = shipped.describe(model, "toy", "abc", {}, {})
    model.write_bytes(model.read_bytes() + b"\0")
    with pytest.raises(DataFormatError, match="does not describe"):
        shipped.ship(model, other, folder, "toy")


def test_the_package_ships_a_model_with_its_provenance() -> None:
    record = shipped.provenance()
    for key in ("command", "commit", "data", "results", "size_bytes", "packed_bytes"):
        assert record[key], key
    seeds = [s["seed"] for part in ("train", "test", "validation", "map")
             for s in record["data"][part]]
    assert len(seeds) == len(set(seeds))  # no event set reused another's events
    found = load_track_model(shipped.shipped_model())
    assert found.module_map is not None and found.module_map.windows is not None
    assert found.edge_filter is not None and found.settings is not None
    assert shipped.shipped_model().stat().st_size == record["size_bytes"]


def test_a_wheel_carries_the_shipped_model() -> None:
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = table["tool"]["setuptools"]["package-data"]["sparsegnn"]
    for suffix in (".pt.xz", ".json"):
        path = (shipped.TRAINED / f"{shipped.SHIPPED_NAME}{suffix}").relative_to(
            ROOT / "src" / "sparsegnn").as_posix()
        assert any(fnmatch.fnmatch(path, p) for p in patterns), path
