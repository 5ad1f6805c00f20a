"""Module-map graph construction and the filter's inputs as C loops (``graph_kernel.c``).

At pileup 200 the numpy forms materialise 1.8M candidate hit pairs, test them in five
gathering passes (:func:`sparsegnn.tracking.graph_construction._in_windows`), sort the
survivors with an argsort and compute the filter's ten inputs column by column: 0.3 s of
each event. The C loops test each candidate as the azimuth search finds it, order the
edges by a counting sort and fill the filter's inputs row by row, and give the same
edges in the same order and the same features bit for bit (tests compare them). They are
compiled on first use like the attention kernels (:mod:`sparsegnn.sparse.native.build`);
without a compiler, with ``SPARSEGNN_NATIVE=0`` or inside
:func:`sparsegnn.sparse.native.disabled`, the numpy forms run.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sparsegnn.sparse import native
from sparsegnn.sparse.native.build import load_once, pointer
from sparsegnn.tracking.events import Event
from sparsegnn.tracking.windows import WINDOW_VARIABLES

SOURCE = Path(__file__).with_name("graph_kernel.c")
# The order graph_kernel.c tests the variables in (and the bounds' columns).
ORDER = ("dphi", "dz", "deta", "phi_slope", "z0")
_lib: list[ctypes.CDLL | None] = []


@dataclass(frozen=True)
class HitSearch:
    """What the azimuth search of one event runs on (made by
    :func:`sparsegnn.tracking.graph_construction.hit_search`): per map pair present in
    the event its two modules ``ia``, ``ib``, map ``row`` and searched dphi range
    ``low``..``high``; per module the ``start`` and ``count`` of its hits in ``order``
    (by module, then azimuth offset ``offset`` from the module's ``reference``)."""

    ia: np.ndarray
    ib: np.ndarray
    row: np.ndarray
    low: np.ndarray
    high: np.ndarray
    start: np.ndarray
    count: np.ndarray
    order: np.ndarray
    offset: np.ndarray  # sorted like order
    reference: np.ndarray
    half: float  # queries are clipped to +-half


def library() -> ctypes.CDLL | None:
    """The compiled kernels, or ``None`` (turned off, or they did not build: warned once)."""
    if not native.enabled():
        return None
    lib = load_once(_lib, SOURCE, "graph", "the graph-construction kernels", "numpy's passes")
    if lib is not None:
        lib.search_runs.restype = lib.search_edges.restype = ctypes.c_int64
    return lib


def search(event: Event, found: HitSearch,
           bounds: tuple[np.ndarray, np.ndarray] | None, min_dr: float
           ) -> tuple[np.ndarray, np.ndarray] | None:
    """The candidate edges of ``found`` and their map rows; with window ``bounds``
    (``[pairs, 5]`` low and high) only those inside, oriented outwards (the numpy form's
    ``_in_windows`` after ``_candidates``). ``None`` where the kernels cannot run, or for
    azimuths outside [-pi, pi] (not an event this package reads): numpy then runs."""
    lib = library()
    if lib is None or not (np.abs(event.phi) <= np.pi).all():
        return None
    if bounds is not None and (WINDOW_VARIABLES != ORDER or bounds[0].shape != bounds[1].shape
                               or bounds[0].shape[1:] != (len(ORDER),)):
        return None
    _check(event, found, bounds)
    i64 = [_c(a, np.int64) for a in (found.ia, found.ib, found.row, found.start, found.count,
                                     found.order)]
    ia, ib, row, start, count, order = i64
    f64 = [_c(a, np.float64) for a in (found.low, found.high, event.phi, found.reference,
                                       found.offset)]
    entries = int(count[ia].sum()) if ia.size else 0
    run_lo, run_hi = np.empty(entries, np.int64), np.empty(entries, np.int64)
    total = lib.search_runs(ctypes.c_int64(ia.size), *map(pointer, (ia, ib, *f64[:2], start,
                                                                  count, order, *f64[2:])),
                            ctypes.c_double(found.half), pointer(run_lo), pointer(run_hi))
    hits = [_c(a, np.float64) for a in (event.distance, event.r, event.phi, event.z, event.eta)]
    window = [None, None] if bounds is None else [_c(b, np.float64) for b in bounds]
    out = np.empty((3, total), dtype=np.int64)
    kept = lib.search_edges(ctypes.c_int64(ia.size), *map(pointer, (ia, ib, start, count, order,
                                                                 run_lo, run_hi, row, *hits,
                                                                 *window)),
                            ctypes.c_double(min_dr), *map(pointer, out))
    return out[:2, :kept].copy(), out[2, :kept].copy()


def _check(event: Event, found: HitSearch, bounds: tuple[np.ndarray, np.ndarray] | None
           ) -> None:
    """The C loops trust their indices: refuse any outside the event, modules or map."""
    modules, hits = found.start.size, event.num_hits
    rows = None if bounds is None else bounds[0].shape[0]
    bad = (found.count.shape != (modules,) or found.order.shape != (hits,)
           or found.offset.shape != (hits,) or found.reference.shape != (modules,)
           or not (found.ia.shape == found.ib.shape == found.row.shape == found.low.shape
                   == found.high.shape)
           or int(found.count.sum()) != hits
           or (found.order.size and (found.order.min() < 0 or found.order.max() >= hits))
           or (found.ia.size and (min(found.ia.min(), found.ib.min()) < 0
                                  or max(found.ia.max(), found.ib.max()) >= modules))
           or (rows is not None and found.row.size and (found.row.min() < 0
                                                        or found.row.max() >= rows))
           or (modules and (found.start.min() < 0
                            or (found.start + found.count).max() > hits)))
    if bad:
        raise IndexError("graph search: hits, modules or map rows outside the event's hits, "
                         "modules or the map's pairs")


def edge_features(event: Event, edge_index: np.ndarray, scale: np.ndarray
                  ) -> np.ndarray | None:
    """``[E, 4]`` float32 dr, dphi, dz, deta of the edges over ``scale``; ``None`` where
    the kernel cannot run, or for azimuths outside [-pi, pi] (numpy then runs)."""
    lib = library()
    if lib is None or scale.shape != (4,) or not (np.abs(event.phi) <= np.pi).all():
        return None
    src, dst = (_c(edge_index[i], np.int64) for i in (0, 1))
    if src.size and (min(src.min(), dst.min()) < 0
                     or max(src.max(), dst.max()) >= event.num_hits):
        raise IndexError("edge features: edges outside the event's hits")
    hits = [_c(a, np.float64) for a in (event.r, event.phi, event.z, event.eta, scale)]
    out = np.empty((src.size, 4), np.float32)
    lib.edge_features(ctypes.c_int64(src.size), pointer(src), pointer(dst), *map(pointer, hits),
                      pointer(out))
    return out


def pair_order(edge_index: np.ndarray, num_hits: int) -> np.ndarray | None:
    """The stable permutation to (smaller hit, larger hit) order, or ``None`` (numpy's
    argsort then runs)."""
    lib = library()
    if lib is None:
        return None
    src, dst = (_c(edge_index[i], np.int64) for i in (0, 1))
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= num_hits):
        raise IndexError("pair order: edges outside the event's hits")
    bucket, perm = np.zeros(num_hits + 1, np.int64), np.empty(src.size, np.int64)
    lib.pair_order(ctypes.c_int64(src.size), pointer(src), pointer(dst), ctypes.c_int64(num_hits),
                   pointer(bucket), pointer(perm))
    return perm


def doublet_features(edge_index: np.ndarray, node: np.ndarray, edge: np.ndarray,
                     node_scale: np.ndarray, edge_scale: np.ndarray, divisor: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray] | None:
    """``[E, 10]`` float32 filter inputs with the first nine columns filled (unscaled
    node/edge features over ``divisor``) and the float64 z0 of every edge, or ``None``
    (numpy then runs)."""
    lib = library()
    if lib is None:
        return None
    src, dst = (_c(edge_index[i], np.int64) for i in (0, 1))
    n = src.size
    if edge.shape != (n, 4) or node.ndim != 2 or node.shape[1] != 3 or divisor.shape != (10,):
        return None
    if n and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= node.shape[0]):
        raise IndexError("doublet features: edges outside the graph's nodes")
    scales = [_c(a, np.float64) for a in (node_scale, edge_scale, divisor)]
    out, z0 = np.empty((n, 10), np.float32), np.empty(n, np.float64)
    lib.doublet_features(ctypes.c_int64(n), *map(pointer, (src, dst, _c(node, np.float32),
                                                        _c(edge, np.float32), *scales, out,
                                                        z0)))
    return out, z0


def _c(a: np.ndarray, dtype: type) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=dtype)

