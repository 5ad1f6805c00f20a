"""Calibration across hosts: broadcast rounds measured the way the stages run, priced per
call from the profile's table; the dropout the calibration times."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sparsegnn.data import sbm
from sparsegnn.distributed import close_session, init_session, spawn
from sparsegnn.distributed.layout.grid import grid_shape
from sparsegnn.distributed.planning import calibration_rates as cal
from sparsegnn.distributed.planning.autoplan import auto_plan
from sparsegnn.distributed.planning.comm_model import spmm_schedule
from sparsegnn.distributed.planning.cost import collective_calls
from sparsegnn.distributed.planning.cost_profile import LinkCost, Profile
from sparsegnn.distributed.planning.planner import PlanConfig, PlanGraph, plan
from sparsegnn.distributed.runtime.comm import Communicator
from sparsegnn.errors import DataFormatError
from sparsegnn.train.fullgraph import TrainConfig

LATENCY, PER_BYTE = 1e-5, 1e-9


def profile(rounds: dict[int, list[tuple[float, float]]] | None = None) -> Profile:
    links = {k: LinkCost(LATENCY, PER_BYTE)
             for k in ("broadcast", "all_reduce", "all_gather", "all_to_all")}
    return Profile("gloo", 4, {8: 2e-9, 128: 1e-9}, 1e-9, 1e-10, 1e-9, links, hosts=4,
                   broadcast_rounds=rounds or {})


def line(start: float, per_byte: float) -> list[tuple[float, float]]:
    """A table that is the straight line ``start + bytes * per_byte``."""
    return [(0.0, start), (1e9, start + 1e9 * per_byte)]


@pytest.fixture(scope="module")
def graph() -> PlanGraph:
    return PlanGraph.of(sbm(600, 4, 8, num_features=16, seed=0), "gcn")


def costs(graph: PlanGraph, prof: Profile) -> dict[str, dict[str, float]]:
    """Each configuration's predicted communication per phase, by "algo comm"."""
    return {f"{c.config.algo} {c.config.comm}": c.cost.comm_s
            for c in auto_plan(graph, 4, prof, PlanConfig(4))}


def broadcasts(algo: str, phase: str, graph: PlanGraph) -> int:
    """Stage broadcasts of ``phase`` in one epoch (a 2D all-gather is q of them)."""
    shape = grid_shape(algo, 4, 1)
    cfg = PlanConfig(4, algo=algo)
    calls = spmm_schedule(cfg, graph.num_features, graph.num_classes,
                          shape.feature_slices > 1)
    counts = collective_calls(shape, calls, "dense")[phase]
    return counts.get("broadcast", 0) + shape.cols * counts.get("all_gather", 0)


def phase_total(algo: str, phase: str, graph: PlanGraph) -> int:
    return plan(graph, PlanConfig(4, algo=algo, comm="dense"))[0]["phases"][phase]["total"]


def test_round_groups_are_the_divisors_from_two() -> None:
    assert cal.round_groups(1) == []
    assert cal.round_groups(4) == [2, 4]
    assert cal.round_groups(6) == [2, 3, 6]


def test_small_messages_are_timed_over_more_turns() -> None:
    assert [cal.round_turns(1 << k) for k in (10, 14, 18, 20, 22)] == [6, 6, 4, 1, 1]


def test_rounds_round_trip_and_bad_ones_are_refused(tmp_path: Path) -> None:
    p = profile({4: [(3e3, 1e-3), (3e6, 5e-2)], 2: [(1e3, 2e-4)]})
    p.save(tmp_path / "p.json")
    assert Profile.load(tmp_path / "p.json") == p
    raw = json.loads((tmp_path / "p.json").read_text())
    for bad in ({"1": [[1.0, 1.0]]}, {"4": []}, {"4": [[1.0, -1.0]]}, {"x": [[1.0, 1.0]]}):
        (tmp_path / "bad.json").write_text(json.dumps({**raw, "broadcast_rounds": bad}))
        with pytest.raises(DataFormatError, match=r"bad\.json"):
            Profile.load(tmp_path / "bad.json")
    raw.pop("broadcast_rounds")  # profiles written before the rounds still load
    (tmp_path / "old.json").write_text(json.dumps(raw))
    assert Profile.load(tmp_path / "old.json").broadcast_rounds == {}


