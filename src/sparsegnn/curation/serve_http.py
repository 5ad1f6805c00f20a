"""The HTTP layer under ``curate serve``: a server that idle, slow or vanishing clients can
neither starve nor fill with tracebacks.

The standard library's ``ThreadingHTTPServer`` gives every connection a thread of its own,
which waits for the request as long as the client likes, and prints a traceback when the
client resets. :class:`GuardedHTTPServer` instead:

- holds every new connection in one thread (:class:`_HeadReader`, a selector) until its
  request head (request line and headers, up to the blank line) has arrived, so a client
  that connects and sends nothing, or part of a head, costs a socket and no thread. The
  whole head must arrive within ``timeout_s`` of connecting (dribbling bytes gains
  nothing) and within ``MAX_HEAD_BYTES`` (else a 431); at most ``max_pending``
  connections wait so, the oldest dropped to make room for a new one;
- serves complete requests with a fixed pool of ``workers`` threads, started with the
  server: the thread count never grows, whatever clients do. At most ``WAITING_PER_WORKER``
  requests per worker wait their turn; past that a request gets an immediate 503;
- gives a worker's socket the same ``timeout_s`` for every read and write that makes no
  progress (a request body that stops coming, a client that stops reading);
- logs a client that goes away (reset, broken pipe, timeout) as one debug line; any other
  error in a handler is a bug and still prints its traceback.
"""

from __future__ import annotations

import io
import json
import logging
import queue
import re
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

log = logging.getLogger(__name__)

CONNECTION_TIMEOUT_S = 20.0
WORKERS = 8
WAITING_PER_WORKER = 4
MAX_PENDING = 256
MAX_HEAD_BYTES = 64 * 1024
_READ_CHUNK = 16 * 1024
_QUERY = re.compile(r"\?\S*")  # query strings hold the token: never logged


def _answer(status: str, kind: str, message: str) -> bytes:
    """A whole HTTP/1.0 response with a JSON error, for the two sent without a handler."""
    body = json.dumps({"error": message, "kind": kind}).encode()
    return (f"HTTP/1.0 {status}\r\nContent-Type: application/json; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nX-Content-Type-Options: nosniff\r\n"
            "Cache-Control: no-store\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
            ).encode() + body


_BUSY = _answer("503 Service Unavailable", "busy", "the server is busy; try again in a moment")
_TOO_LARGE = _answer("431 Request Header Fields Too Large", "error",
                     f"request head over {MAX_HEAD_BYTES} bytes")


def _peer(address: Any) -> str:
    return f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)


class _Replay(io.RawIOBase):
    """The bytes the head reader already took off a socket, then the socket itself."""

    def __init__(self, taken: bytes, sock: socket.socket) -> None:
        super().__init__()
        self._taken, self._sock = memoryview(taken), sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self._taken:
            return self._sock.recv_into(buffer)
        n = min(len(buffer), len(self._taken))
        buffer[:n], self._taken = self._taken[:n], self._taken[n:]
        return n


class GuardedHandler(BaseHTTPRequestHandler):
    """A handler for :class:`GuardedHTTPServer`: it reads the head the server already
    received, then the socket, under the server's timeout."""

    server: GuardedHTTPServer

    def __init__(self, request: socket.socket, client_address: Any,
                 server: GuardedHTTPServer, head: bytes = b"") -> None:
        self.head = head
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        self.timeout = self.server.connection_timeout  # applied to the socket by setup()
        super().setup()
        self.rfile.close()
        self.rfile = io.BufferedReader(_Replay(self.head, self.connection))

    def log_message(self, format: str, *args: Any) -> None:
        """To the debug log, without query strings: they hold the token."""
        log.debug("%s: %s", _peer(self.client_address), _QUERY.sub("?…", format % args))


@dataclass(eq=False)
class _Pending:
    """A connection whose request head has not fully arrived."""

    sock: socket.socket
    address: Any
    deadline: float
    head: bytearray = field(default_factory=bytearray)


def _ends_head(head: bytearray, start: int) -> bool:
    """Whether ``head`` holds the blank line that ends a request head (CRLF or bare LF
    line ends, as ``http.server`` accepts), looking from ``start`` on."""
    return head.find(b"\n\n", start) >= 0 or head.find(b"\n\r\n", start) >= 0


