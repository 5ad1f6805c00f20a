"""``sparsegnn data fetch NAME``: public datasets downloaded and checked against a SHA-256.

Every file has a pinned URL (a commit, not a branch) and its SHA-256, so what lands on
disk is byte for byte what the loaders were tested on. A dataset's folder appears whole
or not at all (written beside and renamed into place), a checksum mismatch deletes the
download, and without a network the error lists each URL, its checksum and the path to
put it at, so the files can be carried over by hand.
"""

from __future__ import annotations

import hashlib
import shutil
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from sparsegnn.data.io import atomic_dir
from sparsegnn.errors import DataFormatError, SparseGNNError

_TIMEOUT_S = 60
_CHUNK = 1 << 20
_PLANETOID = ("https://raw.githubusercontent.com/kimiyoung/planetoid/"
              "af6abf468a772cc055bec88c52e4d6f51b7c37e3/data")
_TAPE = ("https://raw.githubusercontent.com/XiaoxinHe/TAPE/"
         "331e61664be928847af439b27de661eb8f182205/dataset/CiteSeer-Orig")
_TRACKML = ("https://raw.githubusercontent.com/gnn-tracking/gnn_tracking/"
            "06d9a41853798c0be192acf116b4449f013adfc3/tests/test_data/trackml")


class FetchError(SparseGNNError):
    """A dataset could not be downloaded; the message says how to place it by hand."""


@dataclass(frozen=True)
class Remote:
    """One file to download: where from, its SHA-256, and its name in the dataset folder.

    ``unpack`` names the folder inside a zip archive whose contents become the dataset
    folder (OGB's ``arxiv.zip`` holds ``arxiv/raw``, ``arxiv/split``...)."""

    url: str
    sha256: str
    name: str
    unpack: str | None = None


@dataclass(frozen=True)
class Dataset:
    folder: str  # under the data root
    files: tuple[Remote, ...]
    # Other tools whose download of this dataset is read as it is (no fetch needed).
    read_as_is: str | None = None


def _files(base: str, names_and_sums: dict[str, str]) -> tuple[Remote, ...]:
    return tuple(Remote(f"{base}/{name}", digest, name) for name, digest in names_and_sums.items())


CATALOGUE: dict[str, Dataset] = {
    "cora": Dataset("cora", _files(_PLANETOID, {
        "ind.cora.x": "23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab",
        "ind.cora.y": "94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1",
        "ind.cora.tx": "b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a",
        "ind.cora.ty": "41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad",
        "ind.cora.allx": "9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543",
        "ind.cora.ally": "2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71",
        "ind.cora.graph": "58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d",
        "ind.cora.test.index":
            "297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875",
    })),
    "citeseer_text": Dataset("citeseer_text", _files(_TAPE, {
        "citeseer_texts.txt": "9070723640766aaa09875ce72397a4325feecac968ed9fb44152820b651f1f17",
        "citeseer.cites": "cd9730630eaaa745058c2cd2cce6b9afb79ca71278a479aebec55f4cf5eb7f30",
    })),
    "trackml_sample": Dataset("trackml_sample", _files(_TRACKML, {
        "event000000001-hits.csv.gz":
            "6711173a9d7aecbd5a171aa5f08a62700b7e825e2b85eb00082d408d16b0a522",
        "event000000001-truth.csv.gz":
            "8ad8d6daaabdb9cb8fc67241ab4e4382b0843e4c8f1478e862535cc0098a14e2",
        "event000000001-particles.csv.gz":
            "5dd3b945a62fcc1b9ff9ce65a7e365b19dd970c308121bb5e4c14727dcf3319c",
    })),
    "ogbn-arxiv": Dataset("ogbn_arxiv", (Remote(
        "https://snap.stanford.edu/ogb/data/nodeproppred/arxiv.zip",
        "49f85c801589ecdcc52cfaca99693aaea7b8af16a9ac3f41dd85a5f3193fe276",
        "arxiv.zip", unpack="arxiv"),),
        read_as_is="ogb's NodePropPredDataset or PyG's PygNodePropPredDataset"),
}
CATALOGUE["citeseer"] = CATALOGUE["citeseer_text"]

Opener = Callable[[str], BinaryIO]


def _open_url(url: str) -> BinaryIO:
    return urllib.request.urlopen(url, timeout=_TIMEOUT_S)


def fetch(name: str, root: Path, opener: Opener | None = None) -> Path:
    """Download dataset ``name`` into ``root/<folder>`` and return that folder.

    ``opener`` (default: ``urllib``) returns a URL's content as a binary stream."""
    if name not in CATALOGUE:
        raise FetchError(f"no dataset {name!r} to fetch; known: {', '.join(sorted(CATALOGUE))}")
    return fetch_dataset(CATALOGUE[name], root, opener)


def fetch_dataset(dataset: Dataset, root: Path, opener: Opener | None = None) -> Path:
    """Every file of ``dataset``, checked, in a folder that appears only when complete."""
    opener = opener or _open_url
    dest = root / dataset.folder
    with atomic_dir(dest) as tmp:
        for remote in dataset.files:
            target = tmp / remote.name
            try:
                _download(remote.url, target, opener)
            except (urllib.error.URLError, OSError, TimeoutError) as err:
                raise FetchError(_by_hand(dataset, dest, err)) from err
            verify_sha256(target, remote.sha256, remote.url)
            if remote.unpack is not None:
                _unpack(target, remote.unpack, tmp)
    return dest


def verify_sha256(path: Path, expected: str, origin: str | None = None) -> None:
    """Refuse ``path`` (and delete it) unless its SHA-256 is ``expected``."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    if digest.hexdigest() != expected:
        path.unlink()
        raise DataFormatError(f"{origin or path}: SHA-256 {digest.hexdigest()}, expected "
                              f"{expected}; the file was deleted")


def _download(url: str, target: Path, opener: Opener) -> None:
    with opener(url) as response, target.open("wb") as out:
        shutil.copyfileobj(response, out, _CHUNK)


def _unpack(archive: Path, inner: str, folder: Path) -> None:
    """Move the archive's ``inner/`` folder's contents into ``folder``; drop the archive."""
    staging = folder / f".{archive.name}.unpacked"
    try:
        with zipfile.ZipFile(archive) as z:
            z.extractall(staging)
    except (zipfile.BadZipFile, OSError) as err:
        raise DataFormatError(f"{archive.name}: not a readable zip archive ({err})") from err
    source = staging / inner
    if not source.is_dir():
        raise DataFormatError(f"{archive.name}: has no folder {inner}/")
    for item in source.iterdir():
        item.rename(folder / item.name)
    shutil.rmtree(staging)
    archive.unlink()


def _by_hand(dataset: Dataset, dest: Path, err: BaseException) -> str:
    lines = [f"could not download ({err}); to install it by hand, fetch each file, check "
             "its SHA-256 (sha256sum FILE) and place it as shown:"]
    for remote in dataset.files:
        where = (f"unzip it and move the contents of its {remote.unpack}/ folder into {dest}/"
                 if remote.unpack else f"put it at {dest / remote.name}")
        lines.append(f"  {remote.url}\n    sha256 {remote.sha256}\n    {where}")
    if dataset.read_as_is is not None:
        lines.append(f"Already downloaded with {dataset.read_as_is}(root=R)? That folder "
                     f"works as it is, nothing to fetch: --data-dir R (the folder holding "
                     f"{dataset.folder}/), or --dataset R/{dataset.folder}")
    return "\n".join(lines)
