"""Agreement between two annotators: Cohen's kappa, bootstrap intervals, NMI, confusion.

Essential-Web scores a category by Cohen's kappa on the *overlap* of primary and secondary
labels: two annotations of a document agree when their label sets ``{primary, secondary}``
share a code. We generalise that with agreement weights: the agreement of two label sets
is the best agreement ``1 - w(s, t)`` over their members, with ``w`` zero on the diagonal
and one elsewhere (plain kappa), or linear/quadratic in the ordinal distance (weighted
kappa). Chance agreement is the same quantity averaged over all pairs of one annotator's
and the other's annotations, so with primary labels only this is exactly Cohen's (weighted)
kappa.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from sparsegnn.data.io import atomic_write
from sparsegnn.errors import InvalidValueError, ShapeError
from sparsegnn.optional import pyplot

Weights = Literal["none", "linear", "quadratic"]
Labels = Sequence[str | None] | np.ndarray


@dataclass(frozen=True)
class Kappa:
    """Kappa of one category, with its bootstrap interval (NaN bounds when not drawn)."""

    kappa: float
    low: float
    high: float
    observed: float
    expected: float
    n: int

    def to_dict(self) -> dict[str, float | int | None]:
        """Plain values for JSON; undefined (NaN) numbers become None, which JSON has."""
        return {k: None if isinstance(v, float) and math.isnan(v) else v
                for k, v in asdict(self).items()}


def _label_sets(primary: Labels, secondary: Labels | None) -> list[frozenset[str]]:
    """Each document's label set; a missing or empty secondary adds nothing."""
    sec = [None] * len(primary) if secondary is None else list(secondary)
    if len(sec) != len(primary):
        raise ShapeError(f"{len(primary)} primary but {len(sec)} secondary labels")
    out = []
    for i, (p, s) in enumerate(zip(primary, sec, strict=True)):
        if p is None or p == "":
            raise InvalidValueError(f"document {i} has no primary label")
        out.append(frozenset((p,) if s is None or s == "" else (p, s)))
    return out


