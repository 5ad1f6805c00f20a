"""``curate serve``: a local web page over one corpus store, for people rather than scripts.

It browses the annotated documents with their codes and confidences, runs a shipped
recipe or the user's SQL, draws per-category code distributions and exports the
selection. Every query goes through the same :class:`Sandbox` as ``curate query``, so the
page can do nothing the CLI cannot, and every refusal reaches the page as a message.

The server (:class:`~sparsegnn.curation.serve_http.GuardedHTTPServer`) trusts nothing:

- it listens on 127.0.0.1 only, and answers only requests naming that host (a page on
  another site cannot reach it by rebinding a DNS name to 127.0.0.1);
- every request must carry the random token printed at start (403 otherwise), so other
  local users and other sites' pages cannot run queries through it;
- query text, document text and codes are data: the page is static, fetches JSON and
  writes it with ``textContent``, under a Content-Security-Policy that allows only its
  own nonce-marked inline script and style and requests to itself;
- there is no file-serving route (no path from a request ever reaches the disk), request
  bodies, rows per page, characters per cell and bars per chart are bounded, and at most
  ``MAX_QUERIES`` queries run at once;
- a connection costs no thread until its whole request head has arrived (within
  ``timeout_s`` of connecting), a fixed pool of ``workers`` threads serves requests, every
  read and write times out, and a client that goes away is one debug line, not a traceback.
"""

from __future__ import annotations

import json
import secrets
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sparsegnn.curation.curation_errors import QueryError, SandboxError, SchemaError
from sparsegnn.curation.document_store import ANNOTATIONS_FILE, DOCUMENTS_FILE, GRAPH_FILE
from sparsegnn.curation.export import export
from sparsegnn.curation.recipes import list_recipes, recipe_sql
from sparsegnn.curation.sandbox import CorpusFiles, Limits, Sandbox
from sparsegnn.curation.serve_http import (
    CONNECTION_TIMEOUT_S,
    WORKERS,
    GuardedHandler,
    GuardedHTTPServer,
)
from sparsegnn.curation.serve_page import page_html
from sparsegnn.errors import InvalidValueError
from sparsegnn.optional import require

HOST = "127.0.0.1"
MAX_PAGE_ROWS = 200
MAX_CELL_CHARS = 400
MAX_BODY_BYTES = 64 * 1024
MAX_BARS = 20
MAX_QUERIES = 2
EXPORTS = {"parquet": "application/vnd.apache.parquet", "csv": "text/csv; charset=utf-8"}
TAXONOMY = "eai_taxonomy"
_SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store", "X-Frame-Options": "DENY",
    "Cross-Origin-Resource-Policy": "same-origin",
}


