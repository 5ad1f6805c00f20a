"""``data fetch``: checksums, whole-folder writes and the offline instructions, no network.

Downloads are replaced by an opener reading local files (or failing like a machine
without a network); nothing here reaches the internet.
"""

from __future__ import annotations

import hashlib
import io
import urllib.error
import zipfile
from pathlib import Path
from typing import BinaryIO

import pytest

from sparsegnn.cli.main import main
from sparsegnn.data import fetch as fetch_mod
from sparsegnn.data.fetch import CATALOGUE, Dataset, FetchError, Remote, fetch_dataset
from sparsegnn.data.paths import BUNDLED, read_data_bytes
from sparsegnn.errors import DataFormatError


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _local(files: dict[str, bytes]) -> fetch_mod.Opener:
    """An opener serving ``files`` by URL, as urlopen would serve the real ones."""
    def opener(url: str) -> BinaryIO:
        return io.BytesIO(files[url])
    return opener


def _offline(url: str) -> BinaryIO:
    raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")


def test_checked_files_land_in_the_folder(tmp_path: Path) -> None:
    files = {"https://example.org/a.txt": b"alpha", "https://example.org/b.txt": b"beta"}
    dataset = Dataset("two", tuple(Remote(url, _sha(data), url.rsplit("/", 1)[1])
                                   for url, data in files.items()))
    folder = fetch_dataset(dataset, tmp_path, _local(files))
    assert folder == tmp_path / "two"
    assert [(folder / n).read_bytes() for n in ("a.txt", "b.txt")] == [b"alpha", b"beta"]


def test_a_wrong_checksum_leaves_nothing(tmp_path: Path) -> None:
    files = {"https://example.org/a.txt": b"alpha", "https://example.org/b.txt": b"tampered"}
    dataset = Dataset("two", (Remote("https://example.org/a.txt", _sha(b"alpha"), "a.txt"),
                              Remote("https://example.org/b.txt", _sha(b"beta"), "b.txt")))
    with pytest.raises(DataFormatError, match=rf"b\.txt: SHA-256 {_sha(b'tampered')}, expected"):
        fetch_dataset(dataset, tmp_path, _local(files))
    assert list(tmp_path.iterdir()) == []  # neither the folder nor a temporary one


def test_offline_says_where_each_file_goes(tmp_path: Path) -> None:
    with pytest.raises(FetchError) as caught:
        fetch_mod.fetch("cora", tmp_path, _offline)
    text = str(caught.value)
    assert "name resolution" in text
    for remote in CATALOGUE["cora"].files:
        assert remote.url in text and remote.sha256 in text
        assert str(tmp_path / "cora" / remote.name) in text
    assert not (tmp_path / "cora").exists()


def test_catalogue_checksums_match_the_bundled_copies(tmp_path: Path) -> None:
    """The pinned SHA-256s are those of the files the loaders are tested on."""
    for name in ("cora", "citeseer_text", "trackml_sample"):
        for remote in CATALOGUE[name].files:
            data = read_data_bytes(BUNDLED / CATALOGUE[name].folder / remote.name)
            assert _sha(data) == remote.sha256, remote.name


def test_zip_archives_are_unpacked_like_ogb(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("arxiv/raw/edge.csv.gz", b"x")
        z.writestr("arxiv/split/time/train.csv.gz", b"y")
    url = "https://example.org/arxiv.zip"
    dataset = Dataset("ogbn_arxiv", (Remote(url, _sha(buffer.getvalue()), "arxiv.zip",
                                            unpack="arxiv"),))
    folder = fetch_dataset(dataset, tmp_path, _local({url: buffer.getvalue()}))
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == [
        "raw/edge.csv.gz", "split/time/train.csv.gz"]


def test_cli_offline_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(fetch_mod, "_open_url", _offline)
    assert main(["data", "fetch", "ogbn-arxiv", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "\n  https://snap.stanford.edu/ogb/data/nodeproppred/arxiv.zip\n" in err
    assert f"move the contents of its arxiv/ folder into {tmp_path / 'ogbn_arxiv'}" in err
    assert "Already downloaded with ogb's NodePropPredDataset or PyG's " \
           "PygNodePropPredDataset(root=R)? That folder works as it is" in err
    assert "--dataset R/ogbn_arxiv" in err


def test_unknown_name_lists_the_catalogue(tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="known: citeseer, citeseer_text, cora, ogbn-arxiv"):
        fetch_mod.fetch("pubmed", tmp_path, _offline)
