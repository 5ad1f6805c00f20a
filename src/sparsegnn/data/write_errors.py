"""Errors of a write as the user reads them: the output they named, and for a full disk
how many bytes it needed.

Why: every output is written under a hidden temporary name beside it (``.graph.npz.
k2j3x9aa.tmp``, a ``.parts.*.tmp`` folder) and renamed into place, so an ``OSError``
raised while writing names that temporary file, which the user never typed, and a full
disk surfaces as ``[Errno 28]`` with no file at all (numpy's zip writer, pyarrow), which
the CLI cannot tell from a bug. :func:`user_error` turns both into what the CLI prints as
one line: a :class:`~sparsegnn.errors.DiskFullError` naming the output and the bytes, or
the same ``OSError`` naming the output instead of its temporary name.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sparsegnn.data.limits import format_bytes
from sparsegnn.errors import DiskFullError

# ENOSPC: the filesystem is full; EDQUOT: the user's quota is.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_disk_full(err: BaseException | None) -> bool:
    """Whether ``err``, or an error it was raised from or while handling, says the
    filesystem (or the user's quota) has no room left: ``torch.save`` reports a full disk
    as a RuntimeError about a zip position, raised while handling the ENOSPC."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS:
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


def user_error(err: BaseException, *outputs: Path, needed: int | None = None,
               written: int = 0) -> BaseException:
    """``err`` as the user should read it, for a write of ``outputs`` (the paths they gave).

    A full disk becomes a :class:`DiskFullError` naming the first output with ``needed``
    bytes when the caller knows them, else the ``written`` bytes it held when the disk
    filled (a lower bound); an error about a temporary name of an output (or a file inside
    a temporary folder) is re-raised naming the output; any other error (neither, or an
    OSError about another file) is ``err`` itself.
    """
    if isinstance(err, DiskFullError):
        return err
    if is_disk_full(err):
        return disk_full(outputs[0], needed, written)
    if not isinstance(err, OSError):
        return err
    filename = _as_output(err.filename, outputs)
    if filename is None:
        return err
    return OSError(err.errno, err.strerror or str(err), filename)


def disk_full(path: Path, needed: int | None, written: int = 0) -> DiskFullError:
    """The one-line refusal of a write to ``path`` that found no room."""
    free = free_bytes(path)
    if needed is not None:
        size = f"it needs about {_bytes(needed)}, {_bytes(free)} free there"
    elif written:
        size = f"it needs more than the {_bytes(written)} written when the disk filled"
    else:
        size = f"{_bytes(free)} free there"
    return DiskFullError(f"{path}: no space left on device ({size}); nothing was written, "
                         "free some space or write elsewhere")


def free_bytes(path: Path) -> int:
    """Bytes free to this user on the filesystem that holds (or would hold) ``path``."""
    for folder in (path, *path.absolute().parents):
        try:
            return shutil.disk_usage(folder).free
        except OSError:
            continue
    return 0


def size_on_disk(path: Path | str | None) -> int:
    """Bytes of the file, or of every file under the folder, at ``path`` (0 if absent)."""
    if path is None:
        return 0
    path = Path(path)
    try:
        if not path.is_dir():
            return path.stat().st_size
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    except OSError:
        return 0


def _as_output(filename: object, outputs: Iterable[Path]) -> str | None:
    """The output path a temporary ``filename`` stands for (None if it is no temp of ours).

    Our writers name temporaries ``.{name}.{random}.tmp`` (and ``.old`` for an output
    moved aside) in the output's folder; a file inside a temporary folder maps to the
    same file inside the output."""
    if not isinstance(filename, str | os.PathLike):
        return None
    name = Path(os.fsdecode(filename)).absolute()
    for out in outputs:
        for candidate in (name, *name.parents):
            if (candidate.parent == out.absolute().parent
                    and _is_temp_of(candidate.name, out.name)):
                return str(out / name.relative_to(candidate))
    return None


def _is_temp_of(name: str, output: str) -> bool:
    return name.startswith(f".{output}.") and name.endswith((".tmp", ".old"))


def _bytes(n: int) -> str:
    return f"{n} bytes" if n < 1024 else f"{n} bytes ({format_bytes(n)})"


@contextmanager
def named_for(*outputs: Path, temps: Iterable[Path] = (),
              needed: int | None = None) -> Iterator[None]:
    """Inside the block, an ``OSError`` becomes :func:`user_error` for ``outputs``; the
    ``temps`` being written count as the bytes written when a full disk stopped them.
    For writers with temporaries of their own (a curation store's two files)."""
    try:
        yield
    except Exception as err:
        written = sum(size_on_disk(t) for t in temps)
        new = user_error(err, *outputs, needed=needed, written=written)
        if new is err:
            raise
        raise new from err
