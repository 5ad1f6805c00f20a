"""Track building's sequential loops in C (``chain_kernel.c``).

Labelling a pileup-200 event's chains went through scipy (a sparse matrix, its
components, a sort to renumber them): ~4 ms a call, and track building calls it a dozen
times per event while linking; a union-find over the chain edges takes a tenth of that.
The triplet greedy admits one triplet at a time in the order of its rank, a Python loop
over ~100k candidates. Both are integer logic and give exactly what the other forms give
(tests compare them). Compiled on first use like the other kernels
(:mod:`sparsegnn.sparse.native.build`); without a compiler, with ``SPARSEGNN_NATIVE=0``
or inside :func:`sparsegnn.sparse.native.disabled`, the other forms run.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from sparsegnn.sparse import native
from sparsegnn.sparse.native.build import load_once, pointer

SOURCE = Path(__file__).with_name("chain_kernel.c")
_lib: list[ctypes.CDLL | None] = []


def library() -> ctypes.CDLL | None:
    """The compiled kernels, or ``None`` (turned off, or they did not build: warned once)."""
    if not native.enabled():
        return None
    lib = load_once(_lib, SOURCE, "chains", "the track-building kernels",
                    "numpy's and Python's forms")
    if lib is not None:
        lib.link_candidates.restype = lib.bridge_candidates.restype = ctypes.c_int64
    return lib


def label_components(src: np.ndarray, dst: np.ndarray, n: int, min_hits: int
                     ) -> np.ndarray | None:
    """Component number per hit in order of first hit, -1 on components of fewer than
    ``min_hits`` hits; ``None`` where the kernel cannot run."""
    lib = library()
    if lib is None:
        return None
    src, dst = _c(src), _c(dst)
    _check(n, src, dst)
    parent, size, out = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
    lib.label_components(ctypes.c_int64(n), ctypes.c_int64(src.size), pointer(src), pointer(dst),
                         ctypes.c_int64(min_hits), pointer(parent), pointer(size), pointer(out))
    return out


def triplet_greedy(a: np.ndarray, b: np.ndarray, c: np.ndarray, n: int) -> np.ndarray | None:
    """Each hit's way out (-1: none) after taking the triplets ``a-b-c`` greedily in the
    order given; ``None`` where the kernel cannot run."""
    lib = library()
    if lib is None:
        return None
    a, b, c = _c(a), _c(b), _c(c)
    _check(n, a, b, c)
    out_of, in_of = np.full(n, -1, np.int64), np.empty(n, np.int64)
    middle = np.empty(n, np.uint8)
    lib.triplet_greedy(ctypes.c_int64(a.size), *map(pointer, (a, b, c)), ctypes.c_int64(n),
                       *map(pointer, (out_of, in_of, middle)))
    return out_of


def triplet_parts(positions: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray,
                  min_segment: float, curvature_sq: float, arm_noise: float
                  ) -> tuple[np.ndarray, ...] | None:
    """``(bent, y1, x1, y2, x2)`` of the triplets ``a-b-c`` on ``positions`` (``[n, 3]``):
    the squared bend over its squared spread, and the two (rise, run) pairs whose polar
    angles' difference is the turn (:func:`sparsegnn.tracking.triplets._triplet_misfit`
    takes the arctangents); ``None`` where the kernel cannot run."""
    lib = library()
    if lib is None or positions.ndim != 2 or positions.shape[1] != 3:
        return None
    a, b, c = _c(a), _c(b), _c(c)
    _check(positions.shape[0], a, b, c)
    pos = np.ascontiguousarray(positions, dtype=np.float64)
    out = np.empty((5, a.size), np.float64)
    lib.triplet_parts(ctypes.c_int64(a.size), pointer(a), pointer(b), pointer(c), pointer(pos),
                      ctypes.c_double(min_segment), ctypes.c_double(curvature_sq),
                      ctypes.c_double(arm_noise), *map(pointer, out))
    return tuple(out)


def link_candidates(src: np.ndarray, dst: np.ndarray, score: np.ndarray, cut: float,
                    chosen: np.ndarray, out_of: np.ndarray, in_of: np.ndarray,
                    label: np.ndarray) -> np.ndarray | None:
    """Indices of a linking round's candidate edges
    (:func:`sparsegnn.tracking.triplets._link_round`); ``None`` where the kernel cannot
    run."""
    lib = library()
    if lib is None:
        return None
    n = label.size
    src, dst, out_of, in_of, label = (_c(a) for a in (src, dst, out_of, in_of, label))
    if out_of.size != n or in_of.size != n or score.shape != src.shape or chosen.shape != src.shape:
        raise IndexError("link candidates: arrays of different lengths")
    _check(n, src, dst)
    score = np.ascontiguousarray(score, dtype=np.float64)
    flags = np.ascontiguousarray(chosen, dtype=np.uint8)
    out = np.empty(src.size, np.int64)
    found = lib.link_candidates(ctypes.c_int64(src.size), *map(pointer, (src, dst, score)),
                                ctypes.c_double(cut),
                                *map(pointer, (flags, out_of, in_of, label, out)))
    return out[:found].copy()


def bridge_candidates(ends: np.ndarray, by_phi: np.ndarray, phi: np.ndarray, dphi: float,
                      label: np.ndarray, short: np.ndarray, distance: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray] | None:
    """``(end, start)`` bridge candidates (:func:`sparsegnn.tracking.triplets.bridges`):
    azimuths within ``dphi`` (``by_phi``: the starts in azimuth order), different chains,
    one ``short``, the start farther out; ``None`` where the kernel cannot run."""
    lib = library()
    if lib is None:
        return None
    n = phi.size
    ends, by_phi, label = _c(ends), _c(by_phi), _c(label)
    if label.size != n or distance.shape != (n,):
        raise IndexError("bridge candidates: per-hit arrays of different lengths")
    _check(n, ends)
    _check(n, by_phi)
    on = np.concatenate([label[ends], label[by_phi]])
    if on.size and (int(on.min()) < 0 or int(on.max()) >= short.size):
        raise IndexError("bridge candidates: chain labels outside the chains")
    f64 = [np.ascontiguousarray(a, dtype=np.float64)
           for a in (phi, np.array([-2 * np.pi, 0.0, 2 * np.pi]), distance)]
    flags = np.ascontiguousarray(short, dtype=np.uint8)
    args = (ctypes.c_int64(ends.size), pointer(ends), ctypes.c_int64(by_phi.size), pointer(by_phi),
            pointer(f64[0]), pointer(f64[1]), ctypes.c_double(dphi), pointer(label), pointer(flags),
            pointer(f64[2]))
    count = lib.bridge_candidates(*args, None, None)
    out = np.empty((2, count), np.int64)
    lib.bridge_candidates(*args, pointer(out[0]), pointer(out[1]))
    return out[0], out[1]


# Layer ids (volume x 1000 + layer) are indexed directly up to this; larger ones go to numpy.
_MAX_LAYER_ID = 1 << 22


def with_layers(labels: np.ndarray, layer: np.ndarray, min_layers: int) -> np.ndarray | None:
    """:func:`sparsegnn.tracking.chains.with_layers` on ``layer`` ids; ``None`` where the
    kernel cannot run or the ids are negative or very large."""
    lib = library()
    if lib is None or layer.shape != labels.shape:
        return None
    labels, layer = _c(labels), _c(layer)
    if layer.size and (int(layer.min()) < 0 or int(layer.max()) >= _MAX_LAYER_ID):
        return None
    num_labels, num_layers = int(labels.max(initial=-1)) + 1, int(layer.max(initial=-1)) + 1
    n = labels.size
    scratch = [np.empty(k, np.int64) for k in (num_labels + 1, num_labels, n, num_layers)]
    out = np.empty(n, np.int64)
    lib.with_layers(ctypes.c_int64(n), pointer(labels), pointer(layer), ctypes.c_int64(num_labels),
                    ctypes.c_int64(num_layers), ctypes.c_int64(min_layers),
                    *map(pointer, scratch), pointer(out))
    return out


def _check(n: int, *hits: np.ndarray) -> None:
    """The C loops trust their indices: refuse any outside the ``n`` hits, or arrays of
    different lengths."""
    if len({h.size for h in hits}) > 1 or any(
            h.size and (int(h.min()) < 0 or int(h.max()) >= n) for h in hits):
        raise IndexError(f"chain kernels: hit indices outside the event's {n} hits")


def _c(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)

