"""Per-rank memory accounting and the ``--max-rank-memory`` refusal (issue 20, point 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparsegnn.cli.main import main
from sparsegnn.data import load_any, sbm
from sparsegnn.distributed.layout.block_partition import BlockPartition
from sparsegnn.distributed.layout.grid import grid_shape
from sparsegnn.distributed.planning.planner import Layout, PlanGraph
from sparsegnn.distributed.planning.rank_memory import (
    PREDICTED_KINDS,
    Holding,
    activation_width,
    layout_holdings,
    rank_bytes,
)
from sparsegnn.errors import ResourceError
from sparsegnn.nn.model_size import parameter_count
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.fullgraph import TrainConfig, build_model
from sparsegnn.train.memory import (
    MEMORY_KINDS,
    check_graph_rank_memory,
    check_rank_memory,
    measure_rank_memory,
    minibatch_share,
)

SBM = "sbm:nodes=120,blocks=2,degree=6"


def held(predicted: dict[str, int]) -> dict[str, int]:
    """The kinds of a prediction that a rank's ``held_bytes`` measures."""
    return {k: predicted[k] for k in MEMORY_KINDS}


@pytest.mark.parametrize("model", ["gcn", "sage"])
@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize(("in_dim", "hidden", "out_dim"), [(4, 16, 3), (1433, 64, 7),
                                                           (128, 128, 16)])
def test_parameter_count_equals_the_built_model(model: str, layers: int, in_dim: int,
                                                hidden: int, out_dim: int) -> None:
    cfg = TrainConfig(model=model, hidden=hidden, num_layers=layers)
    built = build_model(cfg, in_dim, out_dim)
    assert parameter_count(model, in_dim, hidden, out_dim, layers) == \
        sum(p.numel() for p in built.parameters())


def test_prediction_kinds_for_a_known_small_graph() -> None:
    # 10 vertices, 30 nonzeros in one tile, 4 float32 features, 50 parameters.
    got = rank_bytes(Holding(11, 30, 10, 4), 50, 4)
    assert list(got) == list(PREDICTED_KINDS)
    assert held(got) == {"topology": 11 * 8 + 30 * (8 + 4), "features": 10 * 4 * 4,
                         "model": 200, "optimiser": 400}
    assert got["training"] == 200 and got["graph"] == got["process"] == 0  # gradients
    # Full-graph training: values per row for the activations (three per input column and
    # layer output value on 1D, five on 2D/3D); an overlapped product's blocks in flight;
    # the loaded graph; the process.
    assert activation_width("1d", 4, [4, 16, 3]) == 3 * (4 + 16 + 3)
    assert activation_width("2d", 2, [4, 16, 3]) == 5 * (2 + 16 + 3)
    full = rank_bytes(Holding(11, 30, 10, 4), 50, 4, activation_width=64, in_flight_bytes=7,
                      graph_bytes=3, process_bytes=5)
    assert full["training"] == 200 + 10 * 64 * 4 + 7
    assert (full["graph"], full["process"]) == (3, 5) and held(full) == held(got)


def test_minibatch_share_falls_with_p() -> None:
    assert minibatch_share(100, 1000, 10, 4) == (100, 1000, 10)
    assert minibatch_share(100, 1000, 10, 4, topology="partitioned",
                           replication=2) == (50, 500, 10)


def test_fullgraph_prediction_falls_with_p() -> None:
    """A rank's rows halve as the row blocks double; on 2D/3D it holds only its slice of
    the feature columns; its share of the nonzeros falls with p."""
    graph = sbm(512, 4, 8, num_features=32, seed=0)
    cfg = TrainConfig(hidden=16)

    def predicted(p: int, algo: str = "1d", c: int = 1) -> dict[str, int]:
        return check_graph_rank_memory(graph, cfg, 64.0, p, mode="fullgraph", algo=algo,
                                       replication=c, process=0)

    one, two, four = predicted(1), predicted(2), predicted(4)
    assert one["features"] == 512 * 32 * 4 == 2 * two["features"] == 4 * four["features"]
    assert one["topology"] > two["topology"] > four["topology"]
    assert predicted(4, "1.5d", 2)["features"] == two["features"]
    assert predicted(4, "2d")["features"] == 256 * 16 * 4
    assert predicted(8, "3d")["features"] == 256 * 16 * 4
    assert one["graph"] == four["graph"] > 0  # every rank loads the graph whole


@pytest.mark.parametrize("model", ["gcn", "sage"])
@pytest.mark.parametrize(("algo", "p", "c"), [("1d", 4, 1), ("1.5d", 4, 2), ("2d", 4, 1),
                                              ("3d", 8, 1)])
def test_layout_holdings_equal_a_partitioned_folders(
    model: str, algo: str, p: int, c: int, tmp_path: Path,
) -> None:
    """What the predictor counts on a planner layout is what ``data partition`` records
    each rank will hold (its ``rank_holdings``, checked against the measured held bytes
    below), from the pattern alone and from the built operator alike."""
    from sparsegnn.distributed.layout.partitioned import write_partitioned
    from sparsegnn.distributed.layout.shard import read_manifest

    graph = load_any(SBM, seed=0)
    write_partitioned(graph, tmp_path / "part", algo, p, c, model)  # type: ignore[arg-type]
    written = [Holding(*h) for h in read_manifest(tmp_path / "part")["rank_holdings"]]
    shape = grid_shape(algo, p, c)  # type: ignore[arg-type]
    plan_graph = PlanGraph.of(graph, model)
    lay = Layout(plan_graph, shape, BlockPartition.even(graph.num_nodes, shape.rows), 0.0)
    assert layout_holdings(lay, graph.num_features) == written
    plan_graph.operator()
    assert layout_holdings(lay, graph.num_features) == written


