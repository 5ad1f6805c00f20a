"""Distributed minibatch training (replicated and partitioned topology) on local gloo ranks."""

from __future__ import annotations

import json

import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data import rmat, sbm
from sparsegnn.distributed import Group, close_session, init_session, spawn
from sparsegnn.distributed.comm import Communicator
from sparsegnn.distributed.feature_fetch import PartitionedFeatures
from sparsegnn.distributed.sampled import ExchangeCommunicator, GradientSum, PartitionedTopology
from sparsegnn.sampling import NodeWiseSampler, batch_generator, epoch_permutation
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.fullgraph import TrainConfig
from sparsegnn.train.minibatch import MinibatchConfig, MinibatchData, fit_minibatch
from sparsegnn.train.minibatch_distributed import Handoff, fit_partitioned, train_replicated


@pytest.mark.distributed
def test_replicated_ranks_stay_identical_and_count_only_gradient_bytes() -> None:
    data = MinibatchData.from_graph(sbm(200, 2, 6, num_features=8, seed=1))
    cfg = TrainConfig(model="sage", hidden=8, num_layers=2, epochs=2, patience=5, progress=False)
    mb = MinibatchConfig("sage", (3, 3), batch_size=48, bulk=2, prefetch=True)
    outcomes = train_replicated(data, cfg, mb, 2, timeout_s=60, wall_timeout_s=150)
    assert [o.rank for o in outcomes] == [0, 1]
    first, second = outcomes
    for name, value in first.value.state.items():
        assert torch.equal(value, second.value.state[name]), f"replicas drifted in {name}"
    assert first.value.summary["test_accuracy"] == second.value.summary["test_accuracy"]
    steps = first.value.summary["epochs_run"] * first.value.summary["minibatches_per_epoch"]
    params = sum(v.numel() for v in first.value.state.values())
    assert set(first.comm.phases) == {"grad_allreduce"}, "sampling must not communicate"
    assert first.comm.phases["grad_allreduce"]["sent"] == steps * params * 4  # float32, one peer
    assert first.comm.sent == first.comm.phases["grad_allreduce"]["sent"]


def _partitioned_vs_replicated(adj: CSRMatrix, x: torch.Tensor) -> list[dict[str, object]]:
    """Per replication factor: does each rank's partitioned sampling and feature fetch
    reproduce sampling from the whole A and indexing the whole x?"""
    session = init_session("gloo", timeout_s=60)
    try:
        return [_compare(adj, x, c, session.rank, session.world_size) for c in (1, 2)]
    finally:
        close_session()


def _compare(
    adj: CSRMatrix, x: torch.Tensor, replication: int, rank: int, world: int
) -> dict[str, object]:
    comm = ExchangeCommunicator()
    group = Group(tuple(range(world)), rank)
    topo = PartitionedTopology.from_global(adj, replication, comm, group)
    features = PartitionedFeatures.from_global(x, replication, comm, group)
    partitioned = NodeWiseSampler(topo, [4, 3, 2])
    replicated = NodeWiseSampler(adj, [4, 3, 2])
    perm = epoch_permutation(adj.shape[0], 0, 0)
    same, remote_rows = True, 0
    for call in range(2):  # two bulk calls of three minibatches (the last rank's are empty)
        idx = [rank + world * (3 * call + j) for j in range(3)]
        seeds = [perm[i * 20 : (i + 1) * 20] if rank < world - 1 else perm[:0] for i in idx]
        ref = replicated.sample(seeds, [batch_generator(0, 0, i) for i in idx])
        got = partitioned.sample(seeds, [batch_generator(0, 0, i) for i in idx])
        for a, b in zip(got, ref, strict=True):
            same &= torch.equal(a.node_ids, b.node_ids)
            same &= torch.equal(features.fetch(a.node_ids), x[a.node_ids])
            owned = (a.node_ids >= features.owners.lo) & (a.node_ids < features.owners.hi)
            remote_rows += int((~owned).sum())
            for op_a, op_b in zip(a.operators(3), b.operators(3), strict=True):
                same &= op_a.shape == op_b.shape and torch.equal(op_a.crow, op_b.crow)
                same &= torch.equal(op_a.col, op_b.col) and torch.equal(op_a.val, op_b.val)
    return {"same": same, "comm": comm.counts().to_dict(), "remote_rows": remote_rows}


@pytest.mark.distributed
def test_partitioned_sampling_and_feature_fetch_reproduce_replicated() -> None:
    g = rmat(9, 8, seed=4)
    adj = CSRMatrix.from_edge_index(g.edge_index, g.num_nodes)
    x = torch.randn(adj.shape[0], 5, generator=torch.Generator().manual_seed(0))
    per_rank = spawn(_partitioned_vs_replicated, 4, (adj, x), wall_timeout_s=200)
    for reports in zip(*per_rank, strict=True):  # one replication factor, all ranks
        assert all(r["same"] for r in reports)
        assert all(r["comm"]["sampling"]["sent"] > 0 for r in reports[:3])
        fetch = [r["comm"]["feature_fetch"] for r in reports]
        assert sum(f["sent"] for f in fetch) == sum(f["recv"] for f in fetch)
        for r, f in zip(reports, fetch, strict=True):
            # At least the remote rows (5 float32 each) and the ids asking for them (int64).
            assert f["recv"] >= r["remote_rows"] * 5 * 4
            assert f["sent"] >= r["remote_rows"] * 8


