"""The module map: which pairs of detector elements consecutive hits of a particle connect.

Module map (as in the ATLAS/Exa.TrkX module-map graph construction): every pair of
sensitive modules that consecutive hits of a true particle connect in the training
events. Only module pairs seen in training get edges, so the map needs many training
events to reach full efficiency on unseen ones.

A map can also carry a cut window per module pair (:mod:`sparsegnn.tracking.windows`:
the range of each doublet variable its segments showed, as GNN4ITk's module map);
``DoubletCuts.window_margin`` applies them. Maps of many events are learnt in worker
processes (:func:`learn_module_map`), one event per task, and merged.

It is apart from graph construction (:mod:`sparsegnn.tracking.graph_construction`) because it is
learnt once from training events and saved, then read by every event's graph.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from sparsegnn.data.io import atomic_write
from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.tracking.doublet_cuts import DoubletCuts
from sparsegnn.tracking.events import Event, event_files, module_key, read_event
from sparsegnn.tracking.hit_graph import read_arrays
from sparsegnn.tracking.truth import segments
from sparsegnn.tracking.windows import (
    WINDOW_VARIABLES,
    PairWindows,
    doublet_values,
    outwards,
    reduce_windows,
)


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
        """Plain arrays (an ``.npz``, or a model file's entry); windows and counts in the
        narrowest type that holds them exactly (float32 once :meth:`rounded`: half the
        bytes of a shipped model)."""
        out = {"pairs": self.pairs, "level": np.array(self.level)}
        if self.windows is not None:
            out.update(window_low=_narrowest(self.windows.low),
                       window_high=_narrowest(self.windows.high),
                       window_count=_narrowest(self.windows.count))
        return out

    def rounded(self) -> ModuleMap:
        """This map with its windows widened to float32 bounds (:meth:`PairWindows.rounded`)."""
        if self.windows is None:
            return self
        return ModuleMap(self.pairs, self.level, self.windows.rounded())

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
        data = read_arrays(path, ("pairs", "level"), "module map",
                            optional=("window_low", "window_high", "window_count"))
        return cls.from_arrays(data, path)


def _narrowest(values: np.ndarray) -> np.ndarray:
    """``values`` as int32 or float32 where that type holds every value exactly."""
    narrow = {"i": np.int32, "f": np.float32}.get(values.dtype.kind)
    if narrow is None or values.dtype.itemsize <= 4:
        return values
    cast = values.astype(narrow)
    same = np.array_equal(cast, values, equal_nan=values.dtype.kind == "f")
    return cast if same else values


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


def _unordered(pairs: np.ndarray) -> np.ndarray:
    """Each unordered element pair of ``pairs`` once, as (smaller, larger) key."""
    if pairs.shape[0] == 0:
        return pairs
    both = np.sort(pairs, axis=1)
    both = both[np.lexsort((both[:, 1], both[:, 0]))]
    first = np.ones(both.shape[0], dtype=bool)
    first[1:] = np.any(both[1:] != both[:-1], axis=1)
    return both[first]
