"""``curate serve``: a local corpus browser over one store, for people rather than scripts.

It pages through the documents with their codes and confidences, sorts by a column,
narrows by facets, filters and a text search (written as SQL by
:mod:`~sparsegnn.curation.serve_view` and shown), runs a shipped recipe (those the
store's categories allow) or the user's SQL with ``?`` values, shows one row whole, and
exports any result as CSV, Parquet or JSON Lines. Every query goes through the same
:class:`Sandbox` as ``curate query``, so the page can do nothing the CLI cannot, and
every refusal or failure reaches the page as a message.

The app is Starlette on uvicorn (:mod:`~sparsegnn.curation.serve_http`), and trusts nothing:

- it listens on 127.0.0.1 only, and answers only requests naming that host and port (a
  page on another site cannot reach it by rebinding a DNS name to 127.0.0.1);
- every request must carry the random token printed at start (403 otherwise), so other
  local users and other sites' pages cannot run queries through it;
- query text, document text and codes are data: the page is static, fetches JSON and
  writes it with ``textContent``, under a Content-Security-Policy that allows only its
  own nonce-marked inline script and style and requests to itself;
- there is no file-serving route (no path from a request ever reaches the disk), request
  bodies, rows per page and characters per cell are bounded, at most ``MAX_QUERIES``
  queries run at once, and every error, a bug included, is answered with a JSON message.
"""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs

from sparsegnn.curation.curation_errors import QueryError, SandboxError, SchemaError
from sparsegnn.curation.document_store import ANNOTATIONS_FILE, DOCUMENTS_FILE, GRAPH_FILE
from sparsegnn.curation.export import export
from sparsegnn.curation.sandbox import CorpusFiles, Limits, Sandbox
from sparsegnn.curation.serve_http import CONNECTION_TIMEOUT_S, WORKERS, GuardedServer
from sparsegnn.curation.serve_page import page_html
from sparsegnn.curation.serve_results import MAX_PAGE_ROWS, row_detail, run_page
from sparsegnn.curation.serve_view import Recipes, View, ViewError
from sparsegnn.errors import InvalidValueError
from sparsegnn.optional import require

_anyio = require("anyio", "for curate serve")
_apps = require("starlette.applications", "for curate serve")
_background = require("starlette.background", "for curate serve")
_exceptions = require("starlette.exceptions", "for curate serve")
_middleware = require("starlette.middleware", "for curate serve")
_requests = require("starlette.requests", "for curate serve")
_responses = require("starlette.responses", "for curate serve")
_routing = require("starlette.routing", "for curate serve")

HOST = "127.0.0.1"
MAX_BODY_BYTES = 64 * 1024
MAX_QUERIES = 2
# format -> (file suffix, media type)
EXPORTS = {"csv": (".csv", "text/csv; charset=utf-8"),
           "parquet": (".parquet", "application/vnd.apache.parquet"),
           "json": (".jsonl", "application/x-ndjson")}
_SECURITY_HEADERS = [(k.encode(), v.encode()) for k, v in {
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store", "X-Frame-Options": "DENY",
    "Cross-Origin-Resource-Policy": "same-origin"}.items()]
T = TypeVar("T")


