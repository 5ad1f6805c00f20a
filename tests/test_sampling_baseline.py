"""The benchmark's pure-torch reference sampler samples what ours does (a fair peer)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import torch

from sparsegnn.data import rmat
from sparsegnn.sparse import CSRMatrix


def load_benchmark() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "sampling.py"
    spec = importlib.util.spec_from_file_location("bench_sampling", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_reference_sampler_draws_fanout_true_neighbours_per_vertex() -> None:
    bench = load_benchmark()
    g = rmat(9, 8, seed=2)
    adj = CSRMatrix.from_edge_index(g.edge_index, g.num_nodes)
    dense, degree = adj.to_dense(), adj.row_degrees()
    seeds = torch.randperm(adj.shape[0], generator=torch.Generator().manual_seed(0))[:16]
    nodes, edge_index = bench.torch_sample(
        adj.crow, adj.col, seeds, torch.Generator().manual_seed(1)
    )
    assert torch.equal(nodes[:16], seeds) and nodes.unique().numel() == nodes.numel()
    src, dst = nodes[edge_index[0]], nodes[edge_index[1]]
    assert bool((dense[dst, src] > 0).all())
    pairs = torch.unique(edge_index, dim=1)
    assert pairs.shape[1] == edge_index.shape[1], "a neighbour drawn twice"
    # Seeds are sampled with the first fan-out.
    per_seed = torch.bincount(edge_index[1], minlength=nodes.numel())[:16]
    assert torch.equal(per_seed, degree[seeds].clamp(max=bench.FANOUTS[0]))
