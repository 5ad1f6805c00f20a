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
import pickletools
import shlex
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch


def run_cli(*args: str | os.PathLike[str], cwd: Path | None = None, timeout: float = 180,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``sparsegnn ARGS`` in a fresh interpreter; a hang fails the test instead of CI."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "sparsegnn", *map(str, args)],
        capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full_env, check=False,
    )


def assert_user_error(proc: subprocess.CompletedProcess[str], *names: str) -> str:
    """Exit 2, one stderr line mentioning every ``names`` item, no traceback; returns it.

    Progress records a run logs before it fails (``INFO ...`` off a terminal) are not
    part of the error and are left out."""
    lines = [line for line in proc.stderr.splitlines()
             if line.strip() and not line.startswith("INFO ")]
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


class _TouchMarker:
    """Unpickling this runs a shell command: what a crafted checkpoint or model does."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (self.command,)


def write_crafted_checkpoint(evil: Path, marker: Path,
                             fingerprint: dict[str, str] | None = None) -> None:
    """A file shaped like our checkpoints whose unpickling would ``touch marker``; proven
    to run that command when loaded the unsafe way (the marker is removed again)."""
    torch.save({"format": "sparsegnn-checkpoint", "version": 1,
                "fingerprint": fingerprint or {}, "checksum": "",
                "state": _TouchMarker(f"touch {shlex.quote(str(marker))}")}, evil)
    _prove_it_runs_code(evil, marker)


def _prove_it_runs_code(evil: Path, marker: Path) -> None:
    """The crafted file really calls ``os.system`` when unpickled the unsafe way (else the
    refusal below would prove nothing); the marker it makes is removed again."""
    with zipfile.ZipFile(evil) as z:
        pkl = next(n for n in z.namelist() if n.endswith("data.pkl"))
        ops = [(op.name, arg) for op, arg, _ in pickletools.genops(z.read(pkl))]
    assert ("GLOBAL", f"{os.system.__module__} system") in ops
    torch.load(evil, weights_only=False)
    assert marker.is_file()
    marker.unlink()


def tree(*roots: Path) -> dict[str, str]:
    """:func:`snapshot` plus every folder, so an empty folder left behind shows too."""
    dirs = {str(p): "<dir>" for root in roots if root.is_dir()
            for p in root.rglob("*") if p.is_dir()}
    return {**snapshot(*roots), **dirs}


def run_all(argvs: list[tuple[str | Path, ...]], cwd: Path
             ) -> list[subprocess.CompletedProcess[str]]:
    """Run the commands of one case side by side (each CLI start is seconds of imports)."""
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        return list(pool.map(lambda argv: run_cli(*argv, cwd=cwd), argvs))


def all_refused(cases: list[tuple[tuple[str | Path, ...], tuple[str, ...]]], cwd: Path,
                 *roots: Path) -> list[str]:
    """Run every ``(argv, names)``; each must be a one-line user error naming ``names``,
    and ``roots`` must be exactly as before (inputs unchanged, nothing created)."""
    before = tree(*roots)
    procs = run_all([argv for argv, _ in cases], cwd)
    lines, failures = [], []
    for (argv, names), proc in zip(cases, procs, strict=True):
        try:
            lines.append(assert_user_error(proc, *names))
        except AssertionError as err:
            failures.append(f"sparsegnn {' '.join(map(str, argv))}:\n{err}")
    assert not failures, "\n\n".join(failures)
    assert tree(*roots) == before
    return lines