class RequestError(Exception):
    """A request the server answers with ``status`` and a JSON ``{"error", "kind"}``."""

    def __init__(self, status: int, kind: str, message: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.headers = status, kind, headers


def _json(payload: dict[str, Any], status: int = 200,
          headers: dict[str, str] | None = None) -> Any:
    return _responses.Response(json.dumps(payload, default=str).encode(), status, headers,
                               media_type="application/json; charset=utf-8")


class CurationServer(GuardedServer):
    """The page and its JSON API over one store, on 127.0.0.1 with a random token;
    ``timeout_s`` and ``workers`` as in :class:`GuardedServer`."""

    def __init__(self, corpus: str | Path, port: int = 0, limits: Limits | None = None, *,
                 timeout_s: float = CONNECTION_TIMEOUT_S, workers: int = WORKERS) -> None:
        self.corpus = Path(corpus)
        self.files = CorpusFiles.in_dir(self.corpus)
        self.files.check()
        self.limits = limits or Limits()
        self.token = secrets.token_urlsafe(24)
        self.recipes = Recipes.for_store(self.files)
        self.running = 0  # queries running now (read and written on the event loop only)
        try:
            super().__init__(_app(self), HOST, port, timeout_s=timeout_s, workers=workers)
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

    def refusal(self, scope: dict[str, Any]) -> str | None:
        """Why a request may not be answered (wrong host or token), or None."""
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin-1")
        if host not in (f"{HOST}:{self.server_port}", f"localhost:{self.server_port}"):
            return "this server answers only 127.0.0.1"
        query = parse_qs(scope["query_string"].decode("latin-1"))
        token = query.get("token", [""])[0]
        if not secrets.compare_digest(token.encode(), self.token.encode()):
            return "open the URL with the token that `sparsegnn curate serve` printed"
        return None

    async def run(self, work: Callable[[Sandbox], T]) -> T:
        """``work`` on a fresh sandbox, on a worker thread, counted against
        ``MAX_QUERIES``."""
        if self.running >= MAX_QUERIES:
            raise RequestError(503, "busy", f"{MAX_QUERIES} queries are already running; "
                                            "try again when one has finished")
        self.running += 1

        def job() -> T:
            with Sandbox(self.files, self.limits) as box:
                return work(box)

        try:
            return await _anyio.to_thread.run_sync(job, limiter=self.threads)
        finally:
            self.running -= 1

    async def body(self, request: Any) -> dict[str, Any]:
        """The request's JSON object: JSON only (which a cross-site form cannot send),
        bounded in size, arriving within the connection timeout."""
        content_type = request.headers.get("content-type", "").partition(";")[0].strip()
        if content_type != "application/json":
            raise RequestError(415, "error", "send the request as application/json")
        try:
            length = int(request.headers.get("content-length", ""))
        except ValueError:
            raise RequestError(411, "error", "the request needs a Content-Length") from None
        if not 0 <= length <= MAX_BODY_BYTES:
            raise RequestError(413, "error", f"request body over {MAX_BODY_BYTES} bytes")
        try:
            with _anyio.fail_after(self.connection_timeout):
                data = await request.body()
        except TimeoutError:
            raise RequestError(408, "error", f"the request body did not arrive within "
                               f"{self.connection_timeout:g} s",
                               {"Connection": "close"}) from None
        try:
            body = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise RequestError(400, "error", "the request body is not JSON") from None
        if not isinstance(body, dict):
            raise RequestError(400, "error", "the request body must be a JSON object")
        return body


# --------------------------------------------------------------------------- routes
async def _page(request: Any) -> Any:
    nonce = secrets.token_urlsafe(16)
    csp = (f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
           "img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
           "frame-ancestors 'none'")
    return _responses.Response(page_html(nonce), media_type="text/html; charset=utf-8",
                               headers={"Content-Security-Policy": csp})


async def _recipes(request: Any) -> Any:
    recipes = request.app.state.server.recipes
    return _json({"recipes": recipes.offered, "unavailable": recipes.unavailable})


async def _query(request: Any) -> Any:
    server = request.app.state.server
    body = await server.body(request)
    offset = _whole(body, "offset", 0, 0, None)
    limit = _whole(body, "limit", 50, 1, MAX_PAGE_ROWS)
    view = View.from_body(body, server.recipes)

    def work(box: Sandbox) -> dict[str, Any]:
        sql, params = view.statement(box)
        return {**run_page(box, sql, params, offset, limit), "sql": sql,
                "params": list(params)}

    return _json(await server.run(work))


async def _row(request: Any) -> Any:
    server = request.app.state.server
    body = await server.body(request)
    index = _whole(body, "index", None, 0, None)
    view = View.from_body(body, server.recipes)
    return _json(await server.run(lambda box: row_detail(box, *view.statement(box), index)))


async def _export(request: Any) -> Any:
    server = request.app.state.server
    body = await server.body(request)
    if body.get("format") not in EXPORTS:
        raise RequestError(400, "error", f"'format' must be one of {', '.join(EXPORTS)}")
    suffix, media_type = EXPORTS[body["format"]]
    view = View.from_body(body, server.recipes)
    folder = tempfile.mkdtemp(prefix="sparsegnn-serve-")
    path = Path(folder) / f"selection{suffix}"
    try:  # written whole through `curate query --output`'s path, then sent
        await server.run(lambda box: export(box.batches(*view.statement(box)), path,
                                            server.store_files))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return _responses.FileResponse(path, media_type=media_type, filename=path.name,
                                   background=_background.BackgroundTask(
                                       shutil.rmtree, folder, ignore_errors=True))


def _whole(body: dict[str, Any], key: str, default: int | None, low: int,
           high: int | None) -> int:
    """``body[key]``, a whole number in ``low .. high``."""
    value = body.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < low \
            or (high is not None and value > high):
        bound = f"{low} to {high}" if high is not None else f">= {low}"
        raise RequestError(400, "error", f"'{key}' must be a whole number {bound}")
    return value


# --------------------------------------------------------------------------- the app
class _Guard:
    """ASGI middleware: the host and token check before anything else, and the security
    headers on every response."""

    def __init__(self, app: Any, server: CurationServer) -> None:
        self.app, self.server = app, server

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def secured(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_SECURITY_HEADERS]
            await send(message)

        refusal = self.server.refusal(scope)
        if refusal is not None:
            await _json({"error": refusal, "kind": "forbidden"}, 403)(scope, receive, secured)
            return
        await self.app(scope, receive, secured)


def _error_handlers() -> dict[Any, Callable[[Any, Any], Any]]:
    """Every error as a JSON ``{"error", "kind"}``: 422 for a refused or failed query, the
    request's own status for a malformed one, 500 (its traceback logged) for a bug. All
    are coroutines: Starlette would run plain functions on a thread of their own."""
    def answer(status: int, kind: str) -> Callable[[Any, Exception], Any]:
        async def handle(request: Any, err: Exception) -> Any:
            return _json({"error": str(err), "kind": kind}, status)
        return handle

    async def refused(request: Any, err: RequestError) -> Any:
        return _json({"error": str(err), "kind": err.kind}, err.status, err.headers)

    async def http_error(request: Any, err: Any) -> Any:
        message = "no such page" if err.status_code == 404 else err.detail
        return _json({"error": message, "kind": "error"}, err.status_code)

    async def bug(request: Any, err: Exception) -> Any:
        return _json({"error": f"internal error: {type(err).__name__}: {err}",
                      "kind": "bug"}, 500)

    return {RequestError: refused, ViewError: answer(400, "error"),
            SandboxError: answer(422, "refused"), QueryError: answer(422, "error"),
            SchemaError: answer(422, "error"), _exceptions.HTTPException: http_error,
            _requests.ClientDisconnect: answer(499, "gone"),  # never delivered
            Exception: bug}


def _app(server: CurationServer) -> Any:
    routes = [_routing.Route("/", _page), _routing.Route("/api/recipes", _recipes),
              *(_routing.Route(f"/api/{name}", route, methods=["POST"])
                for name, route in (("query", _query), ("row", _row), ("export", _export)))]
    app = _apps.Starlette(routes=routes, exception_handlers=_error_handlers(),
                          middleware=[_middleware.Middleware(_Guard, server=server)])
    app.state.server = server
    return app
