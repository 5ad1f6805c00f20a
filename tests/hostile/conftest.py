"""What every hostile-input test checks: the real CLI, one clear line, nothing left behind.

Each case runs ``sparsegnn ...`` through the console script's own entry point
(:func:`sparsegnn.cli.main.main`, so the top-level handler, exit status and stderr are the
real ones) and then asserts, with :func:`assert_user_error`, exit status 2, exactly one
non-blank stderr line that names the input and no traceback; :func:`snapshot` before and
after shows that inputs are byte-identical and that no output, ``.partial`` or ``.tmp``
file was left behind.

:func:`run_cli` calls it in this interpreter, as the process would: file descriptors 1
and 2 (what the ranks it starts inherit too) go to files, logging is configured by the
command itself, warnings print as a fresh interpreter prints them, and an exception that
escapes is a traceback and exit 1. A fresh interpreter costs seconds of imports per case;
cases about the process itself (its environment at start, signals, what a killed launcher
leaves) ask for one with ``fresh=True`` or ``env=``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import pickletools
import shlex
import shutil
import subprocess
import sys
import tempfile
import traceback
import warnings
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, TextIO

import pytest
import torch


def run_cli(*args: str | os.PathLike[str], cwd: Path | None = None, timeout: float = 180,
            env: dict[str, str] | None = None, fresh: bool = False
            ) -> subprocess.CompletedProcess[str]:
    """``sparsegnn ARGS``: in this interpreter, or (``fresh`` or ``env`` given) in a new one,
    where a hang fails the test after ``timeout`` seconds instead of CI."""
    argv = [str(arg) for arg in args]
    if not fresh and env is None:
        return _run_here(argv, cwd)
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "sparsegnn", *argv],
        capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full_env, check=False,
    )


# What a fresh interpreter filters (no -W, no PYTHONWARNINGS): pytest's "error" must not
# turn a warning the CLI prints into an exception here.
_PYTHON_DEFAULT_FILTERS = (("default", DeprecationWarning, "__main__"),
                           ("ignore", DeprecationWarning, ""),
                           ("ignore", PendingDeprecationWarning, ""),
                           ("ignore", ImportWarning, ""), ("ignore", ResourceWarning, ""))


def _run_here(argv: list[str], cwd: Path | None) -> subprocess.CompletedProcess[str]:
    """:func:`sparsegnn.cli.main.main` on ``argv`` as ``python -m sparsegnn`` runs it."""
    from sparsegnn.cli.main import main

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        with _fds_to(out, err), _as_started(), contextlib.chdir(cwd or os.getcwd()):
            try:
                code = main(argv)
            except SystemExit as stop:
                code = _exit_status(stop.code)
            except Exception:
                traceback.print_exc()
                code = 1
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(["sparsegnn", *argv], code,
                                           out.read().decode(errors="replace"),
                                           err.read().decode(errors="replace"))


def _exit_status(code: object) -> int:
    """What the interpreter exits with for ``SystemExit(code)`` (a message goes to stderr)."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


@contextlib.contextmanager
def _fds_to(out: IO[bytes], err: IO[bytes]) -> Iterator[None]:
    """Descriptors 1 and 2, and ``sys.stdout``/``sys.stderr`` on them, into ``out``/``err``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (sys.stdout, sys.stderr, os.dup(1), os.dup(2))
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    sys.stdout, sys.stderr = (io.TextIOWrapper(io.FileIO(fd, "w", closefd=False),
                                               write_through=True) for fd in (1, 2))
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = saved[:2]
        for fd, dup in ((1, saved[2]), (2, saved[3])):
            os.dup2(dup, fd)
            os.close(dup)


@contextlib.contextmanager
def _as_started() -> Iterator[None]:
    """Logging unconfigured (the command's ``basicConfig`` takes effect, on the stderr of
    :func:`_fds_to`) and a fresh interpreter's warning filters, printing to that stderr;
    pytest's own handlers, levels and filters are back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers = []
    try:
        with warnings.catch_warnings():
            warnings.resetwarnings()
            for action, category, module in reversed(_PYTHON_DEFAULT_FILTERS):
                warnings.filterwarnings(action, category=category, module=module)
            warnings.showwarning = _print_warning
            yield
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers = handlers
        root.setLevel(level)


def _print_warning(message: Warning | str, category: type[Warning], filename: str,
                   lineno: int, file: TextIO | None = None, line: str | None = None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


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
def workdir() -> Iterator[Path]:
    """An empty folder for one case's inputs and outputs, with a short path: cases point
    ``TMPDIR`` into it, and the launcher folder they look for there (which holds the fork
    server's socket) goes elsewhere when its path would pass a socket path's limit."""
    path = Path(tempfile.mkdtemp(prefix="case-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


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
    """Run the commands of one case, one after the other, each as :func:`run_cli` does."""
    return [run_cli(*argv, cwd=cwd) for argv in argvs]


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
