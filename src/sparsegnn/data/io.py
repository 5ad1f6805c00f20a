"""sparsegnn's on-disk graph format, and the one entry point to every graph source.

A graph is one ``.npz`` archive of plain arrays, read back with ``allow_pickle=False`` so a
downloaded file can never execute code. Strings (texts, node ids, class names) are stored
as UTF-8 bytes plus offsets rather than fixed-width unicode arrays, which would pad every
abstract to the longest one. Writes go to a temporary file that is renamed into place, so
an interrupted ``save_graph`` never leaves a half-written graph under the final name.
Every load is validated, and each failure names the file.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path
from typing import BinaryIO, TypeVar

import numpy as np
import scipy.sparse as sp
import torch
from numpy.lib.npyio import NpzFile

from sparsegnn.data.citeseer import load_citeseer_text
from sparsegnn.data.dgl import is_dgl_dir, read_dgl_csv
from sparsegnn.data.edgelist import edges_to_graph, read_edge_list
from sparsegnn.data.generators import from_spec, is_spec
from sparsegnn.data.graph import GraphData, check_features, check_labels
from sparsegnn.data.ogb import is_ogb_folder, is_ogb_name, load_ogb, read_ogb_folder
from sparsegnn.data.planetoid import load_cora
from sparsegnn.data.pyg import is_pyg_dir, read_pyg
from sparsegnn.data.write_errors import size_on_disk, user_error
from sparsegnn.errors import DataFormatError

FORMAT_VERSION = 1
_MASKS = ("train_mask", "val_mask", "test_mask")
_STRING_LISTS = ("texts", "node_ids", "class_names")

PathLike = str | os.PathLike[str]

# Every way reading an .npz fails on a damaged or hostile file: a bad zip or deflate
# stream, a bad .npy header, an unsupported compression method, a member flagged as
# encrypted (zipfile's RuntimeError: "password required"), a header that claims an array
# larger than memory. Loaders turn these into one DataFormatError naming the file.
NPZ_ERRORS: tuple[type[BaseException], ...] = (
    OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error,
    RuntimeError, MemoryError, OverflowError,
)
_T = TypeVar("_T")

DATASETS: dict[str, Callable[[PathLike | None], GraphData]] = {
    "cora": load_cora,
    "citeseer": load_citeseer_text,
    "citeseer_text": load_citeseer_text,
}


# ---------------------------------------------------------------------- save / load
def atomic_write(path: PathLike, write: Callable[[BinaryIO], None], *,
                 needed: int | None = None) -> Path:
    """Call ``write`` on a temp file beside ``path``, fsync it, then rename it into place.

    A crash mid-write leaves the previous file intact, never a truncated one; graphs and
    checkpoints both go through here. A full disk is a
    :class:`~sparsegnn.errors.DiskFullError` naming ``path`` (and ``needed`` bytes, when
    the caller knows them), and other errors name ``path``, not the temp file
    (:func:`~sparsegnn.data.write_errors.user_error`).
    """
    path = Path(path)
    tmp_name = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                        dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except Exception as err:
        written = size_on_disk(tmp_name)
        if tmp_name is not None:
            Path(tmp_name).unlink(missing_ok=True)
        new = user_error(err, path, needed=needed, written=written)
        if new is err:
            raise
        raise new from err
    except BaseException:  # Ctrl-C, SystemExit: only the temp file goes
        if tmp_name is not None:
            Path(tmp_name).unlink(missing_ok=True)
        raise
    return path


@contextmanager
def atomic_dir(path: PathLike) -> Iterator[Path]:
    """A temp folder beside ``path`` that replaces ``path`` whole when the block succeeds.

    Multi-file outputs (partition rank files, tracking graphs, annotator files) are written
    into the yielded folder, their manifest last; only then is the folder renamed to
    ``path``. A crash or error inside the block removes the temp folder and leaves any
    previous ``path`` untouched, so readers never see a half-written set of files. A
    previous ``path`` is moved aside first and deleted only after the new one is in place.
    Parent folders created for ``path`` are removed again on failure, so a failed write
    leaves no empty folders behind.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise DataFormatError(f"{path}: exists and is not a directory; choose another output")
    created = _missing_parents(path)
    try:
        with _replaced_whole(path) as tmp:
            yield tmp
    except BaseException:
        remove_empty(created)
        raise


