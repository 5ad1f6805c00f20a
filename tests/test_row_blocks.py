"""Row-block folders for partitioned minibatch training (``data partition --mode minibatch``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data import row_normalize, sbm
from sparsegnn.distributed.layout.row_blocks import (
    check_row_blocks,
    read_row_block,
    write_row_blocks,
)
from sparsegnn.distributed.layout.shard import read_manifest
from sparsegnn.errors import DataFormatError
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.fullgraph import TrainConfig
from sparsegnn.train.minibatch import MinibatchConfig, MinibatchData
from sparsegnn.train.minibatch_distributed import train_partitioned

SBM = "sbm:nodes=120,blocks=2,degree=6"


def test_blocks_hold_the_rows_of_a_and_x(tmp_path: Path) -> None:
    g = sbm(90, 3, 5, num_features=4, seed=2)
    write_row_blocks(g, tmp_path / "rb", 3)
    adj = CSRMatrix.from_edge_index(g.edge_index, g.num_nodes)
    x = row_normalize(g.x)
    rows = []
    for j in range(3):
        block = read_row_block(tmp_path / "rb", j)
        lo, hi = block.bounds[j], block.bounds[j + 1]
        want = adj.select_rows(torch.arange(lo, hi))
        assert torch.equal(block.adj.crow, want.crow) and torch.equal(block.adj.col, want.col)
        assert torch.equal(block.x, x[lo:hi]) and torch.equal(block.y, g.y)
        rows.append(hi - lo)
    assert sum(rows) == 90 and max(rows) - min(rows) <= 1


def test_a_rank_reads_only_its_block(tmp_path: Path) -> None:
    out = tmp_path / "rb"
    write_row_blocks(sbm(60, 2, 4, num_features=3, seed=1), out, 3)
    (out / "block1.npz").unlink()
    (out / "block2.npz").write_bytes(b"garbage")
    assert read_row_block(out, 0).adj.shape[0] == 20  # the others are never opened
    with pytest.raises(DataFormatError, match=r"block1\.npz is missing"):
        read_row_block(out, 1)
    with pytest.raises(DataFormatError, match=r"block1\.npz is missing"):
        check_row_blocks(out)


def test_a_block_file_from_another_cut_is_refused(tmp_path: Path) -> None:
    g = sbm(60, 2, 4, num_features=3, seed=1)
    write_row_blocks(g, tmp_path / "a", 2)
    write_row_blocks(g, tmp_path / "b", 2, seed=0, parts="random")
    (tmp_path / "a" / "block0.npz").write_bytes((tmp_path / "b" / "block0.npz").read_bytes())
    with pytest.raises(DataFormatError, match="fingerprint"):
        read_row_block(tmp_path / "a", 0)
    with pytest.raises(DataFormatError, match="minibatch partition"):
        read_manifest(tmp_path / "a")  # the full-graph reader says what the folder is


def test_a_partitioner_relabels_into_blocks(tmp_path: Path) -> None:
    g = sbm(80, 2, 6, num_features=3, seed=5)
    result = write_row_blocks(g, tmp_path / "rb", 2, parts="random", seed=1)
    parts = np.load(tmp_path / "rb" / "parts.npy")
    assert parts.shape == (80,) and sorted(np.bincount(parts).tolist()) == sorted(
        result["block_sizes"])
    # Every edge of the graph is in exactly one block, relabelled.
    total = sum(read_row_block(tmp_path / "rb", j).adj.nnz for j in range(2))
    assert total == CSRMatrix.from_edge_index(g.edge_index, 80).nnz


@pytest.mark.distributed
@pytest.mark.slow
def test_training_from_blocks_equals_training_from_memory(tmp_path: Path) -> None:
    g = sbm(160, 2, 6, num_features=6, seed=3)
    write_row_blocks(g, tmp_path / "rb", 2)
    g.x = row_normalize(g.x)
    cfg = TrainConfig(model="sage", hidden=8, num_layers=2, epochs=2, patience=5,
                      dtype="float64", progress=False)
    mb = MinibatchConfig("sage", (3, 2), batch_size=40, bulk=2, prefetch=True)
    from_disk = train_partitioned(tmp_path / "rb", cfg, mb, 2, wall_timeout_s=150)
    in_memory = train_partitioned(MinibatchData.from_graph(g, torch.float64), cfg, mb, 2,
                                  wall_timeout_s=150)
    for a, b in zip(from_disk, in_memory, strict=True):
        for name, value in a.value.state.items():
            assert torch.equal(value, b.value.state[name]), name
        assert a.value.summary["losses"] == b.value.summary["losses"]
        assert a.comm.phases["sampling"] == b.comm.phases["sampling"]


@pytest.mark.distributed
def test_cli_partition_then_train_with_replication(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rb"
    assert main(["data", "partition", SBM, str(out), "--mode", "minibatch", "--nprocs", "4",
                 "--replication", "2", "--json"]) == 0
    written = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert written["blocks"] == 2 and sum(written["block_sizes"]) == 120
    argv = ["train", "--mode", "minibatch", "--dataset", str(out), "--nprocs", "4",
            "--fanouts", "3,3", "--layers", "2", "--epochs", "1", "--batch-size", "32",
            "--no-progress", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["topology"] == "partitioned" and result["replication"] == 2
    assert result["row_blocks"] == 2 and result["world_size"] == 4
    # Each rank holds its block's 60 feature rows (float32), not the graph's 120.
    f = check_row_blocks(out)["num_features"]
    held = [r["held_bytes"]["features"] for r in result["memory_per_rank"]]
    assert held == [60 * f * 4] * 4


def test_cli_refuses_a_world_the_blocks_do_not_divide(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rb"
    assert main(["data", "partition", SBM, str(out), "--mode", "minibatch", "--nprocs", "3"]) == 0
    argv = ["train", "--mode", "minibatch", "--dataset", str(out), "--nprocs", "2",
            "--epochs", "1", "--no-progress"]
    assert main(argv) != 0
    assert "3 row blocks" in capsys.readouterr().err


def test_cli_max_rank_memory_refuses_a_block_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rb"
    assert main(["data", "partition", SBM, str(out), "--mode", "minibatch", "--nprocs", "2"]) == 0
    argv = ["train", "--mode", "minibatch", "--dataset", str(out), "--nprocs", "2",
            "--max-rank-memory", "1e-6", "--epochs", "1", "--no-progress"]
    assert main(argv) != 0
    assert "exceeds --max-rank-memory" in capsys.readouterr().err


def _cli_rank(argv: list[str]) -> tuple[int, str]:
    """Rank body: ``sparsegnn train`` as torchrun starts it (RANK, WORLD_SIZE set); its
    exit code and what it printed."""
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(argv)
    return code, printed.getvalue()


@pytest.mark.distributed
def test_torchrun_ranks_read_their_blocks_like_nprocs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sparsegnn.distributed import spawn

    out = tmp_path / "rb"
    assert main(["data", "partition", SBM, str(out), "--mode", "minibatch", "--nprocs", "2"]) == 0
    argv = ["train", "--mode", "minibatch", "--dataset", str(out), "--fanouts", "3,3",
            "--layers", "2", "--epochs", "2", "--batch-size", "32", "--no-progress", "--history",
            "--json"]
    capsys.readouterr()
    assert main([*argv, "--nprocs", "2"]) == 0
    launched = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (code0, printed0), (code1, printed1) = spawn(_cli_rank, 2, (argv,), wall_timeout_s=120)
    assert code0 == code1 == 0 and printed1 == ""  # rank 0 reports, rank 1 stays quiet
    torchrun = json.loads(printed0.strip().splitlines()[-1])
    assert torchrun["losses"] == launched["losses"]
    assert torchrun["test_accuracy"] == launched["test_accuracy"]
    assert torchrun["world_size"] == 2 and torchrun["row_blocks"] == 2
