"""Filtered ranking of knowledge-graph triples: MRR and Hits@K as Bordes et al. define them.

Each test triple ``(h, r, t)`` is scored against every entity twice: its tail replaced
(``(h, r, e)`` for all ``e``) and its head replaced (``(e, r, t)``). Candidates that form
another known true triple (train, valid or test) are *filtered* out before ranking, so a
model is not penalised for ranking a true fact above the one asked about. Ties count
half, as OGB's MRR counts them: ``rank = 1 + #above + #tied / 2`` over the remaining
candidates. MRR is the mean of ``1 / rank`` over both sides of every triple; Hits@K the
share of ranks ``<= K``.

The filter is one binary search per candidate (:class:`~sparsegnn.sampling.negatives.EdgeLookup`
keyed by ``(anchor * R + r) * N + e``), run on chunks of queries so the score matrix
never holds more than about ``2^22`` entries at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import torch

from sparsegnn.sampling.negatives import EdgeLookup

Side = Literal["head", "tail"]
# (anchors [Q], relations [Q], side) -> scores [Q, N]: the anchor is the head when
# ranking tails and the tail when ranking heads.
ScoreRows = Callable[[torch.Tensor, torch.Tensor, Side], torch.Tensor]
KG_KS = (1, 3, 10)
_CHUNK_ENTRIES = 1 << 22


class KnownTriples:
    """Every known true triple, looked up from either end: which entities complete
    ``(h, r, ?)`` and which complete ``(?, r, t)``."""

    def __init__(self, triples: torch.Tensor, num_entities: int, num_relations: int):
        self.num_entities, self.num_relations = num_entities, num_relations
        h, r, t = triples.long()
        self.tails = EdgeLookup.of(torch.stack([h * num_relations + r, t]), num_entities)
        self.heads = EdgeLookup.of(torch.stack([t * num_relations + r, h]), num_entities)

    def mask(self, anchors: torch.Tensor, relations: torch.Tensor, side: Side) -> torch.Tensor:
        """``[Q, N]``: which candidates of each query form a known triple."""
        lookup = self.tails if side == "tail" else self.heads
        n = self.num_entities
        base = (anchors.long() * self.num_relations + relations.long()) * n
        return lookup.contains(base[:, None] + torch.arange(n, device=base.device))


def filtered_rank(scores: torch.Tensor, target: torch.Tensor, known: torch.Tensor
                  ) -> torch.Tensor:
    """Each row's rank of its ``target`` column among the columns not ``known`` (the
    target itself always competes), ties counting half."""
    scores = scores.double()
    rows = torch.arange(scores.shape[0], device=scores.device)
    own = scores[rows, target][:, None]
    compete = ~known
    compete[rows, target] = True
    above = ((scores > own) & compete).sum(1)
    tied = ((scores == own) & compete).sum(1) - 1
    return 1 + above.double() + tied.double() / 2


def rank_triples(score_rows: ScoreRows, triples: torch.Tensor, known: KnownTriples
                 ) -> torch.Tensor:
    """Filtered ranks of ``triples`` (``[3, T]``), tails first then heads: ``[2T]``."""
    out = []
    step = max(1, _CHUNK_ENTRIES // max(1, known.num_entities))
    h, r, t = triples.long()
    for side, anchor, target in (("tail", h, t), ("head", t, h)):
        for lo in range(0, triples.shape[1], step):
            a, rel, goal = anchor[lo:lo + step], r[lo:lo + step], target[lo:lo + step]
            scores = score_rows(a, rel, side)  # type: ignore[arg-type]
            mask = known.mask(a, rel, side).to(scores.device)  # type: ignore[arg-type]
            out.append(filtered_rank(scores, goal.to(scores.device), mask).cpu())
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.float64)


def rank_metrics(ranks: torch.Tensor, ks: Sequence[int] = KG_KS) -> dict[str, float]:
    """``mrr`` and ``hits@K`` of a vector of ranks."""
    ranks = ranks.double()
    out = {"mrr": float((1 / ranks).mean())}
    out.update({f"hits@{k}": float((ranks <= k).double().mean()) for k in ks})
    return out
