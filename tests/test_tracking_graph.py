"""Module map, doublet cuts, edge truth and graph statistics; ShaDow bounds on hit graphs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sparsegnn.data.paths import BUNDLED
from sparsegnn.errors import InvalidValueError
from sparsegnn.tracking.doublet_cuts import DoubletCuts
from sparsegnn.tracking.events import Event, Particles, read_event
from sparsegnn.tracking.graph_construction import module_map_graph, truth_graph
from sparsegnn.tracking.hit_graph import HitGraph
from sparsegnn.tracking.module_map import ModuleMap
from sparsegnn.tracking.sampling import max_nodes_per_seed, shadow_subgraphs
from sparsegnn.tracking.truth import TargetConfig, segments, successor

SAMPLE = BUNDLED / "trackml_sample"  # the copy the package ships: runs from a clone alone


def two_track_event() -> Event:
    """Two straight particles through three barrel layers, one noise hit, layers 2/4/6.

    Hits are stored out of order on purpose: the truth order must come from geometry.
    p0 at phi=0 (pT 2 GeV) and p1 at phi=pi/2 (pT 0.5 GeV); the noise hit is on layer 4
    next to p0.
    """
    r = np.array([30.0, 10.0, 20.0, 10.0, 20.0, 30.0, 21.0])
    phi = np.array([0.0, 0.0, 0.0, np.pi / 2, np.pi / 2, np.pi / 2, 0.05])
    z = r * 0.1
    position = np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)
    layer = np.array([6, 2, 4, 2, 4, 6, 4])
    module = np.array([1, 1, 1, 2, 2, 2, 1])
    pidx = np.array([0, 0, 0, 1, 1, 1, -1])
    particles = Particles(
        particle_id=np.array([11, 22]), vertex=np.zeros((2, 3)),
        momentum=np.array([[2.0, 0.0, 0.2], [0.0, 0.5, 0.05]]), charge=np.array([1, -1]),
        nhits=np.array([3, 3]),
    )
    return Event("two", np.arange(1, 8), position, np.full(7, 8), layer, module,
                 np.where(pidx >= 0, particles.particle_id[np.maximum(pidx, 0)], 0), pidx,
                 np.ones(7), particles)


def test_truth_order_follows_distance_from_vertex() -> None:
    ev = two_track_event()
    assert successor(ev).tolist() == [-1, 2, 0, 4, 5, -1, -1]
    assert segments(ev).T.tolist() == [[1, 2], [2, 0], [3, 4], [4, 5]]


def test_module_map_candidates_truth_and_stats() -> None:
    ev = two_track_event()
    mm = ModuleMap.learn([ev])
    assert len(mm) == 4  # (l2,m1)->(l4,m1), (l4,m1)->(l6,m1) and the same for module 2
    graph = module_map_graph(ev, mm)
    edges = {tuple(e) for e in graph.edge_index.T.tolist()}
    # The noise hit 6 shares p0's modules, so it gets edges 1->6 and 6->0.
    assert edges == {(1, 2), (2, 0), (3, 4), (4, 5), (1, 6), (6, 0)}
    stats = graph.stats()
    assert stats.num_edges == 6 and stats.efficiency == 1.0 and stats.purity == pytest.approx(4 / 6)
    target = dict(zip(map(tuple, graph.edge_index.T.tolist()), graph.target.tolist(), strict=True))
    assert target[(1, 2)] and target[(2, 0)] and not target[(3, 4)]  # p1 has pT 0.5
    lowered = module_map_graph(ev, mm, targets=TargetConfig(min_pt=0.4))
    assert lowered.target.sum() == 4


def test_candidates_are_every_hit_pair_on_map_pairs_once() -> None:
    # A map listing a module pair in both directions and a module paired with itself must
    # still give each unordered hit pair exactly once (candidates are never deduplicated).
    ev = two_track_event()
    keys = ev.module_key
    k2, k4, k6 = keys[1], keys[2], keys[0]  # layers 2, 4, 6 of module 1
    mm = ModuleMap(np.array(sorted([[k2, k4], [k4, k2], [k4, k4], [k6, k4]])), "module")
    edges = module_map_graph(ev, mm).edge_index.T.tolist()
    assert len(edges) == len({frozenset(e) for e in edges})
    listed = mm.pairs.tolist()
    wanted = {frozenset((a, b)) for a in range(ev.num_hits) for b in range(ev.num_hits)
              if a != b and [keys[a], keys[b]] in listed}
    assert {frozenset(e) for e in edges} == wanted
    assert wanted == {frozenset(p) for p in ((1, 2), (1, 6), (2, 6), (2, 0), (6, 0))}


def test_module_maps_join_pairs_of_the_same_level() -> None:
    ev = two_track_event()
    one = ModuleMap.learn([ev])
    other = ModuleMap(np.array([[1, 2], one.pairs[0].tolist()]), "module")
    joined = one.union(other)
    assert joined.pairs.tolist() == sorted([*one.pairs.tolist(), [1, 2]])
    with pytest.raises(InvalidValueError, match="layer-level"):
        one.union(ModuleMap.learn([ev], "layer"))


def test_doublet_cuts_remove_noise_edges() -> None:
    ev = two_track_event()
    graph = module_map_graph(ev, ModuleMap.learn([ev]), DoubletCuts(dphi=0.01))
    assert graph.num_edges == 4 and graph.stats().purity == 1.0
    none = module_map_graph(ev, ModuleMap.learn([ev]), DoubletCuts(z0=-1.0))
    assert none.num_edges == 0
    # Straight tracks from the origin: phi slope 0 and z0 0 keep every true edge.
    tight = module_map_graph(ev, ModuleMap.learn([ev]), DoubletCuts(phi_slope=1e-6, z0=1e-6))
    assert tight.y.sum() == 4


def test_pairs_closer_than_min_dr_skip_the_extrapolating_cuts() -> None:
    ev, mm = two_track_event(), ModuleMap.learn([two_track_event()])
    # The noise hit (r=21, phi=0.05) pairs with p0's hits at r=10 (dr 11) and r=30 (dr 9),
    # both with a phi slope of ~0.005 rad/mm: over the bound of 0.001.
    assert module_map_graph(ev, mm, DoubletCuts(phi_slope=1e-3)).num_edges == 4
    loose = module_map_graph(ev, mm, DoubletCuts(phi_slope=1e-3, min_dr=10.0))
    kept = {tuple(e) for e in loose.edge_index.T.tolist()}
    assert loose.num_edges == 5 and (6, 0) in kept  # only the 9 mm pair skips the cut


def test_graph_round_trip(tmp_path: Path) -> None:
    graph = truth_graph(two_track_event())
    graph.save(tmp_path / "g.npz")
    back = HitGraph.load(tmp_path / "g.npz")
    assert back.name == "two" and np.array_equal(back.edge_index, graph.edge_index)
    assert np.array_equal(back.target, graph.target) and back.num_target_segments == 2
    ModuleMap.learn([two_track_event()]).save(tmp_path / "mm.npz")
    assert len(ModuleMap.load(tmp_path / "mm.npz")) == 4


def test_sample_graphs() -> None:
    ev = read_event(SAMPLE, "event000000001")
    truth = truth_graph(ev).stats()
    assert (truth.num_edges, truth.efficiency, truth.purity) == (4230, 1.0, 1.0)
    mm = ModuleMap.learn([ev])
    graph = module_map_graph(ev, mm)
    stats = graph.stats()
    assert stats.efficiency == 1.0 and stats.true_efficiency == 1.0  # learnt on this event
    assert graph.y.sum() == 4230 and 0.2 < stats.purity < 0.4


def test_shadow_subgraphs_respect_the_bound_and_seed_every_hit() -> None:
    ev = two_track_event()
    graph = module_map_graph(ev, ModuleMap.learn([ev]))
    subs = list(shadow_subgraphs(graph, max_nodes=max_nodes_per_seed([2]), fanouts=[2], seed=0,
                                 epoch=0))
    assert all(s.nodes.size <= 3 for s in subs)
    owned = np.concatenate([s.edges[s.loss_mask] for s in subs])
    assert np.unique(owned).size == owned.size  # each edge in at most one loss
    with pytest.raises(InvalidValueError, match="below the 7 hits one seed may visit"):
        next(shadow_subgraphs(graph, max_nodes=5, fanouts=[2, 2], seed=0, epoch=0))


def test_layer_level_map_generalises_across_modules() -> None:
    ev = two_track_event()
    layer_map = ModuleMap.learn([ev], level="layer")
    assert layer_map.level == "layer" and len(layer_map) == 2  # (l2->l4), (l4->l6)
    graph = module_map_graph(ev, layer_map)
    # Any hit pair on consecutive layers is a candidate, across modules too.
    assert graph.num_edges == 2 * 3 + 3 * 2 and graph.stats().efficiency == 1.0
    with pytest.raises(ValueError, match="unknown module-map level"):
        ModuleMap.learn([ev], level="disk")
