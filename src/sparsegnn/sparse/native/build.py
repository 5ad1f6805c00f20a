"""Compile ``kernels.c`` once per machine into the user cache and load it with ctypes.

Why a C file compiled on first use rather than a torch extension: it includes no torch
header, so it builds in about a second with the system's C compiler (a torch extension
takes minutes), and the wheel stays pure Python. The library is keyed by a hash of the
source, the flags, the compiler's version and the CPU's model and flags, since
``-march=native`` code must not run on another CPU. It is written to a temporary file and
renamed into place, so ranks that start together never load a half-written library.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

SOURCE = Path(__file__).with_name("kernels.c")
FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared")
COMPILE_TIMEOUT_S = 120


class BuildError(RuntimeError):
    """The kernels could not be compiled or loaded here (no compiler, a failed build)."""


def compiler() -> str:
    """``$CC``, else ``cc``; a :class:`BuildError` naming it when it is not on ``PATH``."""
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        raise BuildError(f"no C compiler {cc!r} on PATH (set CC)")
    return cc


def _cpu_signature() -> str:
    """The CPU's model name and feature flags (Linux), else the platform's description."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    keep = [ln for ln in lines if ln.startswith(("model name", "flags"))]
    return "\n".join(dict.fromkeys(keep))


def library_path(cc: str, source: Path = SOURCE, name: str = "attention") -> Path:
    """Where the compiled library for this source, compiler and CPU lives."""
    from sparsegnn.data.paths import user_cache_dir

    version = subprocess.run([cc, "--version"], capture_output=True, text=True,
                             timeout=COMPILE_TIMEOUT_S, check=False).stdout
    key = hashlib.sha256()
    for part in (source.read_bytes(), " ".join(FLAGS).encode(), version.encode(),
                 _cpu_signature().encode()):
        key.update(part)
    return user_cache_dir() / "native" / f"{name}-{key.hexdigest()[:16]}.so"


def _compile(cc: str, target: Path, source: Path = SOURCE) -> None:
    """Build into a temporary file and rename it into place; a compiler without OpenMP
    (Apple's clang) gets a second try without it, whose kernels run on one thread."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        for flags in (FLAGS, tuple(f for f in FLAGS if f != "-fopenmp")):
            done = subprocess.run([cc, *flags, "-o", tmp, str(source)], capture_output=True,
                                  text=True, timeout=COMPILE_TIMEOUT_S, check=False)
            if done.returncode == 0:
                break
        else:
            first = (done.stderr.strip().splitlines() or ["(no message)"])[0]
            raise BuildError(f"{cc} failed on {source.name}: {first}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load(source: Path = SOURCE, name: str = "attention") -> ctypes.CDLL:
    """The compiled kernels of ``source`` (default: the attention kernels), built first
    when this machine has no copy yet."""
    cc = compiler()
    try:
        target = library_path(cc, source, name)
        if not target.exists():
            _compile(cc, target, source)
        try:
            return ctypes.CDLL(str(target))
        except OSError:  # a damaged copy (a full disk, another machine's file): once more
            target.unlink(missing_ok=True)
            _compile(cc, target, source)
            return ctypes.CDLL(str(target))
    except (OSError, subprocess.SubprocessError) as err:
        raise BuildError(str(err)) from err


def load_once(cache: list[ctypes.CDLL | None], source: Path = SOURCE, name: str = "attention",
              what: str = "the fused CPU attention kernels", instead: str = "torch's slower ops"
              ) -> ctypes.CDLL | None:
    """``source``'s library, loaded into ``cache`` on the first call; ``None`` (warned once,
    naming ``what`` and what runs ``instead``) where it does not build."""
    if not cache:
        try:
            cache.append(load(source, name))
        except BuildError as err:
            warnings.warn(f"sparsegnn: {what} are not available ({err}); {instead} run "
                          "instead", RuntimeWarning, stacklevel=3)
            cache.append(None)
    return cache[0]


def pointer(a: np.ndarray | None) -> ctypes.c_void_p:
    """The address of a (C-contiguous) array's data for a compiled kernel; NULL for None."""
    return ctypes.c_void_p(None if a is None else a.ctypes.data)
