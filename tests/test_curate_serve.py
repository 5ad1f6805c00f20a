"""``curate serve``: the token, the sandbox's refusals, recipes, exports and escaping over
HTTP, the command's start and Ctrl-C, and the page itself in headless Chromium.

The store is made by ``ingest`` from hand-written documents (one holding markup in its id
and text); its annotations are hand-chosen codes written with ``annotation_batch``, so
that which rows a recipe selects is known exactly.
"""

from __future__ import annotations

import csv
import http.client
import io
import json
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sparsegnn.curation import Prediction, annotation_batch, essential_web
from sparsegnn.curation.document_store import (
    DOCUMENTS_FINGERPRINT_KEY,
    FINGERPRINT_KEY,
    parquet_metadata,
)
from sparsegnn.curation.ingest import IngestConfig, ingest
from sparsegnn.curation.sandbox import Limits

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("duckdb")
from sparsegnn.curation.serve import MAX_PAGE_ROWS, CurationServer  # noqa: E402

# category -> (primary, secondary); MATH passes the math recipe, the others do not.
MATH = {"free_decimal_correspondence": ("513.2", "510"), "document_type_v1": ("3", None),
        "document_type_v2": ("10", None), "reasoning_depth": ("3", None),
        "technical_correctness": ("4", None)}
CODE = {**MATH, "free_decimal_correspondence": ("005.13", "005.1"),
        "document_type_v1": ("4", None), "document_type_v2": ("8", None)}
HISTORY = {**MATH, "free_decimal_correspondence": ("940", "930")}
HOSTILE_ID = "<img src=x onerror=alert('id')>"
HOSTILE_TEXT = "<script>alert('doc')</script><b>bold?</b> & more"
DOCS = ([(f"math-{i}", MATH) for i in range(4)] + [(f"code-{i}", CODE) for i in range(3)]
        + [(f"history-{i}", HISTORY) for i in range(3)] + [(HOSTILE_ID, HISTORY)])
MATH_IDS = {f"math-{i}" for i in range(4)}
COPY_TO = "COPY (SELECT * FROM corpus) TO '{out}'"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("serve")
    rows = [{"id": doc_id, "url": f"https://site{i % 2}.example/{i}",
             "text": HOSTILE_TEXT if doc_id == HOSTILE_ID else f"document {doc_id} on {i}"}
            for i, (doc_id, _) in enumerate(DOCS)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = folder / "store"
    ingest(folder / "corpus.jsonl", store, IngestConfig(batch_rows=4))
    ids = [doc_id for doc_id, _ in DOCS]
    preds = {cat: Prediction(np.array([codes[cat][0] for _, codes in DOCS], dtype=object),
                             np.array([codes[cat][1] for _, codes in DOCS], dtype=object),
                             np.linspace(0.5, 0.99, len(DOCS)).astype(np.float32))
             for cat in MATH}
    table = pa.Table.from_batches([annotation_batch(ids, preds, essential_web())])
    fingerprint = parquet_metadata(store / "documents.parquet", FINGERPRINT_KEY)
    pq.write_table(table.replace_schema_metadata({DOCUMENTS_FINGERPRINT_KEY: fingerprint}),
                   store / "annotations.parquet")
    return store


@pytest.fixture(scope="module")
def server(store: Path, serving: Any) -> Iterator[CurationServer]:
    with serving(CurationServer(store, limits=Limits(timeout_s=60,
                                                    memory_bytes=512 * 2**20))) as srv:
        yield srv


def call(server: CurationServer, method: str, path: str, body: Any = None,
         token: str | None = "", headers: dict[str, str] | None = None,
         ) -> tuple[int, http.client.HTTPMessage, bytes]:
    """One request; ``token=""`` means the server's own, None none at all."""
    token = server.token if token == "" else token
    url = path if token is None else f"{path}?token={token}"
    data = None if body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json"} if data is not None else {}
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=60)
    try:
        conn.request(method, url, body=data, headers={**sent, **(headers or {})})
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


def test_every_request_needs_the_token(server: CurationServer):
    assert server.server_address[0] == "127.0.0.1" and len(server.token) >= 32
    for token in (None, "wrong", server.token[:-1]):
        for method, path, body in (("GET", "/", None), ("GET", "/api/recipes", None),
                                   ("POST", "/api/query", {"recipe": "math"}),
                                   ("POST", "/api/export", {"recipe": "math",
                                                            "format": "csv"}),
                                   ("GET", "/favicon.ico", None)):
            status, _, data = call(server, method, path, body, token=token)
            assert status == 403, (method, path, token)
            assert b"math-0" not in data and b"<html" not in data
    status, _, _ = call(server, "GET", "/", headers={"Host": "attacker.example"})
    assert status == 403  # a DNS-rebound name is not this server


def test_page_is_self_contained_under_a_strict_policy(server: CurationServer):
    status, headers, data = call(server, "GET", "/")
    page = data.decode()
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    csp = headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    nonce = re.search(r"script-src 'nonce-([\w-]+)'", csp).group(1)
    assert f'<script nonce="{nonce}">' in page
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert not re.search(r"""(?:src|href)\s*=\s*["'](?!data:)""", page)
    assert "innerHTML" not in page and "math-0" not in page
    # a new nonce for every page
    assert call(server, "GET", "/")[1]["Content-Security-Policy"] != csp


