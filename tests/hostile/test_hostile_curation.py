"""Hostile and careless input to ``sparsegnn curate``: the real CLI, one line, nothing changed.

The store (documents, graph, annotations) is built once in-process; every case then runs
the CLI's entry point (``run_cli`` in conftest) and checks exit status 2, one stderr line
naming the input, no traceback, no output or partial file, and a byte-identical store.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from conftest import assert_user_error, run_cli, snapshot
from sparsegnn.cli.main import main
from sparsegnn.curation import essential_web, read_labels
from sparsegnn.curation.annotate import annotate
from sparsegnn.curation.distil import ANNOTATOR_FORMAT, Annotator, distil
from sparsegnn.curation.ingest import IngestConfig, ingest
from sparsegnn.curation.student import StudentConfig
from sparsegnn.curation.synthetic import SyntheticConfig, write_corpus
from sparsegnn.train.checkpoint import read_checkpoint, save_checkpoint

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

TINY = StudentConfig(n_features=256, hidden=8, hops=1, epochs=2, patience=2)
LONG_QUERY = "SELECT count(*) FROM range(100000000) a, range(1000000) b"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with corpus.jsonl, store/ (documents, graph, annotations) and model.pt."""
    root = tmp_path_factory.mktemp("curation")
    write_corpus(root / "corpus.jsonl", SyntheticConfig(num_docs=60, num_sites=4, seed=1))
    store = root / "store"
    ingest(root / "corpus.jsonl", store, IngestConfig(batch_rows=32))
    schema = essential_web()
    labels = read_labels(root / "corpus.jsonl", schema)
    annotator = distil(store, labels.subset(labels.ids[:40]), schema, TINY).annotator
    annotator.save(root / "model.pt")
    annotate(store, annotator, progress=False)
    return root


@pytest.fixture
def store(built: Path, tmp_path: Path) -> Path:
    """A private copy of the built store, for cases that could damage it."""
    return Path(shutil.copytree(built / "store", tmp_path / "store"))


def _jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ------------------------------------------------------------------ the SQL sandbox
SANDBOX_CASES = [
    # serious case 1: EXPLAIN ANALYZE runs its inner COPY over the corpus files
    ("EXPLAIN ANALYZE COPY (SELECT 'x' AS id) TO '{store}/documents.parquet' "
     "(FORMAT parquet, USE_TMP_FILE false)", "EXPLAIN"),
    ("EXPLAIN ANALYZE COPY (SELECT 'x' AS id) TO '{store}/annotations.parquet' "
     "(FORMAT parquet, USE_TMP_FILE false)", "EXPLAIN"),
    ("EXPLAIN SELECT * FROM documents", "EXPLAIN"),
    ("COPY (SELECT 'x' AS id) TO '{store}/documents.parquet' (FORMAT parquet)", "COPY"),
    ("SELECT 1; COPY documents TO '{store}/graph.npz'", "exactly one SQL statement"),
    ("ATTACH '{store}/x.duckdb' AS x", "ATTACH"),
    ("SET enable_external_access = true", "SET"),
    ("PRAGMA database_list", "PRAGMA"),
    ("INSTALL httpfs", "statements are not allowed"),
    ("CREATE TABLE t AS SELECT * FROM documents", "CREATE"),
    ("SELECT * FROM read_csv('/etc/passwd')", "read_csv"),
    ("SELECT * FROM read_parquet('{store}/documents.parquet')", "read_parquet"),
    ("SELECT * FROM '{store}/documents.parquet'", "documents.parquet"),
    ("SELECT * FROM glob('/etc/*')", "glob"),
    ("SELECT name, value FROM duckdb_settings()", "duckdb_settings"),
    ("SELECT current_setting('temp_directory') AS t", "current_setting"),
    ("SELECT * FROM pg_settings", "pg_settings"),
    ("SELECT * FROM query('SELECT * FROM duckdb_settings()')", "query"),
]


