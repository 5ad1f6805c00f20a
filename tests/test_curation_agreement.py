"""Kappa, NMI and confusion matrices against values computed by hand."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from sparsegnn.curation import (
    cohen_kappa,
    confusion_matrix,
    normalized_mutual_info,
    plot_confusion,
)
from sparsegnn.errors import InvalidValueError, ShapeError

A = ["a", "a", "b", "b", "c"]
B = ["a", "b", "b", "b", "c"]


def test_plain_kappa_by_hand():
    # observed 4/5; chance (2*1 + 2*3 + 1*1) / 25 = 9/25
    k = cohen_kappa(A, B)
    assert k.observed == pytest.approx(0.8)
    assert k.expected == pytest.approx(9 / 25)
    assert k.kappa == pytest.approx((0.8 - 0.36) / 0.64)
    assert math.isnan(k.low) and k.n == 5
    assert k.to_dict()["low"] is None  # JSON has no NaN


def test_constant_agreeing_annotators_have_undefined_kappa():
    k = cohen_kappa(["a", "a"], ["a", "a"])
    assert math.isnan(k.kappa) and k.observed == 1.0


def test_linear_weighted_kappa_by_hand():
    # agreement 1 - |i - j| / 2; observed 4.5 / 5; chance [.4 .4 .2] M [.2 .6 .2] = .62
    k = cohen_kappa(A, B, weights="linear", order=["a", "b", "c"])
    assert k.kappa == pytest.approx((0.9 - 0.62) / 0.38)


def test_quadratic_weights_need_an_order():
    with pytest.raises(InvalidValueError, match="ordinal order"):
        cohen_kappa(A, B, weights="quadratic")


def test_primary_secondary_overlap_by_hand():
    # doc 1: {a, b} vs {b, c} overlap; doc 2: {b} vs {a} do not -> observed 1/2.
    # chance: of the four cross pairs only ({b}, {a}) misses -> 3/4.
    k = cohen_kappa(["a", "b"], ["b", "a"], ["b", None], ["c", None])
    assert k.observed == pytest.approx(0.5)
    assert k.expected == pytest.approx(0.75)
    assert k.kappa == pytest.approx(-1.0)


def test_secondary_labels_only_add_agreement():
    plain = cohen_kappa(A, B)
    overlap = cohen_kappa(A, B, ["b", "b", None, None, None], [None] * 5)
    assert overlap.observed == pytest.approx(1.0) and plain.observed < 1.0


def test_bootstrap_interval_is_reproducible_and_brackets_kappa():
    rng = np.random.default_rng(1)
    truth = rng.choice(list("abcd"), 400)
    noisy = np.where(rng.random(400) < 0.8, truth, rng.choice(list("abcd"), 400))
    k1 = cohen_kappa(truth, noisy, n_boot=200, seed=3)
    k2 = cohen_kappa(truth, noisy, n_boot=200, seed=3)
    assert (k1.low, k1.high) == (k2.low, k2.high)
    assert k1.low < k1.kappa < k1.high


def test_kappa_input_errors():
    with pytest.raises(ShapeError):
        cohen_kappa(["a"], ["a", "b"])
    with pytest.raises(InvalidValueError, match="no primary label"):
        cohen_kappa(["a", None], ["a", "b"])


def test_nmi_by_hand():
    assert normalized_mutual_info([0, 0, 1, 1], [5, 5, 7, 7]) == pytest.approx(1.0)
    assert normalized_mutual_info([0, 0, 1, 1], [0, 1, 0, 1]) == pytest.approx(0.0)
    hx = math.log(2)
    hy = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    hxy = 1.5 * math.log(2)
    expected = (hx + hy - hxy) / ((hx + hy) / 2)
    assert normalized_mutual_info([0, 0, 1, 1], [0, 0, 0, 1]) == pytest.approx(expected)


def test_confusion_matrix_and_plot(tmp_path: Path):
    cm = confusion_matrix(A, B, ["a", "b", "c"])
    assert cm.tolist() == [[1, 1, 0], [0, 2, 0], [0, 0, 1]]
    with pytest.raises(InvalidValueError, match="not among the codes"):
        confusion_matrix(A, B, ["a", "b"])
    pytest.importorskip("matplotlib")
    png = plot_confusion(cm, ["a", "b", "c"], tmp_path / "cm.png", "topic")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
