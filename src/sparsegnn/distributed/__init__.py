"""Full-graph GNN training on a grid of ranks: CAGNET's 1D, 1.5D, 2D and 3D SpMM.

The only package of sparsegnn that imports ``torch.distributed``, split by concern:

- :mod:`~sparsegnn.distributed.runtime`: running ranks (launch, session, peers,
  affinity, process groups and the byte-counting :class:`Communicator`);
- :mod:`~sparsegnn.distributed.ops`: distributed operators (:func:`build_operator`,
  the sparsity-aware :class:`SparseRowOperator`, :class:`DistributedTask`, sampling);
- :mod:`~sparsegnn.distributed.layout`: data layout (:class:`GridShape`, vertex
  blocks, shards, row blocks, partitioned folders);
- :mod:`~sparsegnn.distributed.planning`: planning without ranks (exact volumes,
  :func:`predict`, the cost and memory models, calibration, the automatic choice).

This module re-exports the names most callers need. See docs/distributed.md.
"""

from sparsegnn.distributed.layout.block_partition import BlockPartition, LocalBlocks, local_blocks
from sparsegnn.distributed.layout.grid import ALGORITHMS, GridError, GridShape, grid_shape
from sparsegnn.distributed.ops.sparse_comm import SparseCommunicator, SparseRowOperator
from sparsegnn.distributed.ops.spmm import DistributedOperator, build_operator
from sparsegnn.distributed.ops.task import DistributedTask
from sparsegnn.distributed.planning.comm_model import SpmmCall, predict, spmm_schedule, tile_nnz
from sparsegnn.distributed.planning.plan import RankVolume, block_pairs, epoch_volume, row_volume
from sparsegnn.distributed.runtime.comm import ByteCounts, Communicator, Group, ProcessGrid
from sparsegnn.distributed.runtime.dispatch import OnRanks, ranks_for, run_on_ranks
from sparsegnn.distributed.runtime.launch import spawn
from sparsegnn.distributed.runtime.peers import PeerLostError, lost_peers_named
from sparsegnn.distributed.runtime.rank_failure import RankFailedError
from sparsegnn.distributed.runtime.session import (
    RankResult,
    Session,
    all_reduce_sum,
    barrier,
    close_session,
    gather_objects,
    in_torchrun,
    init_session,
    rank_and_world,
    rank_session,
)

__all__ = [
    "ALGORITHMS",
    "BlockPartition",
    "ByteCounts",
    "Communicator",
    "DistributedOperator",
    "DistributedTask",
    "GridError",
    "GridShape",
    "Group",
    "LocalBlocks",
    "OnRanks",
    "PeerLostError",
    "ProcessGrid",
    "RankFailedError",
    "RankResult",
    "RankVolume",
    "Session",
    "SparseCommunicator",
    "SparseRowOperator",
    "SpmmCall",
    "all_reduce_sum",
    "barrier",
    "block_pairs",
    "build_operator",
    "close_session",
    "epoch_volume",
    "gather_objects",
    "grid_shape",
    "in_torchrun",
    "init_session",
    "local_blocks",
    "lost_peers_named",
    "predict",
    "rank_and_world",
    "rank_session",
    "ranks_for",
    "row_volume",
    "run_on_ranks",
    "spawn",
    "spmm_schedule",
    "tile_nnz",
]
