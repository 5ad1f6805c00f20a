"""Distributed minibatch training (replicated and partitioned topology) on local gloo ranks."""

from __future__ import annotations

import itertools
import json

import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data import rmat, sbm
from sparsegnn.distributed import Group, close_session, init_session, spawn
from sparsegnn.distributed.ops.feature_fetch import MIB, PartitionedFeatures
from sparsegnn.distributed.ops.sampled import ExchangeCommunicator, GradientSum, PartitionedTopology
from sparsegnn.distributed.runtime.comm import Communicator
from sparsegnn.sampling import (
    LadiesSampler,
    NodeWiseSampler,
    ShadowSampler,
    batch_generator,
    epoch_permutation,
)
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.fullgraph import TrainConfig
from sparsegnn.train.minibatch import MinibatchConfig, MinibatchData, SamplerKind, fit_minibatch
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
    samplers = [(NodeWiseSampler(topo, [4, 3, 2]), NodeWiseSampler(adj, [4, 3, 2])),
                (LadiesSampler(topo, [30, 20, 10]), LadiesSampler(adj, [30, 20, 10])),
                (ShadowSampler(topo, [4, 3]), ShadowSampler(adj, [4, 3]))]
    perm = epoch_permutation(adj.shape[0], 0, 0)
    same, remote_rows = True, 0
    for call, (partitioned, replicated) in itertools.product(range(2), samplers):
        # Two bulk calls of three minibatches per sampler (the last rank's are empty).
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
@pytest.mark.parametrize("sampler, nprocs, replication", [
    ("sage", 2, 1), ("sage", 4, 2), ("ladies", 2, 1), ("ladies", 4, 2), ("shadow", 2, 1),
    ("shadow", 4, 2),
])
def test_partitioned_training_reproduces_replicated_weights(
    sampler: SamplerKind, nprocs: int, replication: int
) -> None:
    data = MinibatchData.from_graph(sbm(160, 2, 6, num_features=6, seed=3), torch.float64)
    cfg = TrainConfig(model="sage", hidden=8, num_layers=2, epochs=3, patience=5,
                      dtype="float64", progress=False)
    mb = MinibatchConfig(sampler, (3, 2), batch_size=40, bulk=2, prefetch=True)
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
        "--feature-cache-mb", "0.001",
    ]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["world_size"] == 2 and out["topology"] == "partitioned"
    cache = out["feature_cache"]  # every rank's record; a row and its id per slot
    fit = int(0.001 * MIB) // (cache["ranks"][0]["row_bytes"] + 8)
    assert fit > 0 and [r["cache_rows"] for r in cache["ranks"]] == [fit, fit]
    assert cache["saved_bytes"] == sum(r["saved_bytes"] for r in cache["ranks"])
    assert 0 <= cache["hit_rate"] <= 1 and out["comm_bytes"]["feature_cache"]["sent"] > 0
    assert out["replication"] == 1
    assert {"sampling", "feature_fetch", "grad_allreduce"} <= set(out["comm_bytes"])
    assert all(out["comm_bytes"][p]["sent"] > 0 for p in ("sampling", "feature_fetch"))


@pytest.mark.distributed
def test_cli_partitioned_topology_runs_shadow(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "train", "--mode", "minibatch", "--nprocs", "2", "--topology", "partitioned",
        "--sampler", "shadow", "--dataset", "sbm:nodes=60,blocks=2,degree=4",
        "--layers", "2", "--fanouts", "3,3", "--epochs", "1", "--no-progress", "--json",
    ]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["minibatch"]["sampler"] == "shadow" and out["comm_bytes"]["sampling"]["sent"] > 0


