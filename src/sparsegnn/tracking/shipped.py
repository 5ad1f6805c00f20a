"""The trained tracking model that ships in the package, and where it came from.

A physicist's first ``track reconstruct`` should not need hours of training first, so
the package carries one model file (Interaction Network, doublet filter, module map and
tuned track building, written by ``benchmarks/tracking.py --save-model``) trained for
targets above 0.5 GeV, which also serves the pT > 1 GeV table. It ships xz-packed (its
module map is most of its bytes) beside a JSON record of its provenance: the command,
the commit, the data seeds, its size and digest and what it measured. On first use it is
unpacked into the user cache folder, checked against that digest, and
``track reconstruct`` and ``track evaluate`` use it when no ``--model`` is given.
"""

from __future__ import annotations

import hashlib
import json
import lzma
from pathlib import Path
from typing import Any, BinaryIO

from sparsegnn.data.io import atomic_write
from sparsegnn.data.paths import user_cache_dir
from sparsegnn.errors import DataFormatError

TRAINED = Path(__file__).resolve().parent / "trained"
SHIPPED_NAME = "exatrkx_pt05"
_CHUNK = 1 << 20


def shipped_model(folder: Path = TRAINED, name: str = SHIPPED_NAME) -> Path:
    """The package's model file, unpacked into the user cache on first use (and checked
    against its recorded digest every time: a damaged copy is unpacked again)."""
    packed = folder / f"{name}.pt.xz"
    if not packed.is_file():
        raise DataFormatError(f"the package's trained model file {packed} is missing (an "
                              "install without the package data?); pass --model FILE")
    digest = provenance(folder, name)["sha256"]
    target = user_cache_dir() / "trained" / f"{name}-{digest[:16]}.pt"
    if target.is_file() and _sha256(target) == digest:
        return target
    def write(out: BinaryIO) -> None:  # checked before it is renamed into place
        if _unpack(packed, out) != digest:
            raise DataFormatError(f"the package's model file {packed} is damaged: it "
                                  "does not unpack to the digest its provenance records")

    return atomic_write(target, write)


def provenance(folder: Path = TRAINED, name: str = SHIPPED_NAME) -> dict[str, Any]:
    """How the shipped model was made: command, commit, data seeds, size and results."""
    path = folder / f"{name}.json"
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DataFormatError(f"cannot read the shipped model's provenance {path}: {err}"
                              ) from err
    if not isinstance(found, dict) or not isinstance(found.get("sha256"), str):
        raise DataFormatError(f"{path} is not a provenance record (no sha256)")
    return found


def describe(model: Path, command: str, commit: str, data: dict[str, Any],
             results: dict[str, Any]) -> dict[str, Any]:
    """The provenance record of a model file: what made it (``command`` at ``commit``
    on the events ``data`` names, with their seeds), its size and digest (so a record
    cannot describe another file), and what it measured (``results``)."""
    return {"model_file": model.name, "size_bytes": model.stat().st_size,
            "sha256": _sha256(model), "command": command, "commit": commit, "data": data,
            "results": results}


def write_provenance(model: Path, record: dict[str, Any]) -> Path:
    """``record`` as JSON beside ``model`` (``NAME.json`` for ``NAME.pt``)."""
    path = model.with_suffix(".json")
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def ship(model: Path, record: dict[str, Any], folder: Path = TRAINED,
         name: str = SHIPPED_NAME) -> Path:
    """Pack ``model`` (described by ``record``, from :func:`describe`) into ``folder`` as
    the shipped model: how a maintainer replaces it (docs/tracking.md)."""
    if record.get("sha256") != _sha256(model):
        raise DataFormatError(f"the provenance record does not describe {model}")
    packed = folder / f"{name}.pt.xz"
    with lzma.open(packed, "wb", preset=9 | lzma.PRESET_EXTREME) as out, model.open("rb") as src:
        while block := src.read(_CHUNK):
            out.write(block)
    record = {**record, "packed_bytes": packed.stat().st_size}
    write_provenance(folder / f"{name}.pt", record)
    return packed


def _unpack(packed: Path, out: BinaryIO) -> str:
    """Decompress ``packed`` into ``out``; the SHA-256 of what was written."""
    digest = hashlib.sha256()
    try:
        with lzma.open(packed, "rb") as src:
            while block := src.read(_CHUNK):
                out.write(block)
                digest.update(block)
    except (lzma.LZMAError, EOFError) as err:
        raise DataFormatError(f"the package's model file {packed} is damaged ({err})") from err
    return digest.hexdigest()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()
