"""Link-prediction metrics with OGB's and scikit-learn's exact definitions.

Scores of positive and negative edges go in, floats come out; no metric needs a
package. Definitions (the tests hold them to ``ogb``'s Evaluator and to scikit-learn):

* ``auc``: area under the ROC curve; tied scores count one half (scikit-learn's
  ``roc_auc_score``, which ``ogb`` uses for ``rocauc``), computed from average ranks;
* ``ap``: scikit-learn's ``average_precision_score``, the step sum
  ``sum_n (R_n - R_{n-1}) P_n`` over the distinct score thresholds (no interpolation);
* ``hits@K``: OGB's: the share of positives scoring strictly above the K-th highest
  negative; 1.0 when there are fewer than K negatives;
* ``mrr``: OGB's: positive ``i`` is ranked among its negatives with ties counted half,
  ``rank = 1 + (#neg > pos + #neg >= pos) / 2``, averaged as ``1 / rank``. With shared
  negatives every positive is ranked against all of them; with per-source negatives
  (``ogbl-citation2``) against its own row.

Everything is computed in float64 on sorted scores: ``O((P + Q) log(P + Q))``, never a
``P x Q`` comparison matrix.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from sparsegnn.errors import InvalidValueError

DEFAULT_KS = (10, 50, 100)


def roc_auc(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """ROC AUC as the Mann-Whitney statistic of the average ranks (ties count half)."""
    pos, neg = _checked(pos, neg)
    scores = torch.cat([pos, neg])
    ranks = _average_ranks(scores)
    p, q = pos.numel(), neg.numel()
    return float((ranks[:p].sum() - p * (p + 1) / 2) / (p * q))


def average_precision(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """scikit-learn's average precision: precision at each distinct threshold, weighted
    by the recall it adds."""
    pos, neg = _checked(pos, neg)
    tps, fps = _counts_at_thresholds(pos, neg)
    recall = tps / pos.numel()
    gained = torch.diff(recall, prepend=recall.new_zeros(1))
    return float((gained * tps / (tps + fps)).sum())


def hits_at_k(pos: torch.Tensor, neg: torch.Tensor, k: int) -> float:
    """OGB's Hits@K against shared negatives."""
    pos, neg = _checked(pos, neg)
    if neg.numel() < k:
        return 1.0
    kth = torch.topk(neg, k).values[-1]
    return float((pos > kth).double().mean())


def mrr(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """OGB's mean reciprocal rank: ``neg`` is ``[Q]`` shared by every positive, or
    ``[P, K]`` with row ``i`` the negatives of positive ``i``."""
    pos = pos.detach().double().reshape(-1)
    neg = neg.detach().double()
    if neg.dim() == 2:
        if neg.shape[0] != pos.numel():
            raise InvalidValueError(f"{pos.numel()} positives but {neg.shape[0]} rows of "
                                    "per-positive negatives")
        above = (neg > pos[:, None]).sum(1)
        at_least = (neg >= pos[:, None]).sum(1)
    else:
        pos, neg = _checked(pos, neg)
        ordered = torch.sort(neg).values
        above = neg.numel() - torch.searchsorted(ordered, pos, right=True)
        at_least = neg.numel() - torch.searchsorted(ordered, pos, right=False)
    rank = 1 + (above + at_least).double() / 2
    return float((1 / rank).mean())


def link_metrics(pos: torch.Tensor, neg: torch.Tensor, ks: Sequence[int] = DEFAULT_KS,
                 neg_rows: torch.Tensor | None = None) -> dict[str, float]:
    """AUC, AP, Hits@K for each K and MRR of one split, named as ``ogb`` names them.

    ``neg_rows`` (``[P, K]`` per-positive negative scores), when given, is what MRR ranks
    against; the shared ``neg`` serve the other metrics.
    """
    out = {"auc": roc_auc(pos, neg), "ap": average_precision(pos, neg)}
    out.update({f"hits@{k}": hits_at_k(pos, neg, k) for k in ks})
    out["mrr"] = mrr(pos, neg if neg_rows is None else neg_rows)
    return out


def roc_curve(pos: torch.Tensor, neg: torch.Tensor, max_points: int = 201
              ) -> dict[str, list[float]]:
    """The ROC curve a report draws: false- and true-positive rates at each distinct
    score threshold from (0, 0) to (1, 1), thinned to ``max_points`` (evenly spaced along
    the thresholds, both ends kept) so a page never carries a point per edge."""
    pos, neg = _checked(pos, neg)
    tps, fps = _counts_at_thresholds(pos, neg)
    tpr = torch.cat([tps.new_zeros(1), tps / pos.numel()])
    fpr = torch.cat([fps.new_zeros(1), fps / neg.numel()])
    keep = torch.linspace(0, tpr.numel() - 1, min(max_points, tpr.numel())).round().long()
    return {"fpr": fpr[keep].tolist(), "tpr": tpr[keep].tolist()}


def _counts_at_thresholds(pos: torch.Tensor, neg: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """True and false positives scored at or above each distinct score, highest first:
    the points both average precision and the ROC curve are made of."""
    scores = torch.cat([pos, neg])
    labels = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)])
    order = torch.argsort(scores, descending=True, stable=True)
    scores, labels = scores[order], labels[order]
    last = torch.ones_like(scores, dtype=torch.bool)
    last[:-1] = scores[1:] != scores[:-1]  # the end of each run of equal scores
    return labels.cumsum(0)[last], (1 - labels).cumsum(0)[last]


def _average_ranks(scores: torch.Tensor) -> torch.Tensor:
    """1-based ranks of ``scores`` (ascending), tied scores sharing their mean rank."""
    order = torch.argsort(scores, stable=True)
    _, inverse, counts = torch.unique_consecutive(scores[order], return_inverse=True,
                                                  return_counts=True)
    ends = counts.cumsum(0).double()  # the last 1-based rank of each group
    mean_rank = ends - (counts.double() - 1) / 2
    ranks = torch.empty_like(scores)
    ranks[order] = mean_rank[inverse]
    return ranks


def _checked(pos: torch.Tensor, neg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    pos = pos.detach().double().reshape(-1).cpu()
    neg = neg.detach().double().reshape(-1).cpu()
    if pos.numel() == 0 or neg.numel() == 0:
        raise InvalidValueError(f"link metrics need positive and negative edges, got "
                                f"{pos.numel()} and {neg.numel()}")
    if not (torch.isfinite(pos).all() and torch.isfinite(neg).all()):
        raise InvalidValueError("link scores must be finite")
    return pos, neg