def _cached_vs_uncached(
    adj: CSRMatrix, x: torch.Tensor, cache_rows: int, replication: int
) -> dict[str, object]:
    """Each rank fetches the same sampled minibatches through an uncached and a cached
    PartitionedFeatures (separate byte counts); are the cache and the rows right?"""
    session = init_session("gloo", timeout_s=60)
    try:
        rank, world = session.rank, session.world_size
        group = Group(tuple(range(world)), rank)
        topo = PartitionedTopology.from_global(adj, replication, ExchangeCommunicator(), group)
        plain_comm, cached_comm = ExchangeCommunicator(), ExchangeCommunicator()
        plain = PartitionedFeatures.from_global(x, replication, plain_comm, group)
        cached = PartitionedFeatures.from_global(x, replication, cached_comm, group)
        row_bytes = x.shape[1] * x.element_size()
        cached.with_cache(topo.block, cache_rows * (row_bytes + 8) / MIB)
        ids = cached.cache_ids
        in_degree = torch.bincount(adj.col, minlength=adj.shape[0])
        remote = ~cached.owners.owned(torch.arange(adj.shape[0]))
        others = remote.clone()
        others[ids] = False
        checks = {
            "cache_equals_owner_rows": torch.equal(cached.cache_rows, x[ids]),
            "cache_is_remote": bool(remote[ids].all()),
            "cache_full": ids.numel() == cache_rows,
            # The policy: no uncached remote vertex has a higher in-degree than a cached one.
            "highest_in_degree": int(in_degree[others].max()) <= int(in_degree[ids].min()),
        }
        sampler = NodeWiseSampler(topo, [5, 5])
        perm = epoch_permutation(adj.shape[0], 0, 0)
        same = True
        for call in range(3):
            idx = [rank + world * (4 * call + j) for j in range(4)]
            seeds = [perm[i * 16 : (i + 1) * 16] for i in idx]
            batches = sampler.sample(seeds, [batch_generator(0, 0, i) for i in idx])
            node_ids = torch.cat([b.node_ids for b in batches])
            want = x[node_ids]
            same &= torch.equal(plain.fetch(node_ids), want)
            same &= torch.equal(cached.fetch(node_ids), want)
        checks["cached_fetch_equals_uncached"] = same
        return {"checks": checks, "plain": plain_comm.counts().to_dict(),
                "cached": cached_comm.counts().to_dict(), "stats": cached.stats.to_dict(),
                "plain_stats": plain.stats.to_dict()}
    finally:
        close_session()


@pytest.mark.distributed
@pytest.mark.parametrize("replication", [1, 2])
def test_feature_cache_serves_owner_rows_and_cuts_fetched_bytes_on_rmat(
    replication: int,
) -> None:
    g = rmat(10, 8, seed=5)
    adj = CSRMatrix.from_edge_index(g.edge_index, g.num_nodes)
    x = torch.randn(adj.shape[0], 16, generator=torch.Generator().manual_seed(1))
    cache_rows = adj.shape[0] // 10  # a tenth of the rows on every rank
    per_rank = spawn(_cached_vs_uncached, 4, (adj, x, cache_rows, replication),
                     wall_timeout_s=120)
    for r in per_rank:
        assert all(r["checks"].values()), r["checks"]
    per_row = 16 * 4 + 8

    def fetched(key: str) -> int:
        return sum(r[key]["feature_fetch"]["sent"] for r in per_rank)

    plain, cached = fetched("plain"), fetched("cached")
    stats = [r["stats"] for r in per_rank]
    # Every cache hit saves its id and its row, exactly; the misses are what moves.
    assert plain - cached == sum(s["saved_bytes"] for s in stats)
    assert all(s["saved_bytes"] == s["hits"] * per_row > 0 for s in stats)
    assert [s["remote_rows"] for s in stats] == [r["plain_stats"]["remote_rows"]
                                                 for r in per_rank]
    assert all(0 < s["hit_rate"] < 1 for s in stats)
    assert cached <= 0.7 * plain, f"the cache saved only {1 - cached / plain:.0%}"
    # The start-up (in-degree exchange, candidates, fill) is counted on its own.
    assert all(r["cached"]["feature_cache"]["sent"] > 0 for r in per_rank)
    assert all("feature_cache" not in r["plain"] for r in per_rank)


def _partitioned_with_and_without_cache(
    data: MinibatchData, cfg: TrainConfig, mb: MinibatchConfig, cache_mb: float
) -> dict[str, object]:
    session = init_session("gloo", timeout_s=60)
    try:
        plain = fit_partitioned(session, Handoff(data), cfg, mb)
        cached = fit_partitioned(session, Handoff(data), cfg, mb, feature_cache_mb=cache_mb)
        return {"plain": (plain.value.summary, plain.value.state, plain.comm.to_dict()),
                "cached": (cached.value.summary, cached.value.state, cached.comm.to_dict())}
    finally:
        close_session()


