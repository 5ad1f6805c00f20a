"""User SQL over a corpus, in a DuckDB sandbox.

The sandbox has two walls, each enough on its own for the cases we test:

1. Only single ``SELECT`` (or ``EXPLAIN``) statements run. The check reads the statement
   types DuckDB's own parser reports, never a regex over the text, so ``COPY ... TO``,
   ``ATTACH``, ``INSTALL``/``LOAD``, ``SET``, ``PRAGMA`` and DDL are refused before they run.
2. The connection itself is locked down: the catalog is opened read-only; the corpus's
   Parquet files are the only ``allowed_paths``; ``enable_external_access=false`` is set
   *before* ``lock_configuration=true`` (after the lock nothing can be changed back), and
   extension auto-install/auto-load is off. So a ``SELECT`` that calls
   ``read_csv('/etc/passwd')`` or ``glob('/')`` fails inside DuckDB.

The views are ``documents`` (the document store), ``annotations`` (the annotator's output)
and ``corpus`` (the two joined on ``id``). Parameters are bound with ``?``, never formatted
into the SQL.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from sparsegnn.curation._optional import require
from sparsegnn.curation.errors import QueryError, SandboxError

_ALLOWED_STATEMENTS = ("SELECT", "EXPLAIN")


@dataclass(frozen=True)
class CorpusFiles:
    """The Parquet files a sandbox may read: the document store and, optionally, annotations."""

    documents: Path
    annotations: Path | None = None

    @classmethod
    def in_dir(cls, folder: str | Path) -> CorpusFiles:
        """The layout ``ingest`` and ``annotate`` write: documents.parquet, annotations.parquet."""
        folder = Path(folder)
        ann = folder / "annotations.parquet"
        return cls(folder / "documents.parquet", ann if ann.exists() else None)

    def check(self) -> None:
        for path in (self.documents, self.annotations):
            if path is not None and not path.is_file():
                raise QueryError(f"{path}: no such Parquet file; run `sparsegnn curate ingest` "
                                 "(documents) or `annotate` (annotations) first")


def _quote(path: Path) -> str:
    """A path as an SQL string literal; only used for our own view definitions, whose paths
    come from the corpus folder, not from user SQL."""
    return "'" + str(path).replace("'", "''") + "'"


def _write_catalog(catalog: Path, files: CorpusFiles) -> None:
    """A DuckDB database holding only the views over the corpus files."""
    duckdb = require("duckdb")
    with duckdb.connect(str(catalog)) as con:
        docs = _quote(files.documents)
        con.execute(f"CREATE VIEW documents AS SELECT * FROM read_parquet({docs})")
        if files.annotations is None:
            con.execute("CREATE VIEW corpus AS SELECT * FROM documents")
            return
        con.execute(
            f"CREATE VIEW annotations AS SELECT * FROM read_parquet({_quote(files.annotations)})"
        )
        con.execute("CREATE VIEW corpus AS SELECT * FROM documents JOIN annotations USING (id)")


def _lock_down(con: Any, files: CorpusFiles) -> None:
    """Restrict file access to the corpus, then freeze the configuration (order matters)."""
    allowed = [str(p) for p in (files.documents, files.annotations) if p is not None]
    con.execute("SET allowed_paths = ?", [allowed])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


class Sandbox:
    """A read-only, locked DuckDB connection over one corpus; use as a context manager."""

    def __init__(self, files: CorpusFiles) -> None:
        files.check()
        duckdb = require("duckdb")
        self._duckdb = duckdb
        self._tmp = tempfile.TemporaryDirectory(prefix="sparsegnn-sql-")
        catalog = Path(self._tmp.name) / "catalog.duckdb"
        _write_catalog(catalog, files)
        self._con = duckdb.connect(str(catalog), read_only=True, config={
            "autoinstall_known_extensions": False, "autoload_known_extensions": False,
        })
        _lock_down(self._con, files)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._con.close()
        self._tmp.cleanup()

    def check(self, sql: str) -> None:
        """Refuse anything but one SELECT/EXPLAIN statement, by its parsed type."""
        try:
            statements = self._con.extract_statements(sql)
        except self._duckdb.Error as err:
            raise QueryError(f"SQL does not parse: {_first_line(err)}") from None
        if len(statements) != 1:
            raise SandboxError(f"expected exactly one SQL statement, got {len(statements)}")
        kind = statements[0].type.name
        if kind not in _ALLOWED_STATEMENTS:
            raise SandboxError(f"{kind} statements are not allowed in the curation sandbox; "
                               "only SELECT queries run (use --output to export results)")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one checked query and return its rows as a ``pyarrow.Table``."""
        return self._fetch(sql, params, lambda rel: _method(rel, "to_arrow_table",
                                                            "fetch_arrow_table")())

    def batches(self, sql: str, params: Sequence[Any] = (), rows: int = 65536) -> Iterator[Any]:
        """The result as ``pyarrow.RecordBatch`` chunks, for exports larger than memory."""
        reader = self._fetch(sql, params, lambda rel: _method(
            rel, "to_arrow_reader", "fetch_arrow_reader")(rows))
        while True:
            try:
                batch = self._guard(reader.read_next_batch)
            except StopIteration:
                return
            yield batch

    def _fetch(self, sql: str, params: Sequence[Any], fetch: Callable[[Any], Any]) -> Any:
        self.check(sql)
        relation = self._guard(lambda: self._con.sql(sql, params=list(params) or None))
        if relation is None:
            raise QueryError("the statement returned no rows")
        return self._guard(lambda: fetch(relation))

    def _guard(self, call: Callable[[], Any]) -> Any:
        """Run ``call``, turning DuckDB's errors into ours (permission -> SandboxError)."""
        try:
            return call()
        except self._duckdb.PermissionException as err:
            raise SandboxError(f"refused by the sandbox: {_first_line(err)}") from None
        except self._duckdb.Error as err:
            raise QueryError(f"query failed: {_first_line(err)}") from None


def _method(obj: Any, name: str, older: str) -> Callable[..., Any]:
    """``obj.name``, or its pre-1.4 DuckDB spelling ``obj.older``."""
    return getattr(obj, name, None) or getattr(obj, older)


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
