"""Fixtures shared by several test modules."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def children_take_ctrl_c() -> Iterator[None]:
    """Start every child with Ctrl-C at its default, as a terminal would.

    A shell without job control runs ``pytest &`` with SIGINT ignored; children inherit
    that across exec and Python then keeps ignoring it, so the tests that press Ctrl-C on
    a CLI would wait for an exit that never comes. A handled signal is reset to its
    default in an exec'd child, so handling it here restores the terminal's behaviour."""
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if ignored:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op thread for tests on tiny tensors: more only add contention on a busy
    machine. Use with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium driven by selenium: Debian's ``chromium`` and ``chromium-driver``,
    never a downloaded browser (selenium is given both paths and told to stay offline).
    Skips, saying what is missing, where they are not installed."""
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium is not installed (pip install 'sparsegnn[dev]')")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        pytest.skip("headless Chromium not installed: apt-get install chromium chromium-driver")
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # selenium manager must not download
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@contextlib.contextmanager
def _serving(server: Any) -> Iterator[Any]:
    """``server`` (an HTTP server) answering in a daemon thread until the block ends, then
    shut down and closed: what every ``curate serve`` test needs around its requests."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture(scope="session")
def serving() -> Any:
    """:func:`_serving`, for the ``curate serve`` tests (a fixture: test modules import
    no conftest, whose name the hostile suite's own conftest shares)."""
    return _serving
