"""Hit graphs: a module map learned from training events plus doublet cuts, or truth-built.

Module map (as in the ATLAS/Exa.TrkX module-map graph construction): every pair of
sensitive modules that consecutive hits of a true particle connect in the training
events. On a new event, every hit pair sitting on a connected module pair is a
candidate edge; geometric doublet cuts (dphi, dz, deta, phi slope, z0) then remove the
candidates no realistic track makes. Only module pairs seen in training get edges, so
the map needs many training events to reach full efficiency on unseen ones.

A map can also carry a cut window per module pair (:mod:`sparsegnn.tracking.windows`:
the range of each doublet variable its segments showed, as GNN4ITk's module map);
``DoubletCuts.window_margin`` applies them. Maps of many events are learnt in worker
processes (:func:`learn_module_map`), one event per task, and merged.

The truth-built graph has exactly the segments of every particle (efficiency and purity
1 by construction): it isolates the edge classifier and track building from graph
construction when evaluating on a single event.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from functools import cached_property
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch

from sparsegnn.data.io import atomic_write
from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.sparse import run_positions
from sparsegnn.tracking.events import Event, event_files, module_key, read_event
from sparsegnn.tracking.truth import (
    DEFAULT_TARGETS,
    TargetConfig,
    edge_truth,
    segments,
    selected_particles,
)
from sparsegnn.tracking.windows import (
    WINDOW_VARIABLES,
    PairWindows,
    doublet_value,
    doublet_values,
    outwards,
    reduce_windows,
    window_pass,
    wrap,
)

NODE_SCALE = np.array([1000.0, np.pi, 1000.0])  # r [mm], phi [rad], z [mm]
EDGE_SCALE = np.array([100.0, 0.1, 100.0, 0.1])  # dr, dphi, dz, deta


@dataclass(frozen=True)
class DoubletCuts:
    """Upper bounds on |value| for a candidate edge; ``None`` disables a cut.

    ``phi_slope`` is dphi/dr (rad/mm): ~ 1 / (2 R) for a helix of radius R, so it bounds
    the curvature, i.e. the transverse momentum. ``z0`` is where the straight line
    through both hits crosses the beam line (mm): it bounds the vertex position.
    Both extrapolate over dr, so pairs with |dr| < ``min_dr`` (mm) skip them: same-r pairs
    in the endcap disks would divide by zero, and two hits of one particle a few mm apart
    (overlapping modules of one layer) give a meaningless slope and z0. At pileup 50,
    ``min_dr=10`` keeps 2% more of the target segments than 1 (docs/tracking.md).

    ``window_margin`` (not ``None``) also applies the module map's per-pair windows,
    each widened on both sides by ``window_margin + window_count_margin / count`` times
    its width, pairs seen fewer than ``window_min_count`` times left to the global cuts
    (:meth:`PairWindows.widened`); the map must have been learnt with windows.
    """

    dphi: float | None = None
    dz: float | None = None
    deta: float | None = None
    phi_slope: float | None = None
    z0: float | None = None
    min_dr: float = 1.0
    window_margin: float | None = None
    window_count_margin: float = 0.0
    window_min_count: int = 1


NO_CUTS = DoubletCuts()


@dataclass(frozen=True)
class ModuleMap:
    """Directed pairs of detector elements that consecutive hits of one particle connect.

    ``level="module"`` keys are sensitive modules (the module map proper: selective, but
    it needs many training events to cover every module pair). ``level="layer"`` keys
    are (volume, layer) pairs with the module ignored: a handful of events cover every
    layer pair, and the doublet cuts then do the selecting (the classic Exa.TrkX
    geometric graph construction). ``windows`` (optional) holds one cut window per row
    of :meth:`unordered_pairs`.
    """

    pairs: np.ndarray  # [M, 2] int64 keys, unique rows sorted lexicographically
    level: str = "module"
    windows: PairWindows | None = None

    @classmethod
    def learn(cls, events: Sequence[Event], level: str = "module", min_pt: float = 0.0,
              windows: bool = False) -> ModuleMap:
        """The element pairs that consecutive hits of particles with pT >= ``min_pt`` (GeV)
        connect in ``events``, with each pair's windows when ``windows``.

        ``min_pt`` a little below the targets' (0.9 for pT >= 1 GeV targets) keeps the
        windows from widening to what soft particles, which curl, need."""
        return cls.merge([cls.empty(level, windows),
                          *(_event_map(ev, level, min_pt, windows) for ev in events)])

    @classmethod
    def empty(cls, level: str = "module", windows: bool = False) -> ModuleMap:
        """A map of no pairs (with windows of no pairs when ``windows``): what merging
        starts from."""
        nvar = len(WINDOW_VARIABLES)
        none = PairWindows(np.empty((0, nvar)), np.empty((0, nvar)), np.empty(0, np.int64))
        return cls(np.empty((0, 2), np.int64), level, none if windows else None)

    @classmethod
    def merge(cls, maps: Sequence[ModuleMap]) -> ModuleMap:
        """One map with the pairs of all ``maps`` (windows joined: the widest range)."""
        levels = {m.level for m in maps}
        if len(levels) != 1:
            raise InvalidValueError("cannot join module maps of different levels ("
                                    + ", ".join(f"{lv}-level" for lv in sorted(levels)) + ")")
        with_windows = {m.windows is not None for m in maps}
        if len(with_windows) != 1:
            raise InvalidValueError("cannot join a module map with cut windows and one "
                                    "without (learn both with windows)")
        pairs = np.unique(np.concatenate([m.pairs for m in maps]), axis=0).astype(np.int64)
        if not with_windows.pop():
            return cls(pairs, levels.pop())
        keys = np.concatenate([m.unordered_pairs() for m in maps])
        _, joined = reduce_windows(keys, *(np.concatenate([getattr(m.windows, f) for m in maps])
                                           for f in ("low", "high", "count")))
        return cls(pairs, levels.pop(), joined)

    def __len__(self) -> int:
        return int(self.pairs.shape[0])

    def union(self, other: ModuleMap) -> ModuleMap:
        """The pairs of both maps: module pairs are geometry, so a map learnt from one kind
        of event (pileup-50 ttbar) completes one learnt from another (a particle gun)."""
        return ModuleMap.merge([self, other])

    def unordered_pairs(self) -> np.ndarray:
        """Each unordered element pair once, as (smaller, larger) key, sorted (read-only)."""
        return self._unordered_rows

    @cached_property
    def _unordered_rows(self) -> np.ndarray:
        """Computed once per map: every graph built from it looks its pairs up here."""
        rows = _unordered(self.pairs)
        rows.flags.writeable = False
        return rows

    def search_ranges(self, cuts: DoubletCuts) -> tuple[tuple[np.ndarray, np.ndarray] | None,
                                                        tuple[np.ndarray, np.ndarray]]:
        """``(bounds, dphi)`` per row of :meth:`unordered_pairs` under ``cuts``: the
        widened windows (``None`` without ``cuts.window_margin``) and the range the
        outward dphi must lie in (read-only arrays).

        Made once per map and cut values and kept: every event's graph needs the same
        ones, and on a 500-event map (176k pairs) making them took 0.01 s of each
        pileup-200 graph, 0.24 s of the first one (fresh memory)."""
        key = (cuts.window_margin, cuts.window_count_margin, cuts.window_min_count, cuts.dphi)
        if key not in self._ranges:
            bounds = None
            if cuts.window_margin is not None:
                if self.windows is None:
                    raise InvalidValueError(
                        "window_margin is set but the module map has no cut windows: learn "
                        "it with windows (ModuleMap.learn(..., windows=True), 'track "
                        "build-graphs --map-windows')")
                bounds = self.windows.widened(cuts.window_margin, cuts.window_count_margin,
                                              cuts.window_min_count)
            dphi = _dphi_ranges(self, bounds, cuts)
            for array in (*(bounds or ()), *dphi):
                array.flags.writeable = False
            self._ranges[key] = bounds, dphi
        return self._ranges[key]

    @cached_property
    def _ranges(self) -> dict[tuple, tuple]:
        """:meth:`search_ranges`' results by cut values (a map is immutable)."""
        return {}

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Plain arrays (an ``.npz``, or a model file's entry)."""
        out = {"pairs": self.pairs, "level": np.array(self.level)}
        if self.windows is not None:
            out.update(window_low=self.windows.low, window_high=self.windows.high,
                       window_count=self.windows.count)
        return out

    @classmethod
    def from_arrays(cls, data: dict[str, np.ndarray], source: str | Path) -> ModuleMap:
        """The inverse of :meth:`to_arrays`; a map written before windows existed has none."""
        pairs = np.asarray(data["pairs"]).astype(np.int64)
        if "window_low" not in data:
            return cls(pairs, str(data["level"]))
        windows = PairWindows(np.asarray(data["window_low"], np.float64),
                              np.asarray(data["window_high"], np.float64),
                              np.asarray(data["window_count"]).astype(np.int64))
        expected = (_unordered(pairs).shape[0], len(WINDOW_VARIABLES))
        if windows.low.shape != expected or windows.high.shape != expected:
            raise DataFormatError(f"{source}: module-map windows of shape {windows.low.shape}, "
                                  f"expected {expected}")
        return cls(pairs, str(data["level"]), windows)

    def save(self, path: str | Path) -> None:
        """Written whole (temp file + rename) to exactly ``path``."""
        atomic_write(path, lambda f: np.savez_compressed(f, **self.to_arrays()))

    @classmethod
    def load(cls, path: str | Path) -> ModuleMap:
        data = _read_arrays(path, ("pairs", "level"), "module map",
                            optional=("window_low", "window_high", "window_count"))
        return cls.from_arrays(data, path)


def _event_map(event: Event, level: str, min_pt: float, windows: bool) -> ModuleMap:
    """One event's pairs (and windows): the unit of work of :func:`learn_module_map`."""
    src, dst = segments(event)
    keep = event.particles.pt[event.particle_index[src]] >= min_pt
    src, dst = src[keep], dst[keep]
    keys = element_keys(event, level)
    pairs = np.unique(np.stack([keys[src], keys[dst]], axis=1).reshape(-1, 2),
                      axis=0).astype(np.int64)
    if not windows:
        return ModuleMap(pairs, level)
    edges = outwards(event, np.stack([src, dst]))
    values = doublet_values(event, edges)
    unordered = np.sort(np.stack([keys[src], keys[dst]], axis=1), axis=1)
    _, found = reduce_windows(unordered, values, values, np.ones(src.size, np.int64))
    return ModuleMap(pairs, level, found)


def learn_module_map(directories: Sequence[str | Path], level: str = "module",
                     min_pt: float = 0.0, windows: bool = False, workers: int = 1,
                     limit: int | None = None) -> ModuleMap:
    """The map of every event in ``directories`` (the first ``limit``), read and learnt
    in ``workers`` processes (reading the CSV is most of the cost, and events are
    independent), merged in batches so memory stays at one map plus a batch."""
    merged, batch = ModuleMap.empty(level, windows), []
    for found in event_maps(directories, level, min_pt, windows, workers, limit):
        batch.append(found)
        if len(batch) == 16:
            merged, batch = ModuleMap.merge([merged, *batch]), []
    return ModuleMap.merge([merged, *batch])


def event_maps(directories: Sequence[str | Path], level: str = "module", min_pt: float = 0.0,
               windows: bool = False, workers: int = 1, limit: int | None = None
               ) -> Iterator[ModuleMap]:
    """Each event's own map, in directory then event order, learnt in ``workers``
    processes (spawned: the caller may hold torch threads); merge them with
    :meth:`ModuleMap.merge` (how a curve of efficiency vs map events is drawn)."""
    files = [(str(d), prefix) for d in directories for prefix in event_files(d)][:limit]
    tasks = [(d, prefix, level, min_pt, windows) for d, prefix in files]
    if workers <= 1:
        yield from (_file_map(*task) for task in tasks)
        return
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        yield from pool.map(_file_map, *zip(*tasks, strict=True), chunksize=1)


def _file_map(directory: str, prefix: str, level: str, min_pt: float, windows: bool
              ) -> ModuleMap:
    return _event_map(read_event(directory, prefix), level, min_pt, windows)


def element_keys(event: Event, level: str) -> np.ndarray:
    """Per-hit key of its module (``"module"``) or of its (volume, layer) (``"layer"``)."""
    if level == "module":
        return event.module_key
    if level == "layer":
        return module_key(event.volume, event.layer, np.zeros_like(event.module))
    raise ValueError(f"unknown module-map level {level!r}; use 'module' or 'layer'")


@dataclass
class HitGraph:
    """One event's graph: hits are nodes, candidate segments are directed edges (inner -> outer)."""

    name: str
    edge_index: np.ndarray  # [2, E] int64
    node_features: np.ndarray  # [N, 3] float32: r, phi, z (scaled)
    edge_features: np.ndarray  # [E, 4] float32: dr, dphi, dz, deta (scaled)
    y: np.ndarray  # [E] bool: consecutive hits of one particle
    target: np.ndarray  # [E] bool: true and the particle passes the TargetConfig
    num_true_segments: int  # segments of all particles in the event
    num_target_segments: int  # segments of target particles in the event

    @property
    def num_nodes(self) -> int:
        return int(self.node_features.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    def keep_edges(self, mask: np.ndarray) -> HitGraph:
        """The same graph with only the edges where ``mask`` is true; the segment counts stay,
        so ``stats().efficiency`` charges the dropped target segments to the graph."""
        return HitGraph(self.name, self.edge_index[:, mask], self.node_features,
                        self.edge_features[mask], self.y[mask], self.target[mask],
                        self.num_true_segments, self.num_target_segments)

    def stats(self) -> GraphStats:
        kept_target = int(self.target.sum())
        return GraphStats(
            num_nodes=self.num_nodes, num_edges=self.num_edges,
            efficiency=kept_target / max(self.num_target_segments, 1),
            true_efficiency=int(self.y.sum()) / max(self.num_true_segments, 1),
            purity=int(self.y.sum()) / max(self.num_edges, 1),
            target_purity=kept_target / max(self.num_edges, 1),
        )

    def save(self, path: str | Path) -> None:
        """Written whole (temp file + rename) to exactly ``path``."""
        atomic_write(path, lambda f: np.savez_compressed(
            f, name=np.array(self.name), edge_index=self.edge_index,
            node_features=self.node_features, edge_features=self.edge_features, y=self.y,
            target=self.target,
            counts=np.array([self.num_true_segments, self.num_target_segments]),
        ))

    @classmethod
    def load(cls, path: str | Path) -> HitGraph:
        names = ("name", "edge_index", "node_features", "edge_features", "y", "target", "counts")
        d = _read_arrays(path, names, "hit graph")
        _check_hit_graph(path, d)
        return cls(str(d["name"]), d["edge_index"].astype(np.int64), d["node_features"],
                   d["edge_features"], d["y"].astype(bool), d["target"].astype(bool),
                   int(d["counts"][0]), int(d["counts"][1]))


def _read_arrays(path: str | Path, names: tuple[str, ...], what: str,
                 optional: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """The named arrays of an ``.npz`` (no pickles) and those of ``optional`` it holds, or
    one error naming the file."""
    try:
        with np.load(Path(path), allow_pickle=False) as data:
            missing = [n for n in names if n not in data]
            if missing:
                raise DataFormatError(f"{path}: not a {what}, missing arrays {missing}")
            return {n: data[n] for n in (*names, *optional) if n in data}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        if isinstance(err, DataFormatError):
            raise
        raise DataFormatError(f"{path}: not a readable {what} file ({err})") from err


def _check_hit_graph(path: str | Path, d: dict[str, np.ndarray]) -> None:
    """Refuse a graph file whose arrays do not fit together, naming the file.

    The arrays are only indexed deep inside training and scoring, where an edge pointing
    past the last hit or a short label array is a torch traceback (or a silently wrong
    loss) rather than a message about the file that caused it.
    """
    edges, nodes, feats = d["edge_index"], d["node_features"], d["edge_features"]

    def bad(why: str) -> DataFormatError:
        return DataFormatError(f"{path}: not a valid hit graph ({why})")

    if d["name"].ndim != 0 or d["name"].dtype.kind != "U":
        raise bad("'name' is not a string")
    if edges.ndim != 2 or edges.shape[0] != 2 or edges.dtype.kind not in "iu":
        raise bad(f"edge_index has shape {edges.shape} and dtype {edges.dtype}, "
                  "expected integers of shape (2, E)")
    num_edges = edges.shape[1]
    for key, width in (("node_features", NODE_SCALE.size), ("edge_features", EDGE_SCALE.size)):
        a = d[key]
        if a.ndim != 2 or a.shape[1] != width or a.dtype.kind != "f":
            raise bad(f"{key} has shape {a.shape} and dtype {a.dtype}, expected floats "
                      f"with {width} columns")
        if not np.isfinite(a).all():
            raise bad(f"{key} holds NaN or infinite values")
    if feats.shape[0] != num_edges:
        raise bad(f"{feats.shape[0]} edge_features rows for {num_edges} edges")
    for key in ("y", "target"):
        if d[key].shape != (num_edges,) or d[key].dtype.kind not in "biu":
            raise bad(f"{key} has shape {d[key].shape}, expected ({num_edges},) labels")
    if num_edges and (edges.min() < 0 or edges.max() >= nodes.shape[0]):
        raise bad(f"edge_index values span {edges.min()}..{edges.max()}, but there are "
                  f"{nodes.shape[0]} hits")
    counts = d["counts"]
    if counts.shape != (2,) or counts.dtype.kind not in "iu" or (counts < 0).any():
        raise bad(f"counts is {counts.tolist()}, expected two segment counts >= 0")


@dataclass(frozen=True)
class GraphStats:
    """Graph-construction quality: efficiency = target segments kept / target segments."""

    num_nodes: int
    num_edges: int
    efficiency: float
    true_efficiency: float  # over the segments of all particles
    purity: float  # true edges / edges
    target_purity: float  # target edges / edges

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def module_map_graph(event: Event, module_map: ModuleMap, cuts: DoubletCuts = NO_CUTS,
                     targets: TargetConfig = DEFAULT_TARGETS) -> HitGraph:
    """Candidate edges from ``module_map``, in their pairs' windows when
    ``cuts.window_margin`` is set, then filtered by the global ``cuts``."""
    bounds, dphi = module_map.search_ranges(cuts)
    edge_index, pair = _candidates(event, module_map, dphi)
    if bounds is not None:
        edge_index = _in_windows(event, edge_index, pair, bounds)
    edge_index = _apply_cuts(event, edge_index, cuts)
    return _graph(event, _sorted_pairs(event, edge_index), targets)


def truth_graph(event: Event, targets: TargetConfig = DEFAULT_TARGETS) -> HitGraph:
    """Edges between consecutive hits of every particle (noise hits stay isolated)."""
    return _graph(event, segments(event), targets)


def _in_windows(event: Event, edge_index: np.ndarray, pair: np.ndarray,
                bounds: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The candidates (oriented outwards) whose every variable lies in its pair's widened
    window ``bounds``; each variable computed only on the survivors of the ones before."""
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


def _dphi_ranges(module_map: ModuleMap, bounds: tuple[np.ndarray, np.ndarray] | None,
                 cuts: DoubletCuts) -> tuple[np.ndarray, np.ndarray]:
    """Per unordered module pair, the range the outward edge's dphi must lie in: its
    widened window (``bounds``, NaN = no bound) within the global dphi cut."""
    rows = module_map.unordered_pairs().shape[0]
    low, high = np.full(rows, -np.inf), np.full(rows, np.inf)
    if bounds is not None:
        low = np.where(np.isnan(bounds[0][:, 0]), -np.inf, bounds[0][:, 0])
        high = np.where(np.isnan(bounds[1][:, 0]), np.inf, bounds[1][:, 0])
    if cuts.dphi is not None:
        low, high = np.maximum(low, -cuts.dphi), np.minimum(high, cuts.dphi)
    return low, high


def _candidates(event: Event, module_map: ModuleMap,
                dphi: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The hit pairs on connected module pairs whose dphi can lie in their pair's range
    ``dphi`` (:func:`_dphi_ranges`), each unordered pair once, no self-pairs, and the row
    of :meth:`ModuleMap.unordered_pairs` each came from.

    Every pair of hits on two connected modules was a candidate before, ten or more for
    every edge kept at pileup 200 (5.6M per event), and computing their variables was
    most of graph construction. Now each module's hits are sorted by azimuth, and each
    hit of a pair's first module finds by binary search the run of the second module's
    hits its dphi range allows. That is a superset of what the exact tests after it
    pass (:func:`_in_windows`, :func:`_apply_cuts` still check dphi), so the graph is
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
    search_key = module[order] * _SPAN + sorted_offset
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
    low = np.where(searchable, low - _SLACK, -np.inf)
    high = np.where(searchable, high + _SLACK, np.inf)
    # Each pair's a-side hits, each searching the b side's run for its dphi range.
    which = np.repeat(np.arange(ia.size), count[ia])
    src = order[_runs(start[ia], count[ia])]
    b, u = ib[which], wrap(phi[src] - reference[ib[which]])
    lo = np.searchsorted(search_key, b * _SPAN + np.clip(u + low[which], -_HALF, _HALF), "left")
    hi = np.searchsorted(search_key, b * _SPAN + np.clip(u + high[which], -_HALF, _HALF), "right")
    found = np.maximum(hi - lo, 0)
    dst = order[_runs(lo, found)]
    src, pair = np.repeat(src, found), np.repeat(which, found)
    keep = (ia != ib)[pair] | (src < dst)
    return np.stack([src[keep], dst[keep]]).astype(np.int64, copy=False), row[pair[keep]]


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


def _unordered(pairs: np.ndarray) -> np.ndarray:
    """Each unordered element pair of ``pairs`` once, as (smaller, larger) key."""
    if pairs.shape[0] == 0:
        return pairs
    both = np.sort(pairs, axis=1)
    both = both[np.lexsort((both[:, 1], both[:, 0]))]
    first = np.ones(both.shape[0], dtype=bool)
    first[1:] = np.any(both[1:] != both[:-1], axis=1)
    return both[first]


def _sorted_pairs(event: Event, edge_index: np.ndarray) -> np.ndarray:
    """Edges in (smaller hit, larger hit) order, so a graph does not depend on the order
    in which the module map lists its pairs."""
    lo, hi = np.minimum(*edge_index), np.maximum(*edge_index)
    order = np.argsort(lo * max(event.num_hits, 1) + hi, kind="stable")
    return edge_index[:, order]


def _edge_values(event: Event, edge_index: np.ndarray) -> dict[str, np.ndarray]:
    src, dst = edge_index
    r, phi, z, eta = event.r, event.phi, event.z, event.eta
    dr = r[dst] - r[src]
    dphi = wrap(phi[dst] - phi[src])
    dz = z[dst] - z[src]
    return {"dr": dr, "dphi": dphi, "dz": dz, "deta": eta[dst] - eta[src], "r_src": r[src],
            "z_src": z[src]}


_PLAIN_CUTS = {  # cut -> its value for edges (src, dst): no extrapolation over dr
    "dphi": lambda ev, src, dst: wrap(ev.phi[dst] - ev.phi[src]),
    "dz": lambda ev, src, dst: ev.z[dst] - ev.z[src],
    "deta": lambda ev, src, dst: ev.eta[dst] - ev.eta[src],
}


def _apply_cuts(event: Event, edge_index: np.ndarray, cuts: DoubletCuts) -> np.ndarray:
    """The candidates that pass every cut, each cut computed only on the survivors of the
    ones before (the plain differences first: cheap, and dphi alone drops most)."""
    for name, value in _PLAIN_CUTS.items():
        bound = getattr(cuts, name)
        if bound is not None:
            edge_index = edge_index[:, np.abs(value(event, *edge_index)) <= bound]
    if cuts.phi_slope is None and cuts.z0 is None:
        return edge_index
    return edge_index[:, _extrapolated_pass(event, edge_index, cuts)]


def _extrapolated_pass(event: Event, edge_index: np.ndarray, cuts: DoubletCuts) -> np.ndarray:
    """Which edges pass the phi-slope and z0 cuts (pairs closer than ``min_dr`` do)."""
    v = _edge_values(event, edge_index)
    keep = np.ones(edge_index.shape[1], dtype=bool)
    has_dr = np.abs(v["dr"]) >= max(cuts.min_dr, 1e-9)
    safe_dr = np.where(has_dr, v["dr"], 1.0)
    if cuts.phi_slope is not None:
        keep &= ~has_dr | (np.abs(v["dphi"] / safe_dr) <= cuts.phi_slope)
    if cuts.z0 is not None:
        z0 = v["z_src"] - v["r_src"] * v["dz"] / safe_dr
        keep &= ~has_dr | (np.abs(z0) <= cuts.z0)
    return keep


def _graph(event: Event, edge_index: np.ndarray, targets: TargetConfig) -> HitGraph:
    edge_index = outwards(event, edge_index)
    y, target = edge_truth(event, edge_index, targets)
    segs = segments(event)
    selected = selected_particles(event, targets)
    num_target = int(selected[event.particle_index[segs[0]]].sum())
    node = np.stack([event.r, event.phi, event.z], axis=1) / NODE_SCALE
    v = _edge_values(event, edge_index)
    edge = np.stack([v["dr"], v["dphi"], v["dz"], v["deta"]], axis=1) / EDGE_SCALE
    return HitGraph(event.name, edge_index, node.astype(np.float32), edge.astype(np.float32),
                    y, target, int(segs.shape[1]), num_target)
