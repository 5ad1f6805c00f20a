"""Partitioners: every vertex in one part, sizes within tolerance, exact volumes."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data import load_any
from sparsegnn.distributed import BlockPartition
from sparsegnn.partition import (
    PARTITIONERS,
    Adjacency,
    PartitionError,
    part_volume,
    partition,
    refine_max_volume,
)

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
