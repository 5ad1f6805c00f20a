"""What a killed process leaves behind, removed by its survivors or by the next run.

SIGKILL runs no cleanup, so what a process removes on its way out stays. Two kinds are
ours: the temporary folder multiprocessing makes for a rank launcher (``/tmp/pymp-*``,
which holds the fork server's socket), and the hidden temporary files of a writer inside
an output folder (a curation store's ``.documents.parquet.*.tmp``). Each is named after
the process that made it (its pid; a launcher's folder also records its pid namespace),
so a later run removes only what a process that no longer exists left, never a live
run's files nor a file a user named.

Imported by the launcher's fork server (a preload), this module also makes the fork
server remove its launcher's folder when the launcher dies: it outlives the launcher by
the moment it takes to read EOF on its pipe, and exits normally.
"""

from __future__ import annotations

import atexit
import multiprocessing.process
import multiprocessing.util
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

# The launcher's pid and its folder, for the fork server it starts (its child).
ENV = "SPARSEGNN_LAUNCHER_TEMP"
# Short: the fork server's socket lives in the folder, and a socket's path may not be
# longer than 107 bytes (pymp-* is 13 characters, sg-<pid>-* 17 for a 5-digit pid).
LAUNCHER_PREFIX = "sg-"
# The longest socket path (sun_path less its final NUL), and the listener's name in the
# folder (multiprocessing's ``listener-`` plus 8 random characters).
_SOCKET_PATH_MAX = 107
_LISTENER_NAME = len("/listener-12345678")
# Short folders to fall back on when the temp folder's path is too long for a socket.
_SHORT_ROOTS = ("/tmp", "/var/tmp", "/dev/shm")
# mkstemp/mkdtemp's random part: 8 characters of this alphabet.
_RANDOM = r"[a-z0-9_]{8}"
_LAUNCHER_DIR = re.compile(rf"{LAUNCHER_PREFIX}(\d+)-{_RANDOM}")


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists in this pid namespace (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def launcher_temp_dir() -> Path:
    """multiprocessing's temporary folder for this process, made here under a name that
    says whose it is (``sg-<pid>-*``, holding an empty ``ns-<pid namespace>``), after
    removing those of launchers that are gone.

    Why: multiprocessing's own ``pymp-*`` folder is removed only at a normal exit, so
    every SIGKILLed launcher left one. A folder multiprocessing already made earlier in
    this process is kept as it is. Where the temp folder's path is too long for the fork
    server's socket (a deep ``TMPDIR``), the folder goes to a short one instead."""
    config = multiprocessing.process.current_process()._config
    if config.get("tempdir"):
        return Path(config["tempdir"])
    root = launcher_root()
    sweep_launcher_dirs(root)
    path = tempfile.mkdtemp(prefix=f"{LAUNCHER_PREFIX}{os.getpid()}-", dir=root)
    (Path(path) / f"ns-{_pid_namespace()}").touch()
    multiprocessing.util.Finalize(None, shutil.rmtree, args=(path,),
                                  kwargs={"ignore_errors": True}, exitpriority=-100)
    config["tempdir"] = path
    os.environ[ENV] = f"{os.getpid()}:{path}"
    return Path(path)


def launcher_root() -> Path:
    """Where launcher folders go: the temp folder, unless a socket path in a folder made
    there would pass the limit (then the first short, writable folder of
    ``_SHORT_ROOTS``; the temp folder when none is, and starting ranks names the limit)."""
    temp = Path(tempfile.gettempdir())
    for root in (temp, *map(Path, _SHORT_ROOTS)):
        if _fits_socket(root) and (root == temp or os.access(root, os.W_OK | os.X_OK)):
            return root
    return temp


def _fits_socket(root: Path) -> bool:
    folder = len(f"/{LAUNCHER_PREFIX}{os.getpid()}-12345678")
    return len(os.fsencode(root)) + folder + _LISTENER_NAME <= _SOCKET_PATH_MAX


def sweep_launcher_dirs(root: Path | None = None) -> list[Path]:
    """Remove this user's launcher folders in ``root`` (default: the temp folder) whose
    launcher, in this pid namespace, no longer exists; returns those removed. A folder of
    another pid namespace (a container sharing ``/tmp``) is left: its pid means nothing
    here."""
    root = Path(root or tempfile.gettempdir())
    removed = []
    for path in _entries(root):
        match = _LAUNCHER_DIR.fullmatch(path.name)
        if (match and _owned_dir(path) and (path / f"ns-{_pid_namespace()}").exists()
                and not pid_alive(int(match[1]))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def pid_temp_prefix(name: str) -> str:
    """The ``mkstemp`` prefix for a temporary file standing for ``name``, with this pid
    in it so that :func:`sweep_temp_files` can tell a dead writer's file from a live one."""
    return f".{name}.{os.getpid()}."


def sweep_temp_files(folder: Path, names: Iterable[str]) -> list[Path]:
    """Remove from ``folder`` the temporary files of ``names`` that a dead writer left:
    ``.{name}.{pid}.{random}.tmp`` whose pid no longer exists, and the pid-less
    ``.{name}.{random}.tmp`` of older versions. Nothing else matches: a user's files stay."""
    alternatives = "|".join(re.escape(n) for n in names)
    pattern = re.compile(rf"\.(?:{alternatives})\.(?:(\d+)\.)?{_RANDOM}\.tmp")
    removed = []
    for path in _entries(folder):
        match = pattern.fullmatch(path.name)
        if match is None or (match[1] is not None and pid_alive(int(match[1]))):
            continue
        if path.is_file() and not path.is_symlink():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def _owned_dir(path: Path) -> bool:
    try:
        st = path.lstat()
    except OSError:
        return False
    return path.is_dir() and not path.is_symlink() and st.st_uid == os.getuid()


def _pid_namespace() -> int:
    """This process's pid namespace (0 where there is no ``/proc``): a pid says whether a
    launcher lives only within its own namespace."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _adopt_launcher_dir() -> None:
    """In a direct child of a launcher (its fork server), remove the launcher's folder on
    exit if the launcher has died by then; a child exiting while it lives leaves it."""
    pid, _, path = os.environ.get(ENV, "").partition(":")
    if not pid.isdigit() or int(pid) != os.getppid() or not path:
        return
    atexit.register(_remove_if_orphaned, int(pid), path)


def _remove_if_orphaned(launcher: int, path: str) -> None:
    if os.getppid() != launcher:  # reparented: the launcher is gone
        shutil.rmtree(path, ignore_errors=True)


_adopt_launcher_dir()
