"""Fetching the feature rows of a sampled minibatch from their owners, with a cache.

Features are partitioned like the adjacency rows (:class:`~sparsegnn.distributed.
sampled.RowOwners`: ``p / c`` contiguous blocks, each replicated on ``c`` ranks). A rank
buckets the vertex ids its minibatch needs by owner, sends the ids with one
``all_to_all`` and receives the rows with a second; the replica slot ``rank % c`` picks
which copy of a block answers. Bytes are counted under the phase ``feature_fetch``:
ids out (8 bytes each) and rows back (``d * element_size`` each), nothing for the rows a
rank owns itself.

Feature cache (:meth:`PartitionedFeatures.with_cache`, ``--feature-cache-mb``): a rank
also keeps copies of the remote rows it is most likely to sample and asks the owners only
for the rest. A node-wise sampler reaches vertex v through the rows of A that hold v as a
column, so the policy ranks remote vertices by their **column count in A** (in-degree as
the sampler sees it; the degree for a symmetric A), highest first, ties to the lower id,
and keeps as many as fit the budget (``d * element_size + 8`` bytes per row: the row and
its id). It is computed once at start-up, collectively, without any rank holding an
n-long vector: each rank counts the columns of its block of A and sends the counts of
every column to that column's owner in its replica slot (one ``all_to_all``), so each
owner learns the full in-degree of its rows; each block's top candidates go to everyone
(one all-gather of ``capacity`` (id, degree) pairs per rank) and each rank takes the best
remote ones; their rows come with one ordinary fetch. These start-up bytes are counted
under ``feature_cache``. A cached row is a copy of the owner's row, so a cached fetch
returns exactly the rows an uncached one does, and every remote row served from the cache
saves its id (8 bytes) and its row (``d * element_size``) in both directions' counts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from sparsegnn.distributed.ops.sampled import ExchangeCommunicator, RowOwners
from sparsegnn.distributed.runtime.comm import Group
from sparsegnn.sparse import CSRMatrix

MIB = 2**20


@dataclass
class CacheStats:
    """One rank's feature-fetch record: what it asked of others and what the cache served.

    ``remote_rows`` counts every requested row this rank does not own (repeats included);
    ``hits`` of them came from the cache and ``fetched_rows`` from their owners.
    """

    cache_rows: int = 0
    row_bytes: int = 0
    remote_rows: int = 0
    hits: int = 0

    @property
    def fetched_rows(self) -> int:
        return self.remote_rows - self.hits

    @property
    def hit_rate(self) -> float:
        return self.hits / self.remote_rows if self.remote_rows else 0.0

    def to_dict(self) -> dict[str, float | int]:
        per_row = self.row_bytes + 8  # the row back and its id out
        return {
            **asdict(self),
            "cache_bytes": self.cache_rows * per_row,
            "fetched_rows": self.fetched_rows,
            "hit_rate": self.hit_rate,
            "fetched_bytes": self.fetched_rows * per_row,
            "saved_bytes": self.hits * per_row,
        }


class PartitionedFeatures:
    """This rank's block of the feature matrix and the collective :meth:`fetch`."""

    def __init__(self, rows: torch.Tensor, owners: RowOwners):
        owners.check_rows(rows.shape[0], "the feature block")
        self.rows, self.owners = rows, owners
        # The cache: sorted remote ids and their rows (empty: no cache).
        self.cache_ids = torch.empty(0, dtype=torch.long, device=rows.device)
        self.cache_rows = rows.new_empty((0, rows.shape[1]))
        self.stats = CacheStats(row_bytes=self.row_bytes)

    @classmethod
    def from_global(
        cls, x: torch.Tensor, replication: int, comm: ExchangeCommunicator, group: Group
    ) -> PartitionedFeatures:
        """Keep this rank's block of a whole feature matrix (tests and small runs)."""
        owners = RowOwners(x.shape[0], replication, comm, group)
        return cls(x[owners.lo : owners.hi].clone(), owners)

    @property
    def num_features(self) -> int:
        return int(self.rows.shape[1])

    @property
    def row_bytes(self) -> int:
        return self.num_features * self.rows.element_size()

    def capacity(self, cache_mb: float) -> int:
        """How many rows (with their ids) fit ``cache_mb`` MiB."""
        return int(cache_mb * MIB) // (self.row_bytes + 8)

    def with_cache(self, block: CSRMatrix, cache_mb: float) -> PartitionedFeatures:
        """Fill the cache with the highest-in-degree remote rows that fit ``cache_mb`` MiB.

        ``block`` is this rank's rows of A (the partition of ``self.owners``). Collective:
        every rank calls it with the same ``cache_mb``; ``0`` leaves the cache empty and
        communicates nothing.
        """
        if cache_mb < 0:
            raise ValueError(f"a cache of {cache_mb} MiB")
        owners = self.owners
        owners.check_rows(block.shape[0], "block")
        want = self.capacity(cache_mb)
        if cache_mb == 0:
            return self
        comm, group = owners.comm, owners.group
        with comm.phase("feature_cache"):
            degree = self._in_degree(block)
            k = min(want, owners.largest_block)
            order = torch.sort(degree, descending=True, stable=True).indices[:k]
            piece = torch.full((k, 2), -1, dtype=torch.long, device=degree.device)
            piece[: order.numel(), 0] = order + owners.lo
            piece[: order.numel(), 1] = degree[order]
            pieces = comm.all_gather(piece, [(k, 2)] * group.size, group)
        # One replica of every other block (their degrees agree), padding dropped.
        c = owners.replication
        cand = torch.cat([pieces[j * c] for j in range(owners.num_blocks)
                          if j != owners.my_block])
        cand = cand[cand[:, 0] >= 0]
        cand = cand[torch.argsort(cand[:, 0])]
        best = torch.sort(cand[:, 1], descending=True, stable=True).indices[:want]
        ids = torch.sort(cand[best, 0]).values.to(self.rows.device)
        with comm.phase("feature_cache"):
            self.cache_rows = owners.ask(ids, lambda req: self.rows[req - owners.lo])
        self.cache_ids = ids
        self.stats.cache_rows = int(ids.numel())
        return self

    def _in_degree(self, block: CSRMatrix) -> torch.Tensor:
        """The column count in A of each of this rank's rows (collective: one exchange)."""
        owners = self.owners
        cols, counts = torch.unique(block.col.long(), return_counts=True)
        # ``cols`` is sorted, so the destinations (block * c + slot) are too.
        dest = owners.destination(cols)
        send_counts = torch.bincount(dest, minlength=owners.group.size).tolist()
        got, _ = owners.comm.all_to_all(torch.stack([cols, counts], 1), send_counts,
                                        owners.group)
        degree = torch.zeros(owners.hi - owners.lo, dtype=torch.long, device=got.device)
        degree.index_add_(0, got[:, 0] - owners.lo, got[:, 1])
        return degree

    def fetch(self, ids: torch.Tensor) -> torch.Tensor:
        """``x[ids]`` assembled from the cache and the owners; every rank must call it
        (ids may be empty)."""
        ids = ids.long()
        owners = self.owners

        def answer(req: torch.Tensor) -> torch.Tensor:
            return self.rows[req - owners.lo]

        remote = int((~owners.owned(ids)).sum())
        self.stats.remote_rows += remote
        with owners.comm.phase("feature_fetch"):
            if self.cache_ids.numel() == 0:
                return owners.ask(ids, answer)
            lookup = ids.to(self.cache_ids.device)
            pos = torch.searchsorted(self.cache_ids, lookup).clamp_(max=self.cache_ids.numel() - 1)
            hit = self.cache_ids[pos] == lookup
            self.stats.hits += int(hit.sum())
            out = self.rows.new_empty((ids.numel(), self.num_features))
            out[hit] = self.cache_rows[pos[hit]]
            out[~hit] = owners.ask(lookup[~hit], answer)
            return out

