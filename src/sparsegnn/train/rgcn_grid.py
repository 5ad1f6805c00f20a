"""R-GCN full-graph training on a grid of ranks (1D, 1.5D, 2D, 3D): request in, run out.

A relational layer is ``X W_0 + sum_r A_r X W_r``, so a grid needs nothing new: every
relation's row-normalised ``A_r`` is relabelled by the same vertex blocks (a partitioner
runs on the union of the relations) and cut into this rank's tiles, and each becomes the
grid algorithm's distributed operator (:func:`~sparsegnn.distributed.build_operator`).
:class:`~sparsegnn.nn.rgcn.RGCNConv` cannot stack distributed operators, so it multiplies
by them one relation at a time; the root weight and the relation weights act on the
rank's full rows. Every rank builds the same seeded model, trains its block's labelled
nodes with the one-process epoch (:func:`~sparsegnn.train.rgcn_task.run_relational`) on a
:class:`~sparsegnn.distributed.DistributedTask` (loss, accuracy and gradient sums over
one replica of every block), and draws the whole graph's dropout masks keeping its rows,
so the weights are one process's up to the order of floating-point sums.

Bytes per phase are measured epoch by epoch and set beside the analytic model
(:mod:`sparsegnn.distributed.planning.relational_model`: one SpMM per relation,
composed; ``--comm sparse`` on 1D/1.5D: each relation's operator fetches only the rows its
tiles use). Checkpoints are one file, written by rank 0 and read by every rank on
resume: every rank holds the same weights, optimiser state and random streams (the
dropout draws are the whole graph's on every rank), so rank 0's state is each rank's
and a resumed run continues bit-identically (on another grid, or one process, it
continues from the same state). What this does not do yet: the 2D/3D column-sliced
input features (every rank holds its rows' whole feature width), torchrun and
partitioned folders.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sparsegnn.data.hetero import HeteroGraph, RelationalGraph
from sparsegnn.distributed import (
    ByteCounts,
    DistributedOperator,
    DistributedTask,
    GridShape,
    ProcessGrid,
    RankResult,
    build_operator,
    gather_objects,
    grid_shape,
    local_blocks,
    lost_peers_named,
    rank_session,
    run_on_ranks,
    tile_nnz,
)
from sparsegnn.distributed.layout.block_partition import BlockPartition
from sparsegnn.distributed.layout.partitioned import partition_for
from sparsegnn.distributed.ops.sparse_comm import SparseCommunicator, SparseRowOperator
from sparsegnn.distributed.ops.spmm import col_lanes
from sparsegnn.distributed.planning.comm_model import NnzTable
from sparsegnn.distributed.planning.plan import phase_pairs
from sparsegnn.distributed.planning.relational_model import rgcn_predict, rgcn_schedule
from sparsegnn.errors import InvalidValueError
from sparsegnn.names import PARTITIONERS, row_wise
from sparsegnn.nn.rgcn import relation_operators
from sparsegnn.train.rank_report import EpochMeter, RankReport, comm_summary
from sparsegnn.train.rgcn_task import (
    RelationalClassifier,
    RGCNOutcome,
    RGCNRanks,
    RGCNRequest,
    TaskEvaluation,
    build_classifier,
    full_graph_step,
    model_input,
    node_labels,
    relational_problem,
    run_relational,
)


@dataclass
class RGCNRankRun:
    """What one rank of a grid ends with: its model (the trained weights), the outcome
    (equal on every rank) and its bytes beside the model's."""

    model: RelationalClassifier
    outcome: RGCNOutcome
    report: RankReport


@dataclass
class RGCNGridRun:
    """Rank 0's view of a finished grid run: its outcome and every rank's bytes."""

    outcome: RGCNOutcome
    shape: GridShape
    backend: str
    reports: list[RankReport]

    def to_dict(self) -> dict[str, Any]:
        """The outcome's fields with the grid and the ``comm`` section (measured bytes
        per rank and phase of the last epoch, the model's, ``matches_model``)."""
        return {**asdict(self.outcome), "algo": self.shape.algo,
                "grid": [self.shape.rows, self.shape.cols, self.shape.layers],
                "world_size": self.shape.size, "backend": self.backend,
                "comm": comm_summary(self.reports)}