class RequestError(Exception):
    """A request the server answers with ``status`` and a JSON ``{"error", "kind"}``."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


@dataclass(frozen=True)
class Selection:
    """What to run: a recipe's or the user's SQL, and its ``?`` values."""

    sql: str
    params: tuple[str, ...] = ()

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> Selection:
        recipe, sql, params = body.get("recipe"), body.get("sql"), body.get("params", [])
        if (recipe is None) == (sql is None):
            raise RequestError(400, "error", "give either 'sql' or 'recipe', not both or neither")
        if not isinstance(params, list) or not all(isinstance(p, str) for p in params):
            raise RequestError(400, "error", "'params' must be a list of strings")
        if recipe is not None:
            if not isinstance(recipe, str):
                raise RequestError(400, "error", "'recipe' must be a recipe name")
            return cls(recipe_sql(recipe), tuple(params))
        if not isinstance(sql, str) or not sql.strip():
            raise RequestError(400, "error", "'sql' must be a non-empty SELECT")
        return cls(sql, tuple(params))


# --------------------------------------------------------------------------- results
def run_page(box: Sandbox, selection: Selection, offset: int, limit: int) -> dict[str, Any]:
    """Rows ``offset .. offset + limit`` of the selection, its row count and the
    distribution of every category's primary codes over all of it.

    The result is streamed batch by batch, so a selection of any size costs the memory of
    one batch plus the page, not of the whole result."""
    rows: list[dict[str, Any]] = []
    columns: list[str] = []
    counts: dict[str, Counter[str]] = {}
    labels: dict[str, dict[str, str]] = {}
    total = 0
    for batch in box.batches(selection.sql, selection.params, rows=4096):
        columns = columns or [n for n in batch.schema.names if n != TAXONOMY]
        if TAXONOMY in batch.schema.names:
            _count_codes(batch.column(TAXONOMY), counts, labels)
        start, stop = max(offset - total, 0), min(offset + limit - total, batch.num_rows)
        if start < stop:
            rows += [_display(r, columns) for r in batch.slice(start, stop - start).to_pylist()]
        total += batch.num_rows
    return {"columns": columns, "rows": rows, "total": total, "offset": offset,
            "distributions": {cat: _bars(c, labels[cat]) for cat, c in counts.items() if c}}


def _display(row: dict[str, Any], columns: list[str]) -> dict[str, Any]:
    """One row as the page shows it: short text cells, and each category's codes."""
    codes = _codes(row.get(TAXONOMY))
    return {"cells": [_cell(row[c]) for c in columns], "codes": codes}


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else (
        "" if value is None else json.dumps(value, default=str, ensure_ascii=False))
    return text if len(text) <= MAX_CELL_CHARS else text[:MAX_CELL_CHARS] + "…"


def _codes(taxonomy: Any) -> dict[str, dict[str, Any]]:
    """``{category: {code, label, secondary, confidence}}`` from an ``eai_taxonomy`` value
    (empty where the column is absent or shaped otherwise: a user's SQL may name any
    column so)."""
    if not isinstance(taxonomy, dict):
        return {}
    out = {}
    for cat, value in taxonomy.items():
        if isinstance(value, dict) and isinstance(value.get("primary"), dict):
            primary, secondary = value["primary"], value.get("secondary") or {}
            confidence = value.get("confidence")
            out[cat] = {"code": _cell(primary.get("code")), "label": _cell(_label(primary)),
                        "secondary": _cell(secondary.get("code")),
                        "confidence": confidence if isinstance(confidence, float) else None}
    return out


def _label(code: dict[str, Any]) -> str:
    """A flat code's label, or an FDC code's deepest level label."""
    if "labels" in code and isinstance(code["labels"], dict):
        return next((v for v in reversed(list(code["labels"].values())) if v), "")
    return str(code.get("label") or "")


def _count_codes(taxonomy: Any, counts: dict[str, Counter[str]],
                 labels: dict[str, dict[str, str]]) -> None:
    """Add one batch's primary codes per category (FDC at level 1, its ten main classes)."""
    pa = require("pyarrow")
    if not pa.types.is_struct(taxonomy.type):
        return
    for field in taxonomy.type:
        columns = _code_columns(taxonomy, field)
        if columns is None:
            continue
        groups = pa.table(dict(zip(("code", "label"), columns, strict=True))).group_by(
            ["code", "label"]).aggregate([("code", "count")])
        seen, names = counts.setdefault(field.name, Counter()), labels.setdefault(field.name, {})
        for c, lab, n in zip(*(groups.column(k).to_pylist()
                               for k in ("code", "label", "code_count")), strict=True):
            if c is not None:
                seen[c] += n
                names.setdefault(c, str(lab or ""))


def _code_columns(taxonomy: Any, field: Any) -> tuple[Any, Any] | None:
    """The primary code and label arrays of one category, FDC codes cut to level 1; None
    where the column is not shaped like our annotations (a user's SQL can name anything
    ``eai_taxonomy``)."""
    pa, pc = require("pyarrow"), require("pyarrow.compute")
    primary_type = _child(field.type, "primary")
    code_type = _child(primary_type, "code")
    if code_type is None or not pa.types.is_string(code_type):
        return None
    primary = pc.struct_field(taxonomy, [field.name, "primary"])
    code = pc.struct_field(primary, ["code"])
    level_1 = _child(_child(primary_type, "labels"), "level_1")
    if level_1 is not None and pa.types.is_string(level_1):
        return (pc.utf8_slice_codeunits(code, 0, 1),
                pc.struct_field(primary, ["labels", "level_1"]))
    label = _child(primary_type, "label")
    if label is not None and pa.types.is_string(label):
        return code, pc.struct_field(primary, ["label"])
    return code, code