class _HeadReader:
    """One thread with a selector holding every connection until its head is complete,
    then handing it to ``dispatch``; connections that take too long are closed."""

    def __init__(self, dispatch: Callable[[socket.socket, Any, bytes], None],
                 timeout_s: float, max_pending: int) -> None:
        self._dispatch, self._timeout_s, self._max_pending = dispatch, timeout_s, max_pending
        self._selector = selectors.DefaultSelector()
        self._wake_out, self._wake_in = socket.socketpair()
        self._wake_in.setblocking(False)
        self._wake_out.setblocking(False)
        self._selector.register(self._wake_out, selectors.EVENT_READ, None)
        self._arrivals: queue.SimpleQueue[tuple[socket.socket, Any] | None] = \
            queue.SimpleQueue()
        self._pending: dict[socket.socket, _Pending] = {}  # oldest first
        self._thread = threading.Thread(target=self._run, name="serve-heads", daemon=True)
        self._thread.start()

    def add(self, sock: socket.socket, address: Any) -> None:
        self._arrivals.put((sock, address))
        self._wake()

    def close(self) -> None:
        """Stop the thread and close every connection still waiting."""
        self._arrivals.put(None)
        self._wake()
        self._thread.join()

    def _wake(self) -> None:
        with suppress(BlockingIOError):  # a full wake-up buffer wakes the thread as well
            self._wake_in.send(b"\0")

    def _run(self) -> None:
        running = True
        while running:
            for key, _ in self._selector.select(self._wait()):
                if key.data is None:
                    running = self._admit()
                else:
                    self._read(key.data)
            self._expire()
        for pending in list(self._pending.values()):
            self._drop(pending, "the server is closing")
        self._selector.close()
        self._wake_out.close()
        self._wake_in.close()

    def _wait(self) -> float | None:
        """Seconds until the oldest connection's deadline; None (no limit) if none waits."""
        if not self._pending:
            return None
        return max(next(iter(self._pending.values())).deadline - time.monotonic(), 0.0)

    def _admit(self) -> bool:
        """Take the new connections; False once :meth:`close` was called."""
        with suppress(BlockingIOError):
            while self._wake_out.recv(4096):
                pass
        while True:
            try:
                arrival = self._arrivals.get_nowait()
            except queue.Empty:
                return True
            if arrival is None:
                return False
            self._hold(*arrival)

    def _hold(self, sock: socket.socket, address: Any) -> None:
        if len(self._pending) >= self._max_pending:
            self._drop(next(iter(self._pending.values())),
                       f"dropped: {self._max_pending} connections were waiting")
        sock.setblocking(False)
        pending = _Pending(sock, address, time.monotonic() + self._timeout_s)
        self._pending[sock] = pending
        self._selector.register(sock, selectors.EVENT_READ, pending)

    def _read(self, pending: _Pending) -> None:
        try:
            data = pending.sock.recv(_READ_CHUNK)
        except BlockingIOError:
            return
        except OSError as err:
            self._drop(pending, f"went away ({type(err).__name__})")
            return
        if not data:
            self._drop(pending, "closed before sending a whole request")
            return
        start = max(len(pending.head) - 2, 0)
        pending.head += data
        if _ends_head(pending.head, start):
            self._release(pending)
            self._dispatch(pending.sock, pending.address, bytes(pending.head))
        elif len(pending.head) > MAX_HEAD_BYTES:
            self._drop(pending, f"request head over {MAX_HEAD_BYTES} bytes", _TOO_LARGE)

    def _expire(self) -> None:
        """Close the connections past their deadline (the oldest are first)."""
        now = time.monotonic()
        while self._pending:
            oldest = next(iter(self._pending.values()))
            if oldest.deadline > now:
                return
            self._drop(oldest, f"no whole request within {self._timeout_s:g} s")

    def _release(self, pending: _Pending) -> None:
        self._selector.unregister(pending.sock)
        del self._pending[pending.sock]

    def _drop(self, pending: _Pending, why: str, answer: bytes = b"") -> None:
        self._release(pending)
        log.debug("%s: %s", _peer(pending.address), why)
        with suppress(OSError):
            if answer:
                pending.sock.send(answer)
        pending.sock.close()


class GuardedHTTPServer(HTTPServer):
    """An HTTP server with per-connection timeouts and a fixed number of worker threads
    (see the module's docstring); its threads start with it and stop at
    :meth:`server_close`."""

    request_queue_size = 128  # a burst of connections waits in the kernel, not refused

    def __init__(self, address: tuple[str, int], handler: type[GuardedHandler], *,
                 timeout_s: float = CONNECTION_TIMEOUT_S, workers: int = WORKERS,
                 max_pending: int = MAX_PENDING) -> None:
        self.connection_timeout = timeout_s
        self._max_waiting = WAITING_PER_WORKER * workers
        self._jobs: queue.Queue[tuple[socket.socket, Any, bytes] | None] = queue.Queue()
        self._heads: _HeadReader | None = None
        self._workers: list[threading.Thread] = []
        super().__init__(address, handler)  # binds first: a taken port starts no thread
        self._heads = _HeadReader(self._dispatch, timeout_s, max_pending)
        self._workers = [threading.Thread(target=self._work, name=f"serve-worker-{i}",
                                          daemon=True) for i in range(workers)]
        for worker in self._workers:
            worker.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Wait for the head in the head reader, not in a thread of its own."""
        self._heads.add(request, client_address)

    def server_close(self) -> None:
        """Close the socket and the waiting connections; workers end after their request
        (they are daemons: a long query does not hold up the process's exit)."""
        super().server_close()
        if self._heads is not None:  # None where binding failed, or once closed
            self._heads.close()
            self._heads = None
            for _ in self._workers:
                self._jobs.put(None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away is one debug line; anything else is a bug and keeps
        its traceback."""
        err = sys.exception()
        if isinstance(err, ConnectionError | TimeoutError):
            log.debug("%s: went away (%s)", _peer(client_address), type(err).__name__)
        else:
            super().handle_error(request, client_address)

    def _dispatch(self, sock: socket.socket, address: Any, head: bytes) -> None:
        """Queue a complete request for the workers (only the head reader calls this, so
        the bound holds), or answer 503 at once when too many wait."""
        if self._jobs.qsize() >= self._max_waiting:
            log.debug("%s: busy, answered 503", _peer(address))
            with suppress(OSError):
                sock.send(_BUSY)
            sock.close()
            return
        self._jobs.put((sock, address, head))

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            sock, address, head = job
            try:
                self.RequestHandlerClass(sock, address, self, head)
            except Exception:
                self.handle_error(sock, address)
            finally:
                self.shutdown_request(sock)
