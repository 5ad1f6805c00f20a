"""``curate serve`` as a corpus browser: sorting, facets, filters and search written as SQL
by the server (values bound, fields checked), row detail, recipes offered by the store's
categories, exports of any result, and the whole page driven in headless Chromium.

The store and server are ``test_curate_serve``'s: hand-chosen codes, so which rows each
step selects is known exactly.
"""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import numpy as np
import pytest
from tests import test_curate_serve as served
from tests.test_curate_serve import DOCS, HOSTILE_ID, MATH, MATH_IDS, CurationServer, call

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

store, server = served.store, served.server  # the fixtures, shared
ALL_IDS = {doc_id for doc_id, _ in DOCS}
CODE_IDS = {f"code-{i}" for i in range(3)}
TYPE_V1 = "eai_taxonomy.document_type_v1.primary.code"


def query(server: CurationServer, **body: Any) -> tuple[int, dict[str, Any]]:
    status, _, data = call(server, "POST", "/api/query", {"limit": 200, **body})
    return status, json.loads(data)


def ids(result: dict[str, Any]) -> list[str]:
    return [row["cells"][result["columns"].index("id")] for row in result["rows"]]


def test_sort_filter_and_search_are_bound_sql(server: CurationServer):
    status, result = query(server, sql="SELECT * FROM corpus", sort="id", descending=True)
    assert status == 200 and ids(result) == sorted(ALL_IDS, reverse=True)
    assert 'ORDER BY base."id" DESC' in result["sql"]
    _, result = query(server, sql="SELECT * FROM corpus",
                      filters=[{"field": TYPE_V1, "op": "eq", "value": "4"}])
    assert set(ids(result)) == CODE_IDS and result["params"] == ["4"]
    assert 'base."eai_taxonomy"."document_type_v1"."primary"."code" = ?' in result["sql"]
    _, result = query(server, recipe="math",  # a recipe narrowed further: the FDC facet
                      filters=[{"field": "id", "op": "prefix", "value": "math-1"}])
    assert ids(result) == ["math-1"] and result["total"] == 1
    _, result = query(server, sql="SELECT * FROM corpus",  # a value is data, never SQL
                      filters=[{"field": "id", "op": "eq", "value": "' OR 1=1 --"}])
    assert result["total"] == 0
    _, result = query(server, sql="SELECT id, text FROM corpus WHERE id <> ?",
                      params=["math-0"], search="BOLD?")
    assert ids(result) == [HOSTILE_ID] and result["params"] == ["math-0", "BOLD?", "BOLD?"]


def test_facet_bars_select_their_rows(server: CurationServer):
    _, result = query(server, sql="SELECT * FROM corpus")
    for category, bars in result["distributions"].items():
        for bar in bars:
            _, narrowed = query(server, sql="SELECT * FROM corpus", filters=[bar["filter"]])
            assert narrowed["total"] == bar["count"], (category, bar)


@pytest.mark.parametrize("body, status, words", [
    ({"sort": "nope"}, 422, "no field nope in this result; its fields are id, text"),
    ({"filters": [{"field": "eai_taxonomy.nope.code", "op": "eq", "value": "1"}]}, 422,
     "no field eai_taxonomy.nope.code"),
    ({"filters": [{"field": "id", "op": "drop", "value": "1"}]}, 400, "a filter is"),
    ({"search": 3}, 400, "must be strings"),
    ({"limit": 0}, 400, "'limit' must be a whole number 1 to 200"),
])
def test_a_bad_view_is_a_message(server: CurationServer, body: dict[str, Any], status: int,
                                 words: str):
    got, answer = query(server, **{"sql": "SELECT * FROM corpus", **body})
    assert got == status and words in answer["error"]


def test_row_detail_has_the_whole_text_and_every_code(server: CurationServer):
    body = {"sql": "SELECT id, repeat('ab', 3000) AS text, eai_taxonomy FROM corpus "
                   "WHERE id = ?", "params": ["math-2"]}
    _, result = query(server, **body)
    assert len(result["rows"][0]["cells"][1]) == 401  # cut in the table
    status, _, data = call(server, "POST", "/api/row", {**body, "index": 0})
    detail = json.loads(data)
    assert status == 200 and {f["name"]: f["value"] for f in detail["fields"]} == {
        "id": "math-2", "text": "ab" * 3000}
    topic = detail["codes"]["free_decimal_correspondence"]
    assert (topic["code"], topic["secondary"]) == ("513.2", "510")
    assert topic["label"] and topic["secondary_label"] and 0.5 <= topic["confidence"] <= 1
    assert detail["codes"]["document_type_v1"]["code"] == "3"
    status, _, data = call(server, "POST", "/api/row", {**body, "index": 1})
    assert status == 422 and "past the end" in json.loads(data)["error"]


