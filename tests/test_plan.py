"""The volume planner: vectorised formulas equal the comm model and the ranks' counters.

That the planner equals the bytes a real p=4 gloo run measures is tested in
tests/test_sparse_comm.py (one job of ranks for both); here the planner is checked
against :func:`sparsegnn.distributed.predict` and brute force, the chunked column-wise
count against the one-sort count it replaced, and the CLI is run.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from sparsegnn.cli.main import main
from sparsegnn.data import load_any
from sparsegnn.distributed import (
    BlockPartition,
    SpmmCall,
    block_pairs,
    epoch_volume,
    grid_shape,
    predict,
    tile_nnz,
)
from sparsegnn.distributed.planning.plan import Pattern, phase_pairs, relabelled
from sparsegnn.distributed.planning.planner import PlanGraph, adjacency
from sparsegnn.nn import operator_for
from sparsegnn.partition import Adjacency, pair_rows
from sparsegnn.partition.volume import column_pairs
from sparsegnn.sparse import CSRMatrix

SPEC = "sbm:nodes=200,blocks=4,degree=6"
CALLS = [SpmmCall(5, "forward_spmm"), SpmmCall(3, "forward_spmm"), SpmmCall(3, "backward_spmm")]


@pytest.fixture(scope="module")
def operator():
    g = load_any(SPEC, None, seed=0)
    return operator_for("gcn", CSRMatrix.from_edge_index(g.edge_index, g.num_nodes))


def _uneven(n: int, blocks: int) -> BlockPartition:
    parts = torch.randint(0, blocks, (n,), generator=torch.Generator().manual_seed(3))
    return BlockPartition.from_parts(parts, blocks)


@pytest.mark.parametrize(("algo", "p", "c"), [("1d", 4, 1), ("1.5d", 8, 2), ("1.5d", 9, 3),
                                              ("2d", 4, 1), ("3d", 8, 1)])
def test_dense_plan_equals_the_comm_model(operator, algo, p, c):
    shape = grid_shape(algo, p, c)
    part = _uneven(operator.shape[0], shape.row_blocks)
    a = relabelled(operator, part)
    nnz = {"forward_spmm": tile_nnz(a, part, shape), "backward_spmm": tile_nnz(a.t(), part, shape)}
    planned = epoch_volume(shape, part, operator, CALLS, value_bytes=4, comm="dense")
    for rank in range(p):
        model = predict(shape, part, rank, CALLS, value_bytes=4, num_params=0, nnz=nnz)
        for phase, vol in planned.items():
            assert model[phase] == {"sent": vol.sent[rank], "recv": vol.recv[rank]}, rank


@pytest.fixture(scope="module")
def directed():
    """A non-symmetric operator: SAGE's mean over in-neighbours of a directed R-MAT."""
    g = load_any("rmat:scale=7,undirected=false", None, seed=0)
    return operator_for("sage", CSRMatrix.from_edge_index(g.edge_index, g.num_nodes))


@pytest.mark.parametrize("name", ["operator", "directed"])
def test_block_pairs_count_distinct_needed_rows(request, name):
    a = request.getfixturevalue(name)
    part = _uneven(a.shape[0], 3)
    dense = relabelled(a, part).to_dense() != 0
    for transpose, m in ((False, dense), (True, dense.T)):
        expected = np.zeros((3, 3), dtype=np.int64)
        for i in range(3):
            for j in range(3):
                if i != j:
                    (r0, r1), (c0, c1) = part.block(i), part.block(j)
                    expected[i, j] = int(m[r0:r1, c0:c1].any(0).sum())
        assert block_pairs(a, part, transpose).tolist() == expected.tolist()


def _one_sort_count(rows, cols, row_part, col_part, nparts):
    """The count before it was streamed: one unique key per (row part, column) pair."""
    rp, cp = row_part[rows], col_part[cols]
    cross = rp != cp
    keys = np.unique(rp[cross] * len(col_part) + cols[cross])
    p, c = np.divmod(keys, len(col_part))
    flat = np.bincount(p * nparts + col_part[c], minlength=nparts * nparts)
    return flat.reshape(nparts, nparts)


