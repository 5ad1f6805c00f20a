"""User SQL over a corpus, in a DuckDB sandbox that cannot touch a file.

The walls, each enough on its own for the file cases we test:

1. DuckDB never sees a path. The corpus's Parquet files are opened by Python
   (``pyarrow.dataset``, read-only, scanned lazily batch by batch) and registered as
   Arrow sources in an *in-memory* connection that was created with
   ``enable_external_access=false``, no ``allowed_paths``/``allowed_directories``, no
   spill folder, Python replacement scans and extension auto-loading off, and then
   ``lock_configuration=true``. So ``COPY ... TO``, ``ATTACH``, ``read_csv('/etc/passwd')``
   or ``glob`` fail inside DuckDB whatever the statement, and no setting can be turned
   back: the originals are unreachable from SQL. An in-memory connection also needs no
   temporary folder, so a killed query leaves nothing behind.
2. Only one plain ``SELECT`` runs, judged by the statement type DuckDB's own parser
   reports (never a regex): no ``EXPLAIN`` (``EXPLAIN ANALYZE`` runs its inner
   statement), ``COPY``, ``ATTACH``, ``SET``, ``PRAGMA``, ``INSTALL``/``LOAD`` or DDL.
3. The parsed tree of that SELECT (``json_serialize_sql``) may name only the corpus
   views, its own CTEs and the table functions ``range``/``generate_series``/``unnest``,
   and no function that reads settings or runs SQL text (``current_setting``,
   ``duckdb_settings()``, ``pg_settings``, ``query(...)``): those reveal local paths
   (the working directory, the home folder) or bypass this check.

Every query runs under a time limit and a memory limit (DuckDB's ``memory_limit``, with
no spilling to disk), and Ctrl-C stops it: the query runs on a worker thread while the
main thread waits, so the wait can call ``interrupt()`` on the connection.

The views are ``documents`` (the document store), ``annotations`` (the annotator's output)
and ``corpus`` (the two joined on ``id``). Parameters are bound with ``?``, never formatted
into the SQL.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from sparsegnn.curation.curation_errors import QueryError, SandboxError
from sparsegnn.curation.document_store import check_annotations
from sparsegnn.optional import require

log = logging.getLogger(__name__)

VIEWS = ("documents", "annotations", "corpus")
_TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})
# Functions that read the configuration or catalog (paths), or run SQL given as text.
_DENIED_FUNCTIONS = frozenset({"current_setting", "getvariable", "getenv", "query",
                               "query_table", "which_secret"})
_DENIED_PREFIXES = ("duckdb_", "pragma_", "json_serialize", "json_deserialize",
                    "json_execute")
_STOP_GRACE_S = 10.0  # how long an interrupted query may take to wind down


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
        """Both files exist, and the annotations were made for these very documents."""
        for path in (self.documents, self.annotations):
            if path is not None and not path.is_file():
                raise QueryError(f"{path}: no such Parquet file; run `sparsegnn curate ingest` "
                                 "(documents) or `annotate` (annotations) first")
        if self.annotations is not None:
            check_annotations(self.documents, self.annotations)


@dataclass(frozen=True)
class Limits:
    """What one query may spend: wall-clock seconds (including reading out its rows) and
    DuckDB memory in bytes (past it the query fails; nothing spills to disk)."""

    timeout_s: float = 900.0
    memory_bytes: int = 4 * 2**30


def _dataset(path: Path) -> Any:
    """A lazily scanned, read-only Arrow view of one Parquet file."""
    ds = require("pyarrow.dataset")
    try:
        return ds.dataset(str(path), format="parquet")
    except (OSError, ValueError) as err:
        raise QueryError(f"{path}: not a readable Parquet file ({_first_line(err)})") from None


def _connect(files: CorpusFiles, limits: Limits) -> tuple[Any, list[Any]]:
    """The locked in-memory connection with the corpus views, and the datasets it scans
    (kept alive for as long as the connection)."""
    duckdb = require("duckdb", "for sandboxed SQL")
    con = duckdb.connect(":memory:", config={
        "enable_external_access": False, "autoinstall_known_extensions": False,
        "autoload_known_extensions": False, "python_enable_replacements": False,
        "temp_directory": "", "memory_limit": f"{limits.memory_bytes}B",
    })
    sources = [_dataset(files.documents)]
    con.register("documents", sources[0])
    if files.annotations is None:
        con.execute("CREATE TEMP VIEW corpus AS SELECT * FROM documents")
    else:
        sources.append(_dataset(files.annotations))
        con.register("annotations", sources[1])
        con.execute("CREATE TEMP VIEW corpus AS "
                    "SELECT * FROM documents JOIN annotations USING (id)")
    con.execute("SET lock_configuration = true")
    return con, sources


def _catalog_names(con: Any) -> frozenset[str]:
    """Every table and view name DuckDB knows (``pg_settings``, ``duckdb_tables`` ...); a CTE
    must not take one of these names, or a reference outside its scope could reach them."""
    rows = con.execute("SELECT lower(table_name) FROM duckdb_tables() UNION "
                       "SELECT lower(view_name) FROM duckdb_views()").fetchall()
    return frozenset(r[0] for r in rows) - set(VIEWS)


class Sandbox:
    """A locked, in-memory DuckDB connection over one corpus; use as a context manager."""

    def __init__(self, files: CorpusFiles, limits: Limits | None = None) -> None:
        files.check()
        self._duckdb = require("duckdb", "for sandboxed SQL")
        self.limits = limits or Limits()
        self._con, self._sources = _connect(files, self.limits)
        self._reserved = _catalog_names(self._con)
        self._stuck = False

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection. Right after an interrupt DuckDB may still call it busy for
        a moment, so retry for a bounded time; a query that ignored its interrupt keeps
        it busy, and it then goes with the process (nothing of it is on disk)."""
        busy = getattr(self._duckdb, "ResourceInUseException", self._duckdb.Error)
        end = time.monotonic() + (0.0 if self._stuck else _STOP_GRACE_S)
        while True:
            try:
                self._con.close()
                return
            except busy:
                if time.monotonic() >= end:
                    return
                time.sleep(0.05)

    # ---------------------------------------------------------------- the statement check
    def check(self, sql: str) -> None:
        """Refuse anything but one plain SELECT over the corpus views (see module doc)."""
        try:
            statements = self._con.extract_statements(sql)
        except self._duckdb.Error as err:
            raise QueryError(f"SQL does not parse: {_first_line(err)}") from None
        if len(statements) != 1:
            raise SandboxError(f"expected exactly one SQL statement, got {len(statements)}")
        kind = statements[0].type.name
        if kind != "SELECT":
            raise SandboxError(f"{kind} statements are not allowed in the curation sandbox; "
                               "only SELECT queries run (use --output to export results)")
        serialized = self._con.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()
        tree = json.loads(serialized[0][0])
        if tree.get("error"):
            raise SandboxError(f"this SELECT cannot be checked by the sandbox: "
                               f"{tree.get('error_message', 'unknown form')}")
        _check_tree(tree["statements"], self._reserved)

    # ---------------------------------------------------------------- running
    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one checked query and return its rows as a ``pyarrow.Table``."""
        deadline = self._start(sql)
        relation = self._relation(sql, params, deadline)
        return self._run(lambda: _method(relation, "to_arrow_table", "fetch_arrow_table")(),
                         deadline)

    def batches(self, sql: str, params: Sequence[Any] = (), rows: int = 65536) -> Iterator[Any]:
        """The result as ``pyarrow.RecordBatch`` chunks, for exports larger than memory.

        The time limit covers the whole read-out, export included."""
        deadline = self._start(sql)
        relation = self._relation(sql, params, deadline)
        reader = self._run(lambda: _method(relation, "to_arrow_reader", "fetch_arrow_reader")(
            rows), deadline)
        empty = True
        while True:
            try:
                batch = self._run(reader.read_next_batch, deadline)
            except StopIteration:
                if empty:  # no row matched: one empty batch, so exports keep the columns
                    yield _empty_batch(reader.schema)
                return
            empty = False
            yield batch

    def _start(self, sql: str) -> float:
        self.check(sql)
        log.debug("sandbox: running query (timeout %s s, memory limit %d bytes)",
                  self.limits.timeout_s, self.limits.memory_bytes)
        return time.monotonic() + self.limits.timeout_s

    def _relation(self, sql: str, params: Sequence[Any], deadline: float) -> Any:
        relation = self._run(lambda: self._con.sql(sql, params=list(params) or None), deadline)
        if relation is None:
            raise QueryError("the statement returned no rows")
        return relation

    def _run(self, call: Callable[[], Any], deadline: float) -> Any:
        """``call()`` on a worker thread, stopped at ``deadline`` or on Ctrl-C.

        The main thread only waits (a wait Ctrl-C can break), so it can interrupt the
        connection whatever DuckDB is doing; DuckDB's errors become ours."""
        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["value"] = call()
            except BaseException as err:  # handed to the main thread, which re-raises it
                outcome["error"] = err

        worker = threading.Thread(target=work, name="sparsegnn-sql", daemon=True)
        worker.start()
        try:
            worker.join(max(deadline - time.monotonic(), 0.0))
        except KeyboardInterrupt:
            self._stop(worker)
            raise
        if worker.is_alive():
            self._stop(worker)
            raise QueryError(f"query stopped: it ran past its time limit of "
                             f"{self.limits.timeout_s:g} s (raise it with --timeout)")
        if "error" in outcome:
            raise self._translate(outcome["error"]) from None
        return outcome["value"]

    def _stop(self, worker: threading.Thread) -> None:
        """Interrupt the query and wait, a bounded time and through further Ctrl-Cs, for
        the worker to let go of the connection."""
        end = time.monotonic() + _STOP_GRACE_S
        while worker.is_alive() and time.monotonic() < end:
            self._con.interrupt()
            try:
                worker.join(0.1)
            except KeyboardInterrupt:
                continue
        self._stuck = worker.is_alive()

    def _translate(self, err: BaseException) -> BaseException:
        """DuckDB's error as ours: permission -> SandboxError, memory -> a limit message.

        Errors met while streaming rows arrive through Arrow's reader as Arrow errors
        (or a bare OSError, Arrow's IO error) carrying DuckDB's message, so all are read
        the same way."""
        pa = require("pyarrow")
        if not isinstance(err, self._duckdb.Error | pa.ArrowException | OSError):
            return err
        message = _first_line(err)
        if isinstance(err, self._duckdb.PermissionException):
            return SandboxError(f"refused by the sandbox: {message}")
        if (isinstance(err, self._duckdb.OutOfMemoryException)
                or message.startswith("Out of Memory Error")):
            return QueryError(f"query ran out of its memory limit of "
                              f"{self.limits.memory_bytes / 2**20:.0f} MiB (raise it with "
                              f"--memory-limit): {message}")
        return QueryError(f"query failed: {message}")


