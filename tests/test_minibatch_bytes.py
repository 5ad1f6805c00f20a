"""Partitioned minibatch training moves exactly the bytes the analytic model predicts."""

from __future__ import annotations

import pytest

from sparsegnn.data import row_normalize, sbm
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.fullgraph import TrainConfig
from sparsegnn.train.minibatch import MinibatchConfig, MinibatchData, SamplerKind
from sparsegnn.train.minibatch_bytes import predict_partitioned_bytes
from sparsegnn.train.minibatch_distributed import train_partitioned

PHASES = ("sampling", "feature_fetch", "grad_allreduce")


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("sampler, nprocs, replication", [
    ("sage", 4, 2), ("sage", 3, 1), ("ladies", 2, 1), ("shadow", 4, 2),
])
def test_measured_bytes_equal_the_model(sampler: SamplerKind, nprocs: int,
                                        replication: int) -> None:
    g = sbm(240, 3, 6, num_features=5, seed=7)
    g.x = row_normalize(g.x)
    data = MinibatchData.from_graph(g)
    cfg = TrainConfig(model="sage", hidden=8, num_layers=2, epochs=2, patience=10,
                      progress=False)
    mb = MinibatchConfig(sampler, (4, 3), batch_size=24, bulk=3, prefetch=True)
    outcomes = train_partitioned(data, cfg, mb, nprocs, replication, wall_timeout_s=150)
    epochs = outcomes[0].value.summary["epochs_run"]
    num_params = sum(v.numel() for v in outcomes[0].value.state.values())
    adj = CSRMatrix.from_edge_index(g.edge_index, g.num_nodes)
    model = predict_partitioned_bytes(
        adj, g.y, g.train_mask, mb, nprocs=nprocs, replication=replication, seed=cfg.seed,
        epochs=epochs, row_bytes=g.x.shape[1] * 4, num_params=num_params, value_bytes=4)
    for outcome, predicted in zip(outcomes, model, strict=True):
        for phase in PHASES:
            measured = outcome.comm.phases[phase]
            assert (measured["sent"], measured["recv"]) == (
                predicted[phase]["sent"], predicted[phase]["recv"]), (outcome.rank, phase)
    assert all(model[r]["sampling"]["sent"] > 0 for r in range(nprocs))


def test_a_single_block_moves_nothing_but_counts() -> None:
    g = sbm(100, 2, 4, num_features=3, seed=1)
    adj = CSRMatrix.from_edge_index(g.edge_index, g.num_nodes)
    mb = MinibatchConfig("sage", (3,), batch_size=16, bulk=2)
    model = predict_partitioned_bytes(
        adj, g.y, g.train_mask, mb, nprocs=2, replication=2, seed=0, epochs=1, row_bytes=32,
        num_params=10, value_bytes=4)
    steps = -(-int(g.train_mask.sum()) // 16)
    calls = 2 * -(-steps // 2)  # per bulk: a degree and an entries exchange (one hop)
    calls += -(-steps // 2)  # and one fetch
    for rank in model:  # both replicas hold every row: only the count exchanges remain
        assert rank["sampling"]["sent"] + rank["feature_fetch"]["sent"] == 8 * calls
        assert rank["grad_allreduce"]["sent"] == steps * 10 * 4
