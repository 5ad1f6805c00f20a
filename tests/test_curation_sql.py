"""Recipes on hand-made rows, and every refusal of the SQL sandbox."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sparsegnn.curation import (
    CorpusFiles,
    Prediction,
    QueryError,
    Sandbox,
    SandboxError,
    annotation_batch,
    essential_web,
    list_recipes,
    recipe_sql,
)

duckdb = pytest.importorskip("duckdb")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

# Passes the math recipe: 51x topic, reference doc, knowledge article, basic reasoning...
MATH = {"free_decimal_correspondence": ("513.2", "510"), "document_type_v1": ("3", None),
        "document_type_v2": ("10", None), "reasoning_depth": ("3", None),
        "technical_correctness": ("4", None)}
# Programming documentation: passes code and STEM.
CODE = {"free_decimal_correspondence": ("005.13", "005.1"), "document_type_v1": ("4", None),
        "document_type_v2": ("8", None), "reasoning_depth": ("3", None),
        "technical_correctness": ("4", None)}
# A medical academic article: passes medical and STEM.
MED = {"free_decimal_correspondence": ("616.1", "570"), "document_type_v1": ("2", None),
       "document_type_v2": ("3", None), "reasoning_depth": ("4", None),
       "technical_correctness": ("3", None)}


def _with(base: dict, **changes: tuple[str, str | None]) -> dict:
    return {**base, **changes}


ROWS: dict[str, dict] = {
    "math": MATH,
    "math_news": _with(MATH, document_type_v1=("1", None)),
    "math_blog_v2": _with(MATH, document_type_v2=("14", None)),
    "math_shallow": _with(MATH, reasoning_depth=("1", None)),
    "math_flawed": _with(MATH, technical_correctness=("3", None)),
    "physics": _with(MATH, free_decimal_correspondence=("530", "510")),
    "code": CODE,
    "code_product": _with(CODE, document_type_v2=("17", None)),
    "code_flawed": _with(CODE, technical_correctness=("1", None)),
    "code_hardware": _with(CODE, free_decimal_correspondence=("004.1", "005.1")),
    "med": MED,
    "med_only": _with(MED, free_decimal_correspondence=("616", None)),
    "med_law": _with(MED, free_decimal_correspondence=("616", "340")),
    "med_spam": _with(MED, document_type_v2=("19", None)),
    "med_news": _with(MED, document_type_v1=("1", None), document_type_v2=("14", None)),
    "med_ad": _with(MED, document_type_v1=("6", None)),
    "history": _with(MATH, free_decimal_correspondence=("940", "930")),
    "stem_mixed": _with(MED, free_decimal_correspondence=("530", "780")),
    "stem_no_reason": _with(MED, reasoning_depth=("1", None)),
}
EXPECTED = {
    "math": {"math"},
    "code": {"code"},
    # medical has no reasoning check, so stem_no_reason (a medical row) passes it
    "medical": {"med", "med_only", "stem_no_reason"},
    "stem": {"math", "math_flawed", "physics", "code", "code_flawed", "med", "med_only"},
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    ids = list(ROWS)
    pq.write_table(pa.table({"id": ids, "text": [f"text of {i}" for i in ids]}),
                   folder / "documents.parquet")
    preds = {}
    for cat in essential_web().names:
        if cat not in MATH:
            continue
        prim = np.array([ROWS[i][cat][0] for i in ids], dtype=object)
        sec = np.array([ROWS[i][cat][1] for i in ids], dtype=object)
        preds[cat] = Prediction(prim, sec, np.ones(len(ids), dtype=np.float32))
    batch = annotation_batch(ids, preds, essential_web())
    pq.write_table(pa.Table.from_batches([batch]), folder / "annotations.parquet")
    return folder


@pytest.fixture(scope="module")
def box(corpus: Path):
    """One sandbox for the read-only tests (each refused statement leaves it unchanged)."""
    with Sandbox(CorpusFiles.in_dir(corpus)) as sandbox:
        yield sandbox


def test_recipes_shipped():
    assert list_recipes() == ["code", "math", "medical", "stem"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recipe_selects_exactly_the_rows_that_pass(box: Sandbox, name: str):
    got = set(box.execute(recipe_sql(name)).column("id").to_pylist())
    assert got == EXPECTED[name]
    # every "must not pass" row is in the corpus, so the check has teeth both ways
    assert EXPECTED[name] < set(ROWS)


def test_stem_branches_fail_on_their_own_rules(box: Sandbox):
    got = set(box.execute(recipe_sql("stem")).column("id").to_pylist())
    # default branch: news/blog types; code branch: product page; hardware (004) is not
    # code, so the default branch's types apply; medical branch: ads, spam; topic pairs
    assert not got & {"math_news", "math_blog_v2", "code_product", "code_hardware",
                      "med_ad", "med_spam", "med_news", "history", "stem_mixed", "med_law",
                      "math_shallow", "stem_no_reason"}


def test_parameters_are_bound(box: Sandbox):
    table = box.execute("SELECT id FROM corpus WHERE id = ?", ["math"])
    injected = box.execute("SELECT id FROM corpus WHERE id = ?", ["x' OR '1'='1"])
    assert table.column("id").to_pylist() == ["math"]
    assert injected.num_rows == 0


def test_annotation_layout_reads_like_essential_web(box: Sandbox):
    row = box.execute(
        "SELECT eai_taxonomy.free_decimal_correspondence.primary.labels.level_2 AS l2, "
        "eai_taxonomy.document_type_v2.primary.label AS dt2 FROM corpus WHERE id = 'code'"
    ).to_pylist()[0]
    assert row == {"l2": "General works, books and libraries, information sciences",
                   "dt2": "Documentation"}


@pytest.mark.parametrize("sql, message", [
    ("COPY (SELECT * FROM corpus) TO '{tmp}/leak.csv'", "COPY statements are not allowed"),
    ("ATTACH '{tmp}/other.duckdb' AS other", "ATTACH statements are not allowed"),
    ("INSTALL httpfs", "statements are not allowed"),
    ("LOAD httpfs", "statements are not allowed"),
    ("SET enable_external_access = true", "SET statements are not allowed"),
    ("CREATE TABLE t AS SELECT 1", "CREATE statements are not allowed"),
    ("SELECT 1; SELECT 2", "exactly one SQL statement"),
    ("PRAGMA version", "PRAGMA statements are not allowed"),  # DuckDB alone would run it
    ("EXPLAIN ANALYZE COPY (SELECT 1) TO '{tmp}/leak.csv'", "EXPLAIN statements are not"),
    ("SELECT * FROM read_csv('/etc/passwd')", r"table function read_csv\(\) is not allowed"),
    ("SELECT * FROM read_text('{tmp}/secret.txt')", "read_text.* is not allowed"),
    ("SELECT * FROM glob('/etc/*')", r"glob\(\) is not allowed"),
    ("SELECT * FROM '{tmp}/secret.txt'", "is not a table of the curation sandbox"),
    ("SELECT * FROM duckdb_settings()", r"duckdb_settings\(\) is not allowed"),
    ("SELECT current_setting('temp_directory')", r"current_setting\(\) is not allowed"),
    ("SELECT * FROM pg_catalog.pg_settings", "is not a table of the curation sandbox"),
    ("SELECT * FROM query('SELECT 1')", r"query\(\) is not allowed"),
    ("WITH pg_settings AS (SELECT 1) SELECT * FROM pg_settings", "named like a system table"),
])
def test_sandbox_refuses(box: Sandbox, tmp_path: Path, sql: str, message: str):
    (tmp_path / "secret.txt").write_text("secret")
    with pytest.raises(SandboxError, match=message):
        box.execute(sql.format(tmp=tmp_path))
    assert not (tmp_path / "leak.csv").exists()
    assert not (tmp_path / "other.duckdb").exists()


@pytest.mark.parametrize("sql", [
    "COPY (SELECT 1) TO '{tmp}/leak.csv'",
    "EXPLAIN ANALYZE COPY (SELECT 1) TO '{tmp}/leak.csv'",
    "COPY (SELECT 1) TO '{corpus}/documents.parquet' (FORMAT parquet, USE_TMP_FILE false)",
    "ATTACH '{tmp}/other.duckdb' AS other",
    "INSTALL httpfs",
    "SET enable_external_access = true",
    "SET allowed_paths = ['{corpus}/documents.parquet']",
    "SET lock_configuration = false",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_parquet('{corpus}/documents.parquet')",
    "SELECT * FROM glob('/etc/*')",
])
def test_connection_itself_is_locked(box: Sandbox, corpus: Path, tmp_path: Path, sql: str):
    """The file wall: even past the statement check, DuckDB can reach no file, the corpus's
    own included (the sandbox reads those through Arrow, not through DuckDB)."""
    before = {p: p.read_bytes() for p in corpus.iterdir()}
    with pytest.raises(duckdb.Error):
        box._con.execute(sql.format(tmp=tmp_path, corpus=corpus)).fetchall()
    assert not list(tmp_path.iterdir())
    assert {p: p.read_bytes() for p in corpus.iterdir()} == before


def test_bad_sql_is_a_query_error(box: Sandbox):
    with pytest.raises(QueryError, match="does not parse"):
        box.execute("SELEC 1")
    with pytest.raises(QueryError, match="query failed"):
        box.execute("SELECT no_such_column FROM corpus")


def test_missing_corpus_is_explained(tmp_path: Path):
    with pytest.raises(QueryError, match="run `sparsegnn curate ingest`"):
        Sandbox(CorpusFiles.in_dir(tmp_path))


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_export_selected_documents(box: Sandbox, tmp_path: Path, suffix: str):
    from sparsegnn.curation.export import export

    out = tmp_path / f"math{suffix}"
    assert export(box.batches(recipe_sql("math"), rows=1), out) == 1
    if suffix == ".parquet":
        assert pq.read_table(out).column("id").to_pylist() == ["math"]
    else:
        assert '"id": "math"' in out.read_text()
    with pytest.raises(QueryError, match=r"export to \.parquet, \.jsonl or \.csv"):
        export(box.batches("SELECT 1"), tmp_path / "x.txt")
