"""The HTTP layer under ``curate serve``: uvicorn, with the guards a server facing idle, slow
or vanishing clients needs and uvicorn leaves to a proxy in front of it.

uvicorn serves every connection on one event loop, so a client that connects and sends
nothing costs a socket, not a thread. On top of it:

- :class:`GuardedProtocol` (uvicorn's h11 protocol) gives every request head ``timeout_s``
  from the connection (or from the previous response) to arrive whole, dribbling bytes
  gaining nothing, and answers 431 to a head over ``MAX_HEAD_BYTES``; a client that goes
  away (reset, closed early, timed out) is one debug line, never a traceback;
- :class:`RequestBound` (ASGI middleware) lets at most ``workers * (1 +
  WAITING_PER_WORKER)`` requests be in flight and answers 503 at once past that;
- :class:`GuardedServer` binds 127.0.0.1 itself (a taken port fails at once), runs the
  blocking work of requests on at most ``workers`` threads (:attr:`threads`) and has the
  ``serve_forever`` / ``shutdown`` / ``server_close`` life cycle of the standard library's
  servers, so a caller can run it on a thread of its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from typing import Any

from sparsegnn.optional import require

log = logging.getLogger(__name__)
_h11_impl = require("uvicorn.protocols.http.h11_impl", "for curate serve")
_uvicorn = require("uvicorn", "for curate serve")
_anyio = require("anyio", "for curate serve")

CONNECTION_TIMEOUT_S = 20.0
WORKERS = 8
WAITING_PER_WORKER = 4
MAX_HEAD_BYTES = 64 * 1024
_SHUTDOWN_GRACE_S = 2.0  # requests still running when the server stops get this long


def _answer(status: str, kind: str, message: str) -> bytes:
    """A whole HTTP/1.0 response with a JSON error, for what is refused below the app."""
    body = json.dumps({"error": message, "kind": kind}).encode()
    return (f"HTTP/1.0 {status}\r\nContent-Type: application/json; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nX-Content-Type-Options: nosniff\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n").encode() + body


_TOO_LARGE = _answer("431 Request Header Fields Too Large", "error",
                     f"request head over {MAX_HEAD_BYTES} bytes")


def peer(address: Any) -> str:
    """``host:port`` of a client, as every log line here starts."""
    return f"{address[0]}:{address[1]}" if isinstance(address, tuple | list) else str(address)


class GuardedProtocol(_h11_impl.H11Protocol):
    """uvicorn's h11 protocol with a deadline and a size bound for each request head, and
    one debug line for a connection that ends without its answer."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        self._ended = False  # this connection's end has been logged

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # the address accept() gave: a client that reset meanwhile has no peer name left
        self.client = self.client or transport.get_extra_info("peername")
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._head_too_long(data):
            self._drop(f"request head over {MAX_HEAD_BYTES} bytes", _TOO_LARGE)
            return
        super().data_received(data)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()  # the next head on this connection gets its own deadline

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self.cycle is None or not self.cycle.response_complete:
            self._note(f"went away ({type(exc).__name__})" if exc else
                       "closed before its answer")
        super().connection_lost(exc)

    def _head_too_long(self, data: bytes) -> bool:
        """Whether the head now waiting, with ``data``, is over ``MAX_HEAD_BYTES`` without
        its end (bytes after the end are the body's)."""
        if not self._waiting_for_head():
            return False
        buffered = self.conn.trailing_data[0] + data
        if len(buffered) <= MAX_HEAD_BYTES:
            return False
        head = buffered[:MAX_HEAD_BYTES + 4]
        return b"\r\n\r\n" not in head and b"\n\n" not in head

    def _waiting_for_head(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        timeout = self.config.timeout_keep_alive
        self._timer = self.loop.call_later(timeout, self._expire, timeout)

    def _expire(self, timeout: float) -> None:
        if self._waiting_for_head() and not self.transport.is_closing():
            self._drop(f"no whole request within {timeout:g} s")

    def _drop(self, why: str, answer: bytes = b"") -> None:
        self._note(why)
        if answer:
            self.transport.write(answer)
        self.transport.close()

    def _note(self, why: str) -> None:
        if not self._ended:
            self._ended = True
            log.debug("%s: %s", peer(self.client), why)


class RequestBound:
    """ASGI middleware: at most ``limit`` requests in flight, a 503 ``busy`` past that (one
    event loop runs every request, so a plain counter is exact)."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit, self.in_flight = app, limit, 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            log.debug("%s: busy, answered 503", peer(scope.get("client")))
            body = json.dumps({"error": "the server is busy; try again in a moment",
                               "kind": "busy"}).encode()
            await send({"type": "http.response.start", "status": 503, "headers": [
                (b"content-type", b"application/json; charset=utf-8"),
                (b"retry-after", b"1"), (b"cache-control", b"no-store"),
                (b"x-content-type-options", b"nosniff")]})
            await send({"type": "http.response.body", "body": body})
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


class GuardedServer:
    """An ASGI ``app`` on ``host:port`` (bound here) under uvicorn with the guards above."""

    def __init__(self, app: Any, host: str, port: int, *,
                 timeout_s: float = CONNECTION_TIMEOUT_S, workers: int = WORKERS) -> None:
        self.connection_timeout = timeout_s
        self.threads = _anyio.CapacityLimiter(workers)
        self.socket = socket.create_server((host, port), backlog=128)
        self.server_address: tuple[str, int] = self.socket.getsockname()[:2]
        self.server_port = self.server_address[1]
        config = _uvicorn.Config(
            RequestBound(app, workers * (1 + WAITING_PER_WORKER)), http=GuardedProtocol,
            lifespan="off", log_config=None, access_log=False, server_header=False,
            timeout_keep_alive=timeout_s, h11_max_incomplete_event_size=2 * MAX_HEAD_BYTES,
            timeout_graceful_shutdown=_SHUTDOWN_GRACE_S)
        self._server = _uvicorn.Server(config)
        self._stopped = threading.Event()
        self._stopped.set()  # not serving yet

    def __enter__(self) -> GuardedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server_close()

    def serve_forever(self) -> None:
        """Serve until :meth:`shutdown` (or, on the main thread, Ctrl-C: uvicorn stops and
        raises the ``KeyboardInterrupt`` again once it has)."""
        self._stopped.clear()
        try:
            self._server.run(sockets=[self.socket])
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop :meth:`serve_forever` and wait for it (a moment, plus the grace that
        running requests get)."""
        self._server.should_exit = True
        self._stopped.wait()

    def server_close(self) -> None:
        self.socket.close()
