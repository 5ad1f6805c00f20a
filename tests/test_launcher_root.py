"""A launcher's folder holds the fork server's socket, whose path has a length limit.

A deep ``TMPDIR`` (a test's temp folder, a job scheduler's per-job folder) once made every
spawned run fail with ``OSError: AF_UNIX path too long``; the folder now goes to a short
root instead, and a ``TMPDIR`` that fits is used as it is.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from sparsegnn.data import leftovers


def _socket_path(root: Path) -> str:
    return f"{root}/{leftovers.LAUNCHER_PREFIX}{os.getpid()}-abcdefgh/listener-abcdefgh"


def test_a_temp_folder_that_fits_is_used_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    short = Path(tempfile.mkdtemp(prefix="r-", dir="/tmp"))
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(short))
        assert len(_socket_path(short)) <= 107
        assert leftovers.launcher_root() == short
    finally:
        short.rmdir()


def test_a_temp_folder_too_deep_for_a_socket_falls_back_to_a_short_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    root = leftovers.launcher_root()
    assert len(_socket_path(deep)) > 107
    assert root != deep and len(_socket_path(root)) <= 107
    assert os.access(root, os.W_OK)
