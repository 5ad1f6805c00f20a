"""Hand-made tracking events shared by the tests: straight tracks through barrel layers."""

from __future__ import annotations

import numpy as np

from sparsegnn.tracking.events import Event, Particles
from sparsegnn.tracking.graph_construction import module_map_graph
from sparsegnn.tracking.hit_graph import HitGraph
from sparsegnn.tracking.module_map import ModuleMap
from sparsegnn.tracking.tracks import EdgeScores


def straight_tracks(n_tracks: int, seed: int, layers: int = 5, n_noise: int = 5,
                    z_vertex: float = 0.0) -> Event:
    """Straight tracks from (0, 0, ``z_vertex``) through ``layers`` barrel layers of 8 phi
    modules."""
    rng = np.random.default_rng(seed)
    phi0 = rng.uniform(-np.pi, np.pi, n_tracks)
    cot = rng.uniform(-0.5, 0.5, n_tracks)
    radii = 30.0 * np.arange(1, layers + 1)
    r = np.concatenate([np.repeat(radii, n_tracks), rng.choice(radii, n_noise)])
    phi = np.concatenate([np.tile(phi0, layers), rng.uniform(-np.pi, np.pi, n_noise)])
    z = np.concatenate([z_vertex + np.outer(radii, cot).ravel(), rng.uniform(-50, 50, n_noise)])
    layer = np.concatenate([np.repeat(np.arange(layers), n_tracks), (r[n_tracks * layers:] // 30)])
    module = ((phi + np.pi) / (2 * np.pi) * 8).astype(np.int64)
    pidx = np.concatenate([np.tile(np.arange(n_tracks), layers), np.full(n_noise, -1)])
    pt = rng.uniform(0.5, 3.0, n_tracks)
    particles = Particles(
        particle_id=np.arange(1, n_tracks + 1), vertex=np.tile([0.0, 0.0, z_vertex], (n_tracks, 1)),
        momentum=np.stack([pt * np.cos(phi0), pt * np.sin(phi0), pt * cot], axis=1),
        charge=np.ones(n_tracks, dtype=np.int64), nhits=np.full(n_tracks, layers),
    )
    n = r.size
    return Event(f"toy{seed}", np.arange(1, n + 1),
                 np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1), np.full(n, 8),
                 layer.astype(np.int64), module, np.where(pidx >= 0, pidx + 1, 0), pidx,
                 np.ones(n), particles)


def toy_graphs(sizes: list[int]) -> list[HitGraph]:
    events = [straight_tracks(n, seed) for seed, n in enumerate(sizes)]
    mm = ModuleMap.learn(events)
    return [module_map_graph(ev, mm) for ev in events]


def scored(edges: list[tuple[int, int, float]], n: int) -> EdgeScores:
    """Edge scores of a toy event of ``n`` hits from ``(src, dst, score)`` triples."""
    src, dst, score = zip(*edges, strict=True)
    return EdgeScores("toy", np.array([src, dst], dtype=np.int64), np.array(score), n)


def groups(hit_track: np.ndarray) -> list[list[int]]:
    """Tracks as sorted hit lists (labels are arbitrary)."""
    out: dict[int, list[int]] = {}
    for hit, label in enumerate(hit_track.tolist()):
        if label >= 0:
            out.setdefault(label, []).append(hit)
    return sorted(out.values())
