"""Geometric doublet cuts: bounds on a candidate edge's variables, and applying them.

:class:`DoubletCuts` bounds dphi, dz, deta, the phi slope and z0 of a hit pair and says
how widely the module map's per-pair windows are taken; :func:`apply_cuts` keeps the
candidates that pass, each cut computed only on the survivors of the ones before;
:func:`edge_values` gives the hit-pair differences the cuts and the graph's edge features
are made of. It is apart from the construction
(:mod:`sparsegnn.tracking.graph_construction`) because the settings, the module map's
search ranges and the graph all read the cuts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sparsegnn.tracking.events import Event
from sparsegnn.tracking.windows import wrap


@dataclass(frozen=True)
class DoubletCuts:
    """Upper bounds on |value| for a candidate edge; ``None`` disables a cut.

    ``phi_slope`` is dphi/dr (rad/mm): ~ 1 / (2 R) for a helix of radius R, so it bounds
    the curvature, i.e. the transverse momentum. ``z0`` is where the straight line
    through both hits crosses the beam line (mm): it bounds the vertex position.
    Both extrapolate over dr, so pairs with |dr| < ``min_dr`` (mm) skip them: same-r pairs
    in the endcap disks would divide by zero, and two hits of one particle a few mm apart
    (overlapping modules of one layer) give a meaningless slope and z0. At pileup 50,
    ``min_dr=10`` keeps 2% more of the target segments than 1 (docs/results/tracking.md).

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


def edge_values(event: Event, edge_index: np.ndarray) -> dict[str, np.ndarray]:
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


def apply_cuts(event: Event, edge_index: np.ndarray, cuts: DoubletCuts) -> np.ndarray:
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
    v = edge_values(event, edge_index)
    keep = np.ones(edge_index.shape[1], dtype=bool)
    has_dr = np.abs(v["dr"]) >= max(cuts.min_dr, 1e-9)
    safe_dr = np.where(has_dr, v["dr"], 1.0)
    if cuts.phi_slope is not None:
        keep &= ~has_dr | (np.abs(v["dphi"] / safe_dr) <= cuts.phi_slope)
    if cuts.z0 is not None:
        z0 = v["z_src"] - v["r_src"] * v["dz"] / safe_dr
        keep &= ~has_dr | (np.abs(z0) <= cuts.z0)
    return keep
