"""Huge pages for large tensors: requested only under the madvise policy, never over the user."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparsegnn import hugepages


@pytest.fixture
def policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(hugepages.ENV, raising=False)

    def write(text: str) -> Path:
        path = tmp_path / "enabled"
        path.write_text(text)
        return path

    return write


def test_madvise_policy_requests(policy) -> None:
    assert hugepages.request_huge_pages(policy("always [madvise] never\n"))
    assert os.environ[hugepages.ENV] == "1"


@pytest.mark.parametrize("text", ["[always] madvise never\n", "always madvise [never]\n", "junk"])
def test_other_policies_leave_it_unset(policy, text: str) -> None:
    assert not hugepages.request_huge_pages(policy(text))
    assert hugepages.ENV not in os.environ


def test_missing_policy_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(hugepages.ENV, raising=False)
    assert hugepages.kernel_policy(tmp_path / "absent") is None
    assert not hugepages.request_huge_pages(tmp_path / "absent")


@pytest.mark.parametrize("value", ["0", "1"])
def test_user_choice_wins(policy, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(hugepages.ENV, value)
    assert hugepages.request_huge_pages(policy("always [madvise] never\n")) == (value == "1")
    assert os.environ[hugepages.ENV] == value


def test_import_sets_it_before_torch_allocates() -> None:
    """A fresh interpreter that imports sparsegnn first passes the request on to torch."""
    code = ("import os, sparsegnn, sparsegnn.hugepages as h; "
            "print(h.kernel_policy(), os.environ.get(h.ENV))")
    env = {k: v for k, v in os.environ.items() if k != hugepages.ENV}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, timeout=120).stdout.split()
    assert out == (["madvise", "1"] if out[0] == "madvise" else [out[0], "None"])