def train_rgcn_grid(request: RGCNRequest) -> RGCNGridRun:
    """Train ``request`` on ``request.ranks``' grid of spawned local ranks; the grid and
    the options it does not support are refused before any rank starts."""
    ranks = request.ranks
    if ranks is None:
        raise InvalidValueError("train_rgcn_grid needs request.ranks (the grid)")
    shape = check_grid_request(request, ranks)
    threads = max(1, (os.cpu_count() or 1) // shape.size)
    lead = run_on_ranks(_rank_job, shape.size, (request, shape), threads=threads,
                        heartbeat_timeout_s=ranks.timeout_s).lead
    assert lead is not None  # spawned ranks: rank 0's result comes back
    return lead.value


def check_grid_request(request: RGCNRequest, ranks: RGCNRanks) -> GridShape:
    """The grid of ``ranks``, or a one-line refusal of what R-GCN on ranks lacks."""
    if request.device != "cpu":
        raise InvalidValueError(f"R-GCN on a grid runs on CPU ranks (gloo), not "
                                f"{request.device}; drop --algo/--nprocs to train there")
    if (ranks.comm == "sparse" or ranks.overlap) and not row_wise(ranks.algo):
        raise InvalidValueError(f"--comm sparse and --overlap apply to --algo 1d and 1.5d, "
                                f"not {ranks.algo}")
    named = ranks.partition in PARTITIONERS
    if not named and not Path(ranks.partition).is_file():
        raise InvalidValueError(f"--partition {ranks.partition}: neither a partitioner "
                                f"({', '.join(PARTITIONERS)}) nor a file")
    return grid_shape(ranks.algo, ranks.nprocs, ranks.replication)


def _rank_job(request: RGCNRequest, shape: GridShape) -> RankResult[RGCNGridRun]:
    """One spawned rank: train its share, gather every rank's report to rank 0."""
    assert request.ranks is not None
    with (rank_session(request.ranks.backend, request.ranks.timeout_s) as session,
          lost_peers_named()):
        run = train_rgcn_rank(request, shape)
        assert run is not None  # the grid spans the whole job
        reports = gather_objects(run.report)
    grid = RGCNGridRun(run.outcome, shape, session.backend, reports)
    return RankResult(session.rank, session.world_size, grid, run.report.epoch_bytes)


def train_rgcn_rank(request: RGCNRequest, shape: GridShape, graph: HeteroGraph | None = None,
                    members: range | None = None) -> RGCNRankRun | None:
    """This rank's share of an R-GCN run on ``shape``; every rank of the job calls it.

    ``members``: the global ranks forming the grid (default: all); ranks outside it only
    take part in creating the groups and get ``None``. ``graph``: the typed graph (else
    each rank loads ``request.source``, deterministically)."""
    ranks = request.ranks or RGCNRanks(algo=shape.algo)
    grid = ProcessGrid.create(shape, members,
                              col_lanes=col_lanes(shape.algo, ranks.comm, ranks.overlap))
    if grid is None:
        return None
    typed, rel = relational_problem(request, graph)
    part = partition_for(rel.num_nodes, shape, ranks.partition, rel.edge_index, request.seed)
    comm = SparseCommunicator()
    ops, nnz, pairs = _relation_operators(request, rel, part, grid, comm, ranks)
    rows = _original_rows(part, grid.coords[0])
    y, masks = node_labels(rel)
    model = build_classifier(request, rel, typed.num_classes)
    model.mask_rows = rows
    task = DistributedTask(model_input(request, rel)[rows], ops, y[rows],  # type: ignore[arg-type]
                           {s: m[rows] for s, m in masks.items()}, comm, grid.col)
    meter = EpochMeter(comm)
    outcome = run_relational(model, TaskEvaluation(task), request, typed, rel,
                             step=full_graph_step(task), is_main=grid.rank == 0,
                             on_epoch=meter.on_epoch)
    widths = [conv.in_channels for conv in model.convs] + [model.convs[-1].out_channels]
    calls = rgcn_schedule(widths, featureless=model.featureless,
                          block_diagonal=request.num_blocks is not None)
    value_bytes = torch.empty(0, dtype=request.torch_dtype).element_size()
    predicted = rgcn_predict(shape, part, grid.rank, calls, relations=rel.num_relations,
                             value_bytes=value_bytes, nnz=nnz, pairs=pairs,
                             num_params=sum(p.numel() for p in model.parameters()))
    report = RankReport(grid.rank, grid.coords, meter.last, meter.constant,
                        ByteCounts(predicted))
    return RGCNRankRun(model, outcome, report)


def _relation_operators(request: RGCNRequest, rel: RelationalGraph, part: BlockPartition,
                        grid: ProcessGrid, comm: SparseCommunicator, ranks: RGCNRanks
                        ) -> tuple[list[DistributedOperator], list[dict[str, NnzTable]] | None,
                                   list[dict[str, np.ndarray]] | None]:
    """Each relation's distributed operator over this rank's tiles (relabelled by the
    blocks); for the byte model, on 2D/3D each relation's tile nonzero tables, with
    sparse communication each relation's block pairs (rows one block needs of another)."""
    shape, sparse = grid.shape, ranks.comm == "sparse"
    ops: list[DistributedOperator] = []
    tables, pairs = [], []
    for mat in relation_operators(rel.edge_index, rel.edge_type, rel.num_relations,
                                  rel.num_nodes, request.aggr, request.torch_dtype):
        if sparse:
            pairs.append(phase_pairs(mat, part))  # the original order, as it asks
        if part.order is not None:
            mat = mat.permute(part.order)
        blocks = local_blocks(mat, part, shape, grid.rank)
        ops.append(SparseRowOperator(grid, comm, part, blocks, ranks.overlap) if sparse
                   else build_operator(grid, comm, part, blocks, ranks.overlap))
        if not shape.row_wise:
            tables.append({"forward_spmm": tile_nnz(mat, part, shape),
                           "backward_spmm": tile_nnz(mat.t(), part, shape)})
    return ops, None if shape.row_wise else tables, pairs if sparse else None


def _original_rows(part: BlockPartition, block: int) -> torch.Tensor:
    """Original vertex ids of a block's rows, in local order."""
    lo, hi = part.block(block)
    return torch.arange(lo, hi) if part.order is None else part.order[lo:hi]
