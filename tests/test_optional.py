"""One way to say no: a missing optional package, or an input path that is not there, is
one stderr line (exit 2) that says what to do, never a traceback.

The command-line cases run the real CLI in subprocesses (one module fixture forks them
all from a process that has imported torch once, so the file stays quick on a slow
machine); a package is made unimportable there by a ``sys.meta_path`` finder that refuses
its top-level name.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from sparsegnn import optional
from sparsegnn.errors import MissingDependencyError, SparseGNNError

SRC = Path(optional.__file__).parent

# Reads [id, blocked module, CLI arguments, folder, stderr file] cases as JSON on stdin and
# runs each as `sparsegnn ARGS...` in a child forked after torch is imported (the slow part
# of every start), with the blocked module and its submodules unimportable in the child;
# prints {id: exit code} as JSON.
_RUNNER = textwrap.dedent("""
    import json, os, sys, traceback
    import numpy, scipy.sparse, torch  # always installed; imported once, before the forks

    class Block:
        name = ""

        def find_spec(self, name, path=None, target=None):
            if self.name and (name == self.name or name.startswith(self.name + ".")):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    codes = {}
    for key, blocked, argv, cwd, errfile in json.load(sys.stdin):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            codes[key] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            continue
        code = 1
        try:
            os.chdir(cwd)
            os.dup2(os.open(errfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            finder = Block()
            finder.name = blocked
            sys.meta_path.insert(0, finder)
            for name in [m for m in sys.modules if m == blocked or m.startswith(blocked + ".")]:
                del sys.modules[name]
            from sparsegnn.cli.main import main
            code = main(argv)
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    print(json.dumps(codes))
""")

_SBM = "sbm:nodes=64,blocks=2,degree=4"

# id -> (blocked module, extra named in the message, CLI arguments); {t} is a scratch folder.
MISSING_EXTRA = {
    "curate-query": ("duckdb", "curation",
                     ["curate", "query", "SELECT 1", "--corpus", "{t}/corpus"]),
    "curate-serve": ("starlette", "curation", ["curate", "serve", "--corpus", "{t}/corpus"]),
    "plan-plot": ("matplotlib", "plot",
                  ["plan", "--graph", "rmat:6", "--parts", "2", "--plot", "{t}/plan.png"]),
    "data-partition-metis": ("pymetis", "partition",
                             ["data", "partition", _SBM, "{t}/parts", "--algo", "1d",
                              "--nprocs", "2", "--partitioner", "metis"]),
    "track-simulate": ("acts", "tracking",
                       ["track", "simulate", "--gun", "5", "--events", "1", "--out", "{t}/sim"]),
    "track-ckf": ("acts", "tracking", ["track", "ckf", "--events", "{t}/no_events"]),
}

# id -> (CLI arguments naming the missing path {m}, that path)
MISSING_INPUT = {
    "train": ["train", "--dataset", "{m}", "--epochs", "1"],
    "demo": ["demo", "--data-dir", "{m}"],
    "data-info": ["data", "info", "{m}"],
    "curate-ingest": ["curate", "ingest", "{m}", "--out", "{t}/ingested"],
    "track-build-graphs": ["track", "build-graphs", "--events", "{m}", "--out", "{t}/graphs"],
    "plan": ["plan", "--graph", "{m}", "--parts", "2"],
}


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, str]]:
    """Every CLI case above: id -> (exit code, stderr, missing path)."""
    cases, missing = [], {}
    for key, (blocked, _, argv) in MISSING_EXTRA.items():
        t = tmp_path_factory.mktemp(key)
        (t / "corpus").mkdir()
        (t / "corpus" / "documents.parquet").touch()  # the sandbox checks files exist first
        cases.append([key, blocked, [a.format(t=t) for a in argv], str(t), str(t / "stderr")])
    for key, argv in MISSING_INPUT.items():
        t = tmp_path_factory.mktemp(key)
        missing[key] = str(t / "not_here" / ("docs.jsonl" if key == "curate-ingest" else "in"))
        cases.append([key, "", [a.format(t=t, m=missing[key]) for a in argv], str(t),
                      str(t / "stderr")])
    done = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps(cases), text=True,
                          capture_output=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    codes = json.loads(done.stdout.splitlines()[-1])
    return {key: (codes[key], Path(errfile).read_text(), missing.get(key, ""))
            for key, _, _, _, errfile in cases}


def _one_line(code: int, err: str) -> str:
    assert "Traceback" not in err, err
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("key", MISSING_EXTRA)
def test_cli_without_an_extra_names_the_pip_command(cli_runs, key: str):
    code, err, _ = cli_runs[key]
    blocked, extra, _ = MISSING_EXTRA[key]
    line = _one_line(code, err)
    assert f"{blocked} is needed" in line and f"pip install 'sparsegnn[{extra}]'" in line


@pytest.mark.parametrize("key", MISSING_INPUT)
def test_cli_with_a_missing_input_path_names_it(cli_runs, key: str):
    code, err, missing = cli_runs[key]
    line = _one_line(code, err)
    assert missing in line and line.startswith(f"sparsegnn {key.split('-')[0]}: error: ")


# ---------------------------------------------------------------------------- require


def test_require_message_names_module_purpose_and_extra(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(optional.EXTRA_OF, "sparsegnn_no_such_pkg", "plot")
    with pytest.raises(MissingDependencyError) as info:
        optional.require("sparsegnn_no_such_pkg.sub", "for a test")
    assert str(info.value) == ("sparsegnn_no_such_pkg is needed for a test but not installed; "
                               "run: pip install 'sparsegnn[plot]'")
    assert isinstance(info.value, SparseGNNError) and isinstance(info.value, ImportError)
    with pytest.raises(MissingDependencyError, match=r"^sparsegnn_no_such_pkg is needed but"):
        optional.locate("sparsegnn_no_such_pkg")
    assert not optional.installed("sparsegnn_no_such_pkg")
    # a module no extra provides points at the extra with everything
    with pytest.raises(MissingDependencyError, match=r"sparsegnn\[all\]"):
        optional.require("sparsegnn_unmapped_pkg")


def test_require_imports_and_does_not_disguise_a_broken_package():
    assert optional.require("json.decoder").__name__ == "json.decoder"
    assert optional.installed("json")
    # the package is there but a submodule is not: a real fault, not a missing extra
    with pytest.raises(ModuleNotFoundError) as info:
        optional.require("sparsegnn.no_such_submodule")
    assert not isinstance(info.value, MissingDependencyError)


def test_optional_is_light():
    code = ("import sys, sparsegnn.optional; "
            "heavy = {'torch', 'numpy', *sparsegnn.optional.EXTRA_OF} & set(sys.modules); "
            "sys.exit(sorted(heavy) or 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def test_no_optional_package_is_imported_directly():
    """Every optional import in the library goes through sparsegnn.optional."""
    found = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found += [f"{path.relative_to(SRC)}:{node.lineno} {n}" for n in names
                      if n.partition(".")[0] in optional.EXTRA_OF]
    assert not found


# ---------------------------------------------------------------------- each call site


def _metis(tmp: Path) -> None:
    from sparsegnn.partition import Adjacency, partition

    partition(Adjacency.from_edge_index(np.array([[0, 1, 2], [1, 2, 3]]), 4), "metis", 2)


def _kahip(tmp: Path) -> None:
    from sparsegnn.partition import Adjacency, partition

    partition(Adjacency.from_edge_index(np.array([[0, 1, 2], [1, 2, 3]]), 4), "kahip", 2)


def _simulate(tmp: Path) -> None:
    from sparsegnn.tracking.simulate import GunConfig, simulate_gun

    simulate_gun(tmp, GunConfig(events=1, particles=1))


def _ckf(tmp: Path) -> None:
    from sparsegnn.tracking.ckf import run_ckf

    run_ckf(tmp)


def _hepmc(tmp: Path) -> None:
    from sparsegnn.tracking.ttbar import write_hepmc

    write_hepmc(tmp / "x.hepmc3", [], 1, 0, False)


def _tracking_plot(tmp: Path) -> None:
    from sparsegnn.tracking.plots import score_plot

    score_plot(np.zeros(2), np.zeros(2, bool), tmp)


def _confusion_plot(tmp: Path) -> None:
    from sparsegnn.curation.agreement import plot_confusion

    plot_confusion(np.eye(2), ["a", "b"], tmp / "c.png", "t")


def _sandbox(tmp: Path) -> None:
    from sparsegnn.curation.sandbox import CorpusFiles, Sandbox

    (tmp / "documents.parquet").touch()
    Sandbox(CorpusFiles.in_dir(tmp))


def _yaml_schema(tmp: Path) -> None:
    from sparsegnn.curation import load_schema

    (tmp / "s.yaml").write_text("name: x\n")
    load_schema(tmp / "s.yaml")


def _embedder(tmp: Path) -> None:
    from sparsegnn.data.embed import SentenceEmbedder

    SentenceEmbedder()


SITES: dict[str, tuple[str, str, Callable[[Path], None]]] = {
    "metis": ("pymetis", "partition", _metis),
    "kahip": ("kahip", "partition", _kahip),
    "simulate": ("acts", "tracking", _simulate),
    "ckf": ("acts", "tracking", _ckf),
    "pythia": ("pythia8mc", "tracking", _hepmc),
    "hepmc": ("pyhepmc", "tracking", _hepmc),
    "tracking-plot": ("matplotlib", "plot", _tracking_plot),
    "confusion-plot": ("matplotlib", "plot", _confusion_plot),
    "sandbox": ("duckdb", "curation", _sandbox),
    "yaml-schema": ("yaml", "curation", _yaml_schema),
    "embedder": ("transformers", "embed", _embedder),
}


@pytest.mark.parametrize("key", SITES)
def test_each_call_site_says_which_extra(key: str, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch):
    blocked, extra, call = SITES[key]
    monkeypatch.setitem(sys.modules, blocked, None)  # import now fails with that name
    with pytest.raises(MissingDependencyError,
                       match=rf"^{blocked} is needed .*pip install 'sparsegnn\[{extra}\]'$"):
        call(tmp_path)
