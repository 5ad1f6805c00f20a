"""The cost model, planner and memory predictor for GAT, GATv2 and GIN (issue 46)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data import sbm
from sparsegnn.distributed.layout.grid import grid_shape
from sparsegnn.distributed.planning.attention_cost import attention_call_counts, model_widths
from sparsegnn.distributed.planning.attention_model import (
    distinct_columns,
    edge_volume,
    fetch_rows,
    model_calls,
)
from sparsegnn.distributed.planning.autoplan import auto_plan
from sparsegnn.distributed.planning.cost import predict_epoch, rank_nonzeros
from sparsegnn.distributed.planning.cost_profile import ATTENTION_KERNELS, LinkCost, Profile
from sparsegnn.distributed.planning.planner import PlanConfig, PlanGraph, partitioned, plan_epoch
from sparsegnn.distributed.planning.rank_memory import edge_bytes, predict_memory
from sparsegnn.errors import DataFormatError
from sparsegnn.nn.model_size import layer_widths
from sparsegnn.nn.operator import graph_operator
from sparsegnn.train.fullgraph import TrainConfig, build_model

SPEC = "sbm:nodes=300,blocks=3,degree=6"
RATES = {k: [(1000.0, 1e-9, 3e-9)] for k in ATTENTION_KERNELS}


def profile(edge_rates: dict[str, list[tuple[float, float, float]]] | None = None
            ) -> Profile:
    links = {k: LinkCost(1e-5, 1e-9)
             for k in ("broadcast", "all_reduce", "all_gather", "all_to_all")}
    return Profile("gloo", 4, {8: 2e-9, 128: 1e-9}, 1e-9, 1e-10, 1e-9, links,
                   attention_s=dict(RATES if edge_rates is None else edge_rates))


@pytest.fixture(scope="module")
def graph():
    return sbm(400, 4, 8, num_features=16, seed=0)


def _layout(graph, model: str, algo: str = "1d", c: int = 1):
    return partitioned(PlanGraph.of(graph, model), grid_shape(algo, 4, c), "block")


def test_attention_phases_carry_the_edge_protocols_bytes_per_head(graph) -> None:
    """The planner adds the edge protocol's analytic bytes (what the ranks' counters equal,
    tests/test_distributed_models.py) for GAT, more with more heads; GCN has none."""
    for algo, c in (("1d", 1), ("1.5d", 2), ("2d", 1)):
        lay = _layout(graph, "gat", algo, c)
        cfg = PlanConfig(4, algo=algo, replication=c, model="gat", hidden=4, heads=2)
        comm = "sparse" if algo != "2d" else "dense"
        planned = plan_epoch(lay, comm, cfg, 4)["phases"]
        op = graph_operator(graph.edge_index, graph.num_nodes, "gat")
        sent, recv = fetch_rows(lay.shape, lay.part, distinct_columns(op, lay.part,
                                                                      lay.shape.layers))
        calls = model_calls("gat", layer_widths(16, 4, 4, 2), 2)
        per = [edge_volume(lay.shape, lay.part, r, calls, (int(sent[r]), int(recv[r])), 4)
               for r in range(4)]
        for phase in ("forward_attention", "backward_attention"):
            assert planned[phase]["total"] == sum(v[phase]["sent"] for v in per)
        more = plan_epoch(lay, comm, replace(cfg, heads=8), 4)["phases"]
        assert more["forward_attention"]["total"] > planned["forward_attention"]["total"]
    gcn = plan_epoch(_layout(graph, "gcn"), "sparse", PlanConfig(4, hidden=8), 4)["phases"]
    assert not {"forward_attention", "backward_attention"} & set(gcn)


def test_gat_is_priced_by_heads_and_its_grids_by_the_edge_protocol(graph) -> None:
    """More heads cost more compute and bytes; GCN pays no attention kernel; the split
    groups of 1.5D/2D make the sums and maxima 1D does not (more calls); an attention
    model has one comm per grid (it fetches by all-to-all whatever the SpMMs' comm)."""
    prof = profile()

    def cost(model: str, heads: int, algo: str = "1d", c: int = 1):
        cfg = PlanConfig(4, algo=algo, replication=c, model=model, hidden=8, heads=heads)
        lay = _layout(graph, model, algo, c)
        comm = "sparse" if algo != "2d" else "dense"
        return predict_epoch(lay, {**plan_epoch(lay, comm, cfg, 4), "value_bytes": 4}, cfg,
                             prof, comm)

    one, eight = cost("gat", 1), cost("gat", 8)
    assert eight.compute_s > one.compute_s
    assert eight.comm_s["forward_attention"] > one.comm_s["forward_attention"]
    assert cost("gcn", 8).compute_s < eight.compute_s
    assert "forward_attention" in cost("gatv2", 2).comm_s
    assert cost("gat", 2, "1.5d", 2).calls > cost("gat", 2).calls
    shape = grid_shape("2d", 4)
    counts = attention_call_counts(shape, model_calls("gat", [16, 8, 4], 2))
    assert counts["forward_attention"]["all_gather"] == 4  # a max per softmax, 4 of them
    gat = auto_plan(PlanGraph.of(graph, "gat"), 4, prof, PlanConfig(4, model="gat", heads=2))
    gcn = auto_plan(PlanGraph.of(graph, "gcn"), 4, prof, PlanConfig(4))
    assert len({(c.config.algo, c.config.replication) for c in gat}) == len(gat) < len(gcn)


@pytest.mark.parametrize(("algo", "p", "c"), [("1d", 4, 1), ("1.5d", 4, 2), ("2d", 4, 1),
                                              ("3d", 8, 1)])
def test_every_edge_is_attended_on_one_rank(graph, algo: str, p: int, c: int) -> None:
    """The attention kernels are priced on the edges each rank holds: every edge once
    over the grid (SUMMA's SpMM multiplies its whole row's tiles instead)."""
    lay = partitioned(PlanGraph.of(graph, "gat"), grid_shape(algo, p, c), "block")
    op = lay.graph.operator()
    own = rank_nonzeros(lay.shape, lay.part, op, own=True)
    assert own.sum() == op.nnz
    if algo in ("2d", "3d"):
        assert (rank_nonzeros(lay.shape, lay.part, op) > own).all()


def test_model_widths_concatenate_the_heads() -> None:
    cfg = TrainConfig(model="gat", hidden=8, heads=4, num_layers=3)
    assert model_widths(cfg, 16, 3) == [16, 32, 32, 3]
    assert model_widths(replace(cfg, model="gcn"), 16, 3) == [16, 8, 8, 3]


def test_a_profile_without_attention_rates_loads_and_falls_back(tmp_path: Path) -> None:
    """Profiles written before `calibrate` measured the attention kernels load: their
    kernels are priced from the SpMM rate, and the profile says it did not measure them."""
    measured = profile()
    measured.save(tmp_path / "new.json")
    assert Profile.load(tmp_path / "new.json") == measured
    assert measured.attention_rates_measured
    assert measured.kernel_time("heads_spmm", 100, True) == pytest.approx(3e-7)
    raw = json.loads((tmp_path / "new.json").read_text())
    del raw["attention_s"]
    (tmp_path / "old.json").write_text(json.dumps(raw))
    old = Profile.load(tmp_path / "old.json")
    assert not old.attention_rates_measured
    assert old.kernel_time("sddmm_add", 100, False) == pytest.approx(100 * 2e-9)
    assert old.kernel_time("sddmm_add", 100, True) == pytest.approx(3 * 100 * 2e-9)
    for bad in ({"sddmm": [[1, 1e-9, 1e-9]]}, {"sddmm_add": [[1e-9, 1e-9]]},
                {"edge_softmax": [[1, -1, 0]]}, {"elu": []}):
        (tmp_path / "bad.json").write_text(json.dumps({**raw, "attention_s": bad}))
        with pytest.raises(DataFormatError, match=r"bad\.json"):
            Profile.load(tmp_path / "bad.json")


def test_kernel_rates_follow_the_rows_they_gather_from() -> None:
    """Measured at two graph sizes: between them linear in log(rows), beyond them the
    nearest (a graph whose rows fit the caches costs less per value)."""
    prof = profile({"heads_spmm": [(1000.0, 1e-9, 2e-9), (100000.0, 3e-9, 6e-9)]})
    assert prof.kernel_time("heads_spmm", 10, False, 100) == pytest.approx(1e-8)
    assert prof.kernel_time("heads_spmm", 10, False, 10000) == pytest.approx(2e-8)
    assert prof.kernel_time("heads_spmm", 10, True, 10**7) == pytest.approx(6e-8)
    assert not prof.attention_rates_measured  # the other kernels fall back


@pytest.mark.parametrize("model", ["gat", "gatv2"])
def test_edge_bytes_equal_what_autograd_keeps_per_edge(graph, model: str) -> None:
    """The predicted per-edge bytes of training equal the per-edge tensors a training
    forward of a tiny GAT saves for its backward pass (measured, storage by storage)."""
    cfg = TrainConfig(model=model, hidden=4, heads=3, num_layers=2, dropout=0.5)
    op = graph_operator(graph.edge_index, graph.num_nodes, model)
    model_ = build_model(cfg, graph.num_features, int(graph.y.max()) + 1)
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.dim() and t.shape[0] == op.nnz:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model_(graph.x, op)
    assert sum(saved.values()) == op.nnz * edge_bytes(cfg, 4)


def test_max_rank_memory_counts_the_heads(graph) -> None:
    """A limit between GCN's and GAT's predicted peak admits GCN's configurations and
    none of GAT's; ``plan --auto --model gat`` then refuses."""
    prof = profile()
    gcn = min(c.memory_bytes for c in auto_plan(PlanGraph.of(graph, "gcn"), 4, prof,
                                                PlanConfig(4, hidden=8)))
    gat_graph = PlanGraph.of(graph, "gat")
    lay = _layout(graph, "gat")
    gat = predict_memory(lay, PlanConfig(4, model="gat", hidden=8, heads=8), 4,
                         whole_graph=True)
    assert gat > gcn
    limit = (gcn + gat) / 2 / 2**30
    assert all(c.fits for c in auto_plan(PlanGraph.of(graph, "gcn"), 4, prof,
                                         PlanConfig(4, hidden=8), max_rank_memory_gib=limit))
    ranked = auto_plan(gat_graph, 4, prof, PlanConfig(4, model="gat", hidden=8, heads=8),
                       max_rank_memory_gib=limit)
    assert not any(c.fits for c in ranked)


def test_cli_plan_prices_gat_and_says_where_the_rates_fell_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile().save(tmp_path / "p.json")
    replace(profile(), attention_s={}).save(tmp_path / "old.json")
    args = ["plan", "--graph", SPEC, "--parts", "4", "--model", "gat", "--heads", "2",
            "--auto", "--json"]
    assert main([*args, "--profile", str(tmp_path / "p.json")]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["choice"]["comm_s"]["forward_attention"] > 0
    assert out["attention_rates"] == "measured"
    assert main([*args, "--profile", str(tmp_path / "old.json")]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out.strip().splitlines()[-1])
    assert out["attention_rates"].startswith("estimated")
    assert "sparsegnn calibrate" in out["attention_rates"]
    assert main(["plan", "--graph", SPEC, "--parts", "4", "--model", "gin", "--json"]) == 0
    assert "forward_spmm" in json.loads(capsys.readouterr().out.strip().splitlines()[-1])[
        "phases"]


@pytest.mark.distributed
def test_cli_train_gat_algo_auto_trains_the_priced_choice(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    """``train --model gat --algo auto`` prices GAT (its edge protocol's phases) and
    trains the choice; a profile without attention rates is used, with a warning."""
    replace(profile(), attention_s={}).save(tmp_path / "old.json")
    assert main(["train", "--dataset", SPEC, "--model", "gat", "--heads", "2", "--hidden",
                 "4", "--nprocs", "2", "--epochs", "2", "--no-progress", "--json",
                 "--algo", "auto", "--profile", str(tmp_path / "old.json"),
                 "--auto-trials", "1"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    auto = out["auto"]
    assert out["algo"] == auto["algo"] and auto["comm_s"]["forward_attention"] > 0
    assert auto["candidates"] == 1  # on 2 ranks 1D, whose sparse and dense are one
    assert "no attention kernel rates" in caplog.text