def test_prediction_matches_measured_held_bytes_on_one_rank() -> None:
    graph = load_any(SBM, seed=0)
    cfg = TrainConfig(model="sage", num_layers=2)
    predicted = check_graph_rank_memory(graph, cfg, 1.0, 1, mode="minibatch")
    adj = CSRMatrix.from_edge_index(graph.edge_index, graph.num_nodes)
    model = build_model(cfg, graph.num_features, graph.num_classes)
    measured = measure_rank_memory([adj, adj], [graph.x.float()], model)
    assert measured.held_bytes == held(predicted)  # a shared tile counts once
    assert measured.peak_rss_bytes > 0


def test_check_refuses_above_the_limit() -> None:
    with pytest.raises(ResourceError, match=r"topology 100.*exceeds --max-rank-memory"):
        check_rank_memory({"topology": 100, "features": 2**30}, 1.0)
    check_rank_memory({"topology": 100}, 1.0)


@pytest.mark.parametrize("extra", [
    [],
    ["--mode", "minibatch", "--topology", "partitioned"],
    ["--mode", "minibatch"],
])
def test_max_rank_memory_refuses_before_spawning(
    extra: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sparsegnn.distributed.runtime.dispatch as dispatch
    import sparsegnn.train.distributed as fg
    import sparsegnn.train.minibatch_distributed as mbd

    def no_spawn(*a: object, **k: object) -> None:
        raise AssertionError("a rank was spawned")

    monkeypatch.setattr(dispatch, "spawn", no_spawn)
    for mod in (fg, mbd):
        monkeypatch.setattr(mod, "run_on_ranks", no_spawn)
    argv = ["train", "--dataset", SBM, "--nprocs", "2", "--max-rank-memory", "1e-6",
            "--epochs", "1", "--no-progress", "--json", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "predicted per-rank memory" in err[0] and "topology" in err[0]
    assert "features" in err[0] and "optimiser" in err[0]
    assert f"({int(1e-6 * 2**30)} bytes)" in err[0]


def test_max_rank_memory_flag_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--nprocs", "2", "--max-rank-memory", "0"])
    assert exit_.value.code == 2


@pytest.mark.distributed
@pytest.mark.slow
def test_nprocs_2_reports_memory_per_rank(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["train", "--dataset", SBM, "--nprocs", "2", "--epochs", "2", "--no-progress",
            "--json", "--max-rank-memory", "1"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    ranks = out["memory_per_rank"]
    assert [r["rank"] for r in ranks] == [0, 1]
    graph = load_any(SBM, seed=0)
    n = graph.num_nodes
    whole = (n + 1) * 8 + (graph.num_edges + n) * (8 + 4)  # GCN's A + I, float32
    for r in ranks:
        held = r["held_bytes"]
        assert set(held) == set(MEMORY_KINDS)
        assert 0 < held["topology"] < whole
        assert held["features"] < n * graph.num_features * 4
        assert held["optimiser"] == 2 * held["model"] > 0
        assert r["peak_rss_bytes"] > 0


@pytest.mark.distributed
@pytest.mark.parametrize("algo, nprocs", [("1d", 2), ("2d", 4)])
def test_partitioned_folder_prediction_equals_held_bytes(
    algo: str, nprocs: int, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """A full-graph partitioned folder records what each rank will hold, so the limit is
    checked without the graph, and the prediction is the largest rank's measured bytes."""
    from sparsegnn.distributed.layout.shard import read_manifest
    from sparsegnn.train.memory import check_shards_rank_memory

    out = tmp_path / "part"
    assert main(["data", "partition", SBM, str(out), "--algo", algo, "--nprocs",
                 str(nprocs)]) == 0
    argv = ["train", "--dataset", str(out), "--nprocs", str(nprocs), "--algo", algo,
            "--epochs", "1", "--no-progress", "--json"]
    assert main([*argv, "--max-rank-memory", "1e-6"]) == 2
    assert "exceeds --max-rank-memory" in capsys.readouterr().err
    assert main([*argv, "--max-rank-memory", "1"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    ranks = result["memory_per_rank"]
    predicted = check_shards_rank_memory(read_manifest(out), TrainConfig(), 1.0)
    assert held(predicted) == max((r["held_bytes"] for r in ranks),
                                  key=lambda h: sum(h.values()))
    assert predicted["graph"] == 0  # each rank reads only its own file
    # The JSON reports what the check predicted, beside what each rank measured.
    assert result["predicted_memory_per_rank"] == {**predicted, "total": sum(predicted.values())}
    assert all(r["training_peak_bytes"] == r["peak_rss_bytes"] - r["start_rss_bytes"] > 0
               for r in ranks)


@pytest.mark.distributed
@pytest.mark.slow
def test_auto_under_a_memory_limit_stays_within_its_prediction(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--algo auto --max-rank-memory``: every rank's measured peak is within the
    predicted memory of the configuration trained, on a graph where building the whole
    operator (2.2M nonzeros) is each rank's peak, and no trials run (runs one after
    another in a process peaked 5-60% above their predictions)."""
    argv = ["train", "--dataset", "sbm:nodes=65536,blocks=16,degree=32,features=128",
            "--nprocs", "4", "--algo", "auto", "--calibrate", "--max-rank-memory", "4",
            "--hidden", "128",
            "--epochs", "2", "--no-progress", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    predicted = out["auto"]["memory_bytes_per_rank"]
    assert predicted <= 4 * 2**30
    assert [t["trial_epoch_s"] for t in out["auto"]["trials"]] == [None]
    assert all(r["peak_rss_bytes"] <= predicted for r in out["memory_per_rank"])
