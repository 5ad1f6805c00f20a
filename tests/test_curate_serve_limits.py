"""``curate serve`` under clients that stall or vanish: real sockets against a server in
this process, with a short connection timeout (``STALL_S``) so that drops happen quickly.

Stalled connections (nothing sent, half a head, half a body) must not hold threads or
keep an ordinary request from being answered, must be ended by the server after the
timeout (a head that never ends: closed; a body that never ends: answered 408, then
closed), and clients that reset must each leave at most one log line and no traceback.
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import socket
import struct
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("duckdb")
from sparsegnn.curation import serve
from sparsegnn.curation.ingest import IngestConfig, ingest
from sparsegnn.curation.serve import CurationServer
from sparsegnn.curation.serve_http import MAX_HEAD_BYTES, WAITING_PER_WORKER

STALL_S = 5.0  # the servers' connection timeout here: far above what one request takes
LOGGER = "sparsegnn.curation.serve_http"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("serve-limits")
    rows = [{"id": f"doc-{i}", "text": f"document {i}"} for i in range(3)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ingest(folder / "corpus.jsonl", folder / "store", IngestConfig())
    return folder / "store"


@pytest.fixture
def running(store: Path, serving: Any) -> Any:
    """Start a server over ``store`` with ``workers`` workers and the short timeout."""
    return lambda workers: serving(CurationServer(store, timeout_s=STALL_S, workers=workers))


def head(server: CurationServer, method: str = "GET", path: str = "/",
         extra: str = "") -> bytes:
    """A whole request head with the token and the right Host."""
    return (f"{method} {path}?token={server.token} HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{server.server_port}\r\n{extra}\r\n").encode()


def half_head(server: CurationServer) -> bytes:
    return head(server)[:-2]  # no blank line: the head never ends


def half_body(server: CurationServer) -> bytes:
    """A query whose body stops after one of its 100 bytes: only a worker can wait on it."""
    return head(server, "POST", "/api/query",
                "Content-Type: application/json\r\nContent-Length: 100\r\n") + b"{"


def connect(server: CurationServer, data: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.server_port), timeout=STALL_S * 3)
    sock.sendall(data)
    return sock


def is_open(sock: socket.socket) -> bool:
    """Whether the server has neither answered nor closed the connection yet."""
    sock.setblocking(False)
    try:
        sock.recv(1)
    except BlockingIOError:
        return True
    except ConnectionError:
        return False
    finally:
        sock.settimeout(STALL_S * 3)
    return False


def ended_by_server(sock: socket.socket) -> bool:
    """Wait (up to three timeouts) for the server to close, without an answer or after a
    408 (the request timed out)."""
    answer = b""
    try:
        while chunk := sock.recv(4096):
            answer += chunk
    except ConnectionResetError:
        return answer == b""
    except TimeoutError:
        return False
    return answer == b"" or answer.startswith(b"HTTP/1.1 408 ")


def reset(sock: socket.socket) -> None:
    """Close with a TCP reset, as a client that crashes or is killed does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def get_page(server: CurationServer) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=STALL_S * 3)
    try:
        conn.request("GET", f"/?token={server.token}")
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_stalled_connections_hold_no_thread_and_are_closed(running: Any):
    with running(workers=2) as server:
        threads = threading.active_count()
        silent = [connect(server) for _ in range(40)]
        partial = [connect(server, half_head(server)) for _ in range(40)]
        body = [connect(server, half_body(server))]  # holds one of the two workers
        stalled = silent + partial + body
        status, page = get_page(server)
        assert status == 200 and b"sparsegnn curation" in page
        assert threading.active_count() <= threads
        assert all(is_open(s) for s in stalled)  # answered while all 81 were still waiting
        assert all(ended_by_server(s) for s in stalled)  # then each ended by the server
        assert threading.active_count() <= threads
        for sock in stalled:
            sock.close()
        assert get_page(server)[0] == 200


def _port_of(line: str) -> int | None:
    match = re.match(r"127\.0\.0\.1:(\d+): ", line)
    return int(match.group(1)) if match else None


def test_clients_that_reset_leave_one_line_each(running: Any, capfd: pytest.CaptureFixture,
                                                caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    with running(workers=2) as server:
        clients = [connect(server, data) for data in
                   [b""] * 35 + [half_head(server)] * 35 + [half_body(server)] * 30]
        ports = {sock.getsockname()[1] for sock in clients}
        for sock in clients:
            reset(sock)
        deadline = time.monotonic() + 3 * STALL_S
        while (not ports <= {_port_of(r.getMessage()) for r in caplog.records}
               and time.monotonic() < deadline):
            time.sleep(0.1)
        assert get_page(server)[0] == 200
    err = capfd.readouterr().err
    assert "Traceback" not in err
    printed = Counter(_port_of(line) for line in err.splitlines())
    assert all(printed[port] <= 1 for port in ports)
    lines = Counter(_port_of(r.getMessage()) for r in caplog.records)
    assert all(lines[port] == 1 for port in ports), lines  # each reset: one line
    assert not any(r.exc_info for r in caplog.records)


def test_requests_past_the_queue_are_answered_503(running: Any):
    """One worker takes 1 + WAITING_PER_WORKER requests in flight (here: bodies that stall);
    the next request is answered 503 at once, and once they end the page is served."""
    with running(workers=1) as server:
        stallers = [connect(server, half_body(server)) for _ in range(1 + WAITING_PER_WORKER)]
        time.sleep(0.5)  # every stalled request is in flight, waiting for its body
        started = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=STALL_S)
        conn.request("GET", f"/api/recipes?token={server.token}")
        response = conn.getresponse()
        status, body = response.status, json.loads(response.read())
        conn.close()
        assert status == 503 and body["kind"] == "busy"
        assert time.monotonic() - started < STALL_S  # at once, not after a wait
        for sock in stallers:
            reset(sock)
        deadline = time.monotonic() + STALL_S
        while get_page(server)[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert get_page(server)[0] == 200


def test_an_endless_head_is_refused_with_431(running: Any):
    with running(workers=1) as server:
        start = b"GET / HTTP/1.1\r\nX: "
        sock = connect(server, start + b"a" * (MAX_HEAD_BYTES + 1 - len(start)))
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        sock.close()
        assert answer.startswith(b"HTTP/1.0 431 ")
        assert get_page(server)[0] == 200


def test_a_bug_in_a_route_is_answered_and_keeps_its_traceback(
        running: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch):
    def broken(nonce: str) -> str:
        raise ValueError("a bug in a route")

    monkeypatch.setattr(serve, "page_html", broken)
    with running(workers=1) as server:
        status, data = get_page(server)
    answer = json.loads(data)
    assert status == 500 and answer["kind"] == "bug" and "a bug in a route" in answer["error"]
    logged = [r for r in caplog.records if r.exc_info]
    assert logged and any("a bug in a route" in str(r.exc_info[1]) for r in logged)
