"""What every hostile-input test checks: the real CLI, one clear line, nothing left behind.

Each case runs ``python -m sparsegnn ...`` as a subprocess (so the top-level handler, exit
status and stderr are the real ones) and then asserts, with :func:`assert_user_error`,
exit status 2, exactly one non-blank stderr line that names the input and no traceback;
:func:`snapshot` before and after shows that inputs are byte-identical and that no output,
``.partial`` or ``.tmp`` file was left behind.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest


def run_cli(*args: str | os.PathLike[str], cwd: Path | None = None, timeout: float = 180,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``sparsegnn ARGS`` in a fresh interpreter; a hang fails the test instead of CI."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "sparsegnn", *map(str, args)],
        capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full_env, check=False,
    )


def assert_user_error(proc: subprocess.CompletedProcess[str], *names: str) -> str:
    """Exit 2, one stderr line mentioning every ``names`` item, no traceback; returns it."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, f"exit {proc.returncode}\nstdout: {proc.stdout}\n{proc.stderr}"
    assert len(lines) == 1, f"expected one stderr line, got:\n{proc.stderr}"
    for name in names:
        assert name in lines[0], f"{name!r} not named in: {lines[0]}"
    return lines[0]


def snapshot(*roots: Path) -> dict[str, str]:
    """sha256 of every file under ``roots`` (hidden ones too: temp files must not linger)."""
    out: dict[str, str] = {}
    for root in roots:
        files: Iterable[Path] = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in files:
            if path.is_file():
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty folder for one case's inputs and outputs."""
    return tmp_path
