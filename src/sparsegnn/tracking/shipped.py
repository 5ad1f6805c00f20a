"""The trained tracking model that ships in the package, and where it came from.

A physicist's first ``track reconstruct`` should not need hours of training first, so
the package carries one model file (Interaction Network, doublet filter, module map and
tuned track building, written by ``benchmarks/tracking.py --save-model``) trained for
targets above 0.5 GeV, which also serves the pT > 1 GeV table. Beside it a JSON file
states its provenance: the command, the commit, the data seeds, its size and what it
measured. ``track reconstruct`` and ``track evaluate`` use it when no ``--model`` is given.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from sparsegnn.errors import DataFormatError

TRAINED = Path(__file__).resolve().parent / "trained"
SHIPPED_NAME = "exatrkx_pt05"


def shipped_model() -> Path:
    """The package's model file; a clear error when an install left it out."""
    path = TRAINED / f"{SHIPPED_NAME}.pt"
    if not path.is_file():
        raise DataFormatError(f"the package's trained model file {path} is missing (an "
                              "install without the package data?); pass --model FILE")
    return path


def provenance() -> dict[str, Any]:
    """How the shipped model was made: command, commit, data seeds, size and results."""
    path = TRAINED / f"{SHIPPED_NAME}.json"
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DataFormatError(f"cannot read the shipped model's provenance {path}: {err}"
                              ) from err
    if not isinstance(found, dict):
        raise DataFormatError(f"{path} is not a JSON object")
    return found


def describe(model: Path, command: str, commit: str, data: dict[str, Any],
             results: dict[str, Any]) -> dict[str, Any]:
    """The provenance record of a model file: what made it (``command`` at ``commit``
    on the events ``data`` names, with their seeds), its size and digest (so a record
    cannot describe another file), and what it measured (``results``)."""
    blob = model.read_bytes()
    return {"model_file": model.name, "size_bytes": len(blob),
            "sha256": hashlib.sha256(blob).hexdigest(), "command": command,
            "commit": commit, "data": data, "results": results}


def write_provenance(model: Path, record: dict[str, Any]) -> Path:
    """``record`` as JSON beside ``model`` (``NAME.json`` for ``NAME.pt``)."""
    path = model.with_suffix(".json")
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path