@pytest.mark.parametrize("sql, named", SANDBOX_CASES, ids=[c[1] + str(i) for i, c in
                                                            enumerate(SANDBOX_CASES)])
def test_sandbox_case_is_refused_and_the_corpus_untouched(built: Path, sql: str, named: str):
    store = built / "store"
    before = snapshot(built)
    proc = run_cli("curate", "query", sql.format(store=store), "--corpus", store)
    assert_user_error(proc, named)
    assert snapshot(built) == before


def test_export_failing_part_way_leaves_nothing(built: Path, tmp_path: Path):
    """Rows stream out for a while, then a cast fails: no output, no partial file."""
    sql = ("SELECT CAST(CASE WHEN range < 150000 THEN '1' ELSE 'x' END AS INTEGER) AS v "
           "FROM range(200000)")
    before = snapshot(built)
    for name in ("out.jsonl", "out.parquet"):
        proc = run_cli("curate", "query", sql, "--corpus", built / "store", "--output",
                       tmp_path / name)
        assert_user_error(proc, "query failed")
    assert list(tmp_path.iterdir()) == []
    assert snapshot(built) == before


def test_timeout_stops_a_long_query(built: Path):
    start = time.monotonic()
    proc = run_cli("curate", "query", LONG_QUERY, "--corpus", built / "store", "--timeout", "1")
    assert_user_error(proc, "time limit of 1 s", "--timeout")
    assert time.monotonic() - start < 60


def test_memory_limit_stops_a_greedy_query(built: Path):
    proc = run_cli("curate", "query", "SELECT list(range) AS l FROM range(50000000)",
                   "--corpus", built / "store", "--memory-limit", "64MB")
    assert_user_error(proc, "memory limit", "--memory-limit")


@contextmanager
def _long_query(built: Path, tmp: Path) -> Iterator[subprocess.Popen[str]]:
    """The CLI running LONG_QUERY, yielded once the query itself has started (-v logs it)."""
    env = {**os.environ, "TMPDIR": str(tmp), "OMP_NUM_THREADS": "1"}
    with subprocess.Popen(
            [sys.executable, "-m", "sparsegnn", "-v", "curate", "query", LONG_QUERY,
             "--corpus", str(built / "store")], stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL, text=True, env=env) as proc:
        assert proc.stderr is not None
        if not any("sandbox: running query" in line for line in proc.stderr):
            raise AssertionError(f"query never started (exit {proc.wait()})")
        time.sleep(0.5)
        try:
            yield proc
        finally:
            proc.kill()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill"])
def test_stopped_query_leaves_nothing_behind(built: Path, tmp_path: Path, sig: int):
    """Ctrl-C stops the query (exit 130); even SIGKILL leaves no sparsegnn-sql-* folder,
    since the sandbox's database lives in memory."""
    before = snapshot(built)
    with _long_query(built, tmp_path) as proc:
        proc.send_signal(sig)
        code = proc.wait(timeout=30)
    assert code == (130 if sig == signal.SIGINT else -signal.SIGKILL)
    assert list(tmp_path.iterdir()) == []
    assert snapshot(built) == before


@pytest.mark.parametrize("target", ["documents.parquet", "annotations.parquet",
                                    "../store/./documents.parquet", "link.parquet"])
def test_output_may_not_replace_the_corpus(store: Path, target: str):
    (store / "link.parquet").symlink_to(store / "annotations.parquet")
    before = snapshot(store)
    proc = run_cli("curate", "query", "SELECT id FROM documents", "--corpus", store,
                   "--output", f"{store}/{target}")
    assert_user_error(proc, "is the input")
    assert snapshot(store) == before


