"""Partitioners: every vertex in one part, sizes within tolerance, exact volumes."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data import from_spec, load_any
from sparsegnn.distributed import BlockPartition
from sparsegnn.partition import (
    PARTITIONERS,
    Adjacency,
    PartitionError,
    part_volume,
    partition,
    refine_max_volume,
)
from sparsegnn.partition.balance import apply_moves, build_table, move_deltas

IMBALANCE = 0.03


@pytest.fixture(scope="module")
def adj():
    g = load_any("sbm:nodes=400,blocks=8,degree=8", None, seed=0)
    return Adjacency.from_edge_index(g.edge_index, g.num_nodes)


@pytest.mark.parametrize("method", PARTITIONERS)
def test_every_vertex_in_exactly_one_balanced_part(adj, method):
    parts = partition(adj, method, 8, seed=0, imbalance=IMBALANCE)
    assert parts.shape == (adj.num_nodes,) and parts.dtype == np.int64
    assert parts.min() >= 0 and parts.max() < 8
    sizes = np.bincount(parts, minlength=8)
    assert sizes.sum() == adj.num_nodes
    # KaHIP and METIS meet the cap up to one vertex of rounding.
    assert sizes.max() <= math.ceil((1 + IMBALANCE) * adj.num_nodes / 8) + 1
    block = BlockPartition.from_parts(torch.from_numpy(parts), 8)
    assert sorted(block.order.tolist()) == list(range(adj.num_nodes))


def test_volume_is_the_connectivity_of_the_parts():
    # path 0-1-2-3, parts [0, 0, 1, 1]: part 0 needs vertex 2, part 1 needs vertex 1.
    adj = Adjacency.from_edge_index(np.array([[0, 1, 2], [1, 2, 3]]), 4)
    vol = part_volume(adj.indptr, adj.indices, np.array([0, 0, 1, 1]), 2)
    assert vol.pair.tolist() == [[0, 1], [1, 0]] and vol.total == 2
    # star centre 0 in part 0 with leaves in parts 1 and 2: its row goes to both, once each
    star = Adjacency.from_edge_index(np.array([[0, 0, 0], [1, 2, 3]]), 4)
    vol = part_volume(star.indptr, star.indices, np.array([0, 1, 2, 2]), 3)
    assert vol.send.tolist() == [2, 1, 2] and vol.recv.tolist() == [3, 1, 1]


def test_edge_cut_partitioners_beat_random(adj):
    def total(method: str) -> int:
        return part_volume(adj.indptr, adj.indices, partition(adj, method, 8), 8).total

    assert total("metis") < total("random") / 2
    assert total("kahip") < total("random") / 2


def test_refinement_never_raises_the_maximum(adj):
    start = partition(adj, "random", 4, seed=1)
    before = part_volume(adj.indptr, adj.indices, start, 4)
    after = part_volume(adj.indptr, adj.indices, refine_max_volume(adj, start, 4), 4)
    assert after.max_per_rank <= before.max_per_rank
    assert after.total <= 1.1 * before.total


def test_move_deltas_are_the_exact_change_of_a_single_move():
    """Every scored move's predicted weighted change equals a full recount after making
    that move alone, for arbitrary per-part weights."""
    g = from_spec("rmat:8,seed=3")
    adj = Adjacency.from_edge_index(g.edge_index, g.num_nodes)
    nparts = 5
    parts = partition(adj, "random", nparts, seed=2)
    src = adj.sources()
    table = build_table(src, adj.indices, parts, nparts)
    rng = np.random.default_rng(0)
    ws, wr = rng.random(nparts) + 0.1, rng.random(nparts) + 0.1
    verts = np.arange(0, adj.num_nodes, 7)
    owner, target, delta = move_deltas(adj, parts, table, verts, nparts, ws, wr, rng)
    assert len(owner) > len(verts)  # several targets per vertex
    for i, b, d in zip(owner, target, delta, strict=True):
        moved = parts.copy()
        moved[verts[i]] = b
        after = build_table(src, adj.indices, moved, nparts)
        exact = ws @ (after.send - table.send) + wr @ (after.recv - table.recv)
        assert d == pytest.approx(exact)
    assert (build_table(src, adj.indices, parts, nparts).send
            == part_volume(adj.indptr, adj.indices, parts, nparts).send).all()


def test_incremental_table_update_equals_a_rebuild():
    """Moving a batch (adjacent movers included, counts reaching zero) updates the table
    and the loads exactly as rebuilding them from every edge would."""
    g = from_spec("rmat:8,seed=4")
    adj = Adjacency.from_edge_index(g.edge_index, g.num_nodes)
    nparts = 6
    parts = partition(adj, "random", nparts, seed=3)
    src = adj.sources()
    table = build_table(src, adj.indices, parts, nparts)
    rng = np.random.default_rng(1)
    hub = int(np.argmax(np.diff(adj.indptr)))
    movers = np.unique(np.concatenate([[hub], adj.indices[adj.indptr[hub]:adj.indptr[hub] + 5],
                                       rng.choice(adj.num_nodes, 40, replace=False)]))
    targets = (parts[movers] + rng.integers(1, nparts, len(movers))) % nparts
    moved, updated = apply_moves(table, adj, parts, movers, targets, nparts)
    rebuilt = build_table(src, adj.indices, moved, nparts)
    assert (moved[movers] == targets).all()
    np.testing.assert_array_equal(updated.keys, rebuilt.keys)
    np.testing.assert_array_equal(updated.counts, rebuilt.counts)
    np.testing.assert_array_equal(updated.send, rebuilt.send)
    np.testing.assert_array_equal(updated.recv, rebuilt.recv)


def test_refinement_lowers_the_maximum_of_a_metis_partition():
    """On R-MAT, METIS leaves parts holding many hubs as bottlenecks; the refinement must
    lower the maximum strictly, within the size cap and the total budget."""
    g = from_spec("rmat:11,seed=1")
    adj = Adjacency.from_edge_index(g.edge_index, g.num_nodes)
    nparts, n = 16, adj.num_nodes
    start = partition(adj, "metis", nparts, imbalance=0.001)
    before = part_volume(adj.indptr, adj.indices, start, nparts)
    refined = refine_max_volume(adj, start, nparts, IMBALANCE, growth=1.1)
    after = part_volume(adj.indptr, adj.indices, refined, nparts)
    assert after.max_per_rank < 0.95 * before.max_per_rank
    assert after.total <= 1.1 * before.total
    assert np.bincount(refined, minlength=nparts).max() <= math.ceil((1 + IMBALANCE) * n / nparts)


def test_unknown_partitioner_is_refused(adj):
    with pytest.raises(PartitionError, match="unknown partitioner"):
        partition(adj, "spectral", 2)


def test_data_partition_with_a_partitioner(tmp_path, capsys):
    out = tmp_path / "metis4"
    argv = ["data", "partition", "sbm:nodes=120,blocks=4,degree=6", str(out), "--algo", "1d",
            "--nprocs", "4", "--partitioner", "metis", "--seed", "0", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    parts = np.load(out / "parts.npy")
    assert np.bincount(parts, minlength=4).tolist() == result["block_sizes"]


@pytest.mark.parametrize(("n", "p"), [(10, 4), (400, 8), (7, 7), (13, 5)])
def test_block_is_the_even_split_training_uses(n: int, p: int) -> None:
    """One name, one split: the planner's ``block`` partitioner and training's default
    ``--partition block`` give the same contiguous blocks, also when p does not divide n."""
    from sparsegnn.distributed.layout.grid import grid_shape
    from sparsegnn.distributed.layout.partitioned import partition_for

    from_planner = BlockPartition.from_parts(
        torch.from_numpy(partition(Adjacency.from_edge_index(torch.zeros(2, 0, dtype=torch.long),
                                                             n), "block", p)), p)
    from_training = partition_for(n, grid_shape("1d", p), "block")
    assert from_planner.offsets == from_training.offsets
    assert from_training == BlockPartition.even(n, p)
