"""Where the bundled datasets live on disk.

The datasets are not shipped inside the package (they are tens of MiB and carry their own
licences); they sit in a ``shared/data`` folder either inside the checkout or beside it.
Looking upward from both the working directory and this file finds that folder from an
editable install, a CI clone, or a shell started anywhere inside the tree.
"""

from __future__ import annotations

import os
from pathlib import Path

from sparsegnn.errors import DataFormatError

ENV_VAR = "SPARSEGNN_DATA"
_SHARED = Path("shared") / "data"


def data_root(flag: str | os.PathLike[str] | None = None) -> Path:
    """The data directory: ``flag`` (e.g. ``--data-dir``), else ``$SPARSEGNN_DATA``, else search.

    The search returns the nearest ``shared/data`` found walking up from the current
    directory, then from this file's location.
    """
    if flag:
        return _existing(Path(flag).expanduser(), "given data directory")
    env = os.environ.get(ENV_VAR)
    if env:
        return _existing(Path(env).expanduser(), f"${ENV_VAR}")
    starts = [Path.cwd().resolve(), Path(__file__).resolve().parent]
    for start in starts:
        for folder in (start, *start.parents):
            candidate = folder / _SHARED
            if candidate.is_dir():
                return candidate
    tried = " and ".join(f"{s}/{_SHARED} (and each parent's)" for s in starts)
    raise DataFormatError(
        f"no data directory found: looked for {tried}; "
        f"pass --data-dir or set ${ENV_VAR} to the folder holding the datasets"
    )


def dataset_dir(name: str, root: str | os.PathLike[str] | None = None) -> Path:
    """The folder of dataset ``name`` under the data root.

    ``root`` may also be the dataset folder itself, so ``load_cora("path/to/cora")`` works.
    """
    base = data_root(root)
    folder = base / name
    if folder.is_dir():
        return folder
    if root is not None and base.name == name:
        return base
    raise DataFormatError(f"dataset folder {folder} does not exist (data root: {base})")


def _existing(path: Path, origin: str) -> Path:
    if not path.is_dir():
        raise DataFormatError(f"data directory {path} ({origin}) does not exist")
    return path
