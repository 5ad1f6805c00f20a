"""``sparsegnn --help`` and every subcommand's ``--help`` load no heavy or optional module.

Help must be instant and must work without the optional extras installed, so the CLI
modules import the library only inside the functions that run a command. Each case runs
in a fresh interpreter, because ``sys.modules`` remembers every earlier import.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "numpy", "scipy", "duckdb", "pyarrow", "yaml", "acts", "pymetis", "kahip",
         "torch_geometric", "matplotlib", "tqdm", "pandas")
_PROBE = """
import contextlib, io, json, sys
from sparsegnn.cli.main import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main(sys.argv[1:])
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""
HELPS = [
    [], ["train"], ["demo"], ["plan"], ["data"], ["data", "info"], ["data", "convert"],
    ["data", "generate"], ["data", "partition"], ["data", "fetch"], ["curate"],
    ["curate", "ingest"],
    ["curate", "distil"], ["curate", "annotate"], ["curate", "query"], ["curate", "agreement"],
    ["curate", "serve"],
    ["track"], ["track", "simulate"], ["track", "build-graphs"], ["track", "train"],
    ["track", "reconstruct"], ["track", "evaluate"],
]


@pytest.mark.parametrize("command", HELPS, ids=lambda c: " ".join(c) or "sparsegnn")
def test_help_imports_nothing_heavy(command: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-c", _PROBE, *command, "--help"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    loaded = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert not loaded & set(HEAVY), f"--help imported {sorted(loaded & set(HEAVY))}"
