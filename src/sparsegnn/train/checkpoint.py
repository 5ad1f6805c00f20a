"""Checkpoints that resume bit-identically and that cannot run code or resume the wrong run.

A checkpoint holds the model, the optimiser, the epoch, the early-stopping state and
every RNG stream the loop draws from (torch CPU and CUDA, numpy, Python), all as
tensors and plain Python data, so it loads with ``torch.load(weights_only=True)``: a
crafted file cannot run code when it is resumed. Around that state the file carries

* a format name and version, so a file of another kind or an older layout is named as such;
* a fingerprint of what must match to continue (model kind and sizes, dtype, a hash of the
  graph, world size and algorithm), so resuming another run is one clear line naming the
  field and both values, not a shape error deep in ``load_state_dict`` or, worse, a run
  that silently trains a float64 checkpoint as float32;
* a sha256 of the state's content, so flipped bytes are refused before anything resumes.

It is written to a temporary file in the same directory and moved into place with
``os.replace``, so a crash mid-write leaves the previous checkpoint intact; the temporary
file of a run killed while saving is removed by :func:`remove_stale_temps` next time.
"""

from __future__ import annotations

import glob
import hashlib
import os
import random
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sparsegnn.data.io import atomic_write
from sparsegnn.errors import DataFormatError, InvalidValueError

FORMAT = "sparsegnn-checkpoint"
FORMAT_VERSION = 1

Fingerprint = Mapping[str, str | int | float | bool | None]


