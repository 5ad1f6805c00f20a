"""Datasets read in place from installed packages (GraKeL, PyKEEN): found, and a clear
error naming the package where it is missing."""

from __future__ import annotations

import pytest

from sparsegnn.data import packaged
from sparsegnn.errors import DataFormatError


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(DataFormatError, match="known: Cuneiform, Kinships, MUTAG"):
        packaged.packaged_dataset("ENZYMES")


def test_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(packaged.PACKAGED, "X", packaged.PackagedDataset(
        "X", "no_such_package_sparsegnn", "data", "nowhere"))
    with pytest.raises(DataFormatError, match=r"no_such_package_sparsegnn.*sparsegnn\[datasets\]"):
        packaged.packaged_dataset("X")
    assert not packaged.packaged_available("X")


@pytest.mark.parametrize("name,member", [("MUTAG", "MUTAG_A.txt"), ("UMLS", "train.txt")])
def test_shipped_files_are_found(name: str, member: str) -> None:
    entry = packaged.PACKAGED[name]
    if not packaged.packaged_available(name):
        pytest.skip(f"{entry.package} is not installed (the datasets extra)")
    folder = packaged.packaged_dataset(name)
    assert (folder / member).stat().st_size > 1000