@pytest.mark.parametrize("path", ["/../../etc/passwd", "/api/../../../etc/passwd",
                                  "/%2e%2e/%2e%2e/etc/passwd", "/api/recipes/../../x",
                                  "//etc/passwd", "/documents.parquet"])
def test_no_path_reaches_a_file(server: CurationServer, path: str):
    status, _, data = call(server, "GET", path)
    assert status == 404 and b"root:" not in data and b"PAR1" not in data


def test_recipe_runs_with_rows_codes_and_distributions(server: CurationServer):
    status, headers, data = call(server, "POST", "/api/query", {"recipe": "math"})
    assert status == 200 and headers["Content-Type"] == "application/json; charset=utf-8"
    result = json.loads(data)
    assert result["total"] == 4 and result["columns"][0] == "id"
    assert {row["cells"][0] for row in result["rows"]} == MATH_IDS
    topic = result["rows"][0]["codes"]["free_decimal_correspondence"]
    assert topic["code"] == "513.2" and topic["secondary"] == "510"
    assert 0.5 <= topic["confidence"] <= 1
    bars = result["distributions"]["free_decimal_correspondence"]
    assert bars == [{"code": "5", "label": "Science", "count": 4, "filter": {
        "field": "eai_taxonomy.free_decimal_correspondence.primary.code", "op": "prefix",
        "value": "5"}}]  # the bar stands for FDC main class 5: codes starting with 5
    assert result["distributions"]["document_type_v2"][0]["label"] == "Knowledge Article"


def test_rows_are_paged_and_bounded(server: CurationServer):
    pages = [json.loads(call(server, "POST", "/api/query",
                             {"sql": "SELECT id FROM corpus ORDER BY id", "offset": offset,
                              "limit": 4})[2]) for offset in (0, 4, 8)]
    ids = [row["cells"][0] for page in pages for row in page["rows"]]
    assert [len(p["rows"]) for p in pages] == [4, 4, 3] and sorted(ids) == ids
    assert set(ids) == {doc_id for doc_id, _ in DOCS} and pages[2]["total"] == len(DOCS)
    status, _, data = call(server, "POST", "/api/query",
                           {"sql": "SELECT 1", "limit": MAX_PAGE_ROWS + 1})
    assert status == 400 and "'limit' must be" in json.loads(data)["error"]
    odd = json.loads(call(server, "POST", "/api/query", {
        "sql": "SELECT {'topic': {'primary': {'code': 7}}, 'x': 1} AS eai_taxonomy"})[2])
    assert odd["total"] == 1 and odd["distributions"] == {}  # not our layout: no chart
    long_cell = json.loads(call(server, "POST", "/api/query",
                                {"sql": "SELECT repeat('x', 100000) AS t"})[2])
    assert len(long_cell["rows"][0]["cells"][0]) < 1000


def test_copy_to_is_refused_with_a_message(server: CurationServer, tmp_path: Path):
    out = tmp_path / "leak.csv"
    status, headers, data = call(server, "POST", "/api/query",
                                 {"sql": COPY_TO.format(out=out)})
    answer = json.loads(data)
    assert status == 422 and headers["Content-Type"].startswith("application/json")
    assert answer["kind"] == "refused" and "COPY statements are not allowed" in answer["error"]
    status, _, data = call(server, "POST", "/api/query",
                           {"sql": "SELECT * FROM read_csv('/etc/passwd')"})
    assert json.loads(data)["kind"] == "refused" and b"root:" not in data
    status, _, data = call(server, "POST", "/api/export",
                           {"sql": COPY_TO.format(out=out), "format": "csv"})
    assert status == 422 and json.loads(data)["kind"] == "refused"
    assert not out.exists()
    assert json.loads(call(server, "POST", "/api/query", {"sql": "SELEC 1"})[2])["kind"] \
        == "error"
    assert json.loads(call(server, "POST", "/api/query", {"recipe": "../../etc"})[2])[
        "error"].startswith("no recipe")


@pytest.mark.parametrize("body, headers, status", [
    (b"{}", {"Content-Type": "text/plain"}, 415),
    (b"x" * (70 * 1024), {"Content-Type": "application/json"}, 413),
    (b"not json", {"Content-Type": "application/json"}, 400),
    (b"[1]", {"Content-Type": "application/json"}, 400),
    (b'{"sql": "SELECT 1", "recipe": "math"}', {"Content-Type": "application/json"}, 400),
])
def test_malformed_requests_are_answered(server: CurationServer, body: bytes,
                                         headers: dict[str, str], status: int):
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=60)
    conn.request("POST", f"/api/query?token={server.token}", body=body, headers=headers)
    response = conn.getresponse()
    assert response.status == status and json.loads(response.read())["error"]
    conn.close()