def _pair_agreement(
    sets_a: list[frozenset[str]], sets_b: list[frozenset[str]], weights: Weights,
    order: Sequence[str] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct label sets of each side (as ids per document) and their agreement matrix."""
    ids_a: dict[frozenset[str], int] = {}
    ids_b: dict[frozenset[str], int] = {}
    u = np.fromiter((ids_a.setdefault(s, len(ids_a)) for s in sets_a), np.int64, len(sets_a))
    v = np.fromiter((ids_b.setdefault(s, len(ids_b)) for s in sets_b), np.int64, len(sets_b))
    rank = _ordinal_ranks(order, ids_a, ids_b, weights)
    agree = np.empty((len(ids_a), len(ids_b)))
    for sa, i in ids_a.items():
        for sb, j in ids_b.items():
            agree[i, j] = max(_agree(s, t, weights, rank) for s in sa for t in sb)
    return u, v, agree


def _ordinal_ranks(
    order: Sequence[str] | None, ids_a: dict, ids_b: dict, weights: Weights,
) -> dict[str, float]:
    """Position of each code scaled to [0, 1] (only used by weighted kappa)."""
    if weights == "none":
        return {}
    if order is None:
        raise InvalidValueError("weighted kappa needs the ordinal order of the codes")
    seen = set().union(*ids_a, *ids_b)
    missing = seen - set(order)
    if missing:
        raise InvalidValueError(f"codes {sorted(missing)} are not in the ordinal order given")
    scale = max(1, len(order) - 1)
    return {code: i / scale for i, code in enumerate(order)}


def _agree(s: str, t: str, weights: Weights, rank: dict[str, float]) -> float:
    if weights == "none":
        return float(s == t)
    d = abs(rank[s] - rank[t])
    return 1.0 - (d if weights == "linear" else d * d)


def _kappa_of(u: np.ndarray, v: np.ndarray, agree: np.ndarray) -> tuple[float, float, float]:
    n = u.size
    observed = float(agree[u, v].mean())
    pa = np.bincount(u, minlength=agree.shape[0]) / n
    pb = np.bincount(v, minlength=agree.shape[1]) / n
    expected = float(pa @ agree @ pb)
    if expected >= 1.0:  # both annotators constant and agreeing: kappa is undefined
        return float("nan"), observed, expected
    return (observed - expected) / (1.0 - expected), observed, expected


def cohen_kappa(
    a_primary: Labels,
    b_primary: Labels,
    a_secondary: Labels | None = None,
    b_secondary: Labels | None = None,
    *,
    weights: Weights = "none",
    order: Sequence[str] | None = None,
    n_boot: int = 0,
    confidence: float = 0.95,
    seed: int = 0,
) -> Kappa:
    """Kappa of annotators A and B on one category, optionally with secondary labels.

    ``weights`` other than ``"none"`` need ``order`` (the category's codes, ordinal).
    ``n_boot`` > 0 draws that many bootstrap resamples of the documents and returns the
    central ``confidence`` percentile interval.
    """
    if len(a_primary) != len(b_primary):
        raise ShapeError(f"A labelled {len(a_primary)} documents but B {len(b_primary)}")
    if len(a_primary) == 0:
        raise InvalidValueError("kappa needs at least one document")
    if weights not in ("none", "linear", "quadratic"):
        raise InvalidValueError(f"weights must be none, linear or quadratic, got {weights!r}")
    u, v, agree = _pair_agreement(_label_sets(a_primary, a_secondary),
                                  _label_sets(b_primary, b_secondary), weights, order)
    k, observed, expected = _kappa_of(u, v, agree)
    low = high = float("nan")
    if n_boot > 0:
        low, high = _bootstrap(u, v, agree, n_boot, confidence, seed)
    return Kappa(k, low, high, observed, expected, int(u.size))


def _bootstrap(
    u: np.ndarray, v: np.ndarray, agree: np.ndarray, n_boot: int, confidence: float, seed: int,
) -> tuple[float, float]:
    """Percentile interval of kappa over documents resampled with replacement."""
    if not 0.0 < confidence < 1.0:
        raise InvalidValueError(f"confidence must be in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    draws = np.empty(n_boot)
    for b in range(n_boot):
        idx = rng.integers(0, u.size, u.size)
        draws[b] = _kappa_of(u[idx], v[idx], agree)[0]
    draws = draws[~np.isnan(draws)]
    if draws.size == 0:
        return float("nan"), float("nan")
    tail = (1.0 - confidence) / 2.0
    return float(np.quantile(draws, tail)), float(np.quantile(draws, 1.0 - tail))


def _entropy(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def normalized_mutual_info(x: Labels, y: Labels) -> float:
    """``I(X; Y) / ((H(X) + H(Y)) / 2)``: 0 for independent labelings, 1 for identical
    partitions (the arithmetic normalisation; defined as 1 when both are constant)."""
    if len(x) != len(y):
        raise ShapeError(f"NMI needs equal lengths, got {len(x)} and {len(y)}")
    if len(x) == 0:
        raise InvalidValueError("NMI needs at least one document")
    _, xi = np.unique(np.asarray(x, dtype=object).astype(str), return_inverse=True)
    _, yi = np.unique(np.asarray(y, dtype=object).astype(str), return_inverse=True)
    joint = np.zeros((xi.max() + 1, yi.max() + 1))
    np.add.at(joint, (xi, yi), 1.0)
    hx, hy = _entropy(joint.sum(1)), _entropy(joint.sum(0))
    if hx == 0.0 and hy == 0.0:
        return 1.0
    mutual = hx + hy - _entropy(joint.ravel())
    return max(0.0, mutual / ((hx + hy) / 2.0))


def confusion_matrix(a: Labels, b: Labels, codes: Sequence[str]) -> np.ndarray:
    """Counts ``[i, j]`` of documents A labelled ``codes[i]`` and B ``codes[j]``."""
    index = {c: i for i, c in enumerate(codes)}
    unknown = {c for c in (*a, *b) if c not in index}
    if unknown:
        raise InvalidValueError(f"labels {sorted(map(str, unknown))} are not among the codes")
    out = np.zeros((len(codes), len(codes)), dtype=np.int64)
    np.add.at(out, (np.array([index[c] for c in a], dtype=np.int64),
                    np.array([index[c] for c in b], dtype=np.int64)), 1)
    return out


def plot_confusion(
    matrix: np.ndarray, codes: Sequence[str], path: str | Path, title: str,
    names: tuple[str, str] = ("reference", "annotator"),
) -> Path:
    """Save a row-normalised confusion heat map (counts written in the cells) as PNG."""
    plt = pyplot("for confusion plots")
    rows = matrix.sum(1, keepdims=True)
    share = matrix / np.where(rows == 0, 1, rows)
    size = 2.5 + 0.45 * len(codes)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(len(codes)), codes, rotation=90)
    ax.set_yticks(range(len(codes)), codes)
    ax.set_xlabel(names[1])
    ax.set_ylabel(names[0])
    ax.set_title(title)
    for (i, j), count in np.ndenumerate(matrix):
        if count:
            ax.text(j, i, str(count), ha="center", va="center", fontsize=7,
                    color="white" if share[i, j] > 0.5 else "black")
    fig.tight_layout()
    try:  # via a temp file: an interrupted plot never leaves a truncated PNG
        return atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=100))
    finally:
        plt.close(fig)
