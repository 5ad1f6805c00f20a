"""R-GCN on process grids: 3 epochs of Adam on 1D, 1.5D, 2D and 3D grids end with the
one-process weights (float64, 1e-10), with features or featureless, full, basis or
block-diagonal relation weights, dropout, a relabelling partitioner, sparsity-aware
communication and overlapped transfers; every rank's bytes
per phase equal the analytic model (one SpMM per relation, composed) in every epoch; a
grid run resumed from its checkpoint ends bit-identical to an uninterrupted one.

One job of 8 gloo ranks runs every case on a sub-grid (starting processes dominates on a
small machine); the typed graph is a typed SBM of 48 nodes, 3 node types, 8 relations.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from sparsegnn.data.typed_sbm import typed_sbm
from sparsegnn.distributed import (
    BlockPartition,
    close_session,
    grid_shape,
    init_session,
    spawn,
    tile_nnz,
)
from sparsegnn.distributed.layout.partitioned import partition_for
from sparsegnn.distributed.planning.plan import phase_pairs
from sparsegnn.distributed.planning.relational_model import rgcn_predict, rgcn_schedule
from sparsegnn.nn.rgcn import relation_operators
from sparsegnn.train.rgcn_grid import train_rgcn_rank
from sparsegnn.train.rgcn_task import RGCNRanks, RGCNRequest, fit_rgcn, relational_problem

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

BASE = RGCNRequest(hidden=8, epochs=3, lr=0.05, dtype="float64", seed=2, progress=False)
# name, algo, ranks, replication, request changes
CASES: list[tuple[str, str, int, int, dict[str, Any]]] = [
    ("1d", "1d", 4, 1, {"dropout": 0.5}),
    ("1.5d", "1.5d", 4, 2, {"num_bases": 2}),
    ("2d", "2d", 4, 1, {"num_blocks": 2, "dropout": 0.5}),
    ("3d", "3d", 8, 1, {}),
    ("2d-featureless", "2d", 4, 1, {"featureless": True, "num_bases": 2}),
    ("1d-random-featureless", "1d", 4, 1, {"featureless": True, "partition": "random"}),
    ("1d-sparse", "1d", 4, 1, {"comm": "sparse", "partition": "random", "num_bases": 2}),
    ("1.5d-sparse-overlap", "1.5d", 4, 2, {"comm": "sparse", "overlap": True}),
    ("1d-overlap-featureless", "1d", 4, 1, {"overlap": True, "featureless": True}),
]


def _graph():
    return typed_sbm(48, blocks=4, degree=2.0, num_features=6, seed=0)


def _request(algo: str, p: int, c: int, change: dict[str, Any]) -> RGCNRequest:
    change = dict(change)
    ranks = RGCNRanks(algo=algo, nprocs=p, replication=c,  # type: ignore[arg-type]
                      partition=change.pop("partition", "block"),
                      comm=change.pop("comm", "dense"), overlap=change.pop("overlap", False))
    return replace(BASE, ranks=ranks, **change)


def _all_cases(graph: Any) -> dict[str, Any]:
    """Rank body: every case on the first p ranks of the job."""
    init_session("gloo", timeout_s=120)
    out = {}
    try:
        for name, algo, p, c, change in CASES:
            run = train_rgcn_rank(_request(algo, p, c, change), grid_shape(algo, p, c),
                                  graph, members=range(p))  # type: ignore[arg-type]
            if run is not None:
                out[name] = {"weights": dict(run.model.state_dict()), "report": run.report,
                             "losses": [h.loss for h in run.outcome.history]}
    finally:
        close_session()
    return out


@pytest.fixture(scope="module")
def rank_outputs():
    return spawn(_all_cases, 8, (_graph(),), wall_timeout_s=500)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_grid_training_equals_one_process(rank_outputs, case):
    name, algo, p, c, change = case
    request = _request(algo, p, c, change)
    model, outcome = fit_rgcn(replace(request, ranks=None), _graph())
    assert outcome.epochs_run == 3
    for rank in range(p):
        got = rank_outputs[rank][name]
        for key, w in model.state_dict().items():
            assert (got["weights"][key] - w).abs().max() <= 1e-10, (rank, key)
        assert got["losses"] == pytest.approx([h.loss for h in outcome.history], abs=1e-12)


def _predicted(request: RGCNRequest, algo: str, p: int, c: int, rank: int,
               model_params: int) -> dict[str, dict[str, int]]:
    """The model's bytes, built here from the graph (not from what the rank reported)."""
    shape = grid_shape(algo, p, c)  # type: ignore[arg-type]
    _, rel = relational_problem(request, _graph())
    assert request.ranks is not None
    part = partition_for(rel.num_nodes, shape, request.ranks.partition, rel.edge_index,
                         request.seed)
    nnz = pairs = None
    originals = relation_operators(rel.edge_index, rel.edge_type, rel.num_relations,
                                   rel.num_nodes)
    if not shape.row_wise:
        mats = [m if part.order is None else m.permute(part.order) for m in originals]
        nnz = [{"forward_spmm": tile_nnz(m, part, shape),
                "backward_spmm": tile_nnz(m.t(), part, shape)} for m in mats]
    if request.ranks.comm == "sparse":
        pairs = [phase_pairs(m, part) for m in originals]
    first = rel.num_nodes if request.featureless else 6
    calls = rgcn_schedule([first, 8, 4], featureless=request.featureless,
                          block_diagonal=request.num_blocks is not None)
    assert isinstance(part, BlockPartition)
    return rgcn_predict(shape, part, rank, calls, relations=rel.num_relations,
                        value_bytes=8, num_params=model_params, nnz=nnz, pairs=pairs)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_measured_bytes_equal_the_model(rank_outputs, case):
    name, algo, p, c, change = case
    request = _request(algo, p, c, change)
    params = sum(w.numel() for w in rank_outputs[0][name]["weights"].values())
    for rank in range(p):
        report = rank_outputs[rank][name]["report"]
        assert report.constant_across_epochs, rank
        predicted = _predicted(request, algo, p, c, rank, params)
        assert report.epoch_bytes.totals().phases == predicted, rank
        assert report.matches_model(), rank
        assert predicted["forward_spmm"]["recv"] > 0 and predicted["backward_spmm"]["recv"] > 0