def test_recipes_are_offered_where_the_store_has_their_categories(
        server: CurationServer, tmp_path: Path, serving: Any):
    from sparsegnn.curation import Category, Code, Prediction, Schema, annotation_batch
    from sparsegnn.curation.document_store import (
        DOCUMENTS_FINGERPRINT_KEY,
        FINGERPRINT_KEY,
        parquet_metadata,
    )
    from sparsegnn.curation.ingest import IngestConfig, ingest

    assert sorted(json.loads(call(server, "GET", "/api/recipes")[2])["recipes"]) == [
        "code", "math", "medical", "stem"]
    rows = [{"id": f"d{i}", "text": f"paper {i}"} for i in range(3)]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ingest(tmp_path / "c.jsonl", tmp_path / "store", IngestConfig())
    schema = Schema("citeseer", (Category("topic", (Code("ML", "Machine learning"),
                                                    Code("DB", "Databases"))),))
    topics = Prediction(np.array(["ML", "DB", "ML"], dtype=object),
                        np.array([None] * 3, dtype=object), np.full(3, 0.9, np.float32))
    table = pa.Table.from_batches([annotation_batch(["d0", "d1", "d2"], {"topic": topics},
                                                    schema)])
    fingerprint = parquet_metadata(tmp_path / "store" / "documents.parquet", FINGERPRINT_KEY)
    pq.write_table(table.replace_schema_metadata({DOCUMENTS_FINGERPRINT_KEY: fingerprint}),
                   tmp_path / "store" / "annotations.parquet")
    with serving(CurationServer(tmp_path / "store")) as topic_server:
        recipes = json.loads(call(topic_server, "GET", "/api/recipes")[2])
        status, answer = query(topic_server, recipe="math")
        _, result = query(topic_server, sql="SELECT * FROM corpus")
    assert recipes["recipes"] == {} and "document_type_v1" in recipes["unavailable"]["math"]
    assert status == 422 and answer["error"].startswith("recipe math needs the categories")
    assert [b["label"] for b in result["distributions"]["topic"]] == ["Machine learning",
                                                                      "Databases"]


def test_json_export_and_a_union_column(server: CurationServer):
    status, headers, data = call(server, "POST", "/api/export",
                                 {"recipe": "math", "format": "json", "sort": "id"})
    lines = [json.loads(line) for line in data.decode().splitlines()]
    assert status == 200 and headers["Content-Type"] == "application/x-ndjson"
    assert [r["id"] for r in lines] == sorted(MATH_IDS)
    assert lines[0]["eai_taxonomy"]["free_decimal_correspondence"]["primary"]["code"] == \
        "513.2"
    union = {"sql": "SELECT id, union_value(n := 1) AS u FROM corpus"}
    status, _, data = call(server, "POST", "/api/export", {**union, "format": "parquet"})
    answer = json.loads(data)
    assert status == 422 and "u: a UNION column, which Parquet cannot hold" in answer["error"]
    status, _, data = call(server, "POST", "/api/export", {**union, "format": "csv"})
    assert status == 200 and len(list(csv.DictReader(io.StringIO(data.decode())))) == len(DOCS)
    status, _, data = call(server, "POST", "/api/export",  # nothing matches: a valid file
                           {"recipe": "math", "search": "no such words", "format": "parquet"})
    assert status == 200 and pq.read_table(io.BytesIO(data)).num_rows == 0


def test_a_wrong_method_is_a_message(server: CurationServer):
    status, _, data = call(server, "GET", "/api/query")
    assert status == 405 and json.loads(data)["kind"] == "error"


# --------------------------------------------------------------------------- the browser
def _wait(driver: Any, condition: Any) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, 60).until(condition)


def _ids(driver: Any) -> list[str]:
    """The first column's texts, read in one script (the table may be redrawn meanwhile)."""
    return driver.execute_script("return Array.from(document.querySelectorAll("
                                 "'#rows tbody tr td:first-child'), td => td.textContent)")


def _shows(driver: Any, expected: list[str] | set[str]) -> Any:
    def check(d: Any) -> bool:
        got = _ids(d)
        return (set(got) if isinstance(expected, set) else got) == expected
    return _wait(driver, check)


def _click(driver: Any, css: str) -> None:
    driver.find_element("css selector", css).click()


def _type(driver: Any, element_id: str, text: str) -> None:
    box = driver.find_element("id", element_id)
    box.clear()
    box.send_keys(text)


def _url_state(driver: Any) -> dict[str, list[str]]:
    return parse_qs(urlsplit(driver.current_url).query)


def _download(driver: Any, folder: Path, button: str, name: str) -> Path:
    """Click an export button and wait for its whole file in ``folder``."""
    _click(driver, f"#{button}")
    path = folder / name
    deadline = time.monotonic() + 60
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert path.exists(), sorted(p.name for p in folder.iterdir())
    return path


