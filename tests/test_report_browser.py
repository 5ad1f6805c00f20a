"""``--report run.html`` opened in headless Chromium: every plot drawn, nothing fetched,
no console errors.

Uses the ``browser`` fixture (tests/conftest.py): Debian's Chromium through selenium,
never a downloaded browser; skips, saying what is missing, where it is not installed.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from sparsegnn.cli.main import main
from sparsegnn.train.run_report import write_report

pytest.importorskip("matplotlib", reason="the report draws its plots with matplotlib")
Image = pytest.importorskip("PIL.Image", reason="Pillow (a matplotlib dependency) is missing")

pytestmark = pytest.mark.usefixtures("one_thread")
GRAPH = "sbm:nodes=300,blocks=3,degree=6"
SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "trackml_sample"


def check_page(driver: Any, page: Path, expected: set[str]) -> None:
    """Open ``page``: the ``expected`` plots (element ids) and no others, each drawn (a
    loaded image whose screenshot is not one flat colour), no request but the page itself
    and its inline images, and nothing on the console."""
    text = page.read_text()
    assert not re.search(r"""(?:src|href)\s*=\s*["'](?!data:)""", text)
    driver.get_log("performance")  # forget what earlier pages requested
    driver.get(page.as_uri())
    plots = driver.find_elements("css selector", "figure.plot")
    assert {p.get_attribute("id") for p in plots} == expected
    for plot in plots:
        img = plot.find_element("tag name", "img")
        assert driver.execute_script(
            "return arguments[0].complete && arguments[0].naturalWidth", img) > 100
        driver.execute_script("arguments[0].scrollIntoView()", img)
        shot = Image.open(io.BytesIO(img.screenshot_as_png)).convert("L")
        low, high = shot.getextrema()
        assert high - low > 100, plot.get_attribute("id")  # not blank
    assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
    urls = [event["params"]["request"]["url"] for event in _network(driver)]
    assert urls and all(u.startswith(("file:", "data:")) for u in urls), urls


def _network(driver: Any) -> list[dict[str, Any]]:
    events = [json.loads(e["message"])["message"] for e in driver.get_log("performance")]
    return [e for e in events if e["method"] == "Network.requestWillBeSent"]


def test_train_report_renders_every_plot(browser: Any, tmp_path: Path) -> None:
    page = tmp_path / "run.html"
    assert main(["train", "--dataset", GRAPH, "--epochs", "5", "--device", "cpu",
                 "--report", str(page)]) == 0
    check_page(browser, page, {"plot-loss", "plot-accuracy", "plot-epoch-time",
                               "plot-confusion"})
    assert "test_accuracy" in page.read_text() and "Configuration" in page.read_text()


def test_report_opens_on_the_curves(browser: Any, tmp_path: Path) -> None:
    """At 1280x900 the first screen shows the loss and accuracy curves, drawn; the
    confusion matrix names Cora's classes; memory reads in KiB/MiB/GiB; the settings table lists
    the options typed, not every default."""
    page = tmp_path / "cora.html"
    assert main(["train", "--dataset", "cora", "--epochs", "4", "--lr", "0.02", "--device",
                 "cpu", "--report", str(page)]) == 0
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False})
    try:
        browser.get(page.as_uri())
        shot = Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("L")
        assert shot.size == (1280, 900)
        for fig_id in ("plot-loss", "plot-accuracy"):
            box = browser.execute_script(
                "const r = document.querySelector(`#${arguments[0]} img`)"
                ".getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom];", fig_id)
            assert box[0] >= 0 and box[1] >= 0 and box[2] <= 1280 and box[3] <= 900, fig_id
            low, high = shot.crop(tuple(round(v) for v in box)).getextrema()
            assert high - low > 100, fig_id  # drawn, not blank
        confusion = browser.find_element("css selector", "#plot-confusion img")
        assert "Neural_Networks" in confusion.get_attribute("alt")
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    text = page.read_text()
    assert "<th>--lr</th>" in text and "<th>--hidden</th>" not in text
    # the process's peak resident set: its unit depends on what this process ran before
    assert re.search(r"<th>peak_memory_bytes</th><td>[0-9.,]+ [KMG]iB</td>", text)


def test_report_of_a_run_on_ranks_with_tracking_figures(browser: Any, tmp_path: Path) -> None:
    """Every kind of plot at once: per-rank bytes and memory, efficiency vs pT and eta."""
    history = [{"epoch": i, "loss": 1.0 / (i + 1), "val_accuracy": 0.5 + 0.05 * i,
                "seconds": 0.01 * (1 + i % 2)} for i in range(6)]
    result = {"dataset": "toy", "test_accuracy": 0.8, "history": history,
              "config": {"model": "gcn", "hidden": 16},
              "comm": {"per_rank": [{"sent": 1000}, {"sent": 1500}]},
              "memory_per_rank": [{"peak_rss_bytes": 3e8}, {"peak_rss_bytes": 2.5e8}],
              "test_confusion": [[5, 1], [2, 7]],
              "efficiency_vs_pt": {"edges": [1, 2, 5, 10], "efficiency": [0.9, None, 0.95]},
              "efficiency_vs_eta": {"edges": [-4, 0, 4], "efficiency": [0.8, 0.85]}}
    page = write_report(tmp_path / "ranks.html", "toy run <on ranks>", result)
    check_page(browser, page, {
        "plot-loss", "plot-accuracy", "plot-epoch-time", "plot-ranks-bytes-sent-per-epoch",
        "plot-ranks-peak-memory-bytes", "plot-confusion", "plot-efficiency-vs-pt",
        "plot-efficiency-vs-eta"})
    assert "toy run &lt;on ranks&gt;" in page.read_text()


@pytest.mark.skipif(not SAMPLE.is_dir(), reason="TrackML sample not present")
def test_track_evaluate_report_draws_efficiency_vs_pt_and_eta(browser: Any,
                                                             tmp_path: Path) -> None:
    page = tmp_path / "evaluate.html"
    assert main(["track", "evaluate", "--events", str(SAMPLE), "--report", str(page)]) == 0
    check_page(browser, page, {"plot-efficiency-vs-pt", "plot-efficiency-vs-eta"})
    assert "tracking_efficiency" in page.read_text()
