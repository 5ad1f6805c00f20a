"""Overlapped 1D/1.5D SpMM (next block's broadcast during this block's multiply) is exact."""

from __future__ import annotations

import pytest
import torch

from sparsegnn.data import sbm
from sparsegnn.distributed import close_session, grid_shape, init_session, spawn
from sparsegnn.distributed.comm import Communicator, ProcessGrid
from sparsegnn.distributed.partitioned import load_shard
from sparsegnn.distributed.spmm import build_operator


def _both_ways(algo: str, replication: int) -> dict[str, object]:
    session = init_session("gloo", timeout_s=60)
    try:
        graph = sbm(300, 3, 6, num_features=5, seed=1)
        shape = grid_shape(algo, session.world_size, replication)  # type: ignore[arg-type]
        grid = ProcessGrid.create(shape)
        assert grid is not None
        shard = load_shard(graph, "gcn", shape, grid.rank, dtype=torch.float64)
        x = torch.randn(shard.x.shape[0], 7, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(grid.coords[0]))
        results, waited = {}, {}
        for overlap in (False, True):
            comm = Communicator()
            op = build_operator(grid, comm, shard.part, shard.blocks, overlap)
            with comm.phase("forward_spmm"):
                results[overlap] = (op.multiply(x, False), op.multiply(x, True))
            waited[overlap] = comm.waited_seconds()
            results[f"{overlap}_bytes"] = comm.counts().to_dict()
        same = all(torch.equal(a, b) for a, b in zip(results[False], results[True], strict=True))
        return {"same": same, "waited": waited, "bytes_equal":
                results["False_bytes"] == results["True_bytes"]}
    finally:
        close_session()


@pytest.mark.distributed
@pytest.mark.parametrize("algo, replication", [("1d", 1), ("1.5d", 2)])
def test_overlapped_row_spmm_is_exact_and_times_its_waits(algo: str, replication: int) -> None:
    for r in spawn(_both_ways, 4, (algo, replication), wall_timeout_s=120):
        assert r["same"] and r["bytes_equal"]
        assert r["waited"][False] == {}  # the blocking path never waits on a handle
        assert set(r["waited"][True]) == {"forward_spmm"}
