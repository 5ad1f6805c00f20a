"""Fetching the feature rows of a sampled minibatch from their owners.

Features are partitioned like the adjacency rows (:class:`~sparsegnn.distributed.
sampled.RowOwners`: ``p / c`` contiguous blocks, each replicated on ``c`` ranks). A rank
buckets the vertex ids its minibatch needs by owner, sends the ids with one
``all_to_all`` and receives the rows with a second; the replica slot ``rank % c`` picks
which copy of a block answers. Bytes are counted under the phase ``feature_fetch``:
ids out (8 bytes each) and rows back (``d * element_size`` each), nothing for the rows a
rank owns itself.
"""

from __future__ import annotations

import torch

from sparsegnn.distributed.comm import Group
from sparsegnn.distributed.sampled import ExchangeCommunicator, RowOwners


class PartitionedFeatures:
    """This rank's block of the feature matrix and the collective :meth:`fetch`."""

    def __init__(self, rows: torch.Tensor, owners: RowOwners):
        owners.check_rows(rows.shape[0], "the feature block")
        self.rows, self.owners = rows, owners

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

    def fetch(self, ids: torch.Tensor) -> torch.Tensor:
        """``x[ids]`` assembled from the owners; every rank must call it (ids may be empty)."""
        with self.owners.comm.phase("feature_fetch"):
            return self.owners.ask(ids.long(), lambda req: self.rows[req - self.owners.lo])
