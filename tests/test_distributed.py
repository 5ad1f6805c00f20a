"""Distributed full-graph training: grids, tiles, the comm model, and real gloo ranks.

The rank tests start one job of 8 gloo ranks and run every algorithm on sub-grids of it
(starting processes dominates the cost on a small machine), then compare each rank's
losses, gradients and final weights with single-process training in float64.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data import load_any, row_normalize
from sparsegnn.distributed import (
    BlockPartition,
    Communicator,
    GridError,
    ProcessGrid,
    RankFailedError,
    SpmmCall,
    close_session,
    grid_shape,
    init_session,
    local_blocks,
    predict,
    spawn,
    spmm_schedule,
    tile_nnz,
)
from sparsegnn.distributed.affinity import BIND_ENV, rank_cpus
from sparsegnn.distributed.comm import Group
from sparsegnn.distributed.comm_model import InputSlicing, input_slicing
from sparsegnn.distributed.feature_slices import RowSumLinear, SliceDropout, use_slice_dropout
from sparsegnn.distributed.partition import split_range, split_sizes, stage_blocks
from sparsegnn.distributed.partitioned import load_shard, write_partitioned
from sparsegnn.distributed.planner import layout, plan_epoch
from sparsegnn.distributed.shard import read_shard
from sparsegnn.nn import GCN, operator_for
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.fullgraph import TrainConfig, train_single
from sparsegnn.train.rank_train import DistributedConfig, train_rank

GRAPH_SPEC = "sbm:nodes=150,blocks=3,degree=6"
RTOL = 1e-6
# (name, model config overrides, algo, ranks, replication, source): source "graph" is the
# graph in memory with even blocks, "parts" adds an uneven partition vector, "shards"
# reads a directory written by write_partitioned.
CASES = [
    ("gcn-1d-2", {}, "1d", 2, 1, "graph"),
    ("gcn-1d-4", {}, "1d", 4, 1, "graph"),
    ("gcn-1.5d-4", {}, "1.5d", 4, 2, "graph"),
    ("gcn-2d-4", {}, "2d", 4, 1, "graph"),
    ("gcn-3d-8", {}, "3d", 8, 1, "graph"),
    ("sage-1d-4", {"model": "sage"}, "1d", 4, 1, "graph"),
    ("sage-1.5d-4", {"model": "sage"}, "1.5d", 4, 2, "graph"),
    ("sage-2d-4", {"model": "sage"}, "2d", 4, 1, "graph"),
    ("sage-3d-8", {"model": "sage"}, "3d", 8, 1, "graph"),
    ("sage-1.5d-4-parts", {"model": "sage"}, "1.5d", 4, 2, "parts"),
    # A partitioned directory draws dropout per block, so that case runs without dropout.
    ("sage-3d-8-shards", {"model": "sage", "dropout": 0.0}, "3d", 8, 1, "shards"),
]


def _cfg(**overrides: Any) -> TrainConfig:
    """Three layers, float64, dropout (ranks reproduce the single-process masks)."""
    base = TrainConfig(
        model="gcn", hidden=40, num_layers=3, dropout=0.5, epochs=3, dtype="float64",
        progress=False,
    )
    if overrides.get("model") == "sage":
        overrides = {"hidden": 8, **overrides}
    return replace(base, **overrides)


@pytest.fixture(scope="module")
def graph():
    return load_any(GRAPH_SPEC, None, seed=0)


# ---------------------------------------------------------------------- no ranks needed
def test_grid_shapes_and_errors():
    assert grid_shape("1d", 4).size == 4
    assert (grid_shape("1.5d", 8, 2).rows, grid_shape("1.5d", 8, 2).cols) == (4, 2)
    assert (grid_shape("2d", 9).rows, grid_shape("2d", 9).cols) == (3, 3)
    assert grid_shape("3d", 8).layers == 2
    with pytest.raises(GridError, match=r"square number of ranks.*got 6"):
        grid_shape("2d", 6)
    with pytest.raises(GridError, match="cubic number"):
        grid_shape("3d", 4)
    with pytest.raises(GridError, match="divides p"):
        grid_shape("1.5d", 6, 4)
    with pytest.raises(GridError, match=r"c\*c <= p"):
        grid_shape("1.5d", 4, 4)
    with pytest.raises(GridError, match=r"1\.5d only"):
        grid_shape("2d", 4, 2)


def test_split_range_is_even_and_covering():
    assert split_range(0, 10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert split_range(5, 6, 3) == [(5, 6), (6, 6), (6, 6)]


def test_partition_vector_makes_contiguous_blocks():
    part = BlockPartition.from_parts(torch.tensor([1, 0, 1, 2, 0]), 3)
    assert part.offsets == (0, 2, 4, 5)
    assert part.order.tolist() == [1, 4, 0, 2, 3]
    with pytest.raises(ValueError, match="partition ids"):
        BlockPartition.from_parts(torch.tensor([0, 3]), 3)


@pytest.mark.parametrize(
    ("algo", "p", "c"), [("1d", 3, 1), ("1.5d", 8, 2), ("2d", 4, 1), ("3d", 8, 1)]
)
def test_tiles_cover_the_operator_once(graph, algo, p, c):
    """Every nonzero of A (and of A^T) lands in exactly one tile of one rank."""
    a = operator_for("sage", CSRMatrix.from_edge_index(graph.edge_index, graph.num_nodes))
    a = a.to(dtype=torch.float64)
    shape = grid_shape(algo, p, c)
    part = BlockPartition.even(graph.num_nodes, shape.row_blocks)
    dense, dense_t = torch.zeros(a.shape, dtype=a.dtype), torch.zeros(a.shape, dtype=a.dtype)
    for rank in range(p):
        i, _, m = shape.coords(rank)
        blocks = local_blocks(a, part, shape, rank)
        lo, hi = part.block(i)
        for key, t in blocks.forward.items():
            rowwise = algo in ("1d", "1.5d")
            c0 = part.block(key)[0] if rowwise else part.inner(key, m, shape.layers)[0]
            dense[lo:hi, c0:c0 + t.shape[1]] += t.to_dense()
            dense_t[lo:hi, c0:c0 + t.shape[1]] += blocks.backward[key].to_dense()
    assert torch.equal(dense, a.to_dense())
    assert torch.equal(dense_t, a.to_dense().T)
    if algo == "1.5d":
        stages = sorted(b for k in range(shape.cols) for b in stage_blocks(shape, k))
        assert stages == list(range(shape.rows))


def test_tile_nnz_table_counts_each_ranks_tile(graph):
    a = operator_for("gcn", CSRMatrix.from_edge_index(graph.edge_index, graph.num_nodes))
    shape = grid_shape("3d", 8)
    part = BlockPartition.from_parts(torch.arange(graph.num_nodes) % 2, shape.row_blocks)
    a = a.permute(part.order)
    table = tile_nnz(a, part, shape)
    assert sum(table.values()) == a.nnz
    for rank in range(shape.size):
        i, j, m = shape.coords(rank)
        assert table[(i, j, m)] == local_blocks(a, part, shape, rank).forward[j].nnz


@pytest.mark.parametrize(("algo", "p"), [("1.5d", 4), ("2d", 4), ("3d", 8)])
def test_ranks_hold_only_their_feature_slice(graph, algo, p):
    """On 2D/3D rank (i, j, m) holds the rows of block i and only column slice j of the
    features, and the slices of a process row tile the block's features exactly once;
    1.5D replicas hold whole rows."""
    shape = grid_shape(algo, p, 2 if algo == "1.5d" else 1)
    part = BlockPartition.even(graph.num_nodes, shape.rows)
    f = graph.num_features
    for rank in range(p):
        i, j, m = shape.coords(rank)
        lo, hi = part.block(i)
        row = [load_shard(graph, "gcn", shape, shape.rank_of(i, k, m)) for k in range(shape.cols)]
        if algo == "1.5d":
            assert all(torch.equal(s.x, graph.x[lo:hi]) for s in row)
            continue
        assert row[j].x.shape == (hi - lo, split_sizes(f, shape.cols)[j])
        assert row[j].columns == split_range(0, f, shape.cols)[j]
        assert torch.equal(torch.cat([s.x for s in row], 1), graph.x[lo:hi])


def test_slice_dropout_draws_per_slice_and_keeps_the_stream_shared(graph):
    """Per-block dropout on 2D/3D feature slices: two slices of one block get different
    masks yet leave the block's shared stream in the same state (so the later, replicated
    layers draw the same masks), and a fiber replica of a slice draws the same mask."""
    adj = operator_for("gcn", CSRMatrix.from_edge_index(graph.edge_index, graph.num_nodes))
    x = torch.ones(graph.num_nodes, 16)

    def run(slice_index: int) -> tuple[torch.Tensor, torch.Tensor]:
        torch.manual_seed(0)
        model = GCN(16, 32, 3, dropout=0.5)  # widens: its input is dropped at once
        use_slice_dropout(model, slice_index)
        seen: list[torch.Tensor] = []
        model.layers[0].register_forward_pre_hook(lambda layer, args: seen.append(args[0]))
        model.train()
        model(x, adj)
        return seen[0], torch.get_rng_state()

    (first, stream), (other, other_stream), (again, _) = run(0), run(1), run(0)
    assert set(first.unique().tolist()) == {0.0, 2.0}
    assert not torch.equal(first, other) and torch.equal(stream, other_stream)
    assert torch.equal(first, again)


@pytest.mark.parametrize("kind", ["bernoulli", "bytes"])
def test_a_row_sum_map_applies_its_slice_and_redraws_the_mask_in_backward(kind):
    """A first-layer map on feature columns 2:5 with per-block dropout applied inside it
    (only the raw slice and the seed are kept) equals dropout then the map on those
    columns, gradients included; the weight's other columns get zero gradient."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(6, 4, bias=False, dtype=torch.float64)
    row_map = RowSumLinear(linear, (2, 5), Communicator(), Group((0,), 0))
    row_map.dropout = dropout = SliceDropout(0.5, 1, kind)
    dropout.seed = 7
    x = torch.randn(50, 3, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(50, 4, dtype=torch.float64)
    got = row_map(x)
    got.backward(grad)
    x_ref = x.detach().clone().requires_grad_()
    w_ref = linear.weight.detach().clone().requires_grad_()
    want = torch.nn.functional.linear(dropout.mask(x_ref, 7) * x_ref, w_ref[:, 2:5])
    want.backward(grad)
    assert torch.allclose(got, want) and torch.allclose(x.grad, x_ref.grad)
    assert torch.allclose(linear.weight.grad, w_ref.grad)
    assert not linear.weight.grad[:, [0, 1, 5]].any()


def test_comm_model_of_one_rank_is_silent():
    shape = grid_shape("1d", 1)
    part = BlockPartition.even(10, 1)
    calls = [SpmmCall(4, "forward_spmm"), SpmmCall(4, "backward_spmm")]
    assert predict(shape, part, 0, calls, value_bytes=8, num_params=100) == {}


def test_comm_model_1d_two_ranks():
    shape = grid_shape("1d", 2)
    part = BlockPartition.even(10, 2)
    got = predict(shape, part, 0, [SpmmCall(3, "forward_spmm")], value_bytes=8, num_params=7)
    assert got["forward_spmm"] == {"sent": 5 * 3 * 8, "recv": 5 * 3 * 8}
    assert got["grad_allreduce"] == {"sent": 7 * 8, "recv": 7 * 8}


def test_spmm_schedule_follows_the_layers():
    gcn = spmm_schedule(_cfg(hidden=40), in_dim=32, out_dim=3)
    assert [c.width for c in gcn if c.phase == "forward_spmm"] == [32, 40, 3] * 2
    assert [c.width for c in gcn if c.phase == "backward_spmm"] == [40, 3]
    sage = spmm_schedule(_cfg(model="sage", hidden=32), in_dim=32, out_dim=3)
    assert [c.width for c in sage if c.phase == "backward_spmm"] == [32, 3]
    # Column-sliced features (2D/3D): only a first layer aggregating them multiplies slices.
    assert [c.sliced for c in spmm_schedule(_cfg(hidden=40), 32, 3, sliced=True)] == [
        True, False, False] * 2 + [False, False]
    assert not any(c.sliced for c in spmm_schedule(_cfg(hidden=16), 32, 3, sliced=True))
    assert input_slicing(_cfg(hidden=40), 32, 3) == InputSlicing((40, 40), 32 * 40)
    assert input_slicing(_cfg(model="sage", hidden=8), 32, 3) == InputSlicing(
        (8,) * 4, 2 * 32 * 8)


# ---------------------------------------------------------------------- real gloo ranks
def _rank_results(model: Any, result: Any, report: Any) -> dict[str, Any]:
    return {
        "losses": [h.loss for h in result.history],
        "test_accuracy": result.test_accuracy,
        "weights": {k: v.clone() for k, v in model.state_dict().items()},
        "grads": {n: p.grad.clone() for n, p in model.named_parameters()},
        "measured": report.epoch_bytes, "predicted": report.predicted,
        "constant": report.constant_across_epochs,
    }


def _all_cases(graph: Any, cases: list[tuple], work: str) -> dict[str, Any]:
    """Rank body: every case on the first p ranks of one 8-rank job, then a resume."""
    session = init_session("gloo", timeout_s=60)
    out: dict[str, Any] = {}
    try:
        for name, overrides, algo, p, c, source in cases:
            parts = Path(work) / "parts.txt" if source == "parts" else None
            dcfg = DistributedConfig(algo=algo, replication=c, backend="gloo", partition=parts)
            data = Path(work) / "shards" if source == "shards" else graph
            got = train_rank(data, _cfg(**overrides), dcfg, session, members=range(p))
            if got is not None:
                out[name] = _rank_results(*got)
        ckpt = Path(work) / "run.pt"
        dcfg = DistributedConfig(algo="2d", backend="gloo")
        first = _cfg(epochs=2, checkpoint=ckpt, checkpoint_every=1)
        train_rank(graph, first, dcfg, session, members=range(4))
        again = replace(first, epochs=3, resume=True)
        got = train_rank(graph, again, dcfg, session, members=range(4))
        if got is not None:
            out["resumed"] = _rank_results(*got)
    finally:
        close_session()
    return out


@pytest.fixture(scope="module")
def rank_outputs(graph, tmp_path_factory):
    work = tmp_path_factory.mktemp("ranks")
    parts = torch.randint(0, 2, (graph.num_nodes,), generator=torch.Generator().manual_seed(1))
    (work / "parts.txt").write_text("\n".join(str(v) for v in parts.tolist()))
    write_partitioned(graph, work / "shards", "3d", 8, 1, "sage", normalize_features=False)
    # The wall timeout only guards against a hang; gloo's 60 s timeout fires first.
    return spawn(_all_cases, 8, (graph, CASES, str(work)), wall_timeout_s=400)


def _key(overrides: dict[str, Any]) -> tuple:
    return tuple(sorted(overrides.items()))


@pytest.fixture(scope="module")
def references(graph):
    out = {}
    for overrides in {_key(case[1]): case[1] for case in CASES}.values():
        m, result = train_single(graph, _cfg(**overrides))
        out[_key(overrides)] = {
            "losses": [h.loss for h in result.history], "test_accuracy": result.test_accuracy,
            "weights": m.state_dict(), "grads": {n: p.grad for n, p in m.named_parameters()},
        }
    return out


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool((a - b).abs().max() <= RTOL * b.abs().max())


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_distributed_training_equals_single_process(rank_outputs, references, case):
    name, overrides, _, p, _, _ = case
    ref = references[_key(overrides)]
    for rank in range(p):
        got = rank_outputs[rank][name]
        assert got["losses"] == pytest.approx(ref["losses"], rel=RTOL)
        assert got["test_accuracy"] == pytest.approx(ref["test_accuracy"], rel=RTOL)
        for key, w in ref["weights"].items():
            assert _close(got["weights"][key], w), (rank, key)
        for key, g in ref["grads"].items():
            assert _close(got["grads"][key], g), (rank, key)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_measured_bytes_equal_the_model(rank_outputs, case):
    name, _, _, p, _, _ = case
    for rank in range(p):
        got = rank_outputs[rank][name]
        measured = {k: {"sent": v.get("sent", 0), "recv": v.get("recv", 0)}
                    for k, v in got["measured"].items()}
        assert got["constant"]
        assert measured == got["predicted"], rank
        assert set(measured) >= {"forward_spmm", "backward_spmm", "grad_allreduce"}


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("name", ["gcn-2d-4", "sage-2d-4", "gcn-3d-8"])
def test_planner_gives_the_measured_bytes_of_sliced_grids(graph, rank_outputs, name):
    """Without ranks, the planner gives every rank's SpMM bytes and the first layer's row
    all-reduces of a real 2D/3D run exactly (GCN aggregating the sliced features first,
    GraphSAGE shrinking them first)."""
    _, overrides, algo, p, _, _ = next(case for case in CASES if case[0] == name)
    cfg = _cfg(**overrides)
    planned = plan_epoch(layout(graph, grid_shape(algo, p), "block", cfg.model), "dense",
                         cfg, 8)
    assert "input_allreduce" in planned["phases"]
    for rank in range(p):
        measured = rank_outputs[rank][name]["measured"]
        for key in ("sent", "recv"):
            assert planned["bytes_per_epoch"][key][rank] == sum(
                measured[phase][key] for phase in planned["phases"]), (rank, key)


@pytest.mark.distributed
@pytest.mark.slow
def test_resume_on_the_same_grid_is_exact(rank_outputs, references):
    """A 2D run stopped after 2 of 3 epochs and resumed ends bit-identical, rank by rank,
    to the uninterrupted 2D run (and so, within float64 rounding, to one process)."""
    ref = references[_key({})]
    for rank in range(4):
        got, uninterrupted = rank_outputs[rank]["resumed"], rank_outputs[rank]["gcn-2d-4"]
        assert got["losses"] == uninterrupted["losses"]
        for key, w in uninterrupted["weights"].items():
            assert torch.equal(got["weights"][key], w)
        assert got["losses"] == pytest.approx(ref["losses"], rel=RTOL)


def _killed_peer() -> None:
    """Rank body: rank 1 dies while rank 0 waits for it inside a collective."""
    session = init_session("gloo", timeout_s=60)
    if session.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    graph = load_any(GRAPH_SPEC, None, seed=0)
    train_rank(graph, _cfg(), DistributedConfig(algo="1d", backend="gloo"), session)


@pytest.mark.distributed
def test_a_killed_rank_ends_the_run_with_its_name():
    start = time.monotonic()
    with pytest.raises(RankFailedError, match=r"rank 1 of 2 failed \(killed by SIGKILL\)"):
        spawn(_killed_peer, 2, wall_timeout_s=120)
    assert time.monotonic() - start < 120


def _raising_peer() -> None:
    """Rank body: rank 1 raises while rank 0 waits for it inside a collective."""
    session = init_session("gloo", timeout_s=60)
    if session.rank == 1:
        raise ValueError("boom on purpose")
    graph = load_any(GRAPH_SPEC, None, seed=0)
    train_rank(graph, _cfg(), DistributedConfig(algo="1d", backend="gloo"), session)


@pytest.mark.distributed
def test_a_raising_rank_ends_the_run_with_its_error():
    expected = r"rank 1 of 2 failed \(ValueError: boom on purpose\)"
    with pytest.raises(RankFailedError, match=expected):
        spawn(_raising_peer, 2, wall_timeout_s=120)


def test_ranks_are_bound_round_robin_or_to_equal_shares(monkeypatch):
    from sparsegnn.distributed import affinity

    monkeypatch.delenv(BIND_ENV, raising=False)
    monkeypatch.setattr(affinity, "_core_of", lambda cpu: (0, cpu))  # one thread per core
    assert rank_cpus(4, {0, 1}) == [{0}, {1}, {0}, {1}]
    assert rank_cpus(3, {2, 5, 7, 9}) == [{2}, {5}, {7}]
    assert rank_cpus(2, set(range(8))) == [{0, 1, 2, 3}, {4, 5, 6, 7}]
    assert rank_cpus(1, {0, 1}) is None  # one rank keeps every CPU
    assert rank_cpus(4, {3}) is None  # already bound to one CPU by an outer launcher
    monkeypatch.setenv(BIND_ENV, "0")
    assert rank_cpus(4, {0, 1}) is None


def test_binding_keeps_hyperthread_siblings_together_or_apart(monkeypatch):
    """Two cores of two hyperthreads each, numbered as Linux often does (siblings 0 and 2,
    1 and 3): a share of two CPUs is one whole core; one CPU per rank uses every core's
    first thread before any second one."""
    from sparsegnn.distributed import affinity

    monkeypatch.delenv(BIND_ENV, raising=False)
    monkeypatch.setattr(affinity, "_core_of", lambda cpu: (0, cpu % 2))
    assert rank_cpus(2, {0, 1, 2, 3}) == [{0, 2}, {1, 3}]
    assert rank_cpus(3, {0, 1, 2, 3}) == [{0}, {1}, {2}]
    assert rank_cpus(6, {0, 1, 2, 3}) == [{0}, {1}, {2}, {3}, {0}, {1}]


def test_a_torchrun_worker_is_bound_only_where_nothing_bound_it(monkeypatch):
    from sparsegnn.distributed import affinity

    monkeypatch.delenv(BIND_ENV, raising=False)
    monkeypatch.setattr(affinity, "_core_of", lambda cpu: (0, cpu))
    monkeypatch.setattr(affinity.os, "cpu_count", lambda: 2)
    bound: list[set[int]] = []
    monkeypatch.setattr(affinity.os, "sched_setaffinity", lambda pid, cpus: bound.append(cpus))
    monkeypatch.setattr(affinity.os, "sched_getaffinity", lambda pid: {0, 1})
    affinity.bind_torchrun_worker(3, 4)
    assert bound == [{1}]
    monkeypatch.setattr(affinity.os, "sched_getaffinity", lambda pid: {1})  # taskset's
    affinity.bind_torchrun_worker(0, 4)
    assert bound == [{1}]


def _own_cpus() -> list[int]:
    """Rank body: the CPUs this rank may run on."""
    return sorted(os.sched_getaffinity(0))


@pytest.mark.distributed
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to bind to")
def test_spawned_ranks_run_on_their_own_cpus():
    got = spawn(_own_cpus, 3, wall_timeout_s=120)
    assert got == [sorted(c) for c in rank_cpus(3) or []]
    assert len({tuple(c) for c in got[:2]}) == 2  # the first two do not share a CPU


# ---------------------------------------------------------------------- command line
def test_cli_rejects_a_grid_that_does_not_fit(capsys):
    assert main(["train", "--nprocs", "6", "--algo", "2d", "--dataset", GRAPH_SPEC]) == 2
    assert "square number of ranks" in capsys.readouterr().err


@pytest.mark.distributed
def test_cli_trains_on_spawned_ranks_and_reports_bytes(capsys):
    argv = ["train", "--nprocs", "2", "--algo", "1d", "--dataset", GRAPH_SPEC, "--epochs", "3",
            "--no-progress", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["world_size"] == 2 and out["epochs_run"] == 3
    assert out["comm"]["matches_model"]
    assert len(out["comm"]["per_rank"]) == 2
    comm = out["comm"]
    assert comm["total_bytes_per_epoch"] == comm["comm_model"]["total_bytes_per_epoch"] > 0
    model = comm["comm_model"]["per_rank"]
    assert [r["sent"] for r in comm["per_rank"]] == [r["sent"] for r in model]


@pytest.mark.distributed
def test_torchrun_trains_a_replicated_grid_on_a_graph_loaded_by_name():
    """Under torchrun the grid is torchrun's world: ``--algo 1.5d --replication 2`` on a
    graph given by name must not be checked against ``--nprocs`` (1 by default)."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", "4", "-m", "sparsegnn", "train", "--dataset", GRAPH_SPEC,
            "--algo", "1.5d", "--replication", "2", "--epochs", "2", "--no-progress",
            "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["grid"] == [2, 2, 1] and out["world_size"] == 4


def test_data_partition_writes_one_file_per_rank(tmp_path, capsys):
    out = tmp_path / "parts"
    argv = ["data", "partition", GRAPH_SPEC, str(out), "--algo", "2d", "--nprocs", "4",
            "--seed", "0", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["ranks"] == 4 and sorted(p.name for p in out.iterdir()) == [
        "manifest.json", "rank0.npz", "rank1.npz", "rank2.npz", "rank3.npz"]
    shard = read_shard(out, 3)  # grid coordinates (1, 1): rows 75:150, columns 16:32
    assert shard.x.shape == (75, 16) and shard.part.offsets == (0, 75, 150)
    assert shard.columns == (16, 32) and shard.num_features == 32
    x = row_normalize(load_any(GRAPH_SPEC, None, seed=0).x)
    assert torch.equal(shard.x, x[75:, 16:])
    assert set(shard.blocks.forward) == {1} and shard.blocks.backward is shard.blocks.forward
    assert torch.equal(shard.blocks.forward[1].col, shard.blocks.forward[1].col.long())


def _send_wide_tile() -> list[int]:
    """Rank body: rank 0 broadcasts a tile whose column ids do not fit a float32."""
    session = init_session("gloo", timeout_s=60)
    try:
        grid = ProcessGrid.create(grid_shape("1d", 2))
        assert grid is not None
        cols = torch.tensor([3, 2**24 + 1, 2**40 + 7])
        tile = CSRMatrix(torch.tensor([0, 2, 3]), cols, torch.ones(3), (2, 2**41))
        got = Communicator().broadcast_sparse(
            tile if session.rank == 0 else None, tile.shape, tile.nnz, 0, grid.col,
            torch.float32, torch.device("cpu"),
        )
        return got.col.tolist() + got.crow.tolist()
    finally:
        close_session()


@pytest.mark.distributed
def test_sparse_tiles_travel_with_exact_integer_indices():
    for got in spawn(_send_wide_tile, 2, wall_timeout_s=120):
        assert got == [3, 2**24 + 1, 2**40 + 7, 0, 2, 3]
