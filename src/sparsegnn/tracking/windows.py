"""Per-module-pair cut windows: the range of each doublet variable a module pair showed.

GNN4ITk's module map (ATLAS) stores, beside every pair of modules that consecutive hits
of a simulated particle connect, the minimum and maximum of the doublet variables (dphi,
dz, deta, phi slope, z0) those hits had. A global cut has to be as loose as the loosest
pair needs: an overlap pair a few mm apart in r, an endcap pair, a barrel pair at
|eta| 0 all share one bound. A window per pair follows each pair's geometry instead, so
it removes far more fake candidates at the same efficiency. A window is only as wide as
the segments it has seen, so a map learnt from few events is too narrow: graph
construction widens each window by a margin (a fraction of its width, at least
:data:`MIN_WIDTH`), and the map is learnt from as many simulated events as one can
afford (``docs/results/tracking.md``: graph efficiency vs the number of map events).

Variables are taken on the edge oriented as graph construction orients it (from the hit
nearer the origin to the farther one), so a window and the edges it is applied to agree
on signs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sparsegnn.tracking.events import Event

WINDOW_VARIABLES = ("dphi", "dz", "deta", "phi_slope", "z0")
# A window seen once has zero width; its margin is a fraction of at least this width
# (rad, mm, -, rad/mm, mm): about the spread of one pair's segments in a few events.
MIN_WIDTH = np.array([0.002, 5.0, 0.01, 2e-5, 5.0])
# Pairs closer than this in r (mm) have no phi slope or z0 (NaN: those windows pass them).
MIN_DR = 1e-3


@dataclass(frozen=True)
class PairWindows:
    """Per unordered module pair (rows of the map's unordered pairs), each variable's range."""

    low: np.ndarray  # [M, V] float64, NaN where no segment defined the variable
    high: np.ndarray  # [M, V] float64
    count: np.ndarray  # [M] int64: segments seen

    def __len__(self) -> int:
        return int(self.count.shape[0])

    def rounded(self) -> PairWindows:
        """The windows widened to the nearest float32 bounds outside them: a map stored in
        half the bytes (what the package ships) that keeps every segment it kept."""
        low, high = self.low.astype(np.float32), self.high.astype(np.float32)
        low = np.where(low > self.low, np.nextafter(low, np.float32(-np.inf)), low)
        high = np.where(high < self.high, np.nextafter(high, np.float32(np.inf)), high)
        return PairWindows(low.astype(np.float64), high.astype(np.float64), self.count)

    def widened(self, margin: float, count_margin: float = 0.0, min_count: int = 1
                ) -> tuple[np.ndarray, np.ndarray]:
        """``(low, high)`` pushed out on each side by ``margin + count_margin / count``
        times each window's width (at least :data:`MIN_WIDTH`): what a segment never seen
        in learning may still need.

        The range of n segments misses about 2 / (n + 1) of the next ones, so a pair seen
        a few times needs far more room than one seen hundreds of times: measured on
        pileup-200 events with a 40-event map, a window of fewer than 5 segments held 16%
        of the new target segments, one of over 100 held 98% (docs/tracking.md). Pairs
        seen fewer than ``min_count`` times get no window (NaN bounds: every edge passes,
        and the global doublet cuts alone decide)."""
        width = np.fmax(self.high - self.low, MIN_WIDTH)
        room = width * (margin + count_margin / np.maximum(self.count, 1))[:, None]
        trusted = (self.count >= min_count)[:, None]
        return (np.where(trusted, self.low - room, np.nan),
                np.where(trusted, self.high + room, np.nan))


def outwards(event: Event, edge_index: np.ndarray) -> np.ndarray:
    """Orient every edge from the hit nearer the origin to the farther one.

    Track building follows edges outwards, and the model's incoming/outgoing aggregation
    then means inner/outer neighbours in every graph, however it was built.
    """
    dist = event.distance
    src, dst = edge_index
    flip = dist[src] > dist[dst]
    edges = np.stack([np.where(flip, dst, src), np.where(flip, src, dst)])
    return edges.astype(np.int64, copy=False)


def doublet_value(event: Event, src: np.ndarray, dst: np.ndarray, name: str) -> np.ndarray:
    """One of :data:`WINDOW_VARIABLES` for the edges ``src -> dst`` (float64).

    ``phi_slope`` (dphi/dr) bounds the curvature, ``z0`` (where the line through both
    hits meets the beam line) the vertex; both are NaN for pairs under 1 um apart in r.
    """
    if name == "dz":
        return event.z[dst] - event.z[src]
    if name == "deta":
        return event.eta[dst] - event.eta[src]
    dphi = wrap(event.phi[dst] - event.phi[src])
    if name == "dphi":
        return dphi
    r_src = event.r[src]
    dr = event.r[dst] - r_src
    has_dr = np.abs(dr) >= MIN_DR
    safe_dr = np.where(has_dr, dr, 1.0)
    if name == "phi_slope":
        return np.where(has_dr, dphi / safe_dr, np.nan)
    if name == "z0":
        dz = event.z[dst] - event.z[src]
        return np.where(has_dr, event.z[src] - r_src * dz / safe_dr, np.nan)
    raise ValueError(f"unknown doublet variable {name!r}; use one of {WINDOW_VARIABLES}")


def doublet_values(event: Event, edge_index: np.ndarray) -> np.ndarray:
    """``[E, V]`` every window variable of the edges (in :data:`WINDOW_VARIABLES` order)."""
    return np.stack([doublet_value(event, *edge_index, name) for name in WINDOW_VARIABLES],
                    axis=1)


def reduce_windows(keys: np.ndarray, low: np.ndarray, high: np.ndarray, count: np.ndarray
                   ) -> tuple[np.ndarray, PairWindows]:
    """Rows with equal ``keys`` ([S, 2] unordered pairs) joined: the smallest low, largest
    high (NaN-ignoring) and summed count; the unique keys come back sorted like
    ``np.unique(keys, axis=0)``, so the windows line up with a map's unordered pairs."""
    if keys.shape[0] == 0:
        return keys.reshape(0, 2), PairWindows(low, high, count)
    order = np.lexsort((keys[:, 1], keys[:, 0]))
    keys = keys[order]
    first = np.ones(keys.shape[0], dtype=bool)
    first[1:] = np.any(keys[1:] != keys[:-1], axis=1)
    starts = np.flatnonzero(first)
    return keys[first], PairWindows(np.fmin.reduceat(low[order], starts, axis=0),
                                    np.fmax.reduceat(high[order], starts, axis=0),
                                    np.add.reduceat(count[order], starts))


def window_pass(values: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Which values lie in ``[low, high]``; a NaN value or bound (undefined) passes."""
    return ~(values < low) & ~(values > high)


def wrap(angle: np.ndarray) -> np.ndarray:
    """Angle difference mapped into [-pi, pi): ``(angle + pi) % 2 pi - pi``, bit for bit.

    The difference of two azimuths needs at most one turn added or taken, which costs a
    few comparisons where the float modulo costs ten times more (it was the largest
    single cost of graph construction); any other input takes the modulo."""
    shifted = np.asarray(angle, dtype=np.float64) + np.pi
    turn = 2 * np.pi
    if shifted.size == 0 or not (shifted.min() >= -np.pi and shifted.max() < 3 * np.pi):
        return shifted % turn - np.pi
    # The modulo is fmod (exact here) plus one turn for negatives: the same roundings.
    return np.where(shifted >= turn, shifted - turn,
                    np.where(shifted < 0, shifted + turn, shifted)) - np.pi
