"""Training regimes (ShaDow-sampled vs whole events with a size cap), checkpoints, learning."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.tracking.infer import load_model, predict, predict_sampled, save_model
from sparsegnn.tracking.metrics import roc_auc
from sparsegnn.tracking.model import INConfig
from sparsegnn.tracking.sampling import seed_order
from sparsegnn.tracking.train import (
    TrackTrainConfig,
    epoch_lr,
    event_order,
    train,
    train_data_parallel,
)
from tracking_toys import toy_graphs

pytestmark = pytest.mark.usefixtures("one_thread")


def test_sampled_training_uses_every_event_within_the_bound() -> None:
    graphs = toy_graphs([10, 30])
    cfg = TrackTrainConfig(INConfig(hidden=8, iterations=2), epochs=1, max_sample_nodes=100,
                           fanouts=(8, 2), skip_larger_than=100)
    _, report = train(graphs, cfg)
    epoch = report.epochs[0]
    assert graphs[1].num_nodes > 100  # the baseline would skip it; sampling must not
    assert epoch.events_used == 2 and epoch.events_skipped == 0
    assert 0 < epoch.max_step_nodes <= 100 and epoch.steps > 2
    assert 0.3 < epoch.edge_coverage <= 1.0 and np.isfinite(epoch.loss)


def test_whole_event_baseline_skips_large_graphs() -> None:
    graphs = toy_graphs([10, 30])
    cfg = TrackTrainConfig(INConfig(hidden=8, iterations=2), epochs=1, skip_larger_than=100)
    _, report = train(graphs, cfg)
    epoch = report.epochs[0]
    assert (epoch.events_used, epoch.events_skipped, epoch.steps) == (1, 1, 1)
    assert epoch.edge_coverage == 1.0 and epoch.max_step_nodes == graphs[0].num_nodes


def test_model_learns_and_checkpoint_round_trips(tmp_path: Path) -> None:
    graphs = toy_graphs([25])
    cfg = TrackTrainConfig(INConfig(hidden=16, iterations=2), epochs=40, lr=3e-3)
    model, report = train(graphs, cfg)
    assert report.epochs[-1].loss < report.epochs[0].loss
    scores = predict(model, graphs[0])
    assert roc_auc(graphs[0].target, scores.scores) > 0.9
    save_model(tmp_path / "in.pt", model, report)
    again = predict(load_model(tmp_path / "in.pt"), graphs[0])
    np.testing.assert_allclose(again.scores, scores.scores, rtol=1e-6)


def test_fine_tuning_starts_from_the_given_model_and_leaves_it_untouched() -> None:
    small, large = toy_graphs([10]), toy_graphs([30])
    base, _ = train(small, TrackTrainConfig(INConfig(hidden=8, iterations=2), epochs=5))
    before = {k: v.clone() for k, v in base.state_dict().items()}
    # cfg.model asks for other sizes: the init model's own sizes must win
    other = TrackTrainConfig(INConfig(hidden=16, iterations=3), epochs=0)
    same, _ = train(large, other, init=base)
    assert same is not base and same.cfg == base.cfg
    np.testing.assert_array_equal(predict(same, large[0]).scores,
                                  predict(base, large[0]).scores)
    tuned, report = train(large, TrackTrainConfig(epochs=3, lr=3e-3), init=base)
    assert len(report.epochs) == 3 and tuned.cfg == base.cfg
    assert all(torch.equal(v, before[k]) for k, v in base.state_dict().items())
    assert not np.allclose(predict(tuned, large[0]).scores, predict(base, large[0]).scores)


def test_sampled_inference_scores_each_edge_in_its_training_context() -> None:
    graphs = toy_graphs([30])
    model, _ = train(graphs, TrackTrainConfig(INConfig(hidden=8, iterations=1), epochs=2,
                                              max_sample_nodes=100, fanouts=(4, 2)))
    # One iteration: an edge's score needs every edge touching its two hits. Full
    # two-hop fan-outs put all of those in the seed's subgraph, so sampled == whole.
    whole = predict(model, graphs[0]).scores
    full_fanout, coverage = predict_sampled(model, graphs[0], 1000, fanouts=(30, 30))
    assert coverage == 1.0
    np.testing.assert_allclose(full_fanout.scores, whole, rtol=1e-5, atol=1e-6)
    # Small fan-outs: every edge still scored (reseeding), deterministic, bounded steps.
    small, coverage = predict_sampled(model, graphs[0], 40, fanouts=(2, 2), max_passes=50)
    assert coverage == 1.0 and ((small.scores > 0) & (small.scores < 1)).all()
    again, _ = predict_sampled(model, graphs[0], 40, fanouts=(2, 2), max_passes=50)
    np.testing.assert_array_equal(small.scores, again.scores)
    assert not np.allclose(small.scores, whole)  # a different context gives other scores


def test_resumed_training_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    graphs = toy_graphs([10, 30])
    cfg = TrackTrainConfig(INConfig(hidden=8, iterations=2), epochs=4, max_sample_nodes=100,
                           fanouts=(8, 2))
    whole, whole_report = train(graphs, cfg)
    ckpt = tmp_path / "run.ckpt"
    train(graphs, replace(cfg, epochs=2), checkpoint=ckpt)
    resumed, report = train(graphs, cfg, checkpoint=ckpt, resume=True)
    assert [e.epoch for e in report.epochs] == [0, 1, 2, 3]
    assert [e.loss for e in report.epochs] == [e.loss for e in whole_report.epochs]
    for key, value in whole.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key
    assert load_model(ckpt).cfg == cfg.model  # a checkpoint is also a usable model


def test_resume_refuses_what_it_cannot_continue(tmp_path: Path) -> None:
    graphs = toy_graphs([10])
    cfg = TrackTrainConfig(INConfig(hidden=8, iterations=2), epochs=1)
    with pytest.raises(InvalidValueError, match="checkpoint"):
        train(graphs, cfg, resume=True)
    model, report = train(graphs, cfg, checkpoint=tmp_path / "run.ckpt")
    save_model(tmp_path / "final.pt", model, report)
    with pytest.raises(DataFormatError, match="finished model"):
        train(graphs, cfg, checkpoint=tmp_path / "final.pt", resume=True)
    other = TrackTrainConfig(INConfig(hidden=16, iterations=2), epochs=2)
    with pytest.raises(InvalidValueError, match="hidden 8 in the file, 16 in this run"):
        train(graphs, other, checkpoint=tmp_path / "run.ckpt", resume=True)


def test_phi_seed_order_visits_every_hit_once_by_azimuth_from_a_random_start() -> None:
    graph = toy_graphs([30])[0]
    phi = graph.node_features[:, 1]
    starts = set()
    for epoch in range(3):
        order = seed_order(graph, "phi", seed=0, epoch=epoch).numpy()
        assert sorted(order.tolist()) == list(range(graph.num_nodes))
        steps = np.diff(phi[order])
        assert (steps < 0).sum() <= 1  # ascending azimuth, wrapping round once
        np.testing.assert_array_equal(order, seed_order(graph, "phi", 0, epoch).numpy())
        starts.add(int(order[0]))
    assert len(starts) == 3  # each epoch starts its wedges somewhere else
    pool = np.arange(0, graph.num_nodes, 3)
    assert sorted(seed_order(graph, "phi", 0, 0, pool).tolist()) == pool.tolist()
    with pytest.raises(InvalidValueError, match="seed order 'eta'"):
        seed_order(graph, "eta", 0, 0)


def test_phi_wedges_give_seeds_their_whole_event_context() -> None:
    graphs = toy_graphs([30])
    model, report = train(graphs, TrackTrainConfig(INConfig(hidden=8, iterations=2), epochs=1,
                                                   max_sample_nodes=100, fanouts=(2, 2),
                                                   seed_order="phi"))
    assert report.epochs[0].max_step_nodes <= 100 and report.epochs[0].events_used == 1
    whole = predict(model, graphs[0]).scores
    exact, error = {}, {}
    for order in ("random", "phi"):
        scores, coverage = predict_sampled(model, graphs[0], 100, fanouts=(2, 2),
                                           max_passes=50, seed_order=order)
        assert coverage == 1.0
        exact[order] = float(np.mean(np.abs(scores.scores - whole) < 1e-5))
        error[order] = float(np.mean(np.abs(scores.scores - whole)))
    # random seeds see truncated neighbourhoods: almost no edge scores as on the whole
    # event; in wedges most do, the rest (at the wedge's rim) err half as much on average
    assert exact["phi"] > 0.5 and exact["phi"] > 5 * exact["random"], exact
    assert error["phi"] < 0.5 * error["random"], error


def _graph_files(tmp_path: Path, graphs: list) -> list[str]:
    paths = []
    for i, g in enumerate(graphs):
        paths.append(str(tmp_path / f"g{i}.npz"))
        g.save(paths[-1])
    return paths


@pytest.mark.distributed
def test_data_parallel_ranks_average_gradients_like_one_process(tmp_path: Path) -> None:
    (g,) = toy_graphs([12])
    cfg = TrackTrainConfig(INConfig(hidden=8, iterations=2), epochs=3, lr=3e-3)
    # Two ranks with the same event each: the averaged gradient is that event's gradient.
    model, report, _ = train_data_parallel(_graph_files(tmp_path, [g, g]), cfg, 2,
                                           timeout_s=60, wall_timeout_s=150)
    alone, alone_report = train([g], cfg)
    for name, value in alone.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], value, atol=1e-6, rtol=1e-5)
    assert report.pos_weight == pytest.approx(alone_report.pos_weight)
    assert [e.steps for e in report.epochs] == [1, 1, 1]
    assert [e.events_used for e in report.epochs] == [2, 2, 2]
    assert report.epochs[-1].loss == pytest.approx(alone_report.epochs[-1].loss, rel=1e-5)


@pytest.mark.distributed
def test_data_parallel_uneven_shares_stay_in_step_and_count_bytes(tmp_path: Path) -> None:
    graphs = toy_graphs([8, 10, 12])
    cfg = TrackTrainConfig(INConfig(hidden=8, iterations=1), epochs=2, max_sample_nodes=30,
                           fanouts=(4, 2))
    _, report, results = train_data_parallel(_graph_files(tmp_path, graphs), cfg, 2,
                                             timeout_s=60, wall_timeout_s=150)
    assert [r.value.events for r in results] == [2, 1]  # events 0 and 2, event 1
    for name, value in results[0].value.state_dict.items():
        torch.testing.assert_close(results[1].value.state_dict[name], value, atol=0, rtol=0)
    updates = sum(e.steps for e in report.epochs)
    assert all(e.events_used == 3 and e.max_step_nodes <= 30 for e in report.epochs)
    n_params = sum(v.numel() for v in results[0].value.state_dict.values())
    for r in results:  # one flat float32 gradient per optimiser step to the other rank
        assert r.comm.phases["grad_allreduce"]["sent"] == updates * n_params * 4


def test_data_parallel_refuses_more_ranks_than_events(tmp_path: Path) -> None:
    with pytest.raises(InvalidValueError, match="every rank needs"):
        train_data_parallel(_graph_files(tmp_path, toy_graphs([5])), TrackTrainConfig(), 2)


def test_cosine_schedule_runs_from_lr_to_lr_final_and_is_constant_without_it() -> None:
    cfg = TrackTrainConfig(epochs=5, lr=1e-3, lr_final=1e-4)
    rates = [epoch_lr(cfg, e) for e in range(5)]
    assert rates[0] == pytest.approx(1e-3) and rates[-1] == pytest.approx(1e-4)
    assert all(a > b for a, b in itertools.pairwise(rates))  # decays every epoch
    assert rates[2] == pytest.approx(0.5 * (1e-3 + 1e-4))  # half-way: the mean
    assert {epoch_lr(replace(cfg, lr_final=None), e) for e in range(5)} == {1e-3}


def test_each_epoch_visits_every_event_once_in_a_new_reproducible_order() -> None:
    orders = [event_order(40, seed=0, epoch=e) for e in range(3)]
    assert all(sorted(o.tolist()) == list(range(40)) for o in orders)
    assert len({tuple(o.tolist()) for o in orders}) == 3  # mixed conditions interleave
    np.testing.assert_array_equal(orders[1], event_order(40, seed=0, epoch=1))
