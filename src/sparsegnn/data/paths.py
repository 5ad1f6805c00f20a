"""Where the datasets live on disk, and reading their (possibly compressed) files.

Cora, CiteSeer-with-text and the TrackML sample event ship inside the package
(``bundled/``, xz- or gzip-compressed, each with its licence and SOURCE note), so a clone
or a wheel alone runs the demos offline. A ``shared/data`` folder inside or beside the
checkout, found by looking upward from the working directory and from this file, still
comes first when it holds the dataset: it is the uncompressed original the bundle was
made from, and the place for datasets that are not bundled.

An explicit root (``--data-dir`` or ``$SPARSEGNN_DATA``) is used alone: a dataset missing
from it is an error naming the folder, never a silent switch to another copy, since the
user asked for that folder.
"""

from __future__ import annotations

import lzma
import os
from pathlib import Path

from sparsegnn.errors import DataFormatError

ENV_VAR = "SPARSEGNN_DATA"
CACHE_ENV = "SPARSEGNN_CACHE"
BUNDLED = Path(__file__).resolve().parent / "bundled"
_SHARED = Path("shared") / "data"


def user_cache_dir() -> Path:
    """Where work that can be made again is kept (unpacked models, simulated benchmark
    events): ``$SPARSEGNN_CACHE``, else ``$XDG_CACHE_HOME/sparsegnn``, else
    ``~/.cache/sparsegnn``; never the checkout, which may be read-only or shared."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "sparsegnn"


def data_root(flag: str | os.PathLike[str] | None = None) -> Path:
    """The data directory: ``flag`` (e.g. ``--data-dir``), else ``$SPARSEGNN_DATA``, else
    the nearest ``shared/data``, else the bundled datasets."""
    explicit = _explicit_root(flag)
    if explicit is not None:
        return explicit[0]
    return shared_data() or BUNDLED


def shared_data() -> Path | None:
    """The nearest ``shared/data`` walking up from the working directory, then from this
    file's location; None when there is none."""
    for start in (Path.cwd().resolve(), Path(__file__).resolve().parent):
        for folder in (start, *start.parents):
            candidate = folder / _SHARED
            if candidate.is_dir():
                return candidate
    return None


def dataset_dir(name: str, root: str | os.PathLike[str] | None = None) -> Path:
    """The folder of dataset ``name``.

    ``root`` may also be the dataset folder itself, so ``load_cora("path/to/cora")`` works.
    Without ``root`` or ``$SPARSEGNN_DATA``: ``shared/data/<name>`` if present, else the
    bundled copy.
    """
    explicit = _explicit_root(root)
    if explicit is None:
        return _implicit_dataset_dir(name)
    base, origin = explicit
    folder = base / name
    if folder.is_dir():
        return folder
    if root is not None and base.name == name:
        return base
    raise DataFormatError(
        f"dataset folder {folder} does not exist (data root {base}, from {origin}); "
        f"without --data-dir and ${ENV_VAR}, sparsegnn uses the nearest shared/data or "
        "its bundled copy"
    )


def read_data_bytes(path: Path) -> bytes:
    """The content of ``path``, or of ``path.xz`` decompressed (how the bundle stores it).

    A missing file raises FileNotFoundError naming ``path``; a damaged ``.xz`` a
    DataFormatError naming the compressed file.
    """
    if path.is_file():
        return path.read_bytes()
    packed = path.with_name(path.name + ".xz")
    if not packed.is_file():
        raise FileNotFoundError(path)
    try:
        return lzma.decompress(packed.read_bytes())
    except (lzma.LZMAError, EOFError) as err:
        raise DataFormatError(f"{packed}: not a readable .xz file ({err})") from err


def _explicit_root(flag: str | os.PathLike[str] | None) -> tuple[Path, str] | None:
    """``(root, where it came from)`` for ``flag`` or ``$SPARSEGNN_DATA``, checked to exist."""
    if flag:
        return _existing(Path(flag).expanduser(), "the given data directory")
    env = os.environ.get(ENV_VAR)
    if env:
        return _existing(Path(env).expanduser(), f"${ENV_VAR}")
    return None


def _implicit_dataset_dir(name: str) -> Path:
    shared = shared_data()
    for base in (shared, BUNDLED):
        if base is not None and (base / name).is_dir():
            return base / name
    looked = f"{shared / name} nor " if shared is not None else ""
    raise DataFormatError(
        f"dataset {name!r} is neither in {looked}the bundled datasets ({BUNDLED}); "
        f"pass --data-dir or set ${ENV_VAR} to the folder holding {name}/"
    )


def _existing(path: Path, origin: str) -> tuple[Path, str]:
    if not path.is_dir():
        raise DataFormatError(f"data directory {path} ({origin}) does not exist")
    return path, origin
