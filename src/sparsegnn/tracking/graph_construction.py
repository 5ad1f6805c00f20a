"""Hit graphs of an event: candidates from a module map under doublet cuts, or truth-built.

On a new event, every hit pair sitting on a connected pair of the module map
(:mod:`sparsegnn.tracking.module_map`) is a candidate edge, found by a search on azimuth;
the pairs' windows and the geometric doublet cuts (:mod:`sparsegnn.tracking.doublet_cuts`)
then remove the candidates no realistic track makes, and a
:class:`~sparsegnn.tracking.hit_graph.HitGraph` records the edges with their features
and truth.

The truth-built graph has exactly the segments of every particle (efficiency and purity
1 by construction): it isolates the edge classifier and track building from graph
construction when evaluating on a single event.
"""

from __future__ import annotations

import numpy as np
import torch

from sparsegnn.sparse import run_positions
from sparsegnn.tracking import graph_kernel
from sparsegnn.tracking.doublet_cuts import NO_CUTS, DoubletCuts, apply_cuts, edge_values
from sparsegnn.tracking.events import Event
from sparsegnn.tracking.graph_kernel import HitSearch
from sparsegnn.tracking.hit_graph import EDGE_SCALE, NODE_SCALE, HitGraph
from sparsegnn.tracking.module_map import ModuleMap, element_keys
from sparsegnn.tracking.truth import (
    DEFAULT_TARGETS,
    TargetConfig,
    edge_truth,
    segments,
    selected_particles,
    successor,
)
from sparsegnn.tracking.windows import (
    MIN_DR,
    WINDOW_VARIABLES,
    doublet_value,
    outwards,
    window_pass,
    wrap,
)


def module_map_graph(event: Event, module_map: ModuleMap, cuts: DoubletCuts = NO_CUTS,
                     targets: TargetConfig = DEFAULT_TARGETS) -> HitGraph:
    """Candidate edges from ``module_map``, in their pairs' windows when
    ``cuts.window_margin`` is set, then filtered by the global ``cuts``."""
    bounds, dphi = module_map.search_ranges(cuts)
    found = hit_search(event, module_map, dphi)
    fast = graph_kernel.search(event, found, bounds, MIN_DR)
    if fast is not None:
        edge_index = fast[0]
    else:
        edge_index, pair = _candidates_of(event, found)
        if bounds is not None:
            edge_index = _in_windows(event, edge_index, pair, bounds)
    edge_index = apply_cuts(event, edge_index, cuts)
    return _graph(event, _sorted_pairs(event, edge_index), targets)


def truth_graph(event: Event, targets: TargetConfig = DEFAULT_TARGETS) -> HitGraph:
    """Edges between consecutive hits of every particle (noise hits stay isolated)."""
    return _graph(event, segments(event), targets)