def _child(struct_type: Any, name: str) -> Any:
    """The type of field ``name`` of a struct type (None if either is missing)."""
    pa = require("pyarrow")
    if struct_type is None or not pa.types.is_struct(struct_type):
        return None
    index = struct_type.get_field_index(name)
    return None if index < 0 else struct_type.field(index).type


def _bars(counts: Counter[str], labels: dict[str, str]) -> list[dict[str, Any]]:
    """The ``MAX_BARS - 1`` most frequent codes and, past them, one bar for the rest."""
    common = counts.most_common()
    bars = [{"code": _cell(c), "label": _cell(labels.get(c, "")), "count": n}
            for c, n in common[:MAX_BARS - 1]]
    rest = sum(n for _, n in common[MAX_BARS - 1:])
    if rest:
        bars.append({"code": "other", "label": f"{len(common) - MAX_BARS + 1} more codes",
                     "count": rest})
    return bars


def export_selection(box: Sandbox, selection: Selection, fmt: str, protected: Iterable[Path],
                 send: Callable[[Path], None]) -> None:
    """Export the selection through ``curate query --output``'s path (to a private
    temporary folder) and hand the finished file to ``send``."""
    with tempfile.TemporaryDirectory(prefix="sparsegnn-serve-") as tmp:
        path = Path(tmp) / f"selection.{fmt}"
        export(box.batches(selection.sql, selection.params), path, protected)
        send(path)


# --------------------------------------------------------------------------- the server
class CurationServer(GuardedHTTPServer):
    """The page and its JSON API over one store, on 127.0.0.1 with a random token;
    ``timeout_s`` and ``workers`` as in :class:`GuardedHTTPServer`."""

    def __init__(self, corpus: str | Path, port: int = 0, limits: Limits | None = None, *,
                 timeout_s: float = CONNECTION_TIMEOUT_S, workers: int = WORKERS) -> None:
        self.corpus = Path(corpus)
        self.files = CorpusFiles.in_dir(self.corpus)
        self.files.check()
        self.limits = limits or Limits()
        self.token = secrets.token_urlsafe(24)
        self.queries = threading.BoundedSemaphore(MAX_QUERIES)
        try:
            super().__init__((HOST, port), _Handler, timeout_s=timeout_s, workers=workers)
        except OSError as err:  # a port in use or reserved: the user's choice, one line
            raise InvalidValueError(f"cannot listen on {HOST}:{port} ({err.strerror or err}); "
                                    "choose another --port, or 0 for any free one") from None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server_port}/?token={self.token}"

    @property
    def store_files(self) -> list[Path]:
        """The store's own files, which an export must never replace."""
        return [self.corpus / n for n in (DOCUMENTS_FILE, GRAPH_FILE, ANNOTATIONS_FILE)]

    @contextmanager
    def sandbox(self) -> Iterator[Sandbox]:
        """A fresh sandbox for one request, counted against ``MAX_QUERIES``."""
        if not self.queries.acquire(blocking=False):
            raise RequestError(503, "busy", f"{MAX_QUERIES} queries are already running; "
                                            "try again when one has finished")
        try:
            with Sandbox(self.files, self.limits) as box:
                yield box
        finally:
            self.queries.release()