# ------------------------------------------------------------------ the store's integrity
def test_graph_of_other_documents_is_refused(built: Path, store: Path, tmp_path: Path):
    """An ingest killed between renaming the documents and the graph: new documents, old
    graph. distil refuses in one line instead of failing inside SpMM."""
    _jsonl(tmp_path / "other.jsonl", [{"id": f"n{i}", "text": f"new text {i}"}
                                      for i in range(60)])
    ingest(tmp_path / "other.jsonl", tmp_path / "other")
    shutil.copyfile(tmp_path / "other" / "documents.parquet", store / "documents.parquet")
    before = snapshot(store)
    proc = run_cli("curate", "distil", "--corpus", store, "--labels", built / "corpus.jsonl",
                   "--out", tmp_path / "m.pt", "--epochs", "1")
    assert_user_error(proc, "graph.npz", "rerun `sparsegnn curate ingest`")
    assert snapshot(store) == before and not (tmp_path / "m.pt").exists()


def test_reingest_invalidates_old_annotations(built: Path, store: Path, tmp_path: Path):
    """Re-ingesting other documents keeps annotations.parquet, which the sandbox then
    refuses to join to the new texts; identical documents keep them valid."""
    ingest(built / "corpus.jsonl", store, IngestConfig(batch_rows=32))  # same documents
    assert main(["curate", "query", "SELECT count(*) AS n FROM corpus", "--corpus",
                 str(store)]) == 0
    rows = [json.loads(line) for line in (built / "corpus.jsonl").read_text().splitlines()]
    rows[0]["text"] = "a changed text"
    ingest(_jsonl(tmp_path / "changed.jsonl", rows), store, IngestConfig(batch_rows=32))
    before = snapshot(store)
    proc = run_cli("curate", "query", "SELECT count(*) AS n FROM corpus", "--corpus", store)
    assert_user_error(proc, "annotations.parquet", "curate annotate")
    assert snapshot(store) == before


# ------------------------------------------------------------------ ingest
GOOD = [{"id": f"d{i}", "text": f"text number {i}", "url": f"https://s{i % 2}.org/{i}"}
        for i in range(4)]
INGEST_CASES = [  # (lines after four good rows, what the one line must name)
    ([b'{"id": "x", "text": "fine"', b""], "in.jsonl:5"),
    ([b'{"id": "x", "text": "caf\xe9"}'], "in.jsonl:5"),
    ([json.dumps({"id": "x", "text": 42}).encode()], "row 4: text for id 'x' must be a string"),
    ([json.dumps({"id": "x", "text": "t", "links": 5}).encode()], "row 4: links for id 'x'"),
    ([json.dumps({"id": "x", "text": "t", "links": {"a": 1}}).encode()], "an object"),
    ([json.dumps({"id": "x", "text": "t", "url": 12}).encode()], "row 4: url for id 'x'"),
]


@pytest.mark.parametrize("bad, named", INGEST_CASES, ids=[c[1] for c in INGEST_CASES])
def test_bad_input_after_good_batches_changes_nothing(tmp_path: Path, bad: list[bytes],
                                                      named: str):
    """Two good batches, then the bad row: the previous store stays as it was, and no
    partial or temporary file is left."""
    out = tmp_path / "store"
    ingest(_jsonl(tmp_path / "old.jsonl", GOOD), out)
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in GOOD)
                       + b"\n".join(bad) + b"\n")
    before = snapshot(tmp_path)
    proc = run_cli("curate", "ingest", source, "--out", out, "--batch-rows", "2")
    assert_user_error(proc, str(source) if ".jsonl:" not in named else str(tmp_path), named)
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------ annotator files
def test_annotator_of_another_format_version_is_named(built: Path, tmp_path: Path):
    saved = read_checkpoint(built / "model.pt")
    save_checkpoint(tmp_path / "future.pt", saved.state, {**saved.fingerprint,
                                                          "annotator_format": 99})
    (tmp_path / "junk.pt").write_bytes(os.urandom(300))
    before = snapshot(built)
    for model, named in (("future.pt", f"version 99, but this sparsegnn reads version "
                                       f"{ANNOTATOR_FORMAT}"), ("junk.pt", "junk.pt")):
        proc = run_cli("curate", "annotate", "--corpus", built / "store", "--model",
                       tmp_path / model, "--out", tmp_path / "a.parquet")
        assert_user_error(proc, named)
    assert snapshot(built) == before and not (tmp_path / "a.parquet").exists()


