"""GAT, GATv2 and GIN trained by the full-graph trainer (``train_rank``) on 1D, 1.5D, 2D
and 3D grids: weights after 3 epochs equal one process (float64, 1e-10), measured bytes
per phase equal the prediction, whose attention phases equal the analytic model built
from the whole graph; a resumed GAT run ends bit-identical to an uninterrupted one; with
attention dropout (each rank draws its own masks) the replicas of a block stay identical.

Input dropout is on (every rank keeps its rows of the whole graph's masks, as one
process draws them); attention dropout is off where one process is the reference.
One job of 8 gloo ranks runs every case on a sub-grid.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from sparsegnn.data import load_any
from sparsegnn.distributed import BlockPartition, close_session, grid_shape, init_session, spawn
from sparsegnn.distributed.planning.attention_model import (
    distinct_columns,
    edge_volume,
    fetch_rows,
    model_calls,
)
from sparsegnn.nn import graph_operator
from sparsegnn.nn.model_size import layer_widths
from sparsegnn.train.fullgraph import TrainConfig, train_single
from sparsegnn.train.rank_train import DistributedConfig, train_rank

GRAPH_SPEC = "sbm:nodes=60,blocks=3,degree=5"
GRIDS = [("1d", 4, 1), ("1.5d", 4, 2), ("2d", 4, 1), ("3d", 8, 1)]
CASES = [(f"{m}-{a}-{p}", m, a, p, c) for m in ("gat", "gin") for a, p, c in GRIDS] + [
    ("gatv2-1.5d-4", "gatv2", "1.5d", 4, 2), ("gatv2-2d-4", "gatv2", "2d", 4, 1)]
pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def _cfg(model: str, **overrides: Any) -> TrainConfig:
    """Two layers, float64, input dropout on, attention dropout off."""
    return replace(TrainConfig(model=model, hidden=4, heads=2, num_layers=2, dropout=0.5,
                               attention_dropout=0.0, epochs=3, dtype="float64",
                               lr=0.01, progress=False), **overrides)


@pytest.fixture(scope="module")
def graph():
    return load_any(GRAPH_SPEC, None, seed=0)


def _result(model: Any, result: Any, report: Any) -> dict[str, Any]:
    return {"losses": [h.loss for h in result.history],
            "weights": {k: v.clone() for k, v in model.state_dict().items()},
            "measured": report.epoch_bytes.to_dict(), "predicted": report.predicted.to_dict(),
            "constant": report.constant_across_epochs}


def _all_cases(graph: Any, work: str) -> dict[str, Any]:
    """Rank body: every case on the first p ranks, a resumed 2D GAT, and a 1.5D GAT
    with attention dropout."""
    session = init_session("gloo", timeout_s=120)
    out: dict[str, Any] = {}
    try:
        for name, model, algo, p, c in CASES:
            dcfg = DistributedConfig(algo=algo, replication=c, backend="gloo")
            got = train_rank(graph, _cfg(model), dcfg, session, members=range(p))
            if got is not None:
                out[name] = _result(*got)
        dcfg = DistributedConfig(algo="2d", backend="gloo")
        first = _cfg("gat", epochs=2, checkpoint=Path(work) / "gat", checkpoint_every=1)
        train_rank(graph, first, dcfg, session, members=range(4))
        got = train_rank(graph, replace(first, epochs=3, resume=True), dcfg, session,
                         members=range(4))
        if got is not None:
            out["resumed"] = _result(*got)
        dcfg = DistributedConfig(algo="1.5d", replication=2, backend="gloo")
        got = train_rank(graph, _cfg("gat", attention_dropout=0.5), dcfg, session,
                         members=range(4))
        if got is not None:
            out["attention-dropout"] = _result(*got)
    finally:
        close_session()
    return out


@pytest.fixture(scope="module")
def rank_outputs(graph, tmp_path_factory):
    work = tmp_path_factory.mktemp("models")
    return spawn(_all_cases, 8, (graph, str(work)), wall_timeout_s=600)


@pytest.fixture(scope="module")
def references(graph):
    out = {}
    for model in ("gat", "gatv2", "gin"):
        m, result = train_single(graph, _cfg(model))
        out[model] = {"losses": [h.loss for h in result.history], "weights": m.state_dict()}
    return out


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_grid_training_equals_one_process(rank_outputs, references, case):
    name, model, _, p, _ = case
    ref = references[model]
    for rank in range(p):
        got = rank_outputs[rank][name]
        assert got["losses"] == pytest.approx(ref["losses"], abs=1e-10)
        for key, w in ref["weights"].items():
            assert (got["weights"][key] - w).abs().max() <= 1e-10, (rank, key)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_measured_bytes_equal_the_model(graph, rank_outputs, case):
    name, model, algo, p, c = case
    shape = grid_shape(algo, p, c)
    part = BlockPartition.even(graph.num_nodes, shape.row_blocks)
    if model != "gin":  # the attention phases from the whole graph, not the ranks' plans
        op = graph_operator(graph.edge_index, graph.num_nodes, model)
        sent, recv = fetch_rows(shape, part, distinct_columns(op, part, shape.layers))
        cfg = _cfg(model)
        calls = model_calls(model, layer_widths(graph.num_features, cfg.hidden,
                                                graph.num_classes, 2), cfg.heads)
    for rank in range(p):
        got = rank_outputs[rank][name]
        measured = {k: {"sent": v.get("sent", 0), "recv": v.get("recv", 0)}
                    for k, v in got["measured"].items()}
        assert got["constant"]
        assert measured == got["predicted"], rank
        if model == "gin":
            assert "forward_spmm" in measured
            continue
        analytic = edge_volume(shape, part, rank, calls, (int(sent[rank]), int(recv[rank])),
                               8)
        for phase in ("forward_attention", "backward_attention"):
            assert measured.get(phase) == analytic.get(phase), (rank, phase)


def test_resume_on_a_grid_is_bit_identical(rank_outputs):
    for rank in range(4):
        got, uninterrupted = rank_outputs[rank]["resumed"], rank_outputs[rank]["gat-2d-4"]
        assert got["losses"] == uninterrupted["losses"]
        for key, w in uninterrupted["weights"].items():
            assert torch.equal(got["weights"][key], w), (rank, key)


def test_attention_dropout_keeps_replicas_identical(rank_outputs):
    """Each rank drops its own edges, yet all ranks end with the same weights (their
    streams stay in step) and the run differs from one without attention dropout."""
    runs = [rank_outputs[rank]["attention-dropout"]["weights"] for rank in range(4)]
    for other in runs[1:]:
        for key, w in runs[0].items():
            assert torch.equal(other[key], w), key
    plain = rank_outputs[0]["gat-1.5d-4"]["weights"]
    assert any(not torch.equal(plain[k], w) for k, w in runs[0].items())
