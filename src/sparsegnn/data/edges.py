"""Edge-list clean-up shared by every loader and generator.

Every graph that enters sparsegnn goes through :func:`undirected_edge_index`, so all of
them obey one convention (both directions stored, no self-loops, no duplicates, sorted by
source then target) and downstream CSR construction never has to second-guess its input.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sparsegnn.errors import IndexOutOfRangeError, ResourceError

# Pairs per step while keys are made or split: the per-step temporaries stay ~50 MiB.
_CHUNK = 1 << 21
# The largest n with n * n <= 2**63, i.e. every key u * n + v (u, v < n) fits in int64.
_MAX_KEYED_NODES = math.isqrt(2**63)
# degree_stats counts densely (one int64 per vertex) up to this many vertices per edge.
_DENSE_DEGREE_RATIO = 4


def undirected_edge_index(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> torch.Tensor:
    """Symmetrise ``(src, dst)`` pairs into a sorted, duplicate- and loop-free ``[2, E]``.

    Works on flat int64 keys ``u * num_nodes + v`` so that deduplication and sorting are
    one numpy sort each instead of a lexsort over two columns, which matters at 10^7 edges.
    The keys are made a chunk of pairs at a time and both directions are sorted in the
    output's own memory, so the peak is the keys and the output, not several copies of
    each (``int32`` endpoints are read as they are, not copied to int64 first).
    """
    return _build(src, dst, num_nodes, undirected=True)


def directed_edge_index(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> torch.Tensor:
    """Like :func:`undirected_edge_index` but keeps direction (for directed edge lists)."""
    return _build(src, dst, num_nodes, undirected=False)


def degree_stats(edge_index: torch.Tensor, num_nodes: int) -> dict[str, float | int]:
    """Out-degree summary (what `data info` prints): skew and isolated vertices matter most.

    A dense count per vertex is used while the id space is comparable to the edge count;
    a sparse id space (ids near 3e9 on a handful of edges) would need gigabytes for it, so
    there only the sources that occur are counted and every other vertex has degree 0.
    """
    if num_nodes == 0:
        return {"degree_min": 0, "degree_max": 0, "degree_mean": 0.0, "degree_median": 0.0,
                "num_isolated": 0}
    sources = edge_index[0].cpu().numpy()
    if num_nodes <= _DENSE_DEGREE_RATIO * sources.size + _CHUNK:
        counts, zeros = np.bincount(sources, minlength=num_nodes), 0
    else:
        counts = np.unique(sources, return_counts=True)[1]
        zeros = num_nodes - counts.size
    middle = (num_nodes - 1) // 2 - zeros  # the lower median, as torch.median gives
    return {
        "degree_min": 0 if zeros else int(counts.min()),
        "degree_max": int(counts.max()) if counts.size else 0,
        "degree_mean": round(sources.size / num_nodes, 4),
        "degree_median": 0.0 if middle < 0 else float(np.partition(counts, middle)[middle]),
        "num_isolated": zeros + int(np.count_nonzero(counts == 0)),
    }


def _build(src: np.ndarray, dst: np.ndarray, num_nodes: int, undirected: bool) -> torch.Tensor:
    """The edge tensor of either kind, through keys on compacted ids when needed.

    A key ``u * n + v`` only fits int64 while ``n * n <= 2**63`` (about 3.04e9 vertices).
    Past that the ids are first renumbered by rank among the distinct endpoints: that
    order-preserving map keeps the sort and the deduplication exact, and at most two ids
    per pair exist, so the compact keys always fit. Normal graphs skip the renumbering.
    """
    src, dst = _ids(src), _ids(dst)
    _check_range(src, dst, num_nodes)
    if _keys_fit(num_nodes):
        return _edge_tensor(_pair_keys(src, dst, num_nodes, undirected), num_nodes,
                            mirror=undirected)
    distinct = sorted_unique(np.concatenate([src, dst]).astype(np.int64, copy=False))
    if not _keys_fit(distinct.size):
        raise ResourceError(
            f"{distinct.size} distinct vertex ids in ids up to {num_nodes - 1}: more than "
            f"{_MAX_KEYED_NODES} distinct ids of a sparse id space are not supported"
        )
    csrc = np.searchsorted(distinct, src)
    cdst = np.searchsorted(distinct, dst)
    compact = _edge_tensor(_pair_keys(csrc, cdst, distinct.size, undirected), distinct.size,
                           mirror=undirected)
    return torch.from_numpy(distinct[compact.numpy()])


def _keys_fit(num_nodes: int) -> bool:
    """Whether every key ``u * num_nodes + v`` with ``u, v < num_nodes`` fits in int64."""
    return num_nodes <= _MAX_KEYED_NODES


def _ids(ids: np.ndarray) -> np.ndarray:
    """Vertex ids as int32 (kept: half the memory) or int64 (anything else is cast)."""
    ids = np.asarray(ids)
    return ids if ids.dtype == np.int32 else ids.astype(np.int64, copy=False)


def _pair_keys(src: np.ndarray, dst: np.ndarray, num_nodes: int, undirected: bool) -> np.ndarray:
    """Sorted unique ``u * num_nodes + v`` of the non-loop pairs (``u <= v`` when
    ``undirected``), built ``_CHUNK`` pairs at a time into one array of keys."""
    n = np.int64(num_nodes)
    keys = np.empty(src.size, dtype=np.int64)
    size = 0
    for lo in range(0, src.size, _CHUNK):
        u = src[lo:lo + _CHUNK].astype(np.int64)
        v = dst[lo:lo + _CHUNK].astype(np.int64)
        if undirected:
            u, v = np.minimum(u, v), np.maximum(u, v)
        keep = u != v
        chunk = u[keep] * n + v[keep]
        keys[size:size + chunk.size] = chunk
        size += chunk.size
    return sorted_unique(keys[:size])


def _edge_tensor(keys: np.ndarray, num_nodes: int, mirror: bool) -> torch.Tensor:
    """``[2, E]`` of sorted ``keys`` (and, with ``mirror``, of their reverses ``v * n + u``,
    sorted in with them). Keys are laid out in the target row and split in place a chunk
    at a time, so the only full-size arrays are ``keys`` and the output."""
    n = np.int64(num_nodes)
    half = keys.size
    out = np.empty((2, 2 * half if mirror else half), dtype=np.int64)
    flat = out[1]
    flat[:half] = keys
    if mirror:
        for lo in range(0, half, _CHUNK):
            u, v = np.divmod(keys[lo:lo + _CHUNK], n)
            flat[half + lo:half + lo + u.size] = v * n + u
        flat.sort()
    for lo in range(0, flat.size, _CHUNK):
        np.divmod(flat[lo:lo + _CHUNK], n, out=(out[0, lo:lo + _CHUNK], flat[lo:lo + _CHUNK]))
    return torch.from_numpy(out)


def sorted_unique(keys: np.ndarray) -> np.ndarray:
    """Sort ``keys`` in place and drop repeats.

    Use this rather than a bare ``np.unique`` on large int64 arrays: with numpy 2.4 that
    takes a hash-table path that measured about 70x slower than a sort and a mask on 4M
    random int64 keys (``np.unique`` with ``return_counts``/``return_index`` still sorts).
    """
    keys.sort()
    fresh = np.empty(keys.size, dtype=bool)
    fresh[:1] = True
    np.not_equal(keys[1:], keys[:-1], out=fresh[1:])
    return keys[fresh]


def _check_range(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> None:
    if src.shape != dst.shape:
        raise IndexOutOfRangeError(
            f"edge endpoints differ in length: {src.shape[0]} sources, {dst.shape[0]} targets"
        )
    if src.size == 0:
        return
    lo = min(int(src.min()), int(dst.min()))
    hi = max(int(src.max()), int(dst.max()))
    if lo < 0 or hi >= num_nodes:
        raise IndexOutOfRangeError(
            f"edge endpoint ids span [{lo}, {hi}] but num_nodes is {num_nodes}; "
            f"ids must lie in [0, {num_nodes})"
        )
