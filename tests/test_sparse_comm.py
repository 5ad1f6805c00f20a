"""Sparsity-aware 1D/1.5D SpMM: same training as dense communication, planned bytes.

One job of 4 gloo ranks trains each case twice (``comm="dense"`` and ``"sparse"``) in
float64; the sparse run must reproduce the dense losses and gradients, and every rank's
measured SpMM bytes must equal what :func:`sparsegnn.distributed.epoch_volume` computes
without ranks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data import load_any
from sparsegnn.distributed import (
    BlockPartition,
    close_session,
    epoch_volume,
    grid_shape,
    init_session,
    spawn,
    spmm_schedule,
)
from sparsegnn.distributed.ops.sparse_comm import compress_columns
from sparsegnn.nn import operator_for
from sparsegnn.partition import Adjacency, partition
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.fullgraph import TrainConfig
from sparsegnn.train.rank_train import DistributedConfig, train_rank

GRAPH_SPEC = "sbm:nodes=120,blocks=4,degree=6"
CFG = TrainConfig(model="gcn", hidden=12, num_layers=2, dropout=0.5, epochs=2,
                  dtype="float64", progress=False)
# (name, algo, replication, partition: None = even blocks, else a parts file name)
CASES = [("1d", "1d", 1, None), ("1.5d", "1.5d", 2, None), ("1d-metis", "1d", 1, "metis.npy")]


@pytest.fixture(scope="module")
def graph():
    return load_any(GRAPH_SPEC, None, seed=0)


def test_compressed_tile_multiplies_like_the_full_one():
    t = CSRMatrix.from_coo(torch.tensor([0, 0, 1]), torch.tensor([5, 2, 5]),
                           torch.tensor([1.0, 2.0, 3.0]), (2, 7))
    small, used = compress_columns(t)
    assert used.tolist() == [2, 5] and small.shape == (2, 2)
    h = torch.randn(7, 3)
    assert torch.allclose(small.matmul(h[used]), t.matmul(h))


def _both(graph: Any, work: str) -> dict[str, Any]:
    """Rank body: every case with dense and with sparse communication."""
    session = init_session("gloo", timeout_s=60)
    out: dict[str, Any] = {}
    try:
        for name, algo, c, parts in CASES:
            for comm in ("dense", "sparse"):
                dcfg = DistributedConfig(
                    algo=algo, replication=c, backend="gloo", comm=comm,
                    partition=Path(work) / parts if parts else "block",
                )
                model, result, report = train_rank(graph, CFG, dcfg, session)
                out[f"{name}/{comm}"] = {
                    "losses": [h.loss for h in result.history],
                    "grads": {n: p.grad.clone() for n, p in model.named_parameters()},
                    "measured": report.epoch_bytes.to_dict(),
                    "predicted": report.predicted.to_dict(),
                }
    finally:
        close_session()
    return out


@pytest.fixture(scope="module")
def rank_outputs(graph, tmp_path_factory):
    work = tmp_path_factory.mktemp("sparse")
    adj = Adjacency.from_edge_index(graph.edge_index, graph.num_nodes)
    np.save(work / "metis.npy", partition(adj, "metis", 4))
    return spawn(_both, 4, (graph, str(work)), wall_timeout_s=300), work


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_sparse_comm_trains_like_dense_comm(rank_outputs, case):
    outputs, _ = rank_outputs
    for rank, got in enumerate(outputs):
        dense, sparse = got[f"{case[0]}/dense"], got[f"{case[0]}/sparse"]
        assert sparse["losses"] == pytest.approx(dense["losses"], rel=1e-10)
        for key, g in dense["grads"].items():
            assert torch.allclose(sparse["grads"][key], g, rtol=1e-10, atol=1e-12), (rank, key)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_measured_bytes_equal_the_planner(graph, rank_outputs, case):
    outputs, work = rank_outputs
    name, algo, c, parts = case
    shape = grid_shape(algo, 4, c)
    part = (BlockPartition.even(graph.num_nodes, shape.row_blocks) if parts is None else
            BlockPartition.from_parts(torch.from_numpy(np.load(work / parts)), shape.row_blocks))
    a = operator_for("gcn", CSRMatrix.from_edge_index(graph.edge_index, graph.num_nodes))
    calls = spmm_schedule(CFG, graph.num_features, graph.num_classes)
    dense_total = 0
    for comm in ("dense", "sparse"):
        planned = epoch_volume(shape, part, a, calls, value_bytes=8, comm=comm)
        for rank, got in enumerate(outputs):
            run = got[f"{name}/{comm}"]
            for phase, vol in planned.items():
                measured = run["measured"][phase]
                assert (measured["sent"], measured["recv"]) == (
                    vol.sent[rank], vol.recv[rank]), (comm, rank, phase)
                assert run["predicted"][phase] == {"sent": measured["sent"],
                                                   "recv": measured["recv"]}
        total = sum(v.total for v in planned.values())
        if comm == "dense":
            dense_total = total
        else:
            assert 0 < total < dense_total


@pytest.mark.distributed
def test_cli_trains_with_sparse_comm_and_a_partitioner(capsys):
    argv = ["train", "--nprocs", "2", "--algo", "1d", "--dataset", GRAPH_SPEC, "--epochs", "2",
            "--comm", "sparse", "--partition", "metis", "--no-progress", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["comm"]["matches_model"] and out["epochs_run"] == 2
    phases = out["comm"]["per_rank"][0]["phases"]
    assert phases["forward_spmm"]["all_to_all_sent"] == phases["forward_spmm"]["sent"] > 0


def test_cli_refuses_sparse_comm_for_2d(capsys):
    argv = ["train", "--nprocs", "4", "--algo", "2d", "--dataset", GRAPH_SPEC, "--comm", "sparse"]
    assert main(argv) == 2
    assert "--comm sparse supports" in capsys.readouterr().err
