"""Full-graph training: determinism, exact resume, atomic checkpoints, Cora accuracy."""

from __future__ import annotations

import pytest
import torch

from sparsegnn.data import load_cora, row_normalize, sbm
from sparsegnn.errors import DataFormatError
from sparsegnn.train import TrainConfig, build_model, fit, load_checkpoint, local_task, train_single
from sparsegnn.train.checkpoint import save_checkpoint


@pytest.fixture(scope="module")
def small_graph():
    return sbm(300, 4, 8, seed=1, num_features=16)


def _run(graph, cfg):
    task = local_task(graph, cfg.model, torch.device("cpu"), cfg.torch_dtype)
    model = build_model(cfg, graph.num_features, graph.num_classes).to(cfg.torch_dtype)
    return model, fit(model, task, cfg)


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_same_seed_same_weights(small_graph, model):
    cfg = TrainConfig(model=model, epochs=8, progress=False, seed=3)
    m1, r1 = _run(small_graph, cfg)
    m2, r2 = _run(small_graph, cfg)
    assert [h.loss for h in r1.history] == [h.loss for h in r2.history]
    for a, b in zip(m1.state_dict().values(), m2.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_interrupted_run_resumes_to_identical_weights(small_graph, tmp_path):
    full_cfg = TrainConfig(epochs=12, progress=False, seed=5)
    full_model, full = _run(small_graph, full_cfg)

    ckpt = tmp_path / "run.ckpt"
    part_cfg = TrainConfig(epochs=7, progress=False, seed=5, checkpoint=ckpt, checkpoint_every=3)
    _run(small_graph, part_cfg)  # "interrupted" after epoch 7; last checkpoint at epoch 7
    assert load_checkpoint(ckpt)["loop"]["epoch"] == 7
    resume_cfg = TrainConfig(epochs=12, progress=False, seed=999, checkpoint=ckpt, resume=True)
    resumed_model, resumed = _run(small_graph, resume_cfg)

    assert [h.loss for h in resumed.history] == [h.loss for h in full.history]
    for a, b in zip(
        full_model.state_dict().values(), resumed_model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b)


def test_early_stopping_stops(small_graph):
    _, result = _run(small_graph, TrainConfig(epochs=200, patience=3, lr=0.0, progress=False))
    assert result.stopped_early and result.epochs_run < 10


def test_checkpoint_write_is_atomic_and_corruption_is_reported(tmp_path):
    path = tmp_path / "c.ckpt"
    save_checkpoint(path, {"a": torch.ones(3)})
    assert list(tmp_path.iterdir()) == [path]  # no temp file left behind
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(DataFormatError, match=r"c\.ckpt"):
        load_checkpoint(path)
    with pytest.raises(DataFormatError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.ckpt")


def test_gcn_on_cora_reaches_published_accuracy():
    graph = load_cora()
    graph.x = row_normalize(graph.x)
    _, result = train_single(graph, TrainConfig(progress=False, seed=0))
    assert result.test_accuracy >= 0.79


def test_progress_bar_stays_off_a_log_file(capsys: pytest.CaptureFixture[str]) -> None:
    """Progress is for terminals: with stderr captured (a log file, CI) no bar is drawn."""
    from sparsegnn.cli.main import main

    assert main(["train", "--dataset", "sbm:nodes=120,blocks=2,degree=6", "--epochs",
                 "3"]) == 0
    err = capsys.readouterr().err
    assert "epoch" not in err and "|" not in err