class _Handler(GuardedHandler):
    server: CurationServer
    server_version = "sparsegnn-curate"
    sys_version = ""

    def do_GET(self) -> None:
        self._respond({"/": self._page, "/api/recipes": self._recipes})

    def do_POST(self) -> None:
        self._respond({"/api/query": self._query, "/api/export": self._export})

    def _respond(self, routes: dict[str, Callable[[], None]]) -> None:
        """Check host and token, then route; errors become JSON messages."""
        try:
            self._check_origin()
            route = routes.get(urlsplit(self.path).path)
            if route is None:
                raise RequestError(404, "error", "no such page")
            route()
        except RequestError as err:
            self._json({"error": str(err), "kind": err.kind}, err.status)
        except SandboxError as err:  # a well-formed request whose SQL the sandbox refuses
            self._json({"error": str(err), "kind": "refused"}, 422)
        except (QueryError, SchemaError) as err:
            self._json({"error": str(err), "kind": "error"}, 422)

    def _check_origin(self) -> None:
        host = self.headers.get("Host", "")
        port = self.server.server_port
        if host not in (f"{HOST}:{port}", f"localhost:{port}"):
            raise RequestError(403, "forbidden", "this server answers only 127.0.0.1")
        token = parse_qs(urlsplit(self.path).query).get("token", [""])[0]
        if not secrets.compare_digest(token.encode(), self.server.token.encode()):
            raise RequestError(403, "forbidden", "open the URL with the token that "
                                                 "`sparsegnn curate serve` printed")

    # ------------------------------------------------------------------ routes
    def _page(self) -> None:
        nonce = secrets.token_urlsafe(16)
        csp = (f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
               "img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
               "frame-ancestors 'none'")
        self._send(200, page_html(nonce).encode(), "text/html; charset=utf-8",
                   {"Content-Security-Policy": csp})

    def _recipes(self) -> None:
        self._json({"recipes": {name: recipe_sql(name) for name in list_recipes()}})

    def _query(self) -> None:
        body = self._body()
        offset, limit = body.get("offset", 0), body.get("limit", 50)
        if not isinstance(offset, int) or offset < 0:
            raise RequestError(400, "error", "'offset' must be a whole number >= 0")
        if not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_ROWS:
            raise RequestError(400, "error", f"'limit' must be 1 to {MAX_PAGE_ROWS}")
        selection = Selection.from_body(body)
        with self.server.sandbox() as box:
            self._json(run_page(box, selection, offset, limit))

    def _export(self) -> None:
        body = self._body()
        fmt = body.get("format")
        if fmt not in EXPORTS:
            raise RequestError(400, "error", f"'format' must be one of {', '.join(EXPORTS)}")
        selection = Selection.from_body(body)
        with self.server.sandbox() as box:
            export_selection(box, selection, fmt, self.server.store_files,
                         lambda path: self._send_file(path, EXPORTS[fmt]))

    # ------------------------------------------------------------------ plumbing
    def _body(self) -> dict[str, Any]:
        """The request's JSON object (bounded in size; JSON only, which a cross-site form
        cannot send)."""
        if self.headers.get_content_type() != "application/json":
            raise RequestError(415, "error", "send the request as application/json")
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise RequestError(411, "error", "the request needs a Content-Length") from None
        if not 0 <= length <= MAX_BODY_BYTES:
            raise RequestError(413, "error", f"request body over {MAX_BODY_BYTES} bytes")
        try:
            body = json.loads(self.rfile.read(length))
        except (ValueError, UnicodeDecodeError):
            raise RequestError(400, "error", "the request body is not JSON") from None
        if not isinstance(body, dict):
            raise RequestError(400, "error", "the request body must be a JSON object")
        return body

    def _json(self, payload: dict[str, Any], status: int = 200) -> None:
        self._send(status, json.dumps(payload, default=str).encode(),
                   "application/json; charset=utf-8")

    def _send(self, status: int, data: bytes, content_type: str,
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in {**_SECURITY_HEADERS, **(extra or {}),
                           "Content-Type": content_type,
                           "Content-Length": str(len(data))}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_file(self, path: Path, content_type: str) -> None:
        self.send_response(200)
        headers = {**_SECURITY_HEADERS, "Content-Type": content_type,
                   "Content-Length": str(path.stat().st_size),
                   "Content-Disposition": f'attachment; filename="{path.name}"'}
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                self.wfile.write(chunk)
