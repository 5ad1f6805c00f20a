"""Link metrics against scikit-learn's AUC and AP and ogb's Evaluator (Hits@K, MRR)."""

from __future__ import annotations

import pytest
import torch

from sparsegnn.errors import InvalidValueError
from sparsegnn.train.link_metrics import (
    average_precision,
    hits_at_k,
    link_metrics,
    mrr,
    roc_auc,
    roc_curve,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def _scores(seed: int, p: int = 300, q: int = 500, ties: bool = True):
    gen = torch.Generator().manual_seed(seed)
    pos = torch.randn(p, generator=gen) + 0.8
    neg = torch.randn(q, generator=gen)
    if ties:  # rounded scores: many ties within and across the classes
        pos, neg = (pos * 4).round() / 4, (neg * 4).round() / 4
    return pos, neg


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ties", [True, False])
def test_auc_and_ap_equal_sklearn(seed: int, ties: bool) -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    pos, neg = _scores(seed, ties=ties)
    y = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)]).numpy()
    s = torch.cat([pos, neg]).numpy()
    assert roc_auc(pos, neg) == pytest.approx(metrics.roc_auc_score(y, s), abs=1e-12)
    assert average_precision(pos, neg) == pytest.approx(
        metrics.average_precision_score(y, s), abs=1e-12)


def test_extremes() -> None:
    pos, neg = torch.tensor([2.0, 3.0]), torch.tensor([0.0, 1.0, 1.5])
    assert roc_auc(pos, neg) == 1.0 and average_precision(pos, neg) == 1.0
    assert roc_auc(neg, pos) == 0.0
    assert roc_auc(torch.ones(3), torch.ones(4)) == 0.5
    assert hits_at_k(pos, neg, 10) == 1.0  # fewer negatives than K: OGB's 1.0
    assert hits_at_k(torch.tensor([1.5, 2.0]), neg, 1) == 0.5  # strictly above the K-th


@pytest.mark.parametrize(("name", "k"), [("ogbl-collab", 50), ("ogbl-ddi", 20),
                                         ("ogbl-ppa", 100)])
def test_hits_equal_ogb_evaluator(name: str, k: int) -> None:
    linkprop = pytest.importorskip("ogb.linkproppred")
    pos, neg = _scores(k, p=400, q=900)
    expected = linkprop.Evaluator(name).eval({"y_pred_pos": pos, "y_pred_neg": neg})
    assert hits_at_k(pos, neg, k) == pytest.approx(expected[f"hits@{k}"], abs=1e-12)
    assert link_metrics(pos, neg, ks=(k,))[f"hits@{k}"] == hits_at_k(pos, neg, k)


def test_mrr_equals_ogb_evaluator_per_source_and_shared() -> None:
    linkprop = pytest.importorskip("ogb.linkproppred")
    gen = torch.Generator().manual_seed(3)
    pos = (torch.randn(200, generator=gen) * 2).round()
    rows = (torch.randn(200, 30, generator=gen) * 2).round()  # ties with the positive
    expected = linkprop.Evaluator("ogbl-citation2").eval(
        {"y_pred_pos": pos, "y_pred_neg": rows})
    assert mrr(pos, rows) == pytest.approx(float(expected["mrr_list"].mean()), abs=1e-6)
    shared = rows[0]
    tiled = linkprop.Evaluator("ogbl-citation2").eval(
        {"y_pred_pos": pos, "y_pred_neg": shared.expand(200, -1)})
    assert mrr(pos, shared) == pytest.approx(float(tiled["mrr_list"].mean()), abs=1e-6)
    assert mrr(pos, shared) == pytest.approx(mrr(pos, shared.expand(200, -1)), abs=1e-12)


def test_refuses_empty_or_mismatched() -> None:
    with pytest.raises(InvalidValueError, match="positive and negative"):
        roc_auc(torch.ones(3), torch.empty(0))
    with pytest.raises(InvalidValueError, match="rows"):
        mrr(torch.ones(3), torch.ones(2, 5))


@pytest.mark.parametrize("ties", [True, False])
def test_roc_curve_is_scikit_learns_and_its_area_the_auc(ties):
    metrics = pytest.importorskip("sklearn.metrics")
    pos, neg = _scores(5, ties=ties)
    curve = roc_curve(pos, neg, max_points=10_000)
    labels = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)]).numpy()
    fpr, tpr, _ = metrics.roc_curve(labels, torch.cat([pos, neg]).numpy(),
                                    drop_intermediate=False)
    assert curve["fpr"] == pytest.approx(fpr.tolist()) and curve["tpr"] == pytest.approx(
        tpr.tolist())
    area = torch.trapezoid(torch.tensor(curve["tpr"], dtype=torch.float64),
                           torch.tensor(curve["fpr"], dtype=torch.float64))
    assert float(area) == pytest.approx(roc_auc(pos, neg), abs=1e-12)
    thin = roc_curve(pos, neg, max_points=7)
    assert len(thin["fpr"]) == 7 and thin["fpr"][0] == 0.0 and thin["tpr"][-1] == 1.0
