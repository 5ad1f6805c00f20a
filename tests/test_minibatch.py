"""Prefetching loader and sampled minibatch training (small graphs, a few epochs)."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data import sbm
from sparsegnn.errors import InvalidValueError
from sparsegnn.sampling import NodeWiseSampler, ShadowSampler
from sparsegnn.sampling.loader import MinibatchLoader
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.fullgraph import TrainConfig
from sparsegnn.train.minibatch import MinibatchConfig, MinibatchData, fit_minibatch


@pytest.fixture(scope="module")
def data() -> MinibatchData:
    return MinibatchData.from_graph(
        sbm(300, 3, 8, mixing=0.05, num_features=8, feature_noise=1.0, seed=0)
    )


def loader(data: MinibatchData, **kw: object) -> MinibatchLoader:
    sampler = NodeWiseSampler(data.adj, [4, 3])
    train = data.masks["train"].nonzero().flatten()
    opts: dict = {"batch_size": 32, "bulk": 2, "seed": 5, **kw}
    return MinibatchLoader(sampler, train, data.x, data.y, **opts)


def signature(items: list) -> list[tuple[list[int], list[int]]]:
    return [(i.batch.seeds.tolist(), i.batch.node_ids.tolist()) for i in items]


def test_an_epoch_visits_every_training_seed_once(data: MinibatchData) -> None:
    items = list(loader(data).epoch(0))
    seeds = torch.cat([i.batch.seeds for i in items])
    train = data.masks["train"].nonzero().flatten()
    assert torch.equal(seeds.sort().values, train)
    assert len(items) == len(loader(data))
    for i in items:
        assert torch.equal(i.x, data.x[i.batch.node_ids])
        assert torch.equal(i.y, data.y[i.batch.seeds])


def test_prefetch_and_bulk_size_do_not_change_the_minibatches(data: MinibatchData) -> None:
    ref = signature(list(loader(data, prefetch=False, bulk=1).epoch(3)))
    assert signature(list(loader(data, prefetch=True, bulk=3).epoch(3))) == ref
    assert signature(list(loader(data, prefetch=True, bulk=3).epoch(4))) != ref


def test_ranks_split_every_minibatch(data: MinibatchData) -> None:
    whole = loader(data, world_size=1).plan(0)
    parts = [loader(data, rank=r, world_size=2).plan(0) for r in range(2)]
    assert len(parts[0]) == len(parts[1]) == len(whole)
    for (_, seeds), (i0, s0), (i1, s1) in zip(whole, *parts, strict=True):
        assert i0 != i1
        assert sorted(torch.cat([s0, s1]).tolist()) == sorted(seeds.tolist())


class _Broken(NodeWiseSampler):
    def sample(self, seeds, generators):  # type: ignore[override]
        raise RuntimeError("sampler exploded")


def test_producer_errors_reach_the_consumer_and_threads_end(data: MinibatchData) -> None:
    train = data.masks["train"].nonzero().flatten()
    broken = MinibatchLoader(_Broken(data.adj, [2]), train, data.x, data.y, batch_size=16)
    with pytest.raises(RuntimeError, match="exploded"):
        list(broken.epoch(0))
    before = threading.active_count()
    it = loader(data, bulk=1).epoch(0)
    next(it)
    it.close()  # stopping mid-epoch must not leave the producer running
    assert threading.active_count() == before


def test_minibatch_training_learns_an_sbm(data: MinibatchData) -> None:
    cfg = TrainConfig(model="sage", hidden=16, num_layers=2, epochs=4, lr=0.03, progress=False)
    _, result = fit_minibatch(data, cfg, MinibatchConfig("sage", (5, 5), 64, 2))
    assert result.test_accuracy > 0.6  # three balanced classes: chance is 1/3
    assert result.minibatches_per_epoch == 3
    assert result.seeds_per_second > 0


@pytest.mark.parametrize("sampler", ["ladies", "shadow"])
def test_other_samplers_train(data: MinibatchData, sampler: str) -> None:
    cfg = TrainConfig(model="sage", hidden=8, num_layers=2, epochs=2, progress=False)
    _, result = fit_minibatch(data, cfg, MinibatchConfig(sampler, (4, 4), 64, 2, prefetch=False))
    assert result.epochs_run == 2 and 0.0 <= result.test_accuracy <= 1.0


def test_shadow_operators_repeat_one_subgraph(data: MinibatchData) -> None:
    (batch,) = ShadowSampler(data.adj, [3]).sample([torch.tensor([0, 1])], [torch.Generator()])
    ops = batch.operators(3)
    assert len(ops) == 3 and all(op is ops[0] for op in ops)
    assert isinstance(ops[0], CSRMatrix)


def test_depth_mismatch_is_reported(data: MinibatchData) -> None:
    cfg = TrainConfig(model="sage", num_layers=3, epochs=1, progress=False)
    with pytest.raises(ValueError, match="fan-outs"):
        fit_minibatch(data, cfg, MinibatchConfig("sage", (4, 4), 64, 1))


def test_cli_minibatch_prints_json_last(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "train",
        "--mode",
        "minibatch",
        "--dataset",
        "sbm:nodes=200,blocks=2,degree=6",
        "--fanouts",
        "3,3",
        "--layers",
        "2",
        "--epochs",
        "2",
        "--batch-size",
        "64",
        "--bulk",
        "2",
        "--no-progress",
        "--json",
    ]
    assert main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    out = json.loads(lines[-1])
    assert out["mode"] == "minibatch" and out["epochs_run"] == 2
    assert out["minibatch"]["fanouts"] == [3, 3]
    assert "test accuracy" in lines[0]


def test_cli_reports_a_fanout_depth_mismatch(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "train", "--mode", "minibatch", "--dataset", "sbm:nodes=100,blocks=2,degree=4",
        "--fanouts", "3", "--layers", "2", "--no-progress",
    ]  # fmt: skip
    assert main(argv) == 2
    assert "fan-outs" in capsys.readouterr().err


def test_interrupted_minibatch_run_resumes_bit_identically(data: MinibatchData,
                                                           tmp_path) -> None:
    """Stopped after 3 of 6 epochs and resumed: the same losses and the same weights as a
    run that never stopped (dropout's stream restored, minibatches drawn from (seed,
    epoch, batch) alone)."""
    mb = MinibatchConfig("sage", (4, 3), 64, 2)
    base = {"model": "sage", "hidden": 8, "num_layers": 2, "lr": 0.02, "progress": False,
            "seed": 3, "patience": 100}
    full_model, full = fit_minibatch(data, TrainConfig(epochs=6, **base), mb)
    ckpt = tmp_path / "mb.pt"
    fit_minibatch(data, TrainConfig(epochs=3, checkpoint=ckpt, **base), mb)
    resumed_model, resumed = fit_minibatch(
        data, TrainConfig(epochs=6, checkpoint=ckpt, resume=True, **base), mb)
    assert [h.loss for h in resumed.history] == [h.loss for h in full.history]
    assert resumed.best_epoch == full.best_epoch
    for a, b in zip(full_model.state_dict().values(), resumed_model.state_dict().values(),
                    strict=True):
        assert torch.equal(a, b)
    # the seed draws the minibatches, so another one cannot continue this run
    with pytest.raises(InvalidValueError, match="seed 3 in the file, 4 in this run"):
        fit_minibatch(data, TrainConfig(epochs=7, checkpoint=ckpt, resume=True,
                                        **{**base, "seed": 4}), mb)