@pytest.mark.distributed
def test_feature_cache_leaves_training_unchanged() -> None:
    data = MinibatchData.from_graph(sbm(160, 2, 6, num_features=6, seed=3), torch.float64)
    cfg = TrainConfig(model="sage", hidden=8, num_layers=2, epochs=2, patience=5,
                      dtype="float64", progress=False)
    mb = MinibatchConfig("sage", (3, 2), batch_size=40, bulk=2, prefetch=True)
    cache_mb = 30 * (6 * 8 + 8) / MIB  # 30 of the 80 remote rows
    per_rank = spawn(_partitioned_with_and_without_cache, 2, (data, cfg, mb, cache_mb),
                     wall_timeout_s=150)
    for r in per_rank:
        plain_summary, plain_state, plain_comm = r["plain"]
        cached_summary, cached_state, cached_comm = r["cached"]
        for name, value in plain_state.items():
            assert torch.equal(cached_state[name], value), name
        assert cached_summary["losses"] == plain_summary["losses"]
        assert cached_summary["test_accuracy"] == plain_summary["test_accuracy"]
        assert cached_comm["feature_fetch"]["sent"] < plain_comm["feature_fetch"]["sent"]
        assert cached_comm["grad_allreduce"] == plain_comm["grad_allreduce"]
        report, off = cached_summary["feature_cache"], plain_summary["feature_cache"]
        assert [k["cache_rows"] for k in report["ranks"]] == [30, 30]
        assert [k["cache_rows"] for k in off["ranks"]] == [0, 0] and off["hit_rate"] == 0
        assert 0 < report["hit_rate"] < 1
        assert report["fetched_bytes"] + report["saved_bytes"] == off["fetched_bytes"]
    # Over both ranks, the fetch bytes fell by exactly the saved bytes reported.
    sent = {k: sum(r[k][2]["feature_fetch"]["sent"] for r in per_rank) for k in ("plain",
                                                                               "cached")}
    assert sent["plain"] - sent["cached"] == per_rank[0]["cached"][0]["feature_cache"][
        "saved_bytes"]


def _evaluate_in_chunks(data: MinibatchData, replication: int) -> dict[str, float]:
    """Accuracy of one fixed model: the local evaluator, and the partitioned one in one
    chunk and in chunks of a few rows (many collective fetches per layer)."""
    from sparsegnn.nn import GraphSAGE
    from sparsegnn.train.minibatch import _Evaluator
    from sparsegnn.train.minibatch_distributed import PartitionedEvaluator

    session = init_session("gloo", timeout_s=60)
    try:
        torch.manual_seed(0)
        model = GraphSAGE(data.num_features, 8, int(data.y.max()) + 1, 2, 0.0).double()
        group = Group(tuple(range(session.world_size)), session.rank)
        comm = ExchangeCommunicator()
        topo = PartitionedTopology.from_global(data.adj, replication, comm, group)
        features = PartitionedFeatures.from_global(data.x, replication, comm, group)
        out = {"local": _Evaluator(data, torch.device("cpu"), "sage").accuracy(model, "test")}
        for name, mb in (("whole", 64.0), ("chunked", 0.002)):
            ev = PartitionedEvaluator(topo, features, data.y, data.masks, comm, group,
                                      torch.device("cpu"), chunk_mb=mb)
            out[name] = ev.accuracy(model, "test")
            out[f"{name}_chunks"] = len(ev.chunks)
        return out
    finally:
        close_session()


@pytest.mark.distributed
def test_chunked_partitioned_evaluation_equals_local() -> None:
    # Power-law degrees: the blocks' average degrees differ, so would their chunk sizes.
    graph = sbm(300, 3, 6, num_features=6, seed=2, powerlaw=2.1)
    data = MinibatchData.from_graph(graph, torch.float64)
    for r in spawn(_evaluate_in_chunks, 4, (data, 2), wall_timeout_s=120):
        assert r["whole_chunks"] == 1 and r["chunked_chunks"] > 5
        assert r["local"] == r["whole"] == r["chunked"]