def _resume_runs(folder: str) -> dict[str, Any]:
    """Rank body: 4 epochs straight, and 2 epochs then a resume to 4, on a 1D grid of 2."""
    init_session("gloo", timeout_s=120)
    out = {}
    try:
        base = replace(_request("1d", 2, 1, {"dropout": 0.5}), epochs=4)
        shape = grid_shape("1d", 2)
        straight = train_rgcn_rank(replace(base, checkpoint=Path(folder) / "a.pt"), shape,
                                   _graph())
        half = replace(base, epochs=2, checkpoint=Path(folder) / "b.pt")
        first = train_rgcn_rank(half, shape, _graph())
        resumed = train_rgcn_rank(replace(half, epochs=4, resume=True), shape, _graph())
        assert straight is not None and first is not None and resumed is not None
        out = {"straight": dict(straight.model.state_dict()),
               "resumed": dict(resumed.model.state_dict()),
               "epochs": [h.epoch for h in resumed.outcome.history],
               "first_s": [h.seconds for h in first.outcome.history],
               "restored_s": [h.seconds for h in resumed.outcome.history[:2]]}
    finally:
        close_session()
    return out


def test_a_resumed_grid_run_is_bit_identical(tmp_path):
    """One checkpoint file, written by rank 0, resumes every rank (with dropout drawn)."""
    outs = spawn(_resume_runs, 2, (str(tmp_path),), wall_timeout_s=200)
    for out in outs:
        # every rank resumed rank 0's saved epochs, timings included
        assert out["epochs"] == [0, 1, 2, 3] and out["restored_s"] == outs[0]["first_s"]
        for key, w in out["straight"].items():
            assert torch.equal(out["resumed"][key], w), key
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".pt") == ["a.pt", "b.pt"]