def test_browse_in_headless_chromium(browser: Any, server: CurationServer, tmp_path: Path):
    """Page size, sort, facet, filter, search, a ``?`` parameter, reload, row detail, each
    export and a bad query, as a user clicks them."""
    browser.execute_cdp_cmd("Browser.setDownloadBehavior",
                            {"behavior": "allow", "downloadPath": str(tmp_path)})
    browser.get_log("browser")  # what earlier tests left
    browser.get(server.url)
    _shows(browser, ALL_IDS)

    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", "size")).select_by_visible_text("10")  # page size
    _wait(browser, lambda d: len(_ids(d)) == 10)
    _click(browser, "#next")
    _wait(browser, lambda d: len(_ids(d)) == len(DOCS) - 10)
    assert _url_state(browser)["page"] == ["2"] and _url_state(browser)["size"] == ["10"]
    Select(browser.find_element("id", "size")).select_by_visible_text("50")
    _shows(browser, ALL_IDS)

    _click(browser, "#rows th button[data-sort='id']")  # sort: ascending, then descending
    _shows(browser, sorted(ALL_IDS))
    _click(browser, "#rows th button[data-sort='id']")
    _shows(browser, sorted(ALL_IDS, reverse=True))
    assert _url_state(browser)["sort"] == ["id"] and _url_state(browser)["desc"] == ["1"]

    facet = "section[data-category='document_type_v1'] button[title$=' eq 4']"
    _click(browser, facet)  # a facet: document type 4, the code documents
    _shows(browser, sorted(CODE_IDS, reverse=True))
    assert browser.find_element("id", "composed").get_attribute("textContent").count("?") == 1
    _click(browser, "#filters li button")  # the facet's filter removed
    _shows(browser, sorted(ALL_IDS, reverse=True))

    Select(browser.find_element("id", "filter-field")).select_by_visible_text("id")
    Select(browser.find_element("id", "filter-op")).select_by_value("prefix")
    _type(browser, "filter-value", "history")
    _click(browser, "#filter-add")  # a filter without SQL
    _shows(browser, [f"history-{i}" for i in (2, 1, 0)])
    _click(browser, "#filters li button")

    _type(browser, "search", "BOLD?")
    _click(browser, "#search-go")  # text search
    _shows(browser, [HOSTILE_ID])
    _type(browser, "search", "")
    _click(browser, "#search-go")

    _type(browser, "sql", "SELECT id, text, eai_taxonomy FROM corpus WHERE id LIKE ?")
    param = _wait(browser, lambda d: d.find_elements("css selector", "#params input.param"))
    assert len(param) == 1
    param[0].send_keys("math-%")
    _click(browser, "#run")  # a `?` parameter, still sorted by id descending
    _shows(browser, sorted(MATH_IDS, reverse=True))

    browser.refresh()  # the reload keeps query, parameter and sort
    _shows(browser, sorted(MATH_IDS, reverse=True))
    assert browser.find_element("id", "sql").get_attribute("value").endswith("LIKE ?")
    assert browser.find_element("css selector", "#params input.param").get_attribute(
        "value") == "math-%"

    _click(browser, "#rows tbody tr:first-child")  # row detail: math-3
    _wait(browser, lambda d: d.find_element("id", "detail").is_displayed())
    fields = {tr.get_attribute("data-field"): tr.find_element("css selector", "pre").text
              for tr in browser.find_elements("css selector", "#detail-fields tr")}
    assert fields["id"] == "math-3" and fields["text"] == "document math-3 on 3"
    codes = browser.find_elements("css selector", "#detail-codes tr[data-category]")
    assert {tr.get_attribute("data-category") for tr in codes} == set(MATH)  # every code
    topic = browser.find_element(
        "css selector", "#detail-codes tr[data-category='free_decimal_correspondence']")
    cells = [td.text for td in topic.find_elements("css selector", "td")]
    assert cells[1] == "513.2" and 0.5 <= float(cells[3]) <= 1 and cells[4] == "510"
    assert _url_state(browser)["row"] == ["0"]

    table = pq.read_table(_download(browser, tmp_path, "parquet", "selection.parquet"))
    assert table.column("id").to_pylist() == sorted(MATH_IDS, reverse=True)
    rows = list(csv.DictReader(io.StringIO(
        _download(browser, tmp_path, "csv", "selection.csv").read_text())))
    assert [r["id"] for r in rows] == sorted(MATH_IDS, reverse=True)
    lines = _download(browser, tmp_path, "json", "selection.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == sorted(MATH_IDS, reverse=True)

    _type(browser, "sql", "SELECT no_such_column FROM corpus")
    _click(browser, "#run")  # a bad query: its message replaces the old rows
    message = _wait(browser, lambda d: d.find_element("id", "message").text or None)
    assert message.startswith("Error: query failed") and "no_such_column" in message
    assert _ids(browser) == [] and not browser.find_element("id", "detail").is_displayed()
    assert browser.find_elements("css selector", "section.facet-group") == []
    browser.get(server.url + "&f=" + quote("id:x']\"<b>:1"))  # a crafted link: a message
    message = _wait(browser, lambda d: d.find_element("id", "message").text or None)
    assert message.startswith("Error: a filter is") and _ids(browser) == []
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert [(" 422 " in e["message"], " 400 " in e["message"]) for e in errors] == [
        (True, False), (False, True)], errors  # the bad query's and the crafted link's