def remove_empty(folders: list[Path]) -> None:
    """Remove folders a failed write created, innermost first, stopping at the first one
    something else has written into since."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            break


def _missing_parents(path: Path) -> list[Path]:
    """The parents of ``path`` that do not exist yet, innermost first."""
    missing = []
    for parent in path.absolute().parents:
        if parent.exists():
            break
        missing.append(parent)
    return missing


@contextmanager
def _replaced_whole(path: Path) -> Iterator[Path]:
    """The temp folder of :func:`atomic_dir`, renamed to ``path`` when the block succeeds."""
    tmp: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        yield tmp
        old = None
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old",
                                        dir=path.parent))
            os.replace(path, old / path.name)
        try:
            os.replace(tmp, path)
        except BaseException:
            if old is not None:  # put the previous output back under its name
                os.replace(old / path.name, path)
                old.rmdir()
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException as err:
        written = size_on_disk(tmp)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        new = user_error(err, path, written=written)
        if new is err:
            raise
        raise new from err


def save_graph(g: GraphData, path: PathLike, *, compress: bool = False) -> Path:
    """Write ``g`` to ``path`` atomically; returns the path written.

    ``compress`` trades write/read speed for size (edge lists shrink about 2x).
    """
    arrays = _to_arrays(g)
    savez = np.savez_compressed if compress else np.savez
    return atomic_write(path, lambda f: savez(f, **arrays),
                        needed=None if compress else npz_bytes(arrays))


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> int:
    """The size of an uncompressed ``.npz`` of ``arrays``: the data, plus a .npy header and
    the zip's two headers per array (a few hundred bytes each, counted generously)."""
    return sum(a.nbytes + 512 + 2 * len(key) for key, a in arrays.items()) + 64


def load_graph(path: PathLike) -> GraphData:
    """Read and validate a graph written by :func:`save_graph`."""
    path = Path(path)
    arrays = _read_npz(path)
    if "edge_index" not in arrays or "num_nodes" not in arrays:
        found = ", ".join(sorted(arrays)) or "nothing"
        raise DataFormatError(
            f"{path}: not a sparsegnn graph (needs edge_index and num_nodes; found {found})"
        )
    return _from_arrays(arrays, path)


