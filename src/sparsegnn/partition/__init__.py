"""Graph partitioning for distributed training: pure graph algorithms, no ranks.

:func:`partition` gives a vertex -> part vector (``block``, ``random``, ``metis``,
``kahip``, ``balanced``) that :meth:`sparsegnn.distributed.BlockPartition.from_parts`
turns into the trainer's blocks; :func:`part_volume` measures the sparsity-aware
communication volume a partition implies (the connectivity of the parts). See
docs/communication.md.
"""

from sparsegnn.partition.adjacency import Adjacency
from sparsegnn.partition.balance import refine_max_volume, size_cap
from sparsegnn.partition.methods import PARTITIONERS, PartitionError, partition
from sparsegnn.partition.volume import PartVolume, pair_rows, part_volume

__all__ = [
    "PARTITIONERS",
    "Adjacency",
    "PartVolume",
    "PartitionError",
    "pair_rows",
    "part_volume",
    "partition",
    "refine_max_volume",
    "size_cap",
]
