"""Overlapped 1D/1.5D SpMM is exact: dense (next block's broadcast during this block's
multiply, several roots at once on lanes of the column group) and sparse (the all-to-all
during the multiply of the rank's own tile), whole or in column slices."""

from __future__ import annotations

import pytest
import torch

from sparsegnn.data import sbm
from sparsegnn.distributed import close_session, grid_shape, init_session, spawn
from sparsegnn.distributed.layout.partitioned import load_shard
from sparsegnn.distributed.ops.sparse_comm import SparseCommunicator, SparseRowOperator
from sparsegnn.distributed.ops.spmm import (
    OVERLAP_LANES,
    DistributedOperator,
    build_operator,
    column_slices,
)
from sparsegnn.distributed.runtime.comm import Communicator, ProcessGrid
from sparsegnn.sparse import CSRMatrix, gcn_norm


def _operator(comm_kind: str, grid: ProcessGrid, shard: object, overlap: bool
              ) -> tuple[Communicator, DistributedOperator]:
    if comm_kind == "sparse":
        sparse = SparseCommunicator()
        return sparse, SparseRowOperator(grid, sparse, shard.part, shard.blocks,  # type: ignore[attr-defined]
                                         overlap)
    comm = Communicator()
    return comm, build_operator(grid, comm, shard.part, shard.blocks, overlap)  # type: ignore[attr-defined]


def _both_ways(algo: str, replication: int, comm_kind: str) -> dict[str, object]:
    session = init_session("gloo", timeout_s=60)
    try:
        graph = sbm(300, 3, 6, num_features=5, seed=1)
        shape = grid_shape(algo, session.world_size, replication)  # type: ignore[arg-type]
        # Overlap on a grid without lanes (one block ahead) and with them (several roots
        # at once): both exact.
        plain_grid = ProcessGrid.create(shape)
        grid = ProcessGrid.create(shape, col_lanes=OVERLAP_LANES)
        assert grid is not None and plain_grid is not None
        same, bytes_equal, waited = True, True, {}
        # float64 at width 7 moves whole blocks; float32 at width 70 moves them in
        # column slices (spmm.column_slices), which must not change a bit either.
        for dtype, width in ((torch.float64, 7), (torch.float32, 70)):
            shard = load_shard(graph, "gcn", shape, grid.rank, dtype=dtype)
            x = torch.randn(shard.x.shape[0], width, dtype=dtype,
                            generator=torch.Generator().manual_seed(grid.coords[0]))
            results = {}
            for key, (g, overlap) in {"plain": (plain_grid, False), "ahead": (plain_grid, True),
                                      "lanes": (grid, True)}.items():
                comm, op = _operator(comm_kind, g, shard, overlap)
                with comm.phase("forward_spmm"):
                    results[key] = (op.multiply(x, False), op.multiply(x, True))
                waited[overlap] = comm.waited_seconds()
                results[f"{key}_bytes"] = comm.counts().to_dict()
            for key in ("ahead", "lanes"):
                same &= all(torch.equal(a, b)
                            for a, b in zip(results["plain"], results[key], strict=True))
                bytes_equal &= results["plain_bytes"] == results[f"{key}_bytes"]
        # Each lane is a process group of its own over the column group's members.
        lanes = grid.col.lanes
        roots = [Communicator().broadcast(torch.tensor([session.rank]), 0, grid.col.lane(n))
                 for n in range(len(lanes))]
        own_lanes = (len(lanes) == OVERLAP_LANES and len(set(map(id, lanes))) == len(lanes)
                     and grid.col.lane(OVERLAP_LANES).handle is grid.col.handle
                     and all(r.item() == grid.col.ranks[0] for r in roots))
        return {"same": same, "waited": waited, "bytes_equal": bytes_equal,
                "own_lanes": own_lanes}
    finally:
        close_session()


@pytest.mark.distributed
@pytest.mark.parametrize("algo, replication, comm_kind",
                         [("1d", 1, "dense"), ("1.5d", 2, "dense"), ("1d", 1, "sparse"),
                          ("1.5d", 2, "sparse")])
def test_overlapped_row_spmm_is_exact_and_times_its_waits(
    algo: str, replication: int, comm_kind: str,
) -> None:
    for r in spawn(_both_ways, 4, (algo, replication, comm_kind), wall_timeout_s=120):
        assert r["same"] and r["bytes_equal"] and r["own_lanes"]
        # Both ways time what the rank waited on communication, by phase.
        for overlap in (False, True):
            assert set(r["waited"][overlap]) >= {"forward_spmm"}
            assert r["waited"][overlap]["forward_spmm"] > 0


def test_column_slices_cover_the_width_only_where_products_stay_exact() -> None:
    x32 = torch.randn(50, 130)
    # 1D: up to 8 slices of at least 16 columns; 1.5D (replicas sum every slice): 4 of 32.
    assert [(s.stop - s.start) for s in column_slices(x32)] == [17, 17, 16, 16, 16, 16, 16, 16]
    slices = column_slices(x32, replicated=True)
    assert [(s.start, s.stop) for s in slices] == [(0, 33), (33, 66), (66, 98), (98, 130)]
    assert column_slices(torch.randn(50, 40), replicated=True) == [slice(0, 40)]  # too narrow
    assert len(column_slices(torch.randn(50, 40))) == 2
    assert column_slices(torch.randn(50, 20)) == [slice(0, 20)]
    # float64's kernel depends on the width, so its products are never sliced.
    assert column_slices(x32.double()) == [slice(0, 130)]
    graph = sbm(300, 3, 6, num_features=5, seed=1)
    a = gcn_norm(CSRMatrix.from_edge_index(graph.edge_index, graph.num_nodes))
    x = torch.randn(300, 130)
    whole = a.matmul(x)
    assert all(torch.equal(a.matmul(x[:, s].contiguous()), whole[:, s])
               for s in column_slices(x))
