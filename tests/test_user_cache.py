"""Work that can be made again (unpacked models, simulated benchmark events) goes to the
user's cache folder, never into the checkout."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sparsegnn.data.paths import CACHE_ENV, user_cache_dir

ROOT = Path(__file__).resolve().parents[1]


def test_the_cache_folder_follows_sparsegnn_cache_then_xdg(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_cache_dir() == tmp_path / "xdg" / "sparsegnn"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # the XDG spec: absolute only
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_cache_dir() == tmp_path / "home" / ".cache" / "sparsegnn"
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert user_cache_dir() == tmp_path / "mine"


def test_tracking_benchmarks_simulate_outside_the_checkout(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.delitem(sys.modules, "_tracking", raising=False)
    import _tracking

    assert tmp_path / "cache" / "bench_tracking" == _tracking.TRACKING_DATA
    monkeypatch.delitem(sys.modules, "_tracking")
