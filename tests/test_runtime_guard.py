"""Only the runtime package knows how ranks are launched.

:mod:`sparsegnn.distributed.runtime` reads the launcher's environment (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``) and opens rank sessions; every job
goes through ``run_on_ranks`` and ``rank_session``. A second reader or a hand-written
``init_session``/``close_session`` frame elsewhere would drift from it (another timeout,
a session left open on error), so these scans fail on one.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = ROOT / "src" / "sparsegnn" / "distributed" / "runtime"
SCANNED = ("src", "benchmarks", "testbed")
# Any string literal that names one of the launcher's variables: how code reads them.
LAUNCHER_VARIABLE = re.compile(r"""["'](RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE)["']""")
SESSION_CALL = re.compile(r"(?<!def )\binit_session\(")


def _sources() -> list[Path]:
    return sorted(p for top in SCANNED for p in (ROOT / top).rglob("*.py"))


def _hits(pattern: re.Pattern[str], outside: Path) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for path in _sources() if not path.is_relative_to(outside)
            for n, line in enumerate(path.read_text().splitlines(), 1)
            if pattern.search(line)]


def test_the_scans_see_the_runtime_itself() -> None:
    """The patterns match the one reader and the one session opener (no silent pass),
    and a definition is not a call."""
    session = (RUNTIME / "session.py").read_text()
    assert LAUNCHER_VARIABLE.search(session)
    assert len(SESSION_CALL.findall(session)) == 1  # inside rank_session
    assert not SESSION_CALL.search("def init_session(backend=None):")


def test_only_the_runtime_reads_the_launcher_environment() -> None:
    assert _hits(LAUNCHER_VARIABLE, RUNTIME) == []


def test_only_the_runtime_opens_a_rank_session() -> None:
    """Jobs use ``rank_session`` (which always closes) rather than ``init_session``."""
    assert _hits(SESSION_CALL, RUNTIME) == []
