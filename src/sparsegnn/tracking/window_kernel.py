"""Module-map graph construction's window test as one C pass (``window_kernel.c``).

The numpy form (:func:`sparsegnn.tracking.graph_construction._in_windows`) computes each
doublet variable for every survivor of the ones before, five gathering passes over ~1.5M
candidates at pileup 200: 0.15-0.2 s of each event's 1.4 s. The C loop reads each
candidate's hits and bounds once and stops at its first failing variable (~0.015 s), and
gives the same edges bit for bit (a test compares them). It is compiled on first use like
the attention kernels (:mod:`sparsegnn.sparse.native.build`); without a compiler, with
``SPARSEGNN_NATIVE=0`` or inside :func:`sparsegnn.sparse.native.disabled`, the numpy form
runs.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from sparsegnn.sparse import native
from sparsegnn.sparse.native.build import load_once
from sparsegnn.tracking.events import Event
from sparsegnn.tracking.windows import WINDOW_VARIABLES

SOURCE = Path(__file__).with_name("window_kernel.c")
# The order window_kernel.c tests the variables in (and the bounds' columns).
ORDER = ("dphi", "dz", "deta", "phi_slope", "z0")
_lib: list[ctypes.CDLL | None] = []


def _library() -> ctypes.CDLL | None:
    """The compiled kernel, or ``None`` (turned off, or it did not build: warned once)."""
    if not native.enabled():
        return None
    lib = load_once(_lib, SOURCE, "windows", "the window-test kernels", "numpy's passes")
    if lib is not None:
        lib.window_edges.restype = ctypes.c_int64
    return lib


def in_windows(event: Event, edge_index: np.ndarray, pair: np.ndarray, low: np.ndarray,
               high: np.ndarray, min_dr: float) -> np.ndarray | None:
    """The candidates ``edge_index`` (``[2, E]``, from pair rows ``pair``) oriented
    outwards whose every window variable lies in ``[low, high]`` of their pair
    (``[pairs, 5]``); ``None`` where the kernel cannot run, and the caller's numpy form
    then does. Azimuths outside [-pi, pi] (not an event this package reads) also go to
    numpy, whose wrap then takes the slower modulo."""
    lib = _library()
    n = edge_index.shape[1]
    if (lib is None or n == 0 or WINDOW_VARIABLES != ORDER or low.shape != high.shape
            or low.ndim != 2 or low.shape[1] != len(ORDER)
            or not (np.abs(event.phi) <= np.pi).all()):
        return None
    if (int(edge_index.min()) < 0 or int(edge_index.max()) >= event.num_hits
            or pair.shape != (n,) or int(pair.min()) < 0 or int(pair.max()) >= low.shape[0]):
        raise IndexError("window test: candidate hits or pair rows outside the event's "
                         "hits or the map's pairs")
    src, dst = (np.ascontiguousarray(edge_index[i], dtype=np.int64) for i in (0, 1))
    hits = [np.ascontiguousarray(a, dtype=np.float64)
            for a in (event.distance, event.r, event.phi, event.z, event.eta)]
    bounds = [np.ascontiguousarray(b, dtype=np.float64) for b in (low, high)]
    pairs = np.ascontiguousarray(pair, dtype=np.int64)
    out = np.empty((2, n), dtype=np.int64)
    kept = lib.window_edges(ctypes.c_int64(n), *(_ptr(a) for a in (src, dst, pairs, *hits,
                                                                     *bounds)),
                            ctypes.c_double(min_dr), _ptr(out[0]), _ptr(out[1]))
    return out[:, :kept].copy()


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)