def test_export_returns_parquet_and_csv(server: CurationServer, store: Path):
    before = {p.name: p.read_bytes() for p in store.iterdir()}
    status, headers, data = call(server, "POST", "/api/export",
                                 {"recipe": "math", "format": "parquet"})
    assert status == 200 and headers["Content-Type"] == "application/vnd.apache.parquet"
    assert headers["Content-Disposition"] == 'attachment; filename="selection.parquet"'
    table = pq.read_table(io.BytesIO(data))
    assert set(table.column("id").to_pylist()) == MATH_IDS
    assert "eai_taxonomy" in table.column_names
    status, headers, data = call(server, "POST", "/api/export",
                                 {"sql": "SELECT * FROM corpus WHERE id = ?",
                                  "params": [HOSTILE_ID], "format": "csv"})
    assert status == 200 and headers["Content-Type"] == "text/csv; charset=utf-8"
    rows = list(csv.DictReader(io.StringIO(data.decode())))
    assert len(rows) == 1 and rows[0]["id"] == HOSTILE_ID and rows[0]["text"] == HOSTILE_TEXT
    assert rows[0]["eai_taxonomy.free_decimal_correspondence.primary.code"] == "940"
    assert {p.name: p.read_bytes() for p in store.iterdir()} == before


def test_untrusted_text_is_json_data(server: CurationServer):
    status, headers, data = call(server, "POST", "/api/query",
                                 {"sql": "SELECT id, text FROM corpus WHERE id = ?",
                                  "params": [HOSTILE_ID]})
    assert status == 200 and headers["Content-Type"] == "application/json; charset=utf-8"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert json.loads(data)["rows"][0]["cells"] == [HOSTILE_ID, HOSTILE_TEXT]


def test_a_taken_port_is_one_line(server: CurationServer, store: Path,
                                  capsys: pytest.CaptureFixture):
    from sparsegnn.cli.main import main

    assert main(["curate", "serve", "--corpus", str(store), "--port",
                 str(server.server_port)]) == 2
    assert "choose another --port" in capsys.readouterr().err


def test_command_prints_the_url_and_stops_on_ctrl_c(store: Path):
    proc = subprocess.Popen([sys.executable, "-m", "sparsegnn", "curate", "serve",
                             "--corpus", str(store)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/\?token=[\w-]+", line).group(0)
        with urllib.request.urlopen(url, timeout=60) as page:
            assert page.status == 200 and b"sparsegnn curation" in page.read()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        assert "stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
        proc.stderr.close()


# --------------------------------------------------------------------------- the browser
def _wait(driver: Any, condition: Any) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, 60).until(condition)


def _cells(driver: Any) -> list[str]:
    """The first column's texts, read in one script (the table may be redrawn meanwhile)."""
    return driver.execute_script("return Array.from(document.querySelectorAll("
                                 "'#rows tr td:first-child'), td => td.textContent)")


def test_page_in_headless_chromium(browser: Any, server: CurationServer, tmp_path: Path):
    """Load, browse (the hostile document shown as text), run a recipe and see rows and
    facets, get the COPY TO refusal, a non-blank screenshot, no console errors, no alert,
    and no request but to the server."""
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.support.ui import Select

    browser.get_log("performance")
    browser.get(server.url)
    _wait(browser, lambda d: len(_cells(d)) == len(DOCS))
    assert HOSTILE_ID in _cells(browser)
    assert HOSTILE_TEXT in browser.find_element("id", "rows").text
    assert browser.find_elements("css selector", "#rows img, #rows script, #rows b") == []

    Select(browser.find_element("id", "recipe")).select_by_visible_text("math")
    browser.find_element("id", "run").click()
    _wait(browser, lambda d: set(_cells(d)) == MATH_IDS)
    assert browser.find_element("id", "status").text.startswith("4 rows")
    facets = browser.find_elements("css selector", "section.facet-group")
    assert "free_decimal_correspondence" in {f.get_attribute("data-category") for f in facets}
    assert len(browser.find_elements("css selector", ".facet .bar")) >= len(facets)

    out = tmp_path / "leak.csv"
    sql = browser.find_element("id", "sql")
    sql.clear()
    sql.send_keys(COPY_TO.format(out=out))
    browser.find_element("id", "run").click()
    message = _wait(browser, lambda d: d.find_element("id", "message").text or None)
    assert message.startswith("Refused:") and "COPY statements are not allowed" in message
    assert browser.find_element("id", "message").get_attribute("class") == "refused"
    assert not out.exists()

    image = pytest.importorskip("PIL.Image", reason="Pillow (a matplotlib dependency) is missing")
    shot = image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("L")
    low, high = shot.getextrema()
    assert high - low > 100 and len(set(shot.getdata())) > 10  # not blank
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.accept()  # the markup in the document never ran
    # Chromium notes every HTTP error on the console; the refusal's 422 is the only one
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert len(errors) == 1 and errors[0]["source"] == "network", errors
    assert "/api/query" in errors[0]["message"] and "422" in errors[0]["message"]
    events = [json.loads(e["message"])["message"] for e in browser.get_log("performance")]
    urls = [e["params"]["request"]["url"] for e in events
            if e["method"] == "Network.requestWillBeSent"]
    origin = f"http://127.0.0.1:{server.server_port}/"
    assert urls and all(u.startswith((origin, "data:")) for u in urls), urls
