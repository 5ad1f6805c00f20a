"""A minibatch loader that samples the next bulk in a background thread.

While the model trains on the k minibatches of one bulk, a producer thread samples the
next bulk and gathers its input features and labels; torch releases the GIL inside its
kernels, so sampling and training overlap. The order and content of the minibatches is
fixed by (seed, epoch, batch index) alone: prefetching, the bulk size and the number of
ranks change when a minibatch is produced, never what it contains.

Distributed ranks split every global minibatch: rank r of w takes seeds ``r::w`` of each
one and samples them with stream ``i * w + r``, so all ranks take the same number of
steps and a gradient all-reduce after each step averages over the whole minibatch.

Features are a local tensor (indexed per minibatch) or a :class:`FeatureSource` such as
:class:`~sparsegnn.distributed.ops.feature_fetch.PartitionedFeatures`, whose collective
``fetch`` the loader calls once per bulk with the node ids of all its minibatches.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

import torch

from sparsegnn.sampling.samplers import Minibatch, Sampler
from sparsegnn.sampling.streams import batch_generator, epoch_permutation

_B = TypeVar("_B")  # a minibatch of any loader

# How long the producer waits on a full queue before checking whether to stop.
_POLL_S = 0.05


@dataclass
class LoadedBatch:
    """A sampled minibatch with its input features and its seeds' labels.

    ``global_seeds`` is the size of the whole minibatch this rank holds a share of;
    dividing the summed loss by it makes the all-reduced gradient the whole minibatch's.
    """

    batch: Minibatch
    x: torch.Tensor
    y: torch.Tensor
    global_seeds: int

    @property
    def num_seeds(self) -> int:
        return int(self.batch.seeds.numel())


@runtime_checkable
class FeatureSource(Protocol):
    """Feature rows that live elsewhere: ``fetch(ids)`` returns ``x[ids]``. A collective
    source (every rank must call it, ids may be empty) is called once per bulk."""

    @property
    def num_features(self) -> int: ...

    def fetch(self, ids: torch.Tensor) -> torch.Tensor: ...


class _Failure:
    """Carries an exception from the producer thread to the consumer."""

    def __init__(self, error: BaseException):
        self.error = error


_DONE = object()


class MinibatchLoader:
    """Iterate over an epoch's minibatches, ``bulk`` sampled per call, one bulk ahead.

    Args:
        sampler: any sampler of :mod:`sparsegnn.sampling`.
        train_ids: the vertices whose predictions are trained (global ids).
        features, labels: per-vertex inputs and targets (gathered per minibatch); features
            may be a :class:`FeatureSource`, fetched once per bulk.
        batch_size: seeds per global minibatch (the last one may be smaller).
        bulk: minibatches sampled per sampler call (k).
        seed: root of every random stream.
        prefetch: sample in a background thread; ``False`` samples in the caller.
        rank, world_size: this process's share of every minibatch.
        device: where features and labels are sent.
    """

    def __init__(
        self,
        sampler: Sampler,
        train_ids: torch.Tensor,
        features: torch.Tensor | FeatureSource,
        labels: torch.Tensor,
        *,
        batch_size: int,
        bulk: int = 1,
        seed: int = 0,
        prefetch: bool = True,
        rank: int = 0,
        world_size: int = 1,
        device: torch.device | str = "cpu",
    ):
        if batch_size < 1 or bulk < 1:
            raise ValueError(f"batch_size and bulk must be positive, got {batch_size} and {bulk}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        self.sampler, self.train_ids = sampler, train_ids.long().cpu()
        self.features, self.labels = features, labels
        self.batch_size, self.bulk, self.seed, self.prefetch = batch_size, bulk, seed, prefetch
        self.rank, self.world_size, self.device = rank, world_size, torch.device(device)

    def __len__(self) -> int:
        """Minibatches per epoch (on every rank)."""
        return -(-self.train_ids.numel() // self.batch_size)

    def plan(self, epoch: int) -> list[tuple[int, torch.Tensor]]:
        """(stream index, seeds) of this rank's minibatches of ``epoch``, in order."""
        order = self.train_ids[epoch_permutation(self.train_ids.numel(), self.seed, epoch)]
        out = []
        for i in range(len(self)):
            whole = order[i * self.batch_size : (i + 1) * self.batch_size]
            out.append((i * self.world_size + self.rank, whole[self.rank :: self.world_size]))
        return out

    def global_size(self, index: int) -> int:
        """Seeds in the whole minibatch that stream ``index`` holds a share of."""
        i = index // self.world_size
        return min(self.batch_size, self.train_ids.numel() - i * self.batch_size)

    def epoch(self, epoch: int) -> Iterator[LoadedBatch]:
        """The minibatches of ``epoch``; stopping early cleanly ends the producer thread."""
        yield from batches_of(self._bulks(epoch), self.prefetch)

    def _bulks(self, epoch: int) -> Iterator[list[LoadedBatch]]:
        plan = self.plan(epoch)
        device = self.sampler.adj.device
        for start in range(0, len(plan), self.bulk):
            chunk = plan[start : start + self.bulk]
            gens = [batch_generator(self.seed, epoch, index, device) for index, _ in chunk]
            batches = self.sampler.sample([seeds.to(device) for _, seeds in chunk], gens)
            xs = bulk_features(self.features, batches)
            yield [
                self._load(b, x, self.global_size(i))
                for b, x, (i, _) in zip(batches, xs, chunk, strict=True)
            ]

    def _load(self, batch: Minibatch, x: torch.Tensor, global_seeds: int) -> LoadedBatch:
        x = x.to(self.device, non_blocking=True)
        y = self.labels[batch.seeds.to(self.labels.device)].to(self.device, non_blocking=True)
        return LoadedBatch(batch, x, y, global_seeds)


def bulk_features(features: torch.Tensor | FeatureSource, batches: list[Minibatch]
                  ) -> list[torch.Tensor]:
    """Each minibatch's input rows: indexed locally, or one fetch for the whole bulk."""
    if isinstance(features, torch.Tensor):
        return [features[b.node_ids.to(features.device)] for b in batches]
    ids = torch.cat([b.node_ids.long() for b in batches])
    rows = features.fetch(ids)
    return list(torch.split(rows, [int(b.node_ids.numel()) for b in batches]))


def batches_of(bulks: Iterator[list[_B]], prefetch: bool) -> Iterator[_B]:
    """Each bulk's minibatches in order; with ``prefetch``, the next bulk is made in a
    thread while this one is consumed (:func:`prefetched`)."""
    if not prefetch:
        for items in bulks:
            yield from items
        return
    yield from prefetched(bulks)


def prefetched(bulks: Iterator[list[_B]]) -> Iterator[_B]:
    """Run ``bulks`` in a thread, at most one finished bulk waiting while one is consumed."""
    q: queue.Queue[object] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in bulks:
                if not _put(q, item, stop):
                    return
            _put(q, _DONE, stop)
        except BaseException as err:  # re-raised in the consumer
            _put(q, _Failure(err), stop)

    thread = threading.Thread(target=produce, name="sparsegnn-sampler", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.error
            assert isinstance(item, list)
            yield from item
    finally:
        stop.set()
        thread.join()


def _put(q: queue.Queue[object], item: object, stop: threading.Event) -> bool:
    """Put unless asked to stop; False when the consumer has gone away."""
    while not stop.is_set():
        try:
            q.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False
