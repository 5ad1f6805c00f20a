"""Per-module-pair cut windows: learnt ranges, merging, margins, files, parallel learning."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sparsegnn.cli.main import main
from sparsegnn.data.paths import BUNDLED
from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.tracking import graph_construction as graph_module
from sparsegnn.tracking import module_map as module_map_module
from sparsegnn.tracking.doublet_cuts import DoubletCuts, apply_cuts
from sparsegnn.tracking.events import read_event
from sparsegnn.tracking.graph_construction import module_map_graph
from sparsegnn.tracking.infer import load_track_model, save_model
from sparsegnn.tracking.model import INConfig, InteractionNetwork
from sparsegnn.tracking.module_map import ModuleMap, event_maps, learn_module_map
from sparsegnn.tracking.simulate import GunConfig, simulate_gun
from sparsegnn.tracking.train import TrainReport
from sparsegnn.tracking.windows import (
    WINDOW_VARIABLES,
    doublet_value,
    outwards,
    window_pass,
    wrap,
)
from tracking_toys import straight_tracks

SAMPLE = BUNDLED / "trackml_sample"


def edges_of(graph) -> set[tuple[int, int]]:
    return {tuple(e) for e in graph.edge_index.T.tolist()}


def test_windows_keep_every_segment_they_were_learnt_from() -> None:
    ev = straight_tracks(30, seed=1, n_noise=40)
    mm = ModuleMap.learn([ev], windows=True)
    assert len(mm.windows) == mm.unordered_pairs().shape[0]
    plain = module_map_graph(ev, mm)
    tight = module_map_graph(ev, mm, DoubletCuts(window_margin=0.0))
    assert tight.stats().efficiency == 1.0 and tight.y.sum() == plain.y.sum()
    # noise hits on connected modules are mostly outside the windows
    assert tight.num_edges < plain.num_edges and edges_of(tight) <= edges_of(plain)
    wider = module_map_graph(ev, mm, DoubletCuts(window_margin=2.0))
    assert edges_of(tight) <= edges_of(wider) <= edges_of(plain)


def test_window_is_the_range_of_the_pair_segments() -> None:
    ev = straight_tracks(20, seed=2, n_noise=0)
    mm = ModuleMap.learn([ev], windows=True)
    seg = outwards(ev, np.stack(np.nonzero(_consecutive(ev))))
    keys = np.sort(ev.module_key[seg.T], axis=1)
    row = np.flatnonzero((mm.unordered_pairs() == keys[0]).all(axis=1))[0]
    same = (keys == keys[0]).all(axis=1)
    for j, name in enumerate(WINDOW_VARIABLES):
        values = doublet_value(ev, *seg[:, same], name)
        assert mm.windows.low[row, j] == pytest.approx(values.min())
        assert mm.windows.high[row, j] == pytest.approx(values.max())
    assert mm.windows.count[row] == same.sum()


def _consecutive(ev) -> np.ndarray:
    """[N, N] bool: hit j follows hit i on its particle (the toy's layers are in r order)."""
    n = ev.num_hits
    out = np.zeros((n, n), dtype=bool)
    for p in range(len(ev.particles)):
        hits = np.flatnonzero(ev.particle_index == p)
        hits = hits[np.argsort(ev.r[hits])]
        out[hits[:-1], hits[1:]] = True
    return out


def test_merged_maps_equal_one_learnt_from_all_events() -> None:
    events = [straight_tracks(15, seed) for seed in range(3)]
    together = ModuleMap.learn(events, windows=True)
    merged = ModuleMap.merge([ModuleMap.learn([ev], windows=True) for ev in events])
    np.testing.assert_array_equal(merged.pairs, together.pairs)
    for field in ("low", "high", "count"):
        np.testing.assert_array_equal(getattr(merged.windows, field),
                                      getattr(together.windows, field))
    with pytest.raises(InvalidValueError, match="with cut windows and one without"):
        ModuleMap.merge([together, ModuleMap.learn(events)])


def test_min_pt_learns_only_from_particles_above_it() -> None:
    ev = straight_tracks(15, seed=4)
    slow = ev.particles.pt < 1.5
    mm = ModuleMap.learn([ev], min_pt=1.5, windows=True)
    assert mm.windows.count.sum() == (~slow).sum() * 4  # 5 layers: 4 segments each
    assert len(ModuleMap.learn([ev], min_pt=100.0)) == 0


def test_window_margin_needs_a_map_with_windows() -> None:
    ev = straight_tracks(5, seed=0)
    with pytest.raises(InvalidValueError, match="has no cut windows"):
        module_map_graph(ev, ModuleMap.learn([ev]), DoubletCuts(window_margin=0.1))


def test_search_ranges_are_made_once_per_map_and_cut_values() -> None:
    events = [straight_tracks(30, seed=s, n_noise=40) for s in (1, 2)]
    mm = ModuleMap.learn(events[:1], windows=True)
    cuts = DoubletCuts(window_margin=0.1, window_count_margin=4.0)
    first = module_map_graph(events[1], mm, cuts)
    bounds, dphi = mm.search_ranges(cuts)
    assert mm.search_ranges(replace(cuts, z0=100.0)) is mm.search_ranges(cuts)  # not a key
    assert mm.search_ranges(replace(cuts, window_margin=0.2))[0][0] is not bounds[0]
    assert not any(a.flags.writeable for a in (*bounds, *dphi))
    np.testing.assert_array_equal(bounds[0], mm.windows.widened(0.1, 4.0)[0])
    # a fresh map (nothing kept) builds the same graph, and so does the kept one again
    fresh = ModuleMap.learn(events[:1], windows=True)
    again = module_map_graph(events[1], mm, cuts)
    for other in (module_map_graph(events[1], fresh, cuts), again):
        np.testing.assert_array_equal(other.edge_index, first.edge_index)


def test_undefined_values_pass_a_window() -> None:
    values = np.array([0.5, np.nan, 2.0, 0.0])
    low = np.array([0.0, 0.0, 0.0, np.nan])
    high = np.array([1.0, 1.0, 1.0, np.nan])
    assert window_pass(values, low, high).tolist() == [True, True, False, True]


def test_map_with_windows_round_trips_through_files(tmp_path: Path) -> None:
    ev = straight_tracks(10, seed=3)
    mm = ModuleMap.learn([ev], windows=True)
    mm.save(tmp_path / "mm.npz")
    back = ModuleMap.load(tmp_path / "mm.npz")
    np.testing.assert_array_equal(back.windows.high, mm.windows.high)
    ModuleMap.learn([ev]).save(tmp_path / "plain.npz")
    assert ModuleMap.load(tmp_path / "plain.npz").windows is None
    arrays = mm.to_arrays()
    arrays["window_low"] = arrays["window_low"][1:]
    with pytest.raises(DataFormatError, match="windows of shape"):
        ModuleMap.from_arrays(arrays, "bad.npz")
    model = InteractionNetwork(INConfig(hidden=4, iterations=1))
    save_model(tmp_path / "m.pt", model, TrainReport(1.0), module_map=mm)
    carried = load_track_model(tmp_path / "m.pt").module_map
    np.testing.assert_array_equal(carried.windows.low, mm.windows.low)
    np.testing.assert_array_equal(carried.pairs, mm.pairs)


def test_a_rounded_map_keeps_every_edge_in_half_the_bytes(tmp_path: Path) -> None:
    ev = straight_tracks(40, seed=5, n_noise=60)
    mm = ModuleMap.learn([ev], windows=True)
    small = mm.rounded()
    w, r = mm.windows, small.windows
    defined = ~np.isnan(w.low)
    assert (r.low[defined] <= w.low[defined]).all() and (r.high[defined] >= w.high[defined]).all()
    assert np.array_equal(np.isnan(r.low), ~defined)
    assert (r.low[defined] < w.low[defined]).any()  # float64 bounds did move outwards
    assert np.array_equal(r.low.astype(np.float32).astype(np.float64), r.low, equal_nan=True)
    cuts = DoubletCuts(window_margin=0.0)
    assert edges_of(module_map_graph(ev, mm, cuts)) <= edges_of(module_map_graph(ev, small, cuts))
    arrays = small.to_arrays()
    assert arrays["window_low"].dtype == np.float32 and arrays["window_count"].dtype == np.int32
    assert mm.to_arrays()["window_low"].dtype == np.float64  # not exact in float32: kept
    small.save(tmp_path / "mm.npz")
    back = ModuleMap.load(tmp_path / "mm.npz")
    np.testing.assert_array_equal(back.windows.low, r.low)
    assert back.windows.count.dtype == np.int64 and np.array_equal(back.pairs, mm.pairs)


def test_maps_learnt_in_worker_processes_equal_one_process() -> None:
    ev = read_event(SAMPLE, "event000000001")
    alone = ModuleMap.learn([ev], min_pt=0.5, windows=True)
    spawned = learn_module_map([SAMPLE], min_pt=0.5, windows=True, workers=2)
    np.testing.assert_array_equal(spawned.pairs, alone.pairs)
    np.testing.assert_array_equal(spawned.windows.high, alone.windows.high)
    assert len(list(event_maps([SAMPLE], limit=0))) == 0


def test_spread_vertices_gun_refuses_more_vertices_than_the_barcode_holds(tmp_path: Path
                                                                           ) -> None:
    with pytest.raises(InvalidValueError, match="fewer than 4096"):
        simulate_gun(tmp_path, GunConfig(particles=5000, spread_vertices=True))


def test_build_graphs_learns_and_applies_windows(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    args = ["track", "build-graphs", "--events", str(SAMPLE), "--train-events", str(SAMPLE),
            "--map-min-pt", "1.0", "--json"]
    assert main([*args, "--out", str(tmp_path / "plain"), "--module-map",
                 str(tmp_path / "plain.npz")]) == 0
    plain = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main([*args, "--out", str(tmp_path / "win"), "--map-windows", "--map-workers", "2",
                 "--window-margin", "0", "--module-map", str(tmp_path / "win.npz")]) == 0
    windowed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # learnt from the same event: every target segment stays, far fewer edges
    assert windowed["mean_efficiency"] == plain["mean_efficiency"] == 1.0
    assert windowed["mean_num_edges"] < plain["mean_num_edges"] / 3
    assert ModuleMap.load(tmp_path / "win.npz").windows is not None


def _every_candidate(ev, mm: ModuleMap) -> tuple[np.ndarray, np.ndarray]:
    """Every hit pair on every map pair (a module with itself: each pair once), plainly."""
    by_module: dict[int, list[int]] = {}
    for hit, key in enumerate(ev.module_key.tolist()):
        by_module.setdefault(key, []).append(hit)
    src, dst, rows = [], [], []
    for row, (a, b) in enumerate(mm.unordered_pairs().tolist()):
        for ha in by_module.get(a, []):
            for hb in by_module.get(b, []):
                if a != b or ha < hb:
                    src.append(ha), dst.append(hb), rows.append(row)
    return np.array([src, dst], dtype=np.int64), np.array(rows, dtype=np.int64)


def _rotated(ev, angle: float):
    """``ev`` turned about the beam line: other modules straddle phi = +-pi."""
    c, s = np.cos(angle), np.sin(angle)
    x, y, z = ev.position.T
    return replace(ev, position=np.stack([c * x - s * y, s * x + c * y, z], axis=1))


@pytest.mark.parametrize("angle", [0.0, 2.9])
def test_azimuth_search_keeps_every_edge_the_exact_tests_pass(angle: float) -> None:
    # Candidates are found by binary search over each module's hits sorted by azimuth;
    # the graph must be exactly what testing every hit pair on every map pair gives, for
    # windows narrow and wide, untrusted (NaN) windows, the global dphi cut, and modules
    # straddling phi = +-pi.
    ev = _rotated(read_event(SAMPLE, "event000000001"), angle)
    mm = ModuleMap.learn([ev], windows=True)
    every, rows = _every_candidate(ev, mm)
    for cuts in (DoubletCuts(window_margin=0.0), DoubletCuts(window_margin=0.3,
                                                              window_count_margin=16),
                 DoubletCuts(window_margin=0.0, window_min_count=3),
                 DoubletCuts(window_margin=40.0), DoubletCuts(dphi=0.02),
                 DoubletCuts(window_margin=0.1, dphi=0.01, z0=200.0)):
        kept = every
        if cuts.window_margin is not None:
            kept = graph_module._in_windows(ev, every, rows, mm.windows.widened(
                cuts.window_margin, cuts.window_count_margin, cuts.window_min_count))
        kept = apply_cuts(ev, kept, cuts)
        built = module_map_graph(ev, mm, cuts)
        assert built.num_edges == kept.shape[1] > 0
        assert {tuple(e) for e in np.sort(built.edge_index, axis=0).T.tolist()} == \
            {tuple(e) for e in np.sort(kept, axis=0).T.tolist()}
    narrow = DoubletCuts(window_margin=0.0)
    searched, _ = graph_module._candidates_of(ev, graph_module.hit_search(
        ev, mm, module_map_module._dphi_ranges(mm, mm.windows.widened(0.0), narrow)))
    assert searched.shape[1] < every.shape[1] / 2  # the search skips most hit pairs


def test_wrap_is_the_modulo_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-np.pi, np.pi, (2, 200_000))
    edges = np.array([np.pi, -np.pi, 0.0, -0.0, 1e-300, -1e-300, 2 * np.pi, -2 * np.pi,
                      np.nextafter(np.pi, 0), np.nextafter(-np.pi, 0), np.nextafter(np.pi, 4),
                      np.nextafter(-np.pi, -4), np.nextafter(2 * np.pi, 0)])
    for angle in (a - b, edges, np.array([7.0, -9.5, np.nan]), np.empty(0)):
        plain = (angle + np.pi) % (2 * np.pi) - np.pi
        assert np.array_equal(wrap(angle), plain, equal_nan=True)


@pytest.mark.parametrize("angle", [0.0, 2.9])
def test_the_graph_kernels_build_the_graph_numpy_builds(angle: float) -> None:
    """graph_kernel.c against the numpy forms, bit for bit: the same edges in the same
    order and the same filter inputs, for windows narrow, wide and untrusted (NaN
    bounds), no windows at all, and modules across phi = +-pi."""
    from sparsegnn.sparse import native
    from sparsegnn.tracking.filter import doublet_features
    from sparsegnn.tracking.graph_kernel import library

    if library() is None:
        pytest.skip("the graph-construction kernels did not build here")
    ev = _rotated(read_event(SAMPLE, "event000000001"), angle)
    mm = ModuleMap.learn([ev], windows=True)
    for cuts in (DoubletCuts(window_margin=0.0), DoubletCuts(window_margin=0.3,
                                                              window_count_margin=16),
                 DoubletCuts(window_margin=0.0, window_min_count=3),
                 DoubletCuts(window_margin=40.0), DoubletCuts(dphi=0.02), DoubletCuts(),
                 DoubletCuts(window_margin=0.1, dphi=0.01, z0=200.0)):
        fast = module_map_graph(ev, mm, cuts)
        with native.disabled():
            plain = module_map_graph(ev, mm, cuts)
            plain_features = doublet_features(plain)
        assert plain.num_edges > 0 and np.array_equal(fast.edge_index, plain.edge_index)
        assert np.array_equal(fast.edge_features, plain.edge_features)
        assert np.array_equal(doublet_features(fast).numpy(), plain_features.numpy())


def test_the_pair_order_kernel_is_a_stable_argsort() -> None:
    from sparsegnn.sparse import native
    from sparsegnn.tracking.graph_kernel import library, pair_order

    if library() is None:
        pytest.skip("the graph-construction kernels did not build here")
    rng = np.random.default_rng(0)
    edges = rng.integers(0, 50, (2, 3000))  # repeated pairs: stability shows
    perm = pair_order(edges, 50)
    lo, hi = np.minimum(*edges), np.maximum(*edges)
    assert np.array_equal(perm, np.argsort(lo * 50 + hi, kind="stable"))
    assert pair_order(np.zeros((2, 0), dtype=np.int64), 0).size == 0
    with native.disabled():
        assert pair_order(edges, 50) is None


def test_the_graph_kernels_refuse_indices_outside_the_event_or_map() -> None:
    from sparsegnn.tracking import graph_kernel
    from sparsegnn.tracking.filter import _DIVISOR
    from sparsegnn.tracking.hit_graph import EDGE_SCALE, NODE_SCALE

    if graph_kernel.library() is None:
        pytest.skip("the graph-construction kernels did not build here")
    ev = read_event(SAMPLE, "event000000001")
    mm = ModuleMap.learn([ev], windows=True)
    bounds, dphi = mm.search_ranges(DoubletCuts(window_margin=0.0))
    found = graph_module.hit_search(ev, mm, dphi)
    assert graph_kernel.search(ev, found, bounds, 1e-3) is not None
    for bad in (replace(found, ib=found.ib + found.start.size),
                replace(found, row=found.row + bounds[0].shape[0]),
                replace(found, order=found.order[::-1] + 1),
                replace(found, count=found.count + 1)):
        with pytest.raises(IndexError, match="outside"):
            graph_kernel.search(ev, bad, bounds, 1e-3)
    with pytest.raises(IndexError, match="outside"):
        graph_kernel.pair_order(np.array([[0], [ev.num_hits]]), ev.num_hits)
    with pytest.raises(IndexError, match="outside"):
        graph_kernel.edge_features(ev, np.array([[-1], [0]]), EDGE_SCALE)
    with pytest.raises(IndexError, match="outside"):
        graph_kernel.doublet_features(np.array([[0], [3]]), np.zeros((3, 3), np.float32),
                                      np.zeros((1, 4), np.float32), NODE_SCALE, EDGE_SCALE,
                                      _DIVISOR)
