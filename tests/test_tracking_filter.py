"""Doublet filter: features, threshold at a kept fraction, learning, pruning, round trip."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.tracking.filter import (
    FilterConfig,
    doublet_features,
    edges_dropped,
    keep_threshold,
    load_filter,
    save_filter,
    train_filter,
    vertex_z,
)
from sparsegnn.tracking.graph_construction import module_map_graph
from sparsegnn.tracking.infer import save_model
from sparsegnn.tracking.module_map import ModuleMap
from tracking_toys import straight_tracks

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("z_vertex", [0.0, 40.0])
def test_features_are_the_cut_quantities_of_each_pair(z_vertex: float) -> None:
    ev = straight_tracks(3, seed=0, n_noise=0, z_vertex=z_vertex)
    graph = module_map_graph(ev, ModuleMap.learn([ev]))
    feats = doublet_features(graph).numpy()
    assert feats.shape == (graph.num_edges, 10) and np.isfinite(feats).all()
    src, dst = graph.edge_index
    dr = ev.r[dst] - ev.r[src]
    z0 = ev.z[src] - ev.r[src] * (ev.z[dst] - ev.z[src]) / dr
    np.testing.assert_allclose(feats[:, 0], ev.r[src] / 1000, rtol=1e-5)
    np.testing.assert_allclose(feats[:, 4], dr / 100, rtol=1e-5)
    true = graph.y
    # Straight tracks from one vertex: their segments point back to it with no bend, and
    # z0 is measured from the event's vertex, wherever the vertex is.
    np.testing.assert_allclose(z0[true], z_vertex, atol=1e-3)
    np.testing.assert_allclose(feats[true, 9], 0.0, atol=1e-4)
    np.testing.assert_allclose(feats[true, 8], 0.0, atol=1e-4)


def test_vertex_is_the_densest_z0() -> None:
    rng = np.random.default_rng(0)
    z0 = np.concatenate([rng.uniform(-300, 300, 5000), rng.normal(-37.3, 0.3, 300)])
    assert vertex_z(z0) == pytest.approx(-37.3, abs=0.2)
    assert vertex_z(np.array([500.0, -400.0])) == 0.0  # nothing inside the span


def test_threshold_keeps_the_asked_fraction_of_targets() -> None:
    logits = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, -5.0])
    target = torch.tensor([True, True, True, True, False, False])
    assert keep_threshold(logits, target, 1.0) == 0.0  # every target passes
    assert keep_threshold(logits, target, 0.75) == 1.0  # 3 of 4 pass
    assert keep_threshold(logits, target, 0.5) == 2.0


def test_filter_drops_fakes_and_keeps_targets_of_unseen_events(tmp_path: Path) -> None:
    train_events = [straight_tracks(40, seed) for seed in range(3)]
    held_out = straight_tracks(40, seed=7)
    mmap = ModuleMap.learn([*train_events, held_out])
    graphs = [module_map_graph(ev, mmap) for ev in train_events]
    filt, _ = train_filter(graphs, FilterConfig(hidden=16, epochs=30, keep=1.0))
    for g in graphs:  # keep=1.0: no training target is lost
        assert (filt.logits(g).numpy() >= float(filt.threshold))[g.target].all()
    test = module_map_graph(held_out, mmap)
    pruned = filt.prune(test)
    assert pruned.num_target_segments == test.num_target_segments  # losses charged to it
    kept_targets = pruned.target.sum() / test.target.sum()
    assert pruned.stats().efficiency == pytest.approx(kept_targets * test.stats().efficiency)
    dropped_fakes = 1 - (~pruned.y).sum() / (~test.y).sum()
    assert kept_targets >= 0.95 and dropped_fakes >= 0.7
    save_filter(tmp_path / "f.pt", filt)
    again = load_filter(tmp_path / "f.pt")
    torch.testing.assert_close(again.logits(test), filt.logits(test))
    assert float(again.threshold) == float(filt.threshold)


def test_bad_filter_inputs_are_refused(tmp_path: Path) -> None:
    ev = straight_tracks(5, seed=0)
    graph = module_map_graph(ev, ModuleMap.learn([ev]))
    with pytest.raises(InvalidValueError, match="keep"):
        train_filter([graph], FilterConfig(keep=0.0))
    no_target = graph.keep_edges(~graph.target)
    with pytest.raises(InvalidValueError, match="no target edges"):
        train_filter([no_target], FilterConfig(epochs=1))
    from sparsegnn.tracking.model import InteractionNetwork
    from sparsegnn.tracking.train import TrainReport

    save_model(tmp_path / "in.pt", InteractionNetwork(), TrainReport(1.0))
    with pytest.raises(DataFormatError, match="not an edge filter"):
        load_filter(tmp_path / "in.pt")


def test_resumed_filter_training_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    """The filter trains through the one loop: stopped after 2 of 4 epochs and resumed
    from its checkpoint, it ends bit for bit where an uninterrupted run does."""
    events = [straight_tracks(20, seed) for seed in range(2)]
    mmap = ModuleMap.learn(events)
    graphs = [module_map_graph(ev, mmap) for ev in events]
    cfg = FilterConfig(hidden=8, epochs=4, batch_edges=256)
    whole, whole_history = train_filter(graphs, cfg)
    ckpt = tmp_path / "filter.ckpt"
    train_filter(graphs, replace(cfg, epochs=2), checkpoint=ckpt)
    resumed, history = train_filter(graphs, cfg, checkpoint=ckpt, resume=True)
    assert [e.epoch for e in history] == [0, 1, 2, 3]
    assert [e.loss for e in history] == [e.loss for e in whole_history]
    for key, value in whole.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key
    with pytest.raises(InvalidValueError, match="checkpoint"):
        train_filter(graphs, cfg, resume=True)


def test_validation_graphs_stop_filter_training_early() -> None:
    """With validation graphs the loop watches the edges dropped at ``keep``: it stops
    ``patience`` epochs after the best one and ends on the best epoch's weights."""
    events = [straight_tracks(20, seed) for seed in range(3)]
    mmap = ModuleMap.learn(events)
    graphs = [module_map_graph(ev, mmap) for ev in events]
    cfg = FilterConfig(hidden=8, epochs=50, patience=1, batch_edges=256)
    filt, history = train_filter(graphs[:2], cfg, validation=graphs[2:])
    dropped = [e.edges_dropped for e in history]
    best = int(np.argmax(dropped))
    assert len(history) == best + 1 + cfg.patience < cfg.epochs
    assert edges_dropped(filt, graphs[2:], cfg.keep) == dropped[best]