def _in_windows(event: Event, edge_index: np.ndarray, pair: np.ndarray,
                bounds: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The candidates (oriented outwards) whose every variable lies in its pair's widened
    window ``bounds``; each variable computed only on the survivors of the ones before
    (the numpy form of :func:`sparsegnn.tracking.graph_kernel.search`'s window test)."""
    low, high = bounds
    edge_index = outwards(event, edge_index)
    for j, name in enumerate(WINDOW_VARIABLES):
        ok = window_pass(doublet_value(event, *edge_index, name), low[pair, j], high[pair, j])
        edge_index, pair = edge_index[:, ok], pair[ok]
    return edge_index


# Hits are searched by azimuth on one sorted key per event: module rank x _SPAN plus the
# hit's azimuth offset within its module (in [-pi, pi)), so each module owns the key range
# rank x _SPAN +- _HALF and a query clipped to that range never reaches another module.
_SPAN, _HALF = 8.0, 4.0
# Slack on every searched range (rad): far above the rounding of keys (~3e-11 rad at
# 30k modules), so the search keeps a superset of what the exact dphi test passes.
_SLACK = 1e-6


def hit_search(event: Event, module_map: ModuleMap,
               dphi: tuple[np.ndarray, np.ndarray]) -> HitSearch:
    """What finding ``event``'s candidates by azimuth needs.

    Every pair of hits on two connected modules was a candidate before, ten or more for
    every edge kept at pileup 200 (5.6M per event), and computing their variables was
    most of graph construction. Now each module's hits are sorted by azimuth, and each
    hit of a pair's first module finds by binary search the run of the second module's
    hits its dphi range allows. That is a superset of what the exact tests after it
    pass (:func:`_in_windows`, :func:`apply_cuts` still check dphi), so the graph is
    the same. A pair whose range plus its second module's azimuth spread could wrap
    around (no window, a wide one) takes the whole run, as before.
    """
    keys = element_keys(event, module_map.level)
    mods, first, module = np.unique(keys, return_index=True, return_inverse=True)
    phi = event.phi
    reference = phi[first]  # one hit's azimuth per module: offsets from it stay small
    offset = wrap(phi - reference[module])
    order = np.lexsort((offset, module))
    count = np.bincount(module, minlength=mods.size)
    start = np.zeros_like(count)
    np.cumsum(count[:-1], out=start[1:])
    sorted_offset = offset[order]
    reach = np.maximum(-sorted_offset[start], sorted_offset[start + count - 1])
    pairs = module_map.unordered_pairs()
    ia = np.searchsorted(mods, pairs[:, 0])
    ib = np.searchsorted(mods, pairs[:, 1])
    ok = (ia < mods.size) & (ib < mods.size)
    ok[ok] &= (mods[ia[ok]] == pairs[ok, 0]) & (mods[ib[ok]] == pairs[ok, 1])
    row = np.flatnonzero(ok)
    ia, ib = ia[ok], ib[ok]
    low, high = _pair_dphi(event, order, start, ia, ib, dphi[0][row], dphi[1][row])
    searchable = reach[ib] + np.maximum(np.abs(low), np.abs(high)) < np.pi - _SLACK
    return HitSearch(ia, ib, row, np.where(searchable, low - _SLACK, -np.inf),
                     np.where(searchable, high + _SLACK, np.inf), start, count, order,
                     sorted_offset, reference, _HALF)


def _candidates_of(event: Event, found: HitSearch) -> tuple[np.ndarray, np.ndarray]:
    """Every hit pair of ``found``'s search, each unordered pair once, and its map row."""
    ia, ib, start, count, order = found.ia, found.ib, found.start, found.count, found.order
    module = np.repeat(np.arange(count.size), count)
    search_key = module * _SPAN + found.offset
    # Each pair's a-side hits, each searching the b side's run for its dphi range.
    which = np.repeat(np.arange(ia.size), count[ia])
    src = order[_runs(start[ia], count[ia])]
    b, u = ib[which], wrap(event.phi[src] - found.reference[ib[which]])
    lo = np.searchsorted(search_key, b * _SPAN + np.clip(u + found.low[which], -_HALF, _HALF),
                         "left")
    hi = np.searchsorted(search_key, b * _SPAN + np.clip(u + found.high[which], -_HALF, _HALF),
                         "right")
    found_hits = np.maximum(hi - lo, 0)
    dst = order[_runs(lo, found_hits)]
    src, pair = np.repeat(src, found_hits), np.repeat(which, found_hits)
    keep = (ia != ib)[pair] | (src < dst)
    return np.stack([src[keep], dst[keep]]).astype(np.int64, copy=False), found.row[pair[keep]]


def _pair_dphi(event: Event, order: np.ndarray, start: np.ndarray, ia: np.ndarray,
               ib: np.ndarray, low: np.ndarray, high: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """The range of phi(b) - phi(a) for hits a, b on modules ``ia``, ``ib`` whose outward
    edge has dphi in [``low``, ``high``]: the range itself where every a-hit lies nearer
    the origin than every b-hit, mirrored where every one lies farther, their hull where
    the modules' distances overlap (``outwards`` orients each hit pair on its own)."""
    dist = event.distance[order]
    near, far = np.minimum.reduceat(dist, start), np.maximum.reduceat(dist, start)
    a_inner, b_inner = far[ia] <= near[ib], near[ia] > far[ib]
    mixed_low, mixed_high = np.minimum(low, -high), np.maximum(high, -low)
    return (np.where(a_inner, low, np.where(b_inner, -high, mixed_low)),
            np.where(a_inner, high, np.where(b_inner, -low, mixed_high)))


def _runs(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``starts[i], ..., starts[i] + counts[i] - 1`` for every i, in order
    (:func:`~sparsegnn.sparse.run_positions` on the arrays' memory)."""
    crow = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=crow[1:])
    return run_positions(torch.from_numpy(starts), torch.from_numpy(counts),
                         torch.from_numpy(crow)).numpy()


def _sorted_pairs(event: Event, edge_index: np.ndarray) -> np.ndarray:
    """Edges in (smaller hit, larger hit) order, so a graph does not depend on the order
    in which the module map lists its pairs (a counting sort in C where it builds)."""
    perm = graph_kernel.pair_order(edge_index, event.num_hits)
    if perm is not None:
        return edge_index[:, perm]
    lo, hi = np.minimum(*edge_index), np.maximum(*edge_index)
    order = np.argsort(lo * max(event.num_hits, 1) + hi, kind="stable")
    return edge_index[:, order]


def _graph(event: Event, edge_index: np.ndarray, targets: TargetConfig) -> HitGraph:
    edge_index = outwards(event, edge_index)
    nxt = successor(event)
    y, target = edge_truth(event, edge_index, targets, nxt)
    segs = segments(event, nxt)
    selected = selected_particles(event, targets)
    num_target = int(selected[event.particle_index[segs[0]]].sum())
    node = np.stack([event.r, event.phi, event.z], axis=1) / NODE_SCALE
    edge = graph_kernel.edge_features(event, edge_index, EDGE_SCALE)
    if edge is None:
        v = edge_values(event, edge_index)
        edge = (np.stack([v["dr"], v["dphi"], v["dz"], v["deta"]], axis=1)
                / EDGE_SCALE).astype(np.float32)
    return HitGraph(event.name, edge_index, node.astype(np.float32), edge, y, target,
                    int(segs.shape[1]), num_target)
