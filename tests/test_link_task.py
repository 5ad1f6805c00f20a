"""Training link prediction on one process: metrics, encoders and decoders, negatives,
the split saved with the run, exact resume, and refusals."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from sparsegnn.data.generators import sbm
from sparsegnn.data.link_edges import load_split
from sparsegnn.errors import InvalidValueError
from sparsegnn.sampling.link_split import random_link_split
from sparsegnn.train.link_task import LinkRequest, train_link

pytestmark = pytest.mark.usefixtures("one_thread")

FAST = LinkRequest(hidden=32, out_channels=16, epochs=30, ks=(10, 50))


@pytest.fixture(scope="module")
def graph():
    return sbm(400, 4, 8.0, mixing=0.05, seed=3, num_features=16, feature_noise=1.0)


def test_learns_and_reports_every_metric(graph) -> None:
    _, out = train_link(graph, FAST)
    assert set(out.test) == {"auc", "ap", "hits@10", "hits@50", "mrr"}
    assert out.test["auc"] > 0.8 and out.val["auc"] > 0.8
    assert out.epochs_run == 30 and len(out.history) == 30
    assert out.history[-1].loss < out.history[0].loss
    assert out.val["auc"] == pytest.approx(max(h.val_auc for h in out.history))
    assert out.to_dict()["test"]["auc"] == out.test["auc"]
    assert out.summary().startswith(f"test auc {out.test['auc']:.4f}")


@pytest.mark.parametrize(("model", "decoder", "negatives"), [
    ("sage", "dot", "uniform"), ("gcn", "mlp", "degree"), ("gcn", "distmult", "tail")])
def test_encoders_decoders_and_negatives(graph, model: str, decoder: str,
                                         negatives: str) -> None:
    request = replace(FAST, model=model, decoder=decoder, negatives=negatives, epochs=40)
    _, out = train_link(graph, request)
    assert out.test["auc"] > 0.6


def test_typed_edges_train_distmult(graph) -> None:
    types = (graph.edge_index[0] % 2).to(torch.int64)
    split = random_link_split(graph.edge_index, graph.num_nodes, seed=0, edge_type=types)
    model, out = train_link(graph, replace(FAST, decoder="distmult"), split)
    assert model.decoder.relations.shape[0] == 2
    assert 0.0 <= out.test["auc"] <= 1.0


def test_seeded_runs_agree_and_split_is_saved(graph, tmp_path: Path) -> None:
    request = replace(FAST, epochs=5, split_out=tmp_path / "split.pt")
    _, a = train_link(graph, request)
    _, b = train_link(graph, replace(request, split_out=None))
    assert a.test == b.test and a.split_hash == b.split_hash
    saved = load_split(tmp_path / "split.pt")
    _, c = train_link(graph, replace(request, split_out=None), saved)
    assert c.test == a.test


def test_resume_is_bit_identical(graph, tmp_path: Path) -> None:
    ckpt = tmp_path / "link.ckpt"
    base = replace(FAST, epochs=6, checkpoint_every=1)
    whole, _ = train_link(graph, base)
    train_link(graph, replace(base, epochs=3, checkpoint=ckpt))
    resumed, _ = train_link(graph, replace(base, checkpoint=ckpt, resume=True))
    for key, value in whole.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key
    other = replace(base, checkpoint=ckpt, resume=True, split_seed=99)
    with pytest.raises(InvalidValueError, match="split"):
        train_link(graph, other)


def test_refusals(graph) -> None:
    with pytest.raises(InvalidValueError, match="negative ratio"):
        LinkRequest(neg_ratio=0)
    with pytest.raises(InvalidValueError, match="no training edges"):
        train_link(graph, replace(FAST, val=0.7, test=0.7))
    featureless = replace(graph, x=None)
    with pytest.raises(InvalidValueError, match="needs node features"):
        train_link(featureless, FAST)
