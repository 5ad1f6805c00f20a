"""Distributed full-graph training on real gloo ranks: equality with one process, the
measured bytes, resume, failing ranks, CPU binding, and the command line and torchrun.

The equality tests start one job of 8 gloo ranks and run every algorithm on sub-grids of
it (starting processes dominates the cost on a small machine), then compare each rank's
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
from sparsegnn.data import load_any
from sparsegnn.distributed import (
    Communicator,
    ProcessGrid,
    RankFailedError,
    close_session,
    grid_shape,
    init_session,
    spawn,
)
from sparsegnn.distributed.layout.partitioned import write_partitioned
from sparsegnn.distributed.planning.planner import layout, plan_epoch
from sparsegnn.distributed.runtime.affinity import rank_cpus
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.fullgraph import train_single
from sparsegnn.train.rank_train import DistributedConfig, train_rank
from test_distributed import GRAPH_SPEC, _cfg

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


@pytest.fixture(scope="module")
def graph():
    return load_any(GRAPH_SPEC, None, seed=0)


# ---------------------------------------------------------------------- real gloo ranks
def _rank_results(model: Any, result: Any, report: Any) -> dict[str, Any]:
    return {
        "losses": [h.loss for h in result.history],
        "test_accuracy": result.test_accuracy,
        "weights": {k: v.clone() for k, v in model.state_dict().items()},
        "grads": {n: p.grad.clone() for n, p in model.named_parameters()},
        "measured": report.epoch_bytes.to_dict(), "predicted": report.predicted.to_dict(),
        "constant": report.constant_across_epochs,
    }


def _all_cases(graph: Any, cases: list[tuple], work: str) -> dict[str, Any]:
    """Rank body: every case on the first p ranks of one 8-rank job, then a resume."""
    session = init_session("gloo", timeout_s=60)
    out: dict[str, Any] = {}
    try:
        for name, overrides, algo, p, c, source in cases:
            parts = Path(work) / "parts.txt" if source == "parts" else "block"
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
