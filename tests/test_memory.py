"""Per-rank memory accounting and the ``--max-rank-memory`` refusal (issue 20, point 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparsegnn.cli.main import main
from sparsegnn.data import load_any
from sparsegnn.errors import ResourceError
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.fullgraph import TrainConfig
from sparsegnn.train.memory import (
    MEMORY_KINDS,
    check_graph_rank_memory,
    check_rank_memory,
    measure_rank_memory,
    predict_rank_memory,
    rank_share,
)

SBM = "sbm:nodes=120,blocks=2,degree=6"


def test_prediction_kinds_for_a_known_small_graph() -> None:
    # 10 vertices, 30 nonzeros, 4 float32 features, 50 parameters, one rank.
    got = predict_rank_memory(10, 30, 4, 50, 4, block_rows=10, block_nnz=30)
    assert list(got) == list(MEMORY_KINDS)
    assert got == {"topology": 11 * 8 + 30 * (8 + 4), "features": 10 * 4 * 4,
                   "model": 200, "optimiser": 400}
    # A^T stored apart doubles the tiles only.
    apart = predict_rank_memory(10, 30, 4, 50, 4, block_rows=10, block_nnz=30,
                                symmetric=False)
    assert apart["topology"] == 2 * got["topology"] and apart["features"] == got["features"]


def test_rank_share_falls_with_p() -> None:
    assert rank_share(100, 1000, 10, 4, mode="fullgraph", algo="1d") == (25, 250, 10)
    assert rank_share(100, 1000, 10, 4, mode="fullgraph", algo="1.5d",
                      replication=2) == (50, 250, 10)
    # 2D/3D: a rank holds its block's rows and only its slice of the feature columns.
    assert rank_share(100, 1000, 10, 4, mode="fullgraph", algo="2d") == (50, 250, 5)
    assert rank_share(100, 1000, 10, 8, mode="fullgraph", algo="3d") == (50, 125, 5)
    assert rank_share(100, 1000, 10, 9, mode="fullgraph", algo="2d") == (34, 112, 4)
    assert rank_share(100, 1000, 10, 4, mode="minibatch") == (100, 1000, 10)
    assert rank_share(100, 1000, 10, 4, mode="minibatch", topology="partitioned",
                      replication=2) == (50, 500, 10)


def test_prediction_matches_measured_held_bytes_on_one_rank() -> None:
    graph = load_any(SBM, seed=0)
    cfg = TrainConfig(model="sage", num_layers=2)
    predicted = check_graph_rank_memory(graph, cfg, 1.0, 1, mode="minibatch")
    adj = CSRMatrix.from_edge_index(graph.edge_index, graph.num_nodes)
    from sparsegnn.train.fullgraph import build_model

    model = build_model(cfg, graph.num_features, graph.num_classes)
    held = measure_rank_memory([adj, adj], [graph.x.float()], model)
    assert held.held_bytes == predicted  # a shared tile counts once
    assert held.peak_rss_bytes > 0


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
    import sparsegnn.distributed as dist
    import sparsegnn.train.distributed as fg
    import sparsegnn.train.minibatch_distributed as mbd

    def no_spawn(*a: object, **k: object) -> None:
        raise AssertionError("a rank was spawned")

    for mod in (dist, fg, mbd):
        monkeypatch.setattr(mod, "spawn", no_spawn)
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
    from sparsegnn.distributed.shard import read_manifest
    from sparsegnn.train.memory import check_shards_rank_memory

    out = tmp_path / "part"
    assert main(["data", "partition", SBM, str(out), "--algo", algo, "--nprocs",
                 str(nprocs)]) == 0
    argv = ["train", "--dataset", str(out), "--nprocs", str(nprocs), "--algo", algo,
            "--epochs", "1", "--no-progress", "--json"]
    assert main([*argv, "--max-rank-memory", "1e-6"]) == 2
    assert "exceeds --max-rank-memory" in capsys.readouterr().err
    assert main([*argv, "--max-rank-memory", "1"]) == 0
    ranks = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["memory_per_rank"]
    predicted = check_shards_rank_memory(read_manifest(out), TrainConfig(), 1.0)
    assert predicted == max((r["held_bytes"] for r in ranks),
                            key=lambda h: sum(h.values()))
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
            "--nprocs", "4", "--algo", "auto", "--max-rank-memory", "4", "--hidden", "128",
            "--epochs", "2", "--no-progress", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    predicted = out["auto"]["memory_bytes_per_rank"]
    assert predicted <= 4 * 2**30
    assert [t["trial_epoch_s"] for t in out["auto"]["trials"]] == [None]
    assert all(r["peak_rss_bytes"] <= predicted for r in out["memory_per_rank"])
