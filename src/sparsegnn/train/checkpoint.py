"""Atomic checkpoints that make a resumed run bit-identical to an uninterrupted one.

A checkpoint holds the model, the optimiser, the epoch, the early-stopping state and
every RNG stream the loop draws from (torch CPU and CUDA, numpy, Python). It is written
to a temporary file in the same directory and moved into place with ``os.replace``, so
a crash mid-write leaves the previous checkpoint intact, never a truncated one.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sparsegnn.data.io import atomic_write
from sparsegnn.errors import DataFormatError


def rng_state() -> dict[str, Any]:
    """Every RNG stream training may draw from."""
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    """Seed torch, numpy and Python so a run is reproducible."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically (temp file + fsync + rename)."""
    atomic_write(path, lambda fh: torch.save(state, fh))


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`, with a clear error if unusable."""
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(f"checkpoint {path} does not exist")
    try:
        # The RNG states include numpy's tuple; everything else is tensors and builtins.
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # torch raises several unrelated types for corrupt files
        raise DataFormatError(f"checkpoint {path} is corrupt or truncated: {err}") from err
