"""Distributed full-graph training without ranks: grids, tiles, the comm model, feature
slices, CPU binding, and the command line's checks that need no ranks.

The tests that start real gloo ranks are in test_distributed_ranks.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data import load_any, row_normalize
from sparsegnn.distributed import (
    BlockPartition,
    Communicator,
    GridError,
    SpmmCall,
    grid_shape,
    local_blocks,
    predict,
    spmm_schedule,
    tile_nnz,
)
from sparsegnn.distributed.layout.block_partition import split_range, split_sizes, stage_blocks
from sparsegnn.distributed.layout.partitioned import load_shard
from sparsegnn.distributed.layout.shard import read_shard
from sparsegnn.distributed.ops.feature_slices import RowSumLinear, SliceDropout, use_slice_dropout
from sparsegnn.distributed.planning.comm_model import InputSlicing, input_slicing
from sparsegnn.distributed.runtime.affinity import BIND_ENV, rank_cpus
from sparsegnn.distributed.runtime.comm import Group
from sparsegnn.names import replicates, row_wise, slices_features
from sparsegnn.nn import GCN, operator_for
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.fullgraph import TrainConfig

GRAPH_SPEC = "sbm:nodes=150,blocks=3,degree=6"


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
    with pytest.raises(GridError, match="unknown algorithm"):
        grid_shape("4d", 4)


def test_grid_shape_knows_its_family():
    """Row-wise (1D, 1.5D) or feature-slicing (2D, 3D), and the replication."""
    family = {a: (grid_shape(a, p, c).row_wise, grid_shape(a, p, c).replication,
                  grid_shape(a, p, c).feature_slices)
              for a, p, c in [("1d", 4, 1), ("1.5d", 8, 2), ("2d", 4, 1), ("3d", 8, 1)]}
    assert family == {"1d": (True, 1, 1), "1.5d": (True, 2, 1), "2d": (False, 1, 2),
                      "3d": (False, 1, 2)}
    assert [replicates(a) for a in ("1d", "1.5d", "2d", "3d", "auto")] == [
        False, True, False, False, False]
    assert not slices_features("auto") and not row_wise("auto")


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
            c0 = part.block(key)[0] if shape.row_wise else part.inner(key, m, shape.layers)[0]
            dense[lo:hi, c0:c0 + t.shape[1]] += t.to_dense()
            dense_t[lo:hi, c0:c0 + t.shape[1]] += blocks.backward[key].to_dense()
    assert torch.equal(dense, a.to_dense())
    assert torch.equal(dense_t, a.to_dense().T)
    if shape.replication > 1:
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
    shape = grid_shape(algo, p, 2 if replicates(algo) else 1)
    part = BlockPartition.even(graph.num_nodes, shape.rows)
    f = graph.num_features
    for rank in range(p):
        i, j, m = shape.coords(rank)
        lo, hi = part.block(i)
        row = [load_shard(graph, "gcn", shape, shape.rank_of(i, k, m)) for k in range(shape.cols)]
        if shape.row_wise:
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
    # the loss and two correct counts; the validation loss beside its count: one value more
    assert got["metrics"] == {"sent": 8 + 8 + 8, "recv": 8 + 8 + 8}
    with_loss = predict(shape, part, 0, [], value_bytes=4, num_params=0, val_loss=True)
    assert with_loss["metrics"] == {"sent": 4 + 8 + 16, "recv": 4 + 8 + 16}


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


def test_ranks_are_bound_round_robin_or_to_equal_shares(monkeypatch):
    from sparsegnn.distributed.runtime import affinity

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
    from sparsegnn.distributed.runtime import affinity

    monkeypatch.delenv(BIND_ENV, raising=False)
    monkeypatch.setattr(affinity, "_core_of", lambda cpu: (0, cpu % 2))
    assert rank_cpus(2, {0, 1, 2, 3}) == [{0, 2}, {1, 3}]
    assert rank_cpus(3, {0, 1, 2, 3}) == [{0}, {1}, {2}]
    assert rank_cpus(6, {0, 1, 2, 3}) == [{0}, {1}, {2}, {3}, {0}, {1}]


def test_a_torchrun_worker_is_bound_only_where_nothing_bound_it(monkeypatch):
    from sparsegnn.distributed.runtime import affinity

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


# ---------------------------------------------------------------------- command line
def test_cli_rejects_a_grid_that_does_not_fit(capsys):
    assert main(["train", "--nprocs", "6", "--algo", "2d", "--dataset", GRAPH_SPEC]) == 2
    assert "square number of ranks" in capsys.readouterr().err


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
