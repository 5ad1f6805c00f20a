"""Train/val/test edge splits for link prediction, as PyG's ``RandomLinkSplit`` makes them.

An undirected graph is split by pair, not by direction: each pair ``{u, v}`` (taken as
``u <= v``, in the graph's edge order) lands in exactly one split, so the encoder never
sees the reverse of an edge it is asked to predict. The splits are nested the way PyG
nests them: training and validation pass messages over the training edges, testing over
the training and validation edges; the supervision edges of each split are its own
positives plus negatives. Validation and test negatives are drawn once, here, excluding
every edge of the graph, so every epoch and every model is scored on the same pairs;
training negatives are drawn fresh each epoch by the trainer.

With the same seed the positive split equals PyG's (the same ``randperm`` of the same
pairs); the negatives are ours (:func:`~sparsegnn.sampling.negatives.uniform_negatives`).
The split's types, and saving it with a run, are :mod:`sparsegnn.data.link_edges`.
"""

from __future__ import annotations

import torch

from sparsegnn.data.link_edges import LabeledEdges, LinkSplit
from sparsegnn.errors import InvalidValueError
from sparsegnn.sampling.negatives import uniform_negatives


def random_link_split(edge_index: torch.Tensor, num_nodes: int, *, val: float = 0.05,
                      test: float = 0.1, neg_ratio: float = 1.0, undirected: bool = True,
                      train_negatives: bool = False, seed: int = 0,
                      edge_type: torch.Tensor | None = None) -> LinkSplit:
    """Split the edges of a graph; ``val``/``test`` are fractions of the pairs (below 1)
    or counts. PyG's example settings are the defaults.

    ``neg_ratio`` negatives per positive are drawn for validation and test (and for
    training with ``train_negatives``). A typed graph (``edge_type`` per edge) keeps each
    positive's relation; negative ``j`` of a split takes the relation of its positive
    ``j mod P``, so relations appear among negatives as often as among positives.
    """
    if not neg_ratio > 0:
        raise InvalidValueError(f"negative ratio must be above 0, got {neg_ratio}: validation "
                                "and test need negatives to score against")
    pairs, types = _pairs(edge_index, undirected, edge_type)
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(pairs.shape[1], generator=gen)
    counts = _counts(pairs.shape[1], val, test)
    parts = torch.split(perm, counts)
    need = [int(c * neg_ratio) for c in (counts[1], counts[2])]
    need.append(int(counts[0] * neg_ratio) if train_negatives else 0)
    neg = uniform_negatives(edge_index, num_nodes, sum(need), gen) if sum(need) else \
        torch.empty(2, 0, dtype=torch.int64)
    negs = torch.split(neg, _fit(need, neg.shape[1]), dim=1)
    sets = [_labeled(pairs, types, part, n) for part, n in zip(parts, (negs[2], *negs[:2]),
                                                                strict=True)]
    settings = {"val": val, "test": test, "neg_ratio": neg_ratio, "seed": seed,
                "undirected": undirected, "train_negatives": train_negatives,
                "method": "random"}
    return LinkSplit(num_nodes, undirected, _messages(pairs[:, parts[0]], undirected),
                     _messages(pairs[:, torch.cat(parts[:2])], undirected),
                     sets[0], sets[1], sets[2], settings)


def _pairs(edge_index: torch.Tensor, undirected: bool,
           edge_type: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each undirected pair once (``u <= v``, PyG's choice), or every edge if directed."""
    edge_index = edge_index.to(torch.int64)
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise InvalidValueError(f"edge_index must be [2, E], got {tuple(edge_index.shape)}")
    keep = edge_index[0] <= edge_index[1] if undirected else slice(None)
    types = None if edge_type is None else edge_type.to(torch.int64)[keep]
    return edge_index[:, keep], types


def _counts(total: int, val: float, test: float) -> list[int]:
    """Sizes of train, val and test; refuses a split that leaves one of them empty."""
    nval, ntest = (int(r * total) if isinstance(r, float) and r < 1 else int(r)
                   for r in (val, test))
    ntrain = total - nval - ntest
    for name, size, ratio in (("training", ntrain, 1), ("validation", nval, val),
                              ("test", ntest, test)):
        if size <= 0 and ratio != 0:
            raise InvalidValueError(
                f"the split leaves no {name} edges ({total} pairs, val={val}, test={test}); "
                "use a larger graph or smaller val/test")
    return [ntrain, nval, ntest]


def _fit(need: list[int], got: int) -> list[int]:
    """Shares of the negatives found: fewer exist than asked only in near-complete graphs,
    where (as PyG) each split keeps its proportion of what there is."""
    total = sum(need)
    if got >= total:
        return need
    shares = [n * got // total for n in need]
    shares[0] += got - sum(shares)
    return shares


def _labeled(pairs: torch.Tensor, types: torch.Tensor | None, part: torch.Tensor,
             neg: torch.Tensor) -> LabeledEdges:
    pos_type = None if types is None else types[part]
    neg_type = None
    if pos_type is not None and pos_type.numel():
        neg_type = pos_type[torch.arange(neg.shape[1]) % pos_type.numel()]
    return LabeledEdges(pairs[:, part], neg, None, pos_type, neg_type)


def _messages(pairs: torch.Tensor, undirected: bool) -> torch.Tensor:
    """Message edges: both directions of each undirected pair (a self-loop once)."""
    if not undirected:
        return pairs
    back = pairs[:, pairs[0] != pairs[1]].flip(0)
    return torch.cat([pairs, back], dim=1)