@pytest.mark.parametrize("chunk", [1, 3, 7, 100, 1 << 22])
@pytest.mark.parametrize("shape", [(300, 300), (300, 300, "symmetric"), (250, 180)])
def test_chunked_count_equals_the_one_sort_count(chunk, shape):
    # Duplicates, empty columns and a hub column far longer than a chunk, so most chunk
    # targets fall inside a column; square symmetric, square and rectangular patterns.
    rng = np.random.default_rng(chunk)
    n_rows, n_cols = shape[0], shape[1]
    rows = np.concatenate([rng.integers(0, n_rows, 3000), rng.integers(0, n_rows, 200)])
    cols = np.concatenate([rng.integers(0, n_cols // 2, 3000), np.full(200, 7)])
    if len(shape) == 3:
        rows, cols = np.concatenate([rows, cols]), np.concatenate([cols, rows])
    nparts = 6
    row_part, col_part = rng.integers(0, nparts, n_rows), rng.integers(0, nparts, n_cols)
    if n_rows == n_cols:
        col_part = row_part
    expected = _one_sort_count(rows, cols, row_part, col_part, nparts).tolist()
    by_col = sp.csc_matrix((np.ones(len(rows), dtype=bool), (rows, cols)), (n_rows, n_cols))
    got = column_pairs(by_col.indptr, by_col.indices, row_part, col_part, nparts, chunk)
    assert got.tolist() == expected
    assert pair_rows(rows, cols, row_part, col_part, nparts).tolist() == expected


@pytest.mark.parametrize("spec", ["rmat:scale=7,undirected=false", "rmat:7"])
def test_plan_graph_keeps_what_the_operator_and_partitioners_need(spec):
    g = load_any(spec, None, seed=0)
    op = operator_for("gcn", CSRMatrix.from_edge_index(g.edge_index, g.num_nodes))
    kept = PlanGraph.of(g)
    assert kept.pattern.symmetric == (spec == "rmat:7")
    part = _uneven(g.num_nodes, 4)
    for phase, pair in phase_pairs(kept.pattern, part).items():
        assert pair.tolist() == phase_pairs(op, part)[phase].tolist()
    mine, ref = adjacency(kept.pattern), Adjacency.from_edge_index(g.edge_index, g.num_nodes)
    assert mine.indptr.tolist() == ref.indptr.tolist()
    assert mine.indices.tolist() == ref.indices.tolist()
    assert torch.equal(kept.operator().crow, op.crow) and torch.equal(kept.operator().col, op.col)
    by_op = Pattern.of(op)  # GCN's self loops included: dropped again for the partitioners
    assert by_op.symmetric == kept.pattern.symmetric
    assert adjacency(by_op).indices.tolist() == ref.indices.tolist()


def test_sparse_plan_is_below_dense_and_rejects_2d(operator):
    shape = grid_shape("1d", 4)
    part = BlockPartition.even(operator.shape[0], 4)
    sparse = epoch_volume(shape, part, operator, CALLS, value_bytes=4, comm="sparse")
    dense = epoch_volume(shape, part, operator, CALLS, value_bytes=4, comm="dense")
    for phase in dense:
        assert (sparse[phase].sent <= dense[phase].sent).all()
        assert sparse[phase].total == sparse[phase].recv.sum()
    with pytest.raises(ValueError, match=r"1d and 1\.5d only"):
        epoch_volume(grid_shape("2d", 4), part, operator, CALLS, value_bytes=4, comm="sparse")


def test_plan_cli_reports_per_rank_volumes(capsys):
    argv = ["plan", "--graph", SPEC, "--parts", "8", "--algo", "1.5d", "--replication", "2",
            "--partitioner", "metis", "--comm", "sparse", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["ranks"] == 8 and len(out["bytes_per_epoch"]["sent"]) == 8
    vol = out["bytes_per_epoch"]
    assert vol["total"] == sum(vol["sent"]) == sum(vol["recv"])
    assert vol["max_per_rank"] == max(max(vol["sent"]), max(vol["recv"]))
    assert out["rows_per_spmm"]["total"] > 0


def test_plan_cli_plots(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "plan.png"
    argv = ["plan", "--graph", SPEC, "--parts", "4", "--comm", "dense", "--plot", str(png)]
    assert main(argv) == 0
    assert png.stat().st_size > 0 and "MiB" in capsys.readouterr().out


@pytest.mark.parametrize("model", ["gcn", "sage"])
@pytest.mark.parametrize(("in_dim", "hidden"), [(16, 16), (32, 16), (16, 32)])
def test_spmm_schedule_multiplies_where_the_layers_do(model: str, in_dim: int,
                                                      hidden: int) -> None:
    """The byte model's schedule follows each layer's ``transforms_first``: a first layer
    that aggregates raw features multiplies at the input width with no backward SpMM;
    one that maps first multiplies at its output width and needs one."""
    from types import SimpleNamespace

    from sparsegnn.distributed.planning.comm_model import spmm_schedule
    from sparsegnn.nn.conv import GCNConv, SAGEConv

    layer = (GCNConv if model == "gcn" else SAGEConv)(in_dim, hidden)
    cfg = SimpleNamespace(model=model, hidden=hidden, num_layers=2)
    calls = spmm_schedule(cfg, in_dim, 4)
    backward = [c for c in calls if c.phase == "backward_spmm"]
    assert calls[0].width == (hidden if layer.transforms_first else in_dim)
    assert len(backward) == (2 if layer.transforms_first else 1)


def test_plan_train_and_auto_predict_memory_alike(capsys):
    """One predictor: ``plan``'s per-rank memory is what ``train --max-rank-memory``
    checks for the same run, and what ``plan --auto`` / ``train --algo auto`` rank by
    (there with the profile's process part)."""
    from sparsegnn.distributed.planning.autoplan import auto_plan
    from sparsegnn.distributed.planning.cost_profile import LinkCost, Profile
    from sparsegnn.distributed.planning.planner import PlanConfig
    from sparsegnn.distributed.planning.rank_memory import DEFAULT_PROCESS_BYTES
    from sparsegnn.train.fullgraph import TrainConfig
    from sparsegnn.train.memory import check_graph_rank_memory

    assert main(["plan", "--graph", SPEC, "--parts", "4", "--comm", "dense", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    graph = load_any(SPEC, None, seed=0)
    checked = check_graph_rank_memory(graph, TrainConfig(), 64.0, 4, mode="fullgraph",
                                      comm="dense")
    assert out["memory_per_rank_by_kind"] == checked
    assert out["memory_bytes_per_rank"] == sum(checked.values())
    assert checked["process"] == DEFAULT_PROCESS_BYTES
    links = {k: LinkCost(1e-5, 1e-9) for k in ("broadcast", "all_reduce", "all_gather",
                                                "all_to_all")}
    profile = Profile("gloo", 4, {8: 2e-9}, 1e-9, 1e-10, 1e-9, links,
                      rank_overhead_bytes=1 << 20, rank_base_bytes=2 << 20)
    ranked = auto_plan(PlanGraph.of(graph, "gcn"), 4, profile, PlanConfig(4))
    one_d = next(c for c in ranked if (c.config.algo, c.config.comm) == ("1d", "dense"))
    assert one_d.memory_bytes == sum({**checked, "process": 3 << 20}.values())
