"""Work that can be made again (unpacked models, simulated benchmark events) goes to the
user's cache folder, never into the checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
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


def _read_only_mounts() -> str | None:
    """Why a private read-only bind mount cannot be made here (None when it can)."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "no unshare/mount"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                           capture_output=True, check=False)
    return None if probe.returncode == 0 else "no mount namespaces (needs root)"


@pytest.mark.slow
@pytest.mark.skipif(_read_only_mounts() is not None, reason=str(_read_only_mounts()))
def test_quick_tracking_benchmark_from_an_empty_cache_on_a_read_only_checkout(
        tmp_path: Path) -> None:
    """Issue 51: the benchmark simulates, learns its map and trains with nothing written
    into the checkout; mounted read-only (in a private mount namespace, gone with the
    process), any write there fails the run. A second run fine-tunes the saved model."""
    checkout, cache = tmp_path / "ro", tmp_path / "cache"
    checkout.mkdir()
    script = (f'mount --bind "{ROOT}" "{checkout}" && '
              f'mount -o remount,bind,ro "{checkout}" && cd "{checkout}" && '
              f'"{sys.executable}" benchmarks/tracking.py --quick --json --workers 2 '
              f'--save-model "{tmp_path}/q.pt" && "{sys.executable}" benchmarks/tracking.py '
              f'--quick --json --model "{tmp_path}/q.pt" --finetune --epochs 1 '
              f'--save-model "{tmp_path}/q2.pt"')
    env = {**os.environ, CACHE_ENV: str(cache), "PYTHONPATH": str(checkout / "src"),
           "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           script], env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])["results"]
    assert {(r["dataset"], r["method"]) for r in rows} >= {("gun200", "gnn"),
                                                          ("ttbar_pu5", "ckf")}
    assert all("tracking_efficiency_pt1" in r for r in rows if r["method"] != "gnn_plain")
    assert (cache / "bench_tracking" / "gun200" / "test").is_dir()
    # --finetune trained the saved model one epoch more on the same (reused) events
    assert all(r["finetuned"] and r["epochs"] == 1 for r in rows if r["method"] == "gnn")
    record = json.loads((tmp_path / "q2.json").read_text())
    assert "--finetune" in record["command"] and record["data"]["train"]


def test_finetune_needs_a_model(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import tracking

    with pytest.raises(SystemExit):
        tracking.parse_args(["--quick", "--finetune"])
    assert "--finetune trains a --model" in capsys.readouterr().err
