"""The cost model, machine profiles, ``plan --auto`` and ``calibrate``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data import load_any, sbm
from sparsegnn.distributed.layout.block_partition import stage_blocks
from sparsegnn.distributed.layout.grid import grid_shape
from sparsegnn.distributed.ops.spmm import OVERLAP_LANES
from sparsegnn.distributed.planning.autoplan import auto_plan, configurations, shortlist
from sparsegnn.distributed.planning.comm_model import spmm_schedule
from sparsegnn.distributed.planning.cost import (
    host_compute_seconds,
    latency_scale,
    rank_nonzeros,
    tile_products,
)
from sparsegnn.distributed.planning.cost_profile import LinkCost, Profile
from sparsegnn.distributed.planning.plan import relabelled
from sparsegnn.distributed.planning.planner import PlanConfig, PlanGraph, partitioned
from sparsegnn.distributed.planning.rank_memory import (
    loaded_graph_bytes,
    predict_memory,
    whole_graph_bytes,
)
from sparsegnn.errors import DataFormatError
from sparsegnn.train.trials import trial_winner


def profile(per_byte: float = 1e-9, latency: float = 1e-5, overhead: int = 0) -> Profile:
    links = {k: LinkCost(latency, per_byte)
             for k in ("broadcast", "all_reduce", "all_gather", "all_to_all")}
    return Profile("gloo", 4, {8: 2e-9, 128: 1e-9}, 1e-9, 1e-10, 1e-9, links,
                   rank_overhead_bytes=overhead)


SPEC = "sbm:nodes=300,blocks=3,degree=6"


@pytest.fixture(scope="module")
def graph() -> PlanGraph:
    return PlanGraph.of(sbm(600, 4, 8, num_features=16, seed=0), "gcn")


def test_profile_round_trips_and_refuses_bad_files(tmp_path: Path) -> None:
    p = profile(overhead=123)
    p.save(tmp_path / "p.json")
    assert Profile.load(tmp_path / "p.json") == p
    raw = json.loads((tmp_path / "p.json").read_text())
    for key, bad in (("spmm_nnz_s", {"8": -1}), ("collectives", {}), ("world_size", 0),
                     ("gemm_s", "fast"), ("format", 99)):
        (tmp_path / "bad.json").write_text(json.dumps({**raw, key: bad}))
        with pytest.raises(DataFormatError, match=r"bad\.json"):
            Profile.load(tmp_path / "bad.json")


def test_slower_links_cost_more_and_compute_does_not_change(graph: PlanGraph) -> None:
    base = PlanConfig(4)
    fast = {c.to_dict()["algo"] + c.config.comm: c for c in auto_plan(graph, 4, profile(), base)}
    slow = {c.to_dict()["algo"] + c.config.comm: c
            for c in auto_plan(graph, 4, profile(per_byte=1e-7), base)}
    for key, cand in fast.items():
        assert slow[key].cost.compute_s == pytest.approx(cand.cost.compute_s)
        assert slow[key].cost.total_s > cand.cost.total_s
    # With communication dominant the fewest bytes win: sparsity-aware 1D beats dense 1D.
    assert slow["1dsparse"].cost.total_s < slow["1ddense"].cost.total_s


def test_configurations_cover_every_grid_the_ranks_admit() -> None:
    found = {(c.algo, c.replication, c.comm) for c in configurations(8, ("block",),
                                                                     PlanConfig(8))}
    assert {("1d", 1, "sparse"), ("1d", 1, "dense"), ("1.5d", 2, "dense"),
            ("3d", 1, "dense")} <= found
    assert not any(a == "2d" for a, _, _ in found)  # 8 is not a square


def test_memory_limit_excludes_and_ranks_fitting_first(graph: PlanGraph) -> None:
    ranked = auto_plan(graph, 4, profile(), PlanConfig(4))
    sizes = sorted({c.memory_bytes for c in ranked})
    limit = (sizes[0] + sizes[-1]) / 2 / 2**30
    limited = auto_plan(graph, 4, profile(), PlanConfig(4), max_rank_memory_gib=limit)
    fits = [c.fits for c in limited]
    assert any(fits) and not all(fits) and fits == sorted(fits, reverse=True)
    assert all(c.memory_bytes <= limit * 2**30 for c in limited if c.fits)
    with_overhead = auto_plan(graph, 4, profile(overhead=2**20), PlanConfig(4))
    assert min(c.memory_bytes for c in with_overhead) == sizes[0] + 2**20
    with_base = auto_plan(graph, 4, replace(profile(), rank_base_bytes=3 << 20), PlanConfig(4))
    assert min(c.memory_bytes for c in with_base) == sizes[0] + (3 << 20)


def test_memory_counts_the_graph_every_rank_loads_and_the_process_base() -> None:
    """``train --algo auto`` ranks each load the whole graph (600 x (64 + 8 + 3) + 16 per
    edge bytes for 600 vertices with 16 features) and build the whole operator from it
    (112 bytes a nonzero at the peak; or a second copy of the graph, where that is more)
    on top of their share."""
    g = sbm(600, 4, 8, num_features=16, seed=0)
    graph = PlanGraph.of(g, "gcn")
    loaded = 600 * (16 * 4 + 8 + 3) + g.num_edges * 16
    assert loaded_graph_bytes(graph, 4) == loaded
    building = 112 * (g.num_edges + 600)  # GCN's operator: the edges and a self loop each
    assert building > loaded and whole_graph_bytes(graph, 4) == loaded + building
    sparse_graph = PlanGraph.of(sbm(600, 4, 2, num_features=512, seed=0), "gcn")
    assert whole_graph_bytes(sparse_graph, 4) == 2 * loaded_graph_bytes(sparse_graph, 4)
    lay = partitioned(graph, grid_shape("1d", 4), "block", 0)
    share = predict_memory(lay, PlanConfig(4), 4)
    assert predict_memory(lay, PlanConfig(4), 4, whole_graph=True) == share + loaded + building
    ranked = auto_plan(graph, 4, profile(), PlanConfig(4))
    one_d = next(c for c in ranked if (c.config.algo, c.config.comm) == ("1d", "dense"))
    assert one_d.memory_bytes == share + loaded + building


def test_memory_counts_the_blocks_an_overlapped_dense_product_holds_in_flight() -> None:
    """``train --overlap`` keeps up to OVERLAP_LANES blocks of H in flight in a dense
    1D/1.5D product where the plain loop receives into one: on 4 ranks 1D (4 stages)
    holds two more blocks of the widest layer, 1.5D c = 2 (one stage) none, and the
    sparse and 2D products nothing more."""
    g = sbm(600, 4, 8, num_features=16, seed=0)
    graph = PlanGraph.of(g, "gcn")
    plain = {(c.config.algo, c.config.replication, c.config.comm): c.memory_bytes
             for c in auto_plan(graph, 4, profile(), PlanConfig(4))}
    overlapped = {(c.config.algo, c.config.replication, c.config.comm): c.memory_bytes
                  for c in auto_plan(graph, 4, profile(), PlanConfig(4, overlap=True))}
    block, widest = 150, max(16, PlanConfig(4).hidden, g.num_classes)
    assert OVERLAP_LANES == 3
    assert overlapped.pop(("1d", 1, "dense")) == plain.pop(("1d", 1, "dense")) \
        + 2 * block * widest * 4
    assert overlapped == plain


@pytest.mark.parametrize("argv", [
    ["plan", "--auto", "--graph", SPEC, "--parts", "4"],
    ["train", "--dataset", SPEC, "--nprocs", "4", "--algo", "auto"],
], ids=["plan", "train"])
def test_auto_without_a_profile_names_the_command_and_starts_nothing(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Calibration spawns ranks for up to a minute: only --calibrate asks for it; without
    it or --profile the choice is one line naming the command that writes a profile (and
    exit 2: nothing was calibrated or trained)."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "needs a machine profile" in err and "sparsegnn calibrate --nprocs 4" in err
    assert "--calibrate" in err and len(err.strip().splitlines()) == 1


def test_cli_plan_auto_chooses_and_refuses(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    profile().save(tmp_path / "p.json")
    argv = ["plan", "--auto", "--graph", SPEC, "--parts", "4",
            "--profile", str(tmp_path / "p.json"), "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["choice"] == out["candidates"][0] and out["choice"]["fits"]
    times = [c["epoch_s"] for c in out["candidates"]]
    assert times == sorted(times)
    assert main([*argv, "--max-rank-memory", "1e-9"]) == 2
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["choice"] is None
    # --overlap: the same candidates, 1D dense's memory with its blocks in flight added.
    assert main([*argv, "--overlap"]) == 0
    overlapped = json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    def one_d_dense(result: dict) -> dict:
        return next(c for c in result["candidates"]
                    if (c["algo"], c["comm"], c["partitioner"]) == ("1d", "dense", "block"))
    assert one_d_dense(overlapped)["memory_bytes_per_rank"] \
        > one_d_dense(out)["memory_bytes_per_rank"]
    assert one_d_dense(overlapped)["epoch_s"] == one_d_dense(out)["epoch_s"]


@pytest.mark.distributed
def test_cli_calibrate_writes_a_loadable_profile(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "prof.json"
    assert main(["calibrate", "--nprocs", "2", "--quick", "--out", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    loaded = Profile.load(out)
    assert loaded.world_size == 2 and printed["world_size"] == 2
    assert set(loaded.collectives) == {"broadcast", "all_reduce", "all_gather", "all_to_all"}
    assert min(loaded.spmm_nnz_s.values()) >= 0 and max(loaded.spmm_nnz_s.values()) > 0
    assert loaded.gemm_s > 0 and loaded.rank_overhead_bytes > 0
    assert loaded.attention_rates_measured
    assert len(loaded.notes["edge_overhead_fit"]) == 1  # a GAT on 2 ranks: 1D alone
    # an R-GCN on every configuration of 2 ranks (1D and 1.5D, dense and sparse)
    assert loaded.relation_call_overhead_s is not None
    assert len(loaded.notes["relation_overhead_fit"]) >= 2
    assert replace(loaded, notes={}).to_dict()["format"] == 1


@pytest.mark.distributed
def test_cli_train_algo_auto_reports_predicted_and_measured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI asks :func:`choose_distribution` (as the benchmark does) and trains its
    choice: a direct call with the same inputs chooses the same."""
    from sparsegnn.train import auto_choice
    from sparsegnn.train.fullgraph import TrainConfig

    seen: list[auto_choice.AutoChoice] = []
    choose = auto_choice.choose_distribution
    monkeypatch.setattr(auto_choice, "choose_distribution",
                        lambda request: seen.append(choose(request)) or seen[-1])
    profile().save(tmp_path / "p.json")
    argv = ["train", "--dataset", SPEC, "--nprocs", "4",
            "--epochs", "2", "--no-progress", "--json"]
    assert main([*argv, "--algo", "auto", "--profile", str(tmp_path / "p.json"),
                 "--auto-trials", "1"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    auto = out["auto"]
    assert out["algo"] == auto["algo"] and auto["fits"] and auto["candidates"] > 3
    assert auto["measured_epoch_s"] == out["epoch_time_s"] > 0 and auto["epoch_s"] > 0
    assert [t["trial_epoch_s"] for t in auto["trials"]] == [None]  # the model alone
    direct = choose(auto_choice.AutoRequest(load_any(SPEC), 4, TrainConfig(), profile(),
                                            trials=1))
    c = direct.config
    assert len(seen) == 1 and seen[0].config == c and seen[0].ranked == direct.ranked
    assert (auto["algo"], auto["replication"], auto["comm"], auto["partitioner"],
            auto["epoch_s"], auto["candidates"]) == (
        c.algo, c.replication, c.comm, c.partitioner, direct.chosen.cost.total_s,
        len(direct.ranked))


@pytest.mark.distributed
def test_cli_train_algo_auto_trains_the_fastest_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """This profile predicts several configurations within 1.5x of each other: those
    (at most 3) are tried, the trials' winner is trained, and the trials leave no trace
    in that run (the same losses as training it directly)."""
    profile().save(tmp_path / "p.json")
    argv = ["train", "--dataset", SPEC, "--nprocs", "4",
            "--epochs", "3", "--no-progress", "--history", "--json"]
    assert main([*argv, "--algo", "auto", "--profile", str(tmp_path / "p.json")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    out = json.loads(lines[-1])
    trials = out["auto"]["trials"]
    short = shortlist(auto_plan(PlanGraph.of(load_any(SPEC), "gcn"), 4, profile(),
                                PlanConfig(4)), 3)
    assert len(short) >= 2
    assert [(t["algo"], t["replication"], t["comm"]) for t in trials] == \
        [(c.config.algo, c.config.replication, c.config.comm) for c in short]
    assert all(t["trial_epoch_s"] > 0 for t in trials)
    won = trials[trial_winner([t["trial_epoch_s"] for t in trials])]
    assert (out["algo"], out["auto"]["replication"], out["auto"]["comm"]) == \
        (won["algo"], won["replication"], won["comm"])
    assert out["grid"][1] == won["replication"]
    assert sum(line.lstrip().startswith("trial ") for line in lines) == len(short)
    assert main([*argv, "--algo", won["algo"], "--replication",
                 str(won["replication"]), "--comm", won["comm"],
                 "--dropout-masks", "block"]) == 0  # auto's default: what it priced
    direct = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert direct["losses"] == out["losses"]


def test_overlap_twins_are_priced_apart_and_tried_only_where_they_fit(graph: PlanGraph) -> None:
    """``--overlap auto`` ranks by the plain runs' memory and prices each 1D/1.5D
    configuration's overlapped twin apart (the same as ranking with overlap on); under a
    limit between the two, the configuration stays and only its twin is left out."""
    twins = {(c.config.algo, c.config.replication, c.config.comm): c
             for c in auto_plan(graph, 4, profile(), PlanConfig(4), overlap_twins=True)}
    plain = {k: c.memory_bytes for k, c in twins.items()}
    on = {(c.config.algo, c.config.replication, c.config.comm): c.memory_bytes
          for c in auto_plan(graph, 4, profile(), PlanConfig(4, overlap=True))}
    assert plain == {
        (c.config.algo, c.config.replication, c.config.comm): c.memory_bytes
        for c in auto_plan(graph, 4, profile(), PlanConfig(4))}
    assert {k: c.twin_memory_bytes for k, c in twins.items() if k[0] in ("1d", "1.5d")} == \
        {k: v for k, v in on.items() if k[0] in ("1d", "1.5d")}
    assert all(c.twin_memory_bytes is None for k, c in twins.items() if k[0] in ("2d", "3d"))
    dense = twins["1d", 1, "dense"]
    assert dense.twin_memory_bytes > plain["1d", 1, "dense"]
    between = (dense.memory_bytes + dense.twin_memory_bytes) / 2 / 2**30
    tight = {(c.config.algo, c.config.comm): c for c in
             auto_plan(graph, 4, profile(), PlanConfig(4), max_rank_memory_gib=between,
                       overlap_twins=True)}
    assert tight["1d", "dense"].fits and not tight["1d", "dense"].twin_fits
    from sparsegnn.train.distributed import with_overlap_variants
    from sparsegnn.train.rank_train import DistributedConfig

    got = with_overlap_variants([DistributedConfig(algo="1d"),
                                 DistributedConfig(algo="1d", comm="sparse")], [False, True])
    assert [(c.comm, c.overlap) for c in got] == [
        ("dense", False), ("sparse", False), ("sparse", True)]


def test_overlap_variants_follow_every_plain_candidate() -> None:
    """``--overlap auto``'s trials: each candidate without overlap first (the reference
    stays the model's choice, plain), then with it where overlap exists (1D/1.5D)."""
    from sparsegnn.train.distributed import with_overlap_variants
    from sparsegnn.train.rank_train import DistributedConfig

    given = [DistributedConfig(algo="1.5d", replication=2, overlap=True),
             DistributedConfig(algo="2d"), DistributedConfig(algo="1d", comm="sparse")]
    got = with_overlap_variants(given)
    assert [(c.algo, c.comm, c.overlap) for c in got] == [
        ("1.5d", "dense", False), ("2d", "dense", False), ("1d", "sparse", False),
        ("1.5d", "dense", True), ("1d", "sparse", True)]
    assert got[0].replication == 2


@pytest.mark.distributed
def test_cli_overlap_auto_trains_what_its_trial_chose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--overlap auto``: the configuration is tried without and with overlap, the
    trials' winner is trained and reported; under ``--algo auto`` every configuration
    tried gets its overlapped twin, each with the model's prediction (this profile's
    first choice is a 1D/1.5D configuration, so it has one)."""
    argv = ["train", "--dataset", SPEC, "--nprocs", "4", "--epochs", "2",
            "--no-progress", "--json", "--overlap", "auto"]
    assert main([*argv, "--algo", "1d", "--comm", "sparse"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    out = json.loads(lines[-1])
    trials = out["trials"]
    assert [(t["algo"], t["comm"], t["overlap"]) for t in trials] == [
        ("1d", "sparse", False), ("1d", "sparse", True)]
    assert all(t["measured_epoch_s"] > 0 for t in trials)
    won = trials[trial_winner([t["measured_epoch_s"] for t in trials])]
    assert out["overlap"] == won["overlap"]
    assert any(line.startswith("overlap auto: trial epochs without ") for line in lines)

    profile().save(tmp_path / "p.json")
    assert main([*argv, "--algo", "auto", "--profile", str(tmp_path / "p.json"),
                 "--auto-trials", "1"]) == 0
    auto = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["auto"]
    first, twin = auto["trials"]
    assert (twin["algo"], twin["replication"], twin["comm"], twin["epoch_s"]) == \
        (first["algo"], first["replication"], first["comm"], first["epoch_s"])
    assert (first["overlap"], twin["overlap"]) == (False, True)
    won = auto["trials"][trial_winner([t["trial_epoch_s"] for t in auto["trials"]])]
    assert auto["overlap"] == won["overlap"]


def test_rounds_rotate_and_pool_every_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every candidate runs once per round, the round's first one rotating (so a burst
    at a round's start does not always land on the same one); its time is the median of
    all its epochs, so neither one slow run nor one lucky run decides."""
    from sparsegnn.train import trials as td

    seen: list[str] = []
    runs = iter([[0.5, 0.6], [0.2, 0.2], [0.9, 0.8],   # round 0: a b c
                 [0.3, 0.9], [0.4, 0.4], [0.1, 0.5],   # round 1: b c a
                 [0.7, 0.6], [0.6, 0.5], [0.2, 0.3]])  # round 2: c a b

    def fake(session: object, source: object, cfg: object, dcfg: str) -> list[float]:
        seen.append(dcfg)
        return next(runs)

    monkeypatch.setattr(td, "measure_epochs_s", fake)
    got = td.median_epoch_over_rounds(None, None, None, ["a", "b", "c"], rounds=3)  # type: ignore[arg-type]
    assert seen == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    # a: 0.5 0.6 0.1 0.5 0.6 0.5; b: 0.2 0.2 0.3 0.9 0.2 0.3; c: 0.9 0.8 0.4 0.4 0.7 0.6
    assert got == pytest.approx([0.5, 0.25, 0.65])
    assert td.median_epoch_over_rounds(None, None, None, [], rounds=2) == []  # type: ignore[arg-type]


def test_a_trial_overrules_the_model_only_by_a_clear_margin() -> None:
    assert trial_winner([1.0, 0.95, 0.97]) == 0  # within the trials' noise: the model's
    assert trial_winner([1.0, 0.95, 0.85]) == 2
    assert trial_winner([1.0, 0.89]) == 1
    assert trial_winner([1.0, 0.95], margin=0.0) == 1
    assert trial_winner([0.5, 0.9]) == 0
    assert trial_winner([]) == 0


def test_shortlist_keeps_the_fitting_ones_near_the_fastest(graph: PlanGraph) -> None:
    ranked = auto_plan(graph, 4, profile(), PlanConfig(4))
    best = ranked[0].cost.total_s
    short = shortlist(ranked, 10, band=1.5)
    assert short[0] is ranked[0] and all(c.cost.total_s <= 1.5 * best for c in short)
    assert len(short) == sum(c.cost.total_s <= 1.5 * best for c in ranked)
    assert shortlist(ranked, 1) == [ranked[0]]
    tight = auto_plan(graph, 4, profile(), PlanConfig(4), max_rank_memory_gib=1e-9)
    assert shortlist(tight, 3) == []  # nothing fits: nothing to try


@pytest.mark.distributed
def test_cli_overlap_changes_nothing_but_reports_waits(
    capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["train", "--dataset", SPEC, "--nprocs", "4",
            "--algo", "1.5d", "--replication", "2", "--epochs", "3", "--dropout", "0",
            "--dtype", "float64", "--no-progress", "--history", "--json"]
    assert main(argv) == 0
    plain = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main([*argv, "--overlap"]) == 0
    overlapped = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert overlapped["losses"] == plain["losses"]
    assert overlapped["comm"]["per_rank"] == plain["comm"]["per_rank"]
    assert overlapped["overlap"] and all(
        "forward_spmm" in waits for waits in overlapped["comm_wait_s_per_epoch"])
    assert all("forward_spmm" in waits for waits in plain["comm_wait_s_per_epoch"])


def test_latency_scales_with_the_group_a_collective_runs_in() -> None:
    """Calibrated over 4 ranks: 1.5D c=2's broadcasts and all-to-alls run within 2 ranks
    (1 step of the world's 3), 1D's within all 4; 2D's along a process row of 2; never
    more than the calibrated latency for a larger grid."""
    assert latency_scale(grid_shape("1d", 4), "forward_spmm", 4) == 1.0
    assert latency_scale(grid_shape("1.5d", 4, 2), "forward_spmm", 4) == pytest.approx(1 / 3)
    assert latency_scale(grid_shape("1.5d", 4, 2), "grad_allreduce", 4) == pytest.approx(1 / 3)
    assert latency_scale(grid_shape("2d", 4), "backward_spmm", 4) == pytest.approx(1 / 3)
    assert latency_scale(grid_shape("1d", 64), "forward_spmm", 4) == 1.0
    assert latency_scale(grid_shape("1d", 4), "forward_spmm", 1) == 1.0


def test_replica_sums_of_dense_spmms_are_priced_as_all_reduces(graph: PlanGraph) -> None:
    """1.5D dense's SpMM phases hold the stage broadcasts and the replicas' all-reduce of
    the output: a dearer all-reduce raises them, and only them (1D has no replica sum;
    sparse phases are priced as their all-to-all), by the reduce's bytes at the rate."""
    def spmm_comm(p: Profile) -> dict[tuple[str, int, str], float]:
        return {(c.config.algo, c.config.replication, c.config.comm):
                c.cost.comm_s["forward_spmm"]
                for c in auto_plan(graph, 4, p, PlanConfig(4)) if c.config.partitioner == "block"}

    cheap = profile()
    dear = replace(cheap, collectives={**cheap.collectives,
                                       "all_reduce": LinkCost(1e-5, 101e-9)})
    before, after = spmm_comm(cheap), spmm_comm(dear)
    for key in (("1d", 1, "dense"), ("1d", 1, "sparse"), ("1.5d", 2, "sparse")):
        assert after[key] == pytest.approx(before[key])
    # Each rank sums its replica's half of its block's output: 1 peer x its rows x the
    # forward SpMMs' widths x 4 bytes, 100 ns a byte dearer.
    shape = grid_shape("1.5d", 4, 2)
    part = partitioned(graph, shape, "block").part
    rows = max(part.size(i) for i in range(shape.rows))
    widths = sum(c.width for c in spmm_schedule(PlanConfig(4), 16, 4)
                 if c.phase == "forward_spmm")
    extra = after[("1.5d", 2, "dense")] - before[("1.5d", 2, "dense")]
    assert extra == pytest.approx(rows * widths * 4 * 100e-9)


def test_rank_nonzeros_are_those_of_the_partitions_blocks(graph: PlanGraph) -> None:
    """A METIS partition relabels the vertices: each rank's nonzeros are its block's in
    the relabelled operator, not those of a range of original ids."""
    for shape in (grid_shape("1d", 4), grid_shape("1.5d", 4, 2)):
        lay = partitioned(graph, shape, "metis", 0)
        assert lay.part.order is not None
        a = relabelled(graph.operator(), lay.part)
        want = []
        for rank in range(shape.size):
            i, _, _ = shape.coords(rank)
            lo, hi = lay.part.block(i)
            rows = a.select_rows(torch.arange(lo, hi))
            stage_cols = [lay.part.block(j) for j in stage_blocks(shape, shape.coords(rank)[1])]
            want.append(sum(int(((rows.col >= c0) & (rows.col < c1)).sum())
                            for c0, c1 in stage_cols))
        assert rank_nonzeros(shape, lay.part, graph.operator()).tolist() == want


def test_shared_cores_price_the_hosts_work_not_the_busiest_rank_alone() -> None:
    """A core per rank: the busiest rank decides. Four ranks per core: a rank with 3x the
    others' work finishes at 4x their shared speed once they are done."""
    assert host_compute_seconds([1.0, 1.0, 3.0, 1.0], 1.0) == 3.0
    assert host_compute_seconds([1.0, 1.0, 3.0, 1.0], 4.0) == pytest.approx(1.5)
    assert host_compute_seconds([2.0, 2.0, 2.0, 2.0], 4.0) == 2.0
    raw = profile().to_dict()
    assert Profile.from_dict(raw).core_sharing == 1.0
    assert Profile.from_dict({**raw, "core_sharing": 3.5}).core_sharing == 3.5
    assert Profile.from_dict({**raw, "core_sharing": 0.5}).core_sharing == 1.0


def test_tile_products_follow_the_kernels() -> None:
    """Dense 1D/1.5D multiply each stage block as its broadcast arrives; the sparse
    exchange multiplies the own tile and the received rows' stacked tiles; SUMMA one
    product per stage of its process row."""
    one_d, one_half = grid_shape("1d", 8), grid_shape("1.5d", 8, 2)
    assert tile_products(one_d, "dense", 3, 0) == 8
    assert tile_products(one_d, "sparse", 3, 0) == 2
    assert tile_products(one_half, "dense", 0, 1) == 2
    assert tile_products(one_half, "sparse", 0, 0) == 2  # block 0 is a stage of replica 0
    assert tile_products(one_half, "sparse", 0, 1) == 1  # replica 1 only receives
    assert tile_products(grid_shape("1d", 1), "sparse", 0, 0) == 1
    assert tile_products(grid_shape("2d", 4), "dense", 1, 1) == 2


@pytest.mark.distributed
def test_dropout_masks_flag_chooses_whole_graph_or_per_block_masks(
    capsys: pytest.CaptureFixture[str]
) -> None:
    """A graph loaded whole draws whole-graph masks unless told otherwise (the same
    losses as one process); ``--dropout-masks block`` draws per block (other losses)."""
    argv = ["train", "--dataset", SPEC, "--epochs", "3",
            "--no-progress", "--history", "--json", "--dtype", "float64"]

    def losses(*extra: str) -> list[float]:
        assert main([*argv, *extra]) == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])["losses"]

    one = losses()
    ranks = ["--nprocs", "2", "--algo", "1d"]
    assert losses(*ranks) == pytest.approx(one, rel=1e-9)
    assert losses(*ranks, "--dropout-masks", "global") == pytest.approx(one, rel=1e-9)
    assert losses(*ranks, "--dropout-masks", "block") != pytest.approx(one, rel=1e-9)
