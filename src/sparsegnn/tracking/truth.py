"""Truth helpers shared by graph building and metrics: hit order along particles, targets.

A particle's hits are ordered by their distance from its production vertex; consecutive
hits in that order are the particle's *segments*, the edges a perfect graph would hold.
Ordering by distance from the vertex rather than by ``r`` keeps the order right in the
endcaps, where a track's ``r`` barely changes between consecutive disks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sparsegnn.tracking.events import Event


@dataclass(frozen=True)
class TargetConfig:
    """Which particles count: reconstructable ones in the metrics, targets in training.

    Defaults are the usual Exa.TrkX/TrackML choices: pT >= 1 GeV, >= 3 hits, |eta| < 4.
    """

    min_pt: float = 1.0
    min_hits: int = 3
    max_abs_eta: float = 4.0


DEFAULT_TARGETS = TargetConfig()


def hit_order(event: Event) -> np.ndarray:
    """Indices of the non-noise hits, grouped by particle, each particle's ordered outwards."""
    hits = np.flatnonzero(event.particle_index >= 0)
    pidx = event.particle_index[hits]
    dist = np.linalg.norm(event.position[hits] - event.particles.vertex[pidx], axis=1)
    return hits[np.lexsort((dist, pidx))]


def successor(event: Event) -> np.ndarray:
    """``next[i]``: the hit after ``i`` on its particle, or -1 (last hit or noise)."""
    order = hit_order(event)
    nxt = np.full(event.num_hits, -1, dtype=np.int64)
    same = event.particle_index[order[1:]] == event.particle_index[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def segments(event: Event, nxt: np.ndarray | None = None) -> np.ndarray:
    """``[2, S]`` consecutive hit pairs of every particle, inner hit first (``nxt``: the
    event's :func:`successor`, when already made)."""
    nxt = successor(event) if nxt is None else nxt
    src = np.flatnonzero(nxt >= 0)
    return np.stack([src, nxt[src]])


def selected_particles(event: Event, cfg: TargetConfig) -> np.ndarray:
    """``[P]`` bool: particles passing the pT, hit-count and |eta| selection."""
    p = event.particles
    return (p.pt >= cfg.min_pt) & (p.nhits >= cfg.min_hits) & (np.abs(p.eta) < cfg.max_abs_eta)


def edge_truth(event: Event, edge_index: np.ndarray, cfg: TargetConfig,
               nxt: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(true, target)`` per edge (``nxt`` as for :func:`segments`).

    An edge is true when its hits are consecutive on one particle (in either direction);
    it is a target when it is true and its particle passes ``cfg``.
    """
    nxt = successor(event) if nxt is None else nxt
    src, dst = edge_index
    true = (nxt[src] == dst) | (nxt[dst] == src)
    # A trailing False stands for noise (index -1), so noise edges are never targets.
    selected = np.append(selected_particles(event, cfg), False)
    target = true & selected[event.particle_index[src]]
    return true, target