def test_a_call_is_priced_between_and_beyond_the_measured_sizes() -> None:
    p = profile({4: [(100.0, 1.0), (200.0, 3.0), (400.0, 2.0)]})
    assert p.broadcast_call_s(2, 150.0) is None  # no rounds for that group size
    assert p.broadcast_call_s(4, 10.0) == pytest.approx(1.0)  # latency-bound below
    assert p.broadcast_call_s(4, 150.0) == pytest.approx(2.0)
    # The noisy cheaper largest size is raised to its predecessor: never cheaper.
    assert p.broadcast_call_s(4, 300.0) == pytest.approx(3.0)
    rising = profile({4: [(100.0, 1.0), (200.0, 3.0)]})
    assert rising.broadcast_call_s(4, 400.0) == pytest.approx(7.0)  # last slope onwards


def test_1d_stages_are_priced_per_call_from_the_world_rounds(graph: PlanGraph) -> None:
    start, per_byte = 2e-3, 5e-8
    without = costs(graph, profile())
    prof = profile({4: line(start, per_byte)})
    found = costs(graph, prof)
    for phase in ("forward_spmm", "backward_spmm"):
        expect = broadcasts("1d", phase, graph) * start \
            + per_byte * phase_total("1d", phase, graph)
        assert found["1d dense"][phase] == pytest.approx(expect)
        # The all-to-all of sparse 1D and the gradient sums do not use the rounds.
        assert found["1d sparse"][phase] == pytest.approx(without["1d sparse"][phase])
    assert found["1d dense"]["grad_allreduce"] == \
        pytest.approx(without["1d dense"]["grad_allreduce"])
    # 2D broadcasts in rows of 2: rounds of 4 ranks do not price them.
    assert found["2d dense"] == pytest.approx(without["2d dense"])


def test_2d_rows_share_the_bytes_and_gather_by_broadcasts(graph: PlanGraph) -> None:
    start, per_byte = 1e-3, 3e-8
    found = costs(graph, profile({2: line(start, per_byte)}))
    for phase in ("forward_spmm", "backward_spmm"):
        # Two process rows broadcast at once, each carrying half of the phase's bytes.
        expect = broadcasts("2d", phase, graph) * start \
            + per_byte * phase_total("2d", phase, graph) / 2
        assert found["2d dense"][phase] == pytest.approx(expect)


def test_1_5d_prices_its_replica_sum_as_an_all_reduce(graph: PlanGraph) -> None:
    """1.5D c = 2 at p = 4: replicas of 2 ranks broadcast, then the two replicas of each
    block sum the output (the busiest rank's bytes at the all-reduce's rate)."""
    start, per_byte = 1e-3, 3e-8
    found = costs(graph, profile({2: line(start, per_byte)}))["1.5d dense"]
    shape = grid_shape("1.5d", 4, 2)
    calls = spmm_schedule(PlanConfig(4), graph.num_features, graph.num_classes)
    rows = graph.num_nodes // shape.rows  # the block partition's equal blocks
    for phase in ("forward_spmm", "backward_spmm"):
        widths = sum(c.width for c in calls if c.phase == phase)
        reduce_total = shape.size * (shape.cols - 1) * rows * 4 * widths  # equal blocks
        reduce_max = (shape.cols - 1) * rows * 4 * widths
        counts = collective_calls(shape, calls, "dense")[phase]
        bcast = counts["broadcast"]
        total = plan(graph, PlanConfig(4, algo="1.5d", replication=2, comm="dense")
                     )[0]["phases"][phase]["total"]
        expect = bcast * start + per_byte * (total - reduce_total) / 2 \
            + LinkCost(LATENCY, PER_BYTE).time(counts["all_reduce"], reduce_max, 1 / 3)
        assert found[phase] == pytest.approx(expect)


def _rounds_rank(sizes: list[int]) -> dict[int, list[tuple[float, float]]]:
    session = init_session("gloo", 60)
    try:
        return cal.measure_broadcast_rounds(Communicator(), session.rank,
                                            session.world_size, sizes, 1)
    finally:
        close_session()


def test_rounds_are_measured_for_every_group_size_in_root_bytes() -> None:
    sizes = [1 << 10, 1 << 14]
    table = spawn(_rounds_rank, 4, (sizes,), wall_timeout_s=120)[0]
    assert sorted(table) == [2, 4]
    for g, points in table.items():
        assert [b for b, _ in points] == [float((g - 1) * s) for s in sizes]
        assert all(t > 0 for _, t in points)


def test_measure_dense_times_the_models_dropout_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def recording(x: torch.Tensor, p: float, training: bool, mask: str) -> torch.Tensor:
        seen.append(mask)
        return x

    monkeypatch.setattr(cal, "dropout", recording)
    cal.measure_dense(64, 1, lambda: None)
    assert set(seen) == {TrainConfig().dropout_mask}  # the models' default (names.DEFAULT_MASK)
    seen.clear()
    cal.measure_dense(64, 1, lambda: None, "bytes")
    assert set(seen) == {"bytes"}
