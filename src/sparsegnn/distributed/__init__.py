"""Full-graph GNN training on a grid of ranks: CAGNET's 1D, 1.5D, 2D and 3D SpMM.

The only package of sparsegnn that imports ``torch.distributed``. A
:class:`ProcessGrid` creates its groups once; :func:`local_blocks` cuts a rank's tiles
out of a :class:`BlockPartition`; :func:`build_operator` gives the operator whose
``matmul`` is the distributed SpMM (autograd included) that the unchanged models call;
:class:`DistributedTask` reduces loss, accuracy and weight gradients over the grid;
:class:`Communicator` counts every byte, and :func:`predict` states what it should count.
:class:`SparseRowOperator` is the sparsity-aware 1D/1.5D SpMM and
:func:`epoch_volume` its exact per-rank volume without ranks (docs/communication.md).
See docs/distributed.md.
"""

from sparsegnn.distributed.comm import ByteCounts, Communicator, Group, ProcessGrid
from sparsegnn.distributed.comm_model import SpmmCall, predict, spmm_schedule, tile_nnz
from sparsegnn.distributed.grid import ALGORITHMS, GridError, GridShape, grid_shape
from sparsegnn.distributed.launch import RankFailedError, spawn
from sparsegnn.distributed.partition import BlockPartition, LocalBlocks, local_blocks
from sparsegnn.distributed.peers import PeerLostError, lost_peers_named
from sparsegnn.distributed.plan import RankVolume, block_pairs, epoch_volume, row_volume
from sparsegnn.distributed.session import (
    RankResult,
    Session,
    all_reduce_sum,
    barrier,
    close_session,
    gather_objects,
    in_torchrun,
    init_session,
    rank_and_world,
)
from sparsegnn.distributed.sparse_comm import SparseCommunicator, SparseRowOperator
from sparsegnn.distributed.spmm import DistributedOperator, build_operator
from sparsegnn.distributed.task import DistributedTask

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
    "row_volume",
    "spawn",
    "spmm_schedule",
    "tile_nnz",
]