def test_annotator_save_is_all_or_nothing(built: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch):
    annotator = Annotator.load(built / "model.pt")
    annotator.save(tmp_path / "m.pt")
    before = snapshot(tmp_path)

    def crash(obj: object, f: object) -> None:
        f.write(b"half a file")  # type: ignore[attr-defined]
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        annotator.save(tmp_path / "m.pt")
    assert snapshot(tmp_path) == before


def test_annotate_failing_part_way_leaves_no_partial(built: Path, store: Path,
                                                     monkeypatch: pytest.MonkeyPatch):
    from sparsegnn.curation import annotate as annotate_module

    before = snapshot(store)
    calls = {"n": 0}
    real = annotate_module.annotation_batch

    def fail_second(*args: object) -> object:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(annotate_module, "annotation_batch", fail_second)
    with pytest.raises(KeyboardInterrupt):
        annotate(store, Annotator.load(built / "model.pt"), batch_rows=16, progress=False)
    assert snapshot(store) == before


# ------------------------------------------------------------------ options
@pytest.mark.parametrize("argv, named", [
    (["query", "SELECT 1", "--show", "-1"], "--show"),
    (["query", "SELECT 1", "--timeout", "0"], "--timeout"),
    (["query", "SELECT 1", "--timeout", "nan"], "--timeout"),
    (["query", "SELECT 1", "--memory-limit", "1KB"], "--memory-limit"),
    (["query", "SELECT 1", "--memory-limit", "lots"], "--memory-limit"),
    (["ingest", "x.jsonl", "--out", "o", "--batch-rows", "0"], "--batch-rows"),
    (["ingest", "x.jsonl", "--out", "o", "--site-neighbors", "-1"], "--site-neighbors"),
    (["ingest", "x.jsonl", "--out", "o", "--knn", "-2"], "--knn"),
    (["distil", "--corpus", "c", "--labels", "l", "--out", "m.pt", "--epochs", "0"],
     "--epochs"),
    (["distil", "--corpus", "c", "--labels", "l", "--out", "m.pt", "--batch-size", "0"],
     "--batch-size"),
    (["distil", "--corpus", "c", "--labels", "l", "--out", "m.pt", "--fanouts", "abc"],
     "--fanouts"),
    (["distil", "--corpus", "c", "--labels", "l", "--out", "m.pt", "--seed", "-1"], "--seed"),
    (["annotate", "--corpus", "c", "--model", "m", "--batch-rows", "0"], "--batch-rows"),
    (["agreement", "--reference", "a", "--annotations", "b", "--bootstrap", "-5"],
     "--bootstrap"),
    (["demo", "--seed", "-1"], "--seed"),
])
def test_numeric_options_are_range_checked(argv: list[str], named: str,
                                           capsys: pytest.CaptureFixture[str]):
    """In-process (the same parser the CLI builds): argparse's one line, exit 2."""
    with pytest.raises(SystemExit) as exc:
        main(["curate", *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1
    assert named in err and "Traceback" not in err


def test_empty_recipe_is_one_line(built: Path):
    proc = run_cli("curate", "query", "--recipe", "", "--corpus", built / "store")
    assert_user_error(proc, "--recipe", "must not be empty")


def test_outputs_naming_a_directory_or_an_impossible_place(built: Path, tmp_path: Path):
    (tmp_path / "file").write_text("x")
    for output, named in ((tmp_path, "is a directory"),
                          (tmp_path / "file" / "out.jsonl", "is not a directory")):
        proc = run_cli("curate", "query", "SELECT id FROM documents", "--corpus",
                       built / "store", "--output", output)
        assert_user_error(proc, "--output", named)
    assert [p.name for p in tmp_path.iterdir()] == ["file"]
