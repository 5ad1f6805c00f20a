"""Minibatches of candidate edges for link prediction: PyG's ``LinkNeighborLoader``.

An epoch permutes the seed edges (supervision edges) and cuts them into batches of
``batch_size``; each rank takes its share of every batch (``whole[rank::world_size]``, as
:class:`~sparsegnn.sampling.loader.MinibatchLoader` shares seed vertices). For training
(no ``labels``), each share draws ``round(neg_ratio * share)`` negatives from the batch's
own stream (:func:`~sparsegnn.sampling.streams.batch_generator`): uniform random source
and destination vertices, as PyG's ``neg_sampling="binary"`` draws them (a random pair
may be an edge, and no topology is needed to draw it). The endpoints of the share's
positives and negatives, distinct and sorted, are the seed vertices of one node
minibatch, sampled ``bulk`` batches per sampler call with every other batch of the bulk,
negatives' neighbourhoods included; the features of a whole bulk are gathered (or
fetched, for a partitioned :class:`~sparsegnn.sampling.loader.FeatureSource`) at once.

For evaluation, ``labels`` fixes the candidates (positives and negatives together) and
no negatives are drawn; ``shuffle=False`` keeps them in order, so ``LinkBatch.positions``
say where each score belongs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from sparsegnn.errors import InvalidValueError, ShapeError
from sparsegnn.sampling.loader import FeatureSource, batches_of, bulk_features
from sparsegnn.sampling.samplers import Minibatch, Sampler
from sparsegnn.sampling.streams import batch_generator, epoch_permutation


@dataclass
class LinkBatch:
    """One rank's share of a minibatch of candidate edges, sampled and loaded.

    Attributes:
        batch: the node minibatch whose seeds are the candidates' endpoints (sorted).
        x: input features of ``batch.node_ids``.
        pairs: ``[2, q]`` rows of the seeds (``batch.seeds``) of each candidate's source
            and destination.
        labels: 1 for a positive, 0 for a negative.
        positions: the positives' places in the loader's candidate list (-1: a drawn
            negative).
        global_pairs: candidates in the whole minibatch (every rank's share): dividing
            the summed loss by it makes the all-reduced gradient the whole minibatch's.
    """

    batch: Minibatch
    x: torch.Tensor
    pairs: torch.Tensor
    labels: torch.Tensor
    positions: torch.Tensor
    global_pairs: int


class LinkMinibatchLoader:
    """Iterate over an epoch's minibatches of candidate edges (see the module doc).

    Args:
        sampler: any node sampler of :mod:`sparsegnn.sampling`.
        pairs: ``[2, Q]`` candidate edges (global ids): the supervision positives, or,
            with ``labels``, the fixed candidates of an evaluation.
        features: per-vertex inputs, or a :class:`FeatureSource` fetched once per bulk.
        num_nodes: the vertices negatives are drawn from.
        labels: ``[Q]`` fixed labels (evaluation; no negatives drawn), or None (training).
        neg_ratio: negatives per positive in training.
        batch_size, bulk, seed, shuffle, prefetch, rank, world_size, device: as
            :class:`~sparsegnn.sampling.loader.MinibatchLoader`'s (``shuffle`` False:
            list order).
    """

    def __init__(self, sampler: Sampler, pairs: torch.Tensor,
                 features: torch.Tensor | FeatureSource, num_nodes: int, *,
                 labels: torch.Tensor | None = None, neg_ratio: float = 1.0,
                 batch_size: int, bulk: int = 1, seed: int = 0, shuffle: bool = True,
                 prefetch: bool = True, rank: int = 0, world_size: int = 1,
                 device: torch.device | str = "cpu") -> None:
        if batch_size < 1 or bulk < 1:
            raise InvalidValueError(f"batch size and bulk must be positive, got "
                                    f"{batch_size} and {bulk}")
        if labels is None and not neg_ratio > 0:
            raise InvalidValueError(f"negative ratio must be above 0, got {neg_ratio}")
        if pairs.dim() != 2 or pairs.shape[0] != 2 or (
                labels is not None and labels.shape != (pairs.shape[1],)):
            raise ShapeError(f"expected [2, Q] pairs and [Q] labels, got {tuple(pairs.shape)}")
        self.sampler, self.pairs, self.labels = sampler, pairs.long().cpu(), labels
        self.features, self.num_nodes, self.neg_ratio = features, num_nodes, neg_ratio
        self.batch_size, self.bulk, self.seed = batch_size, bulk, seed
        self.shuffle, self.prefetch = shuffle, prefetch
        self.rank, self.world_size, self.device = rank, world_size, torch.device(device)

    def __len__(self) -> int:
        """Minibatches per epoch (on every rank)."""
        return -(-self.pairs.shape[1] // self.batch_size)

    def plan(self, epoch: int) -> list[tuple[int, torch.Tensor, int]]:
        """(stream index, positions of this rank's candidates, whole minibatch's
        candidate count) of each minibatch of ``epoch``, in order."""
        q = self.pairs.shape[1]
        order = epoch_permutation(q, self.seed, epoch) if self.shuffle else torch.arange(q)
        out = []
        for i in range(len(self)):
            whole = order[i * self.batch_size:(i + 1) * self.batch_size]
            total = sum(self._with_negatives(len(whole[r::self.world_size]))
                        for r in range(self.world_size))
            out.append((i * self.world_size + self.rank, whole[self.rank::self.world_size],
                        total))
        return out

    def epoch(self, epoch: int) -> Iterator[LinkBatch]:
        """The minibatches of ``epoch``; stopping early cleanly ends the producer thread."""
        yield from batches_of(self._bulks(epoch), self.prefetch)

    def _with_negatives(self, positives: int) -> int:
        return positives if self.labels is not None else positives + self._negatives(positives)

    def _negatives(self, positives: int) -> int:
        return round(self.neg_ratio * positives)

    def _bulks(self, epoch: int) -> Iterator[list[LinkBatch]]:
        plan = self.plan(epoch)
        device = self.sampler.adj.device
        for start in range(0, len(plan), self.bulk):
            chunk = plan[start:start + self.bulk]
            gens = [batch_generator(self.seed, epoch, index, device) for index, _, _ in chunk]
            shares = [self._candidates(pos, gen) for (_, pos, _), gen in zip(chunk, gens,
                                                                             strict=True)]
            ends = [torch.unique(pairs.flatten()) for pairs, _, _ in shares]
            batches = self.sampler.sample([e.to(device) for e in ends], gens)
            xs = bulk_features(self.features, batches)
            yield [LinkBatch(b, x.to(self.device), torch.searchsorted(e, pairs).to(self.device),
                             labels.to(self.device), positions, total)
                   for b, x, e, (pairs, labels, positions), (_, _, total)
                   in zip(batches, xs, ends, shares, chunk, strict=True)]

    def _candidates(self, positions: torch.Tensor, gen: torch.Generator
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """This share's candidate pairs, labels and positions (negatives drawn last)."""
        pairs = self.pairs[:, positions]
        if self.labels is not None:
            return pairs, self.labels[positions].float(), positions
        k = self._negatives(positions.numel())
        neg = torch.randint(self.num_nodes, (2, k), generator=gen, device=gen.device).cpu()
        labels = torch.cat([torch.ones(positions.numel()), torch.zeros(k)])
        drawn = torch.full((k,), -1, dtype=torch.long)
        return torch.cat([pairs, neg], 1), labels, torch.cat([positions, drawn])