def _to_arrays(g: GraphData) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {
        "format_version": np.asarray(FORMAT_VERSION, dtype=np.int64),
        "edge_index": g.edge_index.detach().cpu().numpy().astype(np.int64, copy=False),
        "num_nodes": np.asarray(g.num_nodes, dtype=np.int64),
        # Bytes, not a numpy string: numpy drops a string's trailing NUL characters.
        "name_utf8": np.frombuffer(g.name.encode("utf-8"), dtype=np.uint8),
        "meta": np.frombuffer(json.dumps(g.meta, default=str).encode(), dtype=np.uint8),
    }
    if g.x is not None:
        arrays["x"] = g.x.detach().cpu().numpy()
    if g.y is not None:
        arrays["y"] = g.y.detach().cpu().numpy()
    for key in _MASKS:
        mask = getattr(g, key)
        if mask is not None:
            arrays[key] = mask.detach().cpu().numpy().astype(bool, copy=False)
    for key in _STRING_LISTS:
        strings = getattr(g, key)
        if strings is not None:
            arrays[f"{key}_utf8"], arrays[f"{key}_offsets"] = _pack_strings(strings)
    return arrays


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of an ``.npz``, read eagerly so truncation surfaces here, not later."""
    return _with_npz(path, lambda npz: {key: npz[key] for key in npz.files})


def _with_npz(path: Path, use: Callable[[NpzFile], _T]) -> _T:
    """``use(npz)`` on the open archive, with every way of being unreadable a DataFormatError.

    The file is opened here rather than by np.load, which leaks its handle when the zip
    turns out to be unreadable.
    """
    if not path.is_file():
        raise DataFormatError(f"{path}: no such file")
    try:
        with path.open("rb") as f:
            loaded = np.load(f, allow_pickle=False)
            if not isinstance(loaded, NpzFile):
                raise DataFormatError(f"{path}: holds a single .npy array, not an .npz archive")
            with loaded as npz:
                return use(npz)
    except DataFormatError:
        raise
    except NPZ_ERRORS as err:
        raise DataFormatError(f"{path}: not a readable .npz archive ({err})") from err


def _from_arrays(arrays: Mapping[str, np.ndarray], path: Path) -> GraphData:
    version = _scalar_int(arrays, "format_version", path, default=FORMAT_VERSION)
    if version > FORMAT_VERSION:
        raise DataFormatError(
            f"{path}: format_version {version} is newer than this sparsegnn reads "
            f"({FORMAT_VERSION}); upgrade sparsegnn"
        )
    num_nodes = _scalar_int(arrays, "num_nodes", path)
    edge_index = _check_edge_index(arrays["edge_index"], num_nodes, path)
    g = GraphData(edge_index=torch.from_numpy(edge_index), num_nodes=num_nodes)
    if "name_utf8" in arrays:
        g.name = _unpack_name(arrays["name_utf8"], path)
    elif "name" in arrays:  # files written before names were stored as bytes
        if arrays["name"].shape != () or arrays["name"].dtype.kind != "U":
            raise DataFormatError(f"{path}: name must be a single string")
        g.name = str(arrays["name"])
    if "meta" in arrays:
        g.meta = _unpack_meta(arrays["meta"], path)
    if "x" in arrays:
        x = _check_rows(arrays, "x", num_nodes, path, ndim=2, kind="f")
        check_features(x, path)
        g.x = torch.from_numpy(x)
    if "y" in arrays:
        y = _check_rows(arrays, "y", num_nodes, path, ndim=1, kind="iu").astype(np.int64)
        check_labels(y, path)
        g.y = torch.from_numpy(y)
    for key in _MASKS:
        if key in arrays:
            setattr(g, key, torch.from_numpy(_check_rows(arrays, key, num_nodes, path, 1, "b")))
    for key in _STRING_LISTS:
        if f"{key}_utf8" in arrays:
            strings = _unpack_strings(arrays, key, path)
            if key != "class_names" and len(strings) != num_nodes:
                raise DataFormatError(
                    f"{path}: {len(strings)} {key} for {num_nodes} nodes; need one per node"
                )
            setattr(g, key, strings)
    return g


def _scalar_int(
    arrays: Mapping[str, np.ndarray], key: str, path: Path, default: int | None = None
) -> int:
    if key not in arrays and default is not None:
        return default
    value = arrays[key]
    if value.shape != () or value.dtype.kind not in "iu" or int(value) < 0:
        raise DataFormatError(
            f"{path}: {key} must be a non-negative integer scalar, "
            f"got dtype {value.dtype} shape {value.shape}"
        )
    return int(value)


def _check_edge_index(edge_index: np.ndarray, num_nodes: int, path: Path) -> np.ndarray:
    if edge_index.ndim != 2 or edge_index.shape[0] != 2 or edge_index.dtype.kind not in "iu":
        raise DataFormatError(
            f"{path}: edge_index must be an integer array of shape [2, E], "
            f"got dtype {edge_index.dtype} shape {list(edge_index.shape)}"
        )
    if edge_index.size and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
        raise DataFormatError(
            f"{path}: edge_index ids span [{edge_index.min()}, {edge_index.max()}] "
            f"but num_nodes is {num_nodes}"
        )
    return np.ascontiguousarray(edge_index, dtype=np.int64)


def _check_rows(
    arrays: Mapping[str, np.ndarray], key: str, num_nodes: int, path: Path, ndim: int, kind: str
) -> np.ndarray:
    """``arrays[key]`` with one row per node, of ``ndim`` dims and a dtype kind in ``kind``."""
    value = arrays[key]
    if value.ndim != ndim or value.shape[0] != num_nodes or value.dtype.kind not in kind:
        raise DataFormatError(
            f"{path}: {key} has dtype {value.dtype} shape {list(value.shape)}; expected "
            f"{ndim}-d with {num_nodes} rows (one per node)"
        )
    return value


def _pack_strings(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encoded = [s.encode("utf-8") for s in strings]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets


def _unpack_strings(arrays: Mapping[str, np.ndarray], key: str, path: Path) -> list[str]:
    data, offsets = arrays[f"{key}_utf8"], arrays.get(f"{key}_offsets")
    if (offsets is None or data.dtype != np.uint8 or offsets.ndim != 1 or offsets.size == 0
            or offsets.dtype.kind not in "iu" or offsets[0] != 0 or offsets[-1] != data.size
            or (np.diff(offsets) < 0).any()):
        raise DataFormatError(f"{path}: {key}_utf8/{key}_offsets are inconsistent")
    raw = data.tobytes()
    try:
        return [raw[lo:hi].decode("utf-8") for lo, hi in pairwise(offsets.tolist())]
    except UnicodeDecodeError as err:
        raise DataFormatError(f"{path}: {key} is not valid UTF-8 ({err})") from err


def _unpack_name(data: np.ndarray, path: Path) -> str:
    if data.dtype != np.uint8 or data.ndim != 1:
        raise DataFormatError(f"{path}: name_utf8 must be a 1-D uint8 array")
    try:
        return data.tobytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataFormatError(f"{path}: name is not valid UTF-8 ({err})") from err


def _unpack_meta(data: np.ndarray, path: Path) -> dict[str, object]:
    try:
        meta = json.loads(data.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise DataFormatError(f"{path}: meta is not UTF-8 JSON ({err})") from err
    if not isinstance(meta, dict):
        raise DataFormatError(f"{path}: meta must be a JSON object")
    return meta


# ---------------------------------------------------------------------- other formats
def read_scipy_npz(
    path: PathLike, *, undirected: bool = True
) -> GraphData:
    """A square adjacency matrix saved with ``scipy.sparse.save_npz``; nonzeros are edges."""
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(f"{path}: no such file")
    try:
        with path.open("rb") as f:
            adj = sp.load_npz(f).tocoo()
    except (*NPZ_ERRORS, TypeError, AttributeError) as err:
        raise DataFormatError(f"{path}: not a scipy.sparse .npz matrix ({err})") from err
    if adj.shape[0] != adj.shape[1]:
        raise DataFormatError(f"{path}: adjacency must be square, got shape {adj.shape}")
    return edges_to_graph(adj.row, adj.col, adj.shape[0], undirected, path)


def read_graph(path: PathLike, *, undirected: bool = True) -> GraphData:
    """Any supported graph file: our ``.npz``, a scipy ``.npz``, or a text edge list.

    An ``.npz`` is recognised by its suffix or by its zip signature, whatever its name.
    """
    path = Path(path)
    if path.suffix.lower() != ".npz" and not _is_zip(path):
        return read_edge_list(path, undirected=undirected)
    keys = _with_npz(path, lambda npz: set(npz.files))
    if "edge_index" in keys:
        return load_graph(path)
    if {"indices", "indptr", "format", "shape"} <= keys or {"row", "col", "shape"} <= keys:
        return read_scipy_npz(path, undirected=undirected)
    raise DataFormatError(
        f"{path}: .npz holds neither a sparsegnn graph nor a scipy.sparse matrix "
        f"(arrays: {', '.join(sorted(keys)) or 'none'})"
    )


def _is_zip(path: Path) -> bool:
    """Whether ``path`` starts like a zip archive (an ``.npz`` under any name).

    ``data convert g.txt out.graph`` writes an ``.npz`` without the suffix; dispatching on
    content as well lets every command read that file back instead of parsing it as text.
    """
    try:
        with path.open("rb") as f:
            return f.read(4) in (b"PK\x03\x04", b"PK\x05\x06")
    except OSError:
        return False


def load_any(
    source: PathLike,
    root: PathLike | None = None,
    *,
    seed: int | None = None,
    undirected: bool = True,
    progress: bool = False,
) -> GraphData:
    """A graph from a dataset name, a generator spec or a file, whichever ``source`` is.

    Dataset names (``cora``, ``citeseer``, OGB's ``ogbn-arxiv``...) are read from the data
    root ``root``; generator specs (``rmat:18``) are generated, with ``seed`` overriding
    the spec's; anything else is a path: an OGB dataset folder, a PyG ``.pt`` file or
    dataset folder (``processed/data.pt``), a DGL ``CSVDataset`` folder (``edges.csv``,
    ``nodes.csv``), or a file handled by :func:`read_graph`. One entry point lets every CLI
    command and benchmark accept all of them interchangeably.
    """
    text = os.fspath(source)
    if text.lower() in DATASETS:
        return DATASETS[text.lower()](root)
    if is_ogb_name(text):
        return load_ogb(text, root, undirected=undirected)
    if is_spec(text):
        return from_spec(text, seed=seed, progress=progress)
    path = Path(text)
    if not path.exists():
        raise DataFormatError(
            f"{path}: no such file, and not a dataset name ({', '.join(DATASETS)}, "
            f"ogbn-...) or generator spec (rmat:..., sbm:..., uniform:...)"
        )
    if path.is_dir() and is_ogb_folder(path):
        return read_ogb_folder(path, undirected=undirected)
    if path.suffix == ".pt" or (path.is_dir() and is_pyg_dir(path)):
        return read_pyg(path, undirected=undirected)
    if path.is_dir() and is_dgl_dir(path):
        return read_dgl_csv(path, undirected=undirected)
    if path.is_dir():
        raise DataFormatError(_not_a_graph_folder(path))
    return read_graph(path, undirected=undirected)


def _not_a_graph_folder(path: Path) -> str:
    """Why a folder is read as no graph: a partition folder holds per-rank blocks of one
    (its operator already normalised), not the graph itself."""
    if (path / "manifest.json").is_file():
        return (f"{path}: a partition folder written by `sparsegnn data partition` (per-rank "
                "blocks, not the graph): train on it with `train --dataset`, or convert or "
                "partition the graph it was made from")
    return (f"{path}: a folder of no layout sparsegnn reads (an OGB dataset folder, a PyG "
            "dataset folder with processed/*.pt, a DGL CSVDataset with edges.csv or meta.yaml)")


def convert(
    source: PathLike,
    out: PathLike,
    root: PathLike | None = None,
    *,
    undirected: bool = True,
    compress: bool = False,
) -> GraphData:
    """Read ``source`` (anything :func:`load_any` accepts) and save it to ``out``."""
    g = load_any(source, root, undirected=undirected)
    save_graph(g, out, compress=compress)
    return g
