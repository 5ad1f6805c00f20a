"""Fixtures shared by several test modules."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
import torch


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