def rng_state() -> dict[str, Any]:
    """Every RNG stream training may draw from, as tensors and numbers (no numpy objects)."""
    _, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached_gaussian)},
        "python": {"version": int(version), "internal": torch.tensor(internal, dtype=torch.int64),
                   "gauss_next": gauss_next},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    torch.set_rng_state(state["torch"])
    np_state = state["numpy"]
    np.random.set_state(("MT19937", np_state["keys"].numpy().astype(np.uint32), np_state["pos"],
                         np_state["has_gauss"], np_state["cached_gaussian"]))
    py_state = state["python"]
    random.setstate((py_state["version"], tuple(py_state["internal"].tolist()),
                     py_state["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    """Seed torch, numpy and Python so a run is reproducible."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def content_hash(obj: Any) -> str:
    """sha256 of nested dicts, lists and tuples of tensors and plain values.

    Tensors contribute their dtype, shape and bytes; other leaves their ``repr`` (exact for
    ints, floats and strings). Containers keep their order, which pickling preserves.
    """
    digest = hashlib.sha256()
    _feed(digest, obj)
    return digest.hexdigest()


def _feed(digest: Any, obj: Any) -> None:
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        digest.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy())
    elif isinstance(obj, Mapping):
        digest.update(b"{")
        for key, value in obj.items():
            _feed(digest, key)
            _feed(digest, value)
        digest.update(b"}")
    elif isinstance(obj, list | tuple):
        digest.update(b"[")
        for value in obj:
            _feed(digest, value)
        digest.update(b"]")
    else:
        digest.update(f"{type(obj).__name__}:{obj!r};".encode())


def graph_hash(num_nodes: int, edge_index: torch.Tensor, feature_shape: tuple[int, ...]) -> str:
    """A short hash of a graph's structure and feature shape, for checkpoint fingerprints.

    One pass over the edge list: cheap next to a single epoch, and it tells Cora from
    CiteSeer or from a regenerated random graph, which sizes alone may not.
    """
    return content_hash([int(num_nodes), edge_index.to(torch.int64), list(feature_shape)])[:16]


def check_checkpoint_path(path: str | Path) -> Path:
    """Refuse, before any training, a ``path`` that cannot hold a checkpoint file: a
    directory or an unwritable place is one clear line now rather than a failure after
    the first epochs."""
    path = Path(path)
    if path.is_dir():
        raise InvalidValueError(f"checkpoint {path} is a directory; name a file inside it")
    parent = path.absolute().parent
    if parent.exists() and not parent.is_dir():
        raise InvalidValueError(f"checkpoint {path}: {parent} is not a directory")
    if parent.is_dir() and not os.access(parent, os.W_OK | os.X_OK):
        raise InvalidValueError(f"checkpoint {path}: cannot write in {parent}")
    return path


def remove_stale_temps(path: str | Path) -> None:
    """Remove the ``.{name}.*.tmp`` siblings of ``path`` that
    :func:`~sparsegnn.data.io.atomic_write` leaves when a process is killed mid-save
    (nothing else writes that pattern); only the run holding the path's lock may."""
    path = Path(path)
    if path.parent.is_dir():
        for stale in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
            stale.unlink(missing_ok=True)


def rank_checkpoint(path: str | Path | None, rank: int, world_size: int,
                    tag: str = "") -> Path | None:
    """The file rank ``rank`` of ``world_size`` keeps its checkpoint in.

    One process uses ``path`` itself; ranks each write their own file
    (``run.rank3.pt``, or ``run.TAG.rank3.pt``), because every rank must resume its own
    RNG streams (dropout, sampling) to continue bit-identically.
    """
    if path is None:
        return None
    path = Path(path)
    if world_size == 1 and not tag:
        return path
    middle = f".{tag}" if tag else ""
    return path.with_name(f"{path.stem}{middle}.rank{rank}{path.suffix}")


def save_checkpoint(path: str | Path, state: dict[str, Any],
                    fingerprint: Fingerprint | None = None) -> None:
    """Write ``state`` with its format, fingerprint and checksum to ``path`` atomically."""
    payload = {"format": FORMAT, "version": FORMAT_VERSION,
               "fingerprint": dict(fingerprint or {}), "checksum": content_hash(state),
               "state": state}
    atomic_write(path, lambda fh: torch.save(payload, fh))


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint file as read: its fingerprint and its (checksum-verified) state."""

    path: Path
    fingerprint: dict[str, Any]
    state: dict[str, Any]

    def require(self, expected: Fingerprint) -> dict[str, Any]:
        """The state, if every field of ``expected`` matches; else one line naming them."""
        require_fingerprint(self.path, self.fingerprint, expected)
        return self.state


def require_fingerprint(path: Path, found: Mapping[str, Any], expected: Fingerprint) -> None:
    """Refuse, in one line naming each differing field and both values, a checkpoint (a
    file, or a distributed checkpoint's manifest) whose fingerprint differs from this run's.

    Only the fields of ``expected`` are compared: a field this run does not ask about (the
    world size, when resuming onto another grid is allowed) never refuses a checkpoint.
    """
    wrong = [f"{key} {found.get(key, 'unset')} in the file, {value} in this run"
             for key, value in expected.items() if found.get(key) != value]
    if wrong:
        raise InvalidValueError(
            f"checkpoint {path} does not match this run: {'; '.join(wrong)} "
            "(resume with the settings it was written with, or start without --resume)"
        )


def read_checkpoint(path: str | Path, what: str = "checkpoint") -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint`, refusing anything else.

    Only tensors and plain data are unpickled (``weights_only=True``); a file that needs
    any other object is refused without running it. A file that is not the zip archive
    ``torch.save`` writes (truncated, or garbage) is refused before torch reads it at all:
    torch would take it for a legacy pickle and blame an "unsupported operand", which
    reads like a crafted file rather than a broken one. ``what`` names the file in
    errors as its user knows it (``model file`` for a finished model).
    """
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(f"{what} {path} does not exist")
    if not zipfile.is_zipfile(path):
        raise DataFormatError(f"{what} {path}: corrupt or truncated (not the zip archive "
                              "torch.save writes); nothing was loaded")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several unrelated types for corrupt files
        raise DataFormatError(f"{what} {path}: {_load_failure(err)}") from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise DataFormatError(f"{path} is not a sparsegnn {what} (no '{FORMAT}' header)")
    if payload.get("version") != FORMAT_VERSION:
        redo = "start without --resume" if what == "checkpoint" else "write it again"
        raise DataFormatError(
            f"{what} {path} has format version {payload.get('version')}; this sparsegnn "
            f"reads version {FORMAT_VERSION} ({redo})"
        )
    state, fingerprint = payload.get("state"), payload.get("fingerprint")
    if not isinstance(state, dict) or not isinstance(fingerprint, dict):
        raise DataFormatError(f"{what} {path} is corrupt (no state or fingerprint)")
    found = content_hash(state)
    if found != payload.get("checksum"):
        raise DataFormatError(
            f"{what} {path} is corrupt: its content hashes to {found[:16]}, the file "
            f"recorded {str(payload.get('checksum'))[:16]}; nothing was loaded"
        )
    return Checkpoint(path, fingerprint, state)


def _load_failure(err: Exception) -> str:
    """torch's many-line reasons, cut to what a user needs to know."""
    unsafe = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(err))
    if unsafe or "Weights only load failed" in str(err):
        what = unsafe.group(1) if unsafe else "objects other than tensors and plain data"
        return (f"refused: it needs {what}, which could run code when loaded; only "
                "checkpoints written by sparsegnn load")
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return f"corrupt or truncated ({first})"


def load_checkpoint(path: str | Path, expected: Fingerprint | None = None) -> dict[str, Any]:
    """The state of a checkpoint whose fingerprint matches ``expected`` (every field given)."""
    return read_checkpoint(path).require(expected or {})