def _check_tree(node: Any, reserved: frozenset[str]) -> None:
    """Walk a ``json_serialize_sql`` tree: every function, table function and table name
    must be one the sandbox allows."""
    ctes = set(_cte_names(node))
    shadowing = sorted(ctes & reserved)
    if shadowing:
        raise SandboxError(f"a CTE may not be named like a system table: {shadowing[0]}")
    allowed_tables = set(VIEWS) | ctes
    for item in _nodes(node):
        if item.get("class") in ("FUNCTION", "WINDOW") and "function_name" in item:
            _check_function(str(item["function_name"]))
        kind = item.get("type")
        if kind == "TABLE_FUNCTION":
            name = str(item.get("function", {}).get("function_name", "")).lower()
            if name not in _TABLE_FUNCTIONS:
                raise SandboxError(f"table function {name}() is not allowed in the curation "
                                   f"sandbox; use {', '.join(sorted(_TABLE_FUNCTIONS))}")
        elif kind in ("BASE_TABLE", "SHOW_REF") and item.get("table_name"):
            _check_table(item, allowed_tables)


def _check_function(name: str) -> None:
    lower = name.lower()
    if lower in _DENIED_FUNCTIONS or lower.startswith(_DENIED_PREFIXES):
        raise SandboxError(f"function {name}() is not allowed in the curation sandbox: it "
                           "reads DuckDB's settings or catalog, or runs SQL text")


def _check_table(item: dict[str, Any], allowed: set[str]) -> None:
    name = str(item["table_name"]).lower()
    if item.get("schema_name") or item.get("catalog_name") or name not in allowed:
        qualified = ".".join(str(item[k]) for k in ("catalog_name", "schema_name", "table_name")
                             if item.get(k))
        raise SandboxError(f"{qualified} is not a table of the curation sandbox; query "
                           f"{', '.join(VIEWS)} or your own CTEs")


def _nodes(node: Any) -> Iterator[dict[str, Any]]:
    """Every dict in a JSON tree, depth first."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _cte_names(node: Any) -> Iterator[str]:
    for item in _nodes(node):
        cte_map = item.get("cte_map")
        if isinstance(cte_map, dict):
            yield from (str(entry["key"]).lower() for entry in cte_map.get("map", []))


def _empty_batch(schema: Any) -> Any:
    """A zero-row ``pyarrow.RecordBatch`` of ``schema``."""
    pa = require("pyarrow")
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema],
                                      schema=schema)


def _method(obj: Any, name: str, older: str) -> Callable[..., Any]:
    """``obj.name``, or its pre-1.4 DuckDB spelling ``obj.older``."""
    return getattr(obj, name, None) or getattr(obj, older)


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