@pytest.mark.distributed
def test_cli_minibatch_with_nprocs_reports_ranks_and_bytes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        "train", "--mode", "minibatch", "--nprocs", "2", "--dataset",
        "sbm:nodes=120,blocks=2,degree=6", "--fanouts", "3,3", "--layers", "2",
        "--epochs", "1", "--batch-size", "32", "--no-progress", "--json",
    ]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["world_size"] == 2 and out["epochs_run"] == 1
    assert out["comm_bytes"]["grad_allreduce"]["sent"] > 0


def _replicated_then_partitioned(
    data: MinibatchData, cfg: TrainConfig, mb: MinibatchConfig, replication: int
) -> dict[str, object]:
    """One job, both topologies: replicated training, then partitioned training from the
    same seeds; each rank's final weights, summaries and partitioned bytes."""
    session = init_session("gloo", timeout_s=60)
    try:
        comm = Communicator()
        world = Group(tuple(range(session.world_size)), session.rank)
        model, rep = fit_minibatch(data, cfg, mb, rank=session.rank,
                                   world_size=session.world_size, sync=GradientSum(comm, world))
        rep_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        part = fit_partitioned(session, Handoff(data), cfg, mb, replication)
        return {"replicated": (rep.to_dict(), rep_state, comm.counts().to_dict()),
                "partitioned": (part.value.summary, part.value.state, part.comm.to_dict())}
    finally:
        close_session()


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("nprocs, replication", [(2, 1), (4, 2)])
def test_partitioned_training_reproduces_replicated_weights(nprocs: int, replication: int) -> None:
    data = MinibatchData.from_graph(sbm(160, 2, 6, num_features=6, seed=3), torch.float64)
    cfg = TrainConfig(model="sage", hidden=8, num_layers=2, epochs=3, patience=5,
                      dtype="float64", progress=False)
    mb = MinibatchConfig("sage", (3, 2), batch_size=40, bulk=2, prefetch=True)
    per_rank = spawn(_replicated_then_partitioned, nprocs, (data, cfg, mb, replication),
                     wall_timeout_s=200)
    for r in per_rank:
        rep_summary, rep_state, rep_comm = r["replicated"]
        part_summary, part_state, part_comm = r["partitioned"]
        for name, value in rep_state.items():
            torch.testing.assert_close(part_state[name], value, rtol=0, atol=1e-6)
        # The same minibatches: the same per-epoch losses and the same model selection.
        assert part_summary["losses"] == pytest.approx(rep_summary["losses"], abs=1e-9)
        for key in ("epochs_run", "best_epoch", "best_val_accuracy", "test_accuracy",
                    "minibatches_per_epoch"):
            assert part_summary[key] == rep_summary[key], key
        # Gradient bytes are the replicated run's exactly; sampling and fetch communicate.
        assert part_comm["grad_allreduce"] == rep_comm["grad_allreduce"]
        assert part_comm["sampling"]["sent"] > 0 and part_comm["feature_fetch"]["recv"] > 0
        assert part_comm["evaluation"]["sent"] > 0
    first_state = per_rank[0]["partitioned"][1]
    for r in per_rank[1:]:
        for name, value in r["partitioned"][1].items():
            assert torch.equal(value, first_state[name]), f"ranks drifted in {name}"
    for phase in ("sampling", "feature_fetch", "evaluation"):
        sent = sum(r["partitioned"][2][phase]["sent"] for r in per_rank)
        assert sent == sum(r["partitioned"][2][phase]["recv"] for r in per_rank), phase


@pytest.mark.distributed
@pytest.mark.slow
def test_cli_minibatch_partitioned_topology_reports_phases(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        "train", "--mode", "minibatch", "--nprocs", "2", "--topology", "partitioned",
        "--dataset", "sbm:nodes=120,blocks=2,degree=6", "--fanouts", "3,3", "--layers", "2",
        "--epochs", "1", "--batch-size", "32", "--no-progress", "--json",
    ]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["world_size"] == 2 and out["topology"] == "partitioned"
    assert out["replication"] == 1
    assert {"sampling", "feature_fetch", "grad_allreduce"} <= set(out["comm_bytes"])
    assert all(out["comm_bytes"][p]["sent"] > 0 for p in ("sampling", "feature_fetch"))


def test_partitioned_topology_refuses_layerwise_samplers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        "train", "--mode", "minibatch", "--nprocs", "2", "--topology", "partitioned",
        "--sampler", "ladies", "--dataset", "sbm:nodes=60,blocks=2,degree=4",
        "--layers", "2", "--fanouts", "3,3", "--epochs", "1", "--no-progress",
    ]  # fmt: skip
    assert main(argv) != 0
    assert "sage" in capsys.readouterr().err
