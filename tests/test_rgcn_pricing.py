"""R-GCN priced by the planner (issue 46): the planner's bytes per rank and phase equal
the analytic model the grid runs are checked against, for every algorithm, comm and
weight form; its weight count equals the model's; the choice ranks every configuration
and honours a memory limit; ``plan --model rgcn`` and ``train --model rgcn --algo auto``
/ ``--max-rank-memory`` choose and refuse in-process (no rank is started here)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import pytest

from sparsegnn.cli.main import main
from sparsegnn.cli.train_tasks import rgcn_request
from sparsegnn.data.typed_sbm import typed_sbm
from sparsegnn.distributed import grid_shape, tile_nnz
from sparsegnn.distributed.planning.autoplan import configurations
from sparsegnn.distributed.planning.cost_profile import LinkCost, Profile
from sparsegnn.distributed.planning.plan import phase_pairs
from sparsegnn.distributed.planning.planner import PlanConfig, partitioned
from sparsegnn.distributed.planning.relational_cost import (
    RelationalPlanGraph,
    parameter_count,
    relational_auto_plan,
    relational_volumes,
)
from sparsegnn.distributed.planning.relational_model import rgcn_predict
from sparsegnn.errors import InvalidValueError
from sparsegnn.train.rgcn_task import RGCNRequest, build_classifier

HSBM = "hsbm:nodes=120,blocks=3,degree=4,features=8"


def profile(per_byte: float = 1e-9) -> Profile:
    links = {k: LinkCost(1e-5, per_byte)
             for k in ("broadcast", "all_reduce", "all_gather", "all_to_all")}
    return Profile("gloo", 4, {8: 2e-9, 128: 1e-9}, 1e-9, 1e-10, 1e-9, links,
                   call_overhead_s=1e-4)


@pytest.fixture(scope="module")
def typed():
    return typed_sbm(48, blocks=4, degree=2.0, num_features=6, seed=0)


def _graph(typed, featureless: bool) -> RelationalPlanGraph:
    return RelationalPlanGraph.of(typed.to_relational(inverse=True), typed.num_classes,
                                  featureless=featureless)


@pytest.mark.parametrize(("algo", "p", "c", "comm", "partitioner", "featureless", "weights"), [
    ("1d", 4, 1, "dense", "block", False, {}),
    ("1d", 4, 1, "sparse", "random", True, {"num_bases": 2}),
    ("1.5d", 4, 2, "sparse", "block", False, {"num_blocks": 2}),
    ("1.5d", 4, 2, "dense", "random", True, {}),
    ("2d", 4, 1, "dense", "block", False, {"num_bases": 2}),
    ("3d", 8, 1, "dense", "random", True, {}),
])
def test_planned_bytes_equal_the_model_of_the_grid_runs(typed, algo, p, c, comm, partitioner,
                                                        featureless, weights):
    graph = _graph(typed, featureless)
    cfg = PlanConfig(p, algo=algo, replication=c, comm=comm, partitioner=partitioner,
                     model="rgcn", hidden=8, **weights)
    shape = grid_shape(algo, p, c)
    lay = partitioned(graph.union, shape, partitioner)
    part, ops = lay.part, graph.relations
    nnz = None if shape.row_wise else [
        {"forward_spmm": tile_nnz(m, part, shape), "backward_spmm": tile_nnz(m.t(), part, shape)}
        for m in (op.permute(part.order) if part.order is not None else op for op in ops)]
    pairs = [phase_pairs(m, part) for m in ops] if comm == "sparse" else None
    volumes = relational_volumes(lay, graph, cfg)
    assert volumes["forward_spmm"].total > 0
    for rank in range(shape.size):
        model = rgcn_predict(shape, part, rank, graph.schedule(cfg), relations=len(ops),
                             value_bytes=4, num_params=1, nnz=nnz, pairs=pairs)
        for phase, vol in volumes.items():
            assert (model[phase]["sent"], model[phase]["recv"]) == \
                (vol.sent[rank], vol.recv[rank]), (rank, phase)


@pytest.mark.parametrize("change", [{}, {"num_bases": 2}, {"num_blocks": 2},
                                    {"featureless": True, "num_bases": 3},
                                    {"featureless": True, "num_layers": 3}])
def test_weight_count_equals_the_models(typed, change):
    change = dict(change)
    featureless = change.pop("featureless", False)
    request = RGCNRequest(hidden=8, featureless=featureless, **change)
    rel = typed.to_relational(inverse=True)
    model = build_classifier(request, rel, typed.num_classes)
    cfg = PlanConfig(4, model="rgcn", hidden=8, **{k: v for k, v in change.items()})
    assert parameter_count(_graph(typed, featureless), cfg) == \
        sum(p.numel() for p in model.parameters())


def test_every_configuration_is_priced_and_a_memory_limit_excludes(typed):
    graph = _graph(typed, False)
    base = PlanConfig(4, model="rgcn", hidden=8)
    ranked = relational_auto_plan(graph, 4, profile(), base)
    assert len(ranked) == len(configurations(4, ("block",), base))
    assert [c.cost.total_s for c in ranked] == sorted(c.cost.total_s for c in ranked)
    # R relations: R times a GCN's SpMM calls (1D sparse: one all-to-all per SpMM), plus
    # the gradient sum and three metric reductions.
    one = next(c for c in ranked if (c.config.algo, c.config.comm) == ("1d", "sparse"))
    assert one.cost.calls == graph.num_relations * len(graph.schedule(base)) + 4
    limit = sorted(c.memory_bytes for c in ranked)[len(ranked) // 2] / 2**30
    limited = relational_auto_plan(graph, 4, profile(), base, max_rank_memory_gib=limit)
    fits = [c.fits for c in limited]
    assert any(fits) and not all(fits) and fits == sorted(fits, reverse=True)
    assert all(c.memory_bytes <= limit * 2**30 for c in limited if c.fits)


def test_slower_links_favour_sparse_communication(typed):
    graph = _graph(typed, True)
    base = PlanConfig(4, model="rgcn", hidden=8)

    def epoch(per_byte: float, comm: str) -> float:
        ranked = relational_auto_plan(graph, 4, profile(per_byte), base)
        return next(c.cost.total_s for c in ranked
                    if (c.config.algo, c.config.comm) == ("1d", comm))

    assert epoch(1e-6, "dense") - epoch(1e-6, "sparse") > epoch(1e-9, "dense") - \
        epoch(1e-9, "sparse") > 0


@pytest.fixture
def profile_file(tmp_path: Path) -> str:
    return str(profile().save(tmp_path / "machine.json"))


def test_plan_lists_configurations_with_epoch_and_memory(capsys, profile_file):
    assert main(["plan", "--graph", HSBM, "--model", "rgcn", "--parts", "4", "--auto",
                 "--profile", profile_file, "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = out["candidates"]
    assert {(r["algo"], r["comm"]) for r in rows} == \
        {("1d", "sparse"), ("1d", "dense"), ("1.5d", "sparse"), ("1.5d", "dense"),
         ("2d", "dense")}
    assert out["choice"] == rows[0] and all(r["epoch_s"] > 0 and
                                            r["memory_bytes_per_rank"] > 0 for r in rows)
    assert main(["plan", "--graph", HSBM, "--model", "rgcn", "--parts", "4", "--auto",
                 "--profile", profile_file, "--max-rank-memory", "1e-6"]) == 2
    assert "no configuration fits" in capsys.readouterr().out


def test_plan_of_one_configuration(capsys, profile_file):
    assert main(["plan", "--graph", HSBM, "--model", "rgcn", "--parts", "4", "--algo", "2d",
                 "--num-bases", "2", "--profile", profile_file, "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["comm"] == "dense" and out["grid"] == [2, 2, 1] and out["num_relations"] > 1
    assert out["phases"]["forward_spmm"]["total"] > 0 and out["cost"]["epoch_s"] > 0
    assert out["memory_bytes_per_rank"] == sum(out["memory_per_rank_by_kind"].values())


def _args(*flags: str) -> argparse.Namespace:
    from sparsegnn.cli.main import build_parser

    return build_parser().parse_args(["train", "--dataset", HSBM, "--model", "rgcn", *flags])


def test_train_auto_trains_the_predicted_fastest(profile_file):
    graph_flags = ("--nprocs", "4", "--algo", "auto", "--profile", profile_file)
    request = rgcn_request(_args(*graph_flags), "cpu")
    assert request.ranks is not None
    ranked = relational_auto_plan(
        _plan_graph(), 4, Profile.load(profile_file), PlanConfig(4, model="rgcn"))
    c = ranked[0].config
    assert (request.ranks.algo, request.ranks.replication, request.ranks.comm) == \
        (c.algo, c.replication, c.comm)
    assert request.ranks.nprocs == 4 and request.ranks.partition == "block"


def _plan_graph() -> RelationalPlanGraph:
    from sparsegnn.cli.plan_cmd import relational_graph

    return relational_graph(HSBM, None, 0)


def test_train_auto_and_memory_limit_refusals(capsys, profile_file):
    with pytest.raises(InvalidValueError, match="no R-GCN configuration"):
        rgcn_request(_args("--nprocs", "4", "--algo", "auto", "--profile", profile_file,
                           "--max-rank-memory", "1e-6"), "cpu")
    # a given grid above the limit: refused before any rank starts, in one line
    assert main(["train", "--dataset", HSBM, "--model", "rgcn", "--nprocs", "2",
                 "--max-rank-memory", "0.01"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exceeds --max-rank-memory 0.01 GiB" in err[0]
    assert main(["train", "--dataset", HSBM, "--model", "rgcn", "--nprocs", "2",
                 "--algo", "auto"]) == 2
    assert "needs a machine profile" in capsys.readouterr().err
    assert main(["train", "--dataset", HSBM, "--model", "rgcn", "--nprocs", "2",
                 "--algo", "auto", "--profile", profile_file, "--auto-trials", "2"]) == 2
    assert "drop --auto-trials" in capsys.readouterr().err


def test_a_limit_that_fits_keeps_the_given_grid():
    request = rgcn_request(_args("--nprocs", "2", "--algo", "1d", "--max-rank-memory", "8"),
                           "cpu")
    assert request.ranks is not None and request.ranks.algo == "1d"
    assert request.ranks.nprocs == 2


def test_relation_calls_are_priced_at_their_own_fitted_overhead(typed):
    graph = _graph(typed, False)
    base = PlanConfig(4, model="rgcn", hidden=8)
    old = profile()  # written before the R-GCN fit: GCN's per-call overhead prices them
    own = replace(old, relation_call_overhead_s=3e-4)
    before = {c.config: c for c in relational_auto_plan(graph, 4, old, base)}
    after = {c.config: c for c in relational_auto_plan(graph, 4, own, base)}
    assert before.keys() == after.keys()
    for config, a in before.items():
        b = after[config]
        assert a.cost.relation_calls == b.cost.relation_calls > 0
        assert a.cost.relation_calls < a.cost.calls  # the reductions are not a relation's
        assert b.cost.overhead_s - a.cost.overhead_s == pytest.approx(
            a.cost.relation_calls * (3e-4 - old.call_overhead_s))
    loaded = Profile.from_dict(own.to_dict())
    assert loaded.relation_call_overhead_s == 3e-4
    assert Profile.from_dict(old.to_dict()).relation_call_overhead_s is None
