"""`train --model gat|gatv2|gin`: the papers' settings where the user gives none, one-process
training and bit-identical resume, the per-rank memory prediction of attention's per-edge
tensors, and the command line on a grid (measured bytes equal the prediction)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.cli.train_cmd import config_from_args
from sparsegnn.cli.train_flags import add_train_flags
from sparsegnn.data import load_any
from sparsegnn.distributed.planning.rank_memory import Holding, edge_bytes, rank_bytes
from sparsegnn.errors import InvalidValueError
from sparsegnn.nn import GAT, GIN
from sparsegnn.sparse import native
from sparsegnn.train.fullgraph import TrainConfig, build_model, config_for, train_single
from sparsegnn.train.memory import check_graph_rank_memory

SPEC = "sbm:nodes=80,blocks=3,degree=5"


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_train_flags(parser)
    return parser.parse_args(list(argv))


def test_papers_settings_fill_only_what_was_not_given() -> None:
    gat = config_from_args(_args("--model", "gat"))
    assert (gat.hidden, gat.heads, gat.dropout, gat.lr, gat.weight_decay) == (
        8, 8, 0.6, 0.005, 5e-4)
    assert gat.attention_dropout is None  # the model's dropout, as in the paper
    mine = config_from_args(_args("--model", "gat", "--lr", "0.01", "--hidden", "16",
                                  "--heads", "4", "--weight-decay", "0"))
    assert (mine.hidden, mine.heads, mine.dropout, mine.lr, mine.weight_decay) == (
        16, 4, 0.6, 0.01, 0.0)
    gcn = config_from_args(_args())
    assert (gcn.model, gcn.hidden, gcn.dropout, gcn.lr) == ("gcn", 16, 0.5, 0.01)
    gin = config_from_args(_args("--model", "gin"))
    assert (gin.hidden, gin.lr, gin.weight_decay) == (64, 0.01, 0.0)
    with pytest.raises(InvalidValueError, match="unknown model 'mlp'"):
        config_for("mlp")


def test_the_trainer_builds_every_kind_through_nn_build_model() -> None:
    gat = build_model(config_for("gatv2", heads=3, attention_dropout=0.1), 10, 4)
    assert isinstance(gat, GAT) and gat.layers[0].heads == 3
    assert gat.layers[0].dropout == 0.1 and gat.dropout == 0.6
    assert isinstance(build_model(config_for("gin"), 10, 4), GIN)


@pytest.mark.parametrize("model", ["gat", "gatv2", "gin"])
def test_interrupted_run_resumes_to_identical_weights(tmp_path, model: str) -> None:
    graph = load_any(SPEC, None, seed=0)
    base = config_for(model, hidden=4, heads=2, epochs=6, progress=False, seed=1)
    full_model, full = train_single(graph, base)
    ckpt = tmp_path / "run.pt"
    train_single(graph, replace(base, epochs=3, checkpoint=ckpt, checkpoint_every=1))
    resumed_model, resumed = train_single(graph, replace(base, checkpoint=ckpt, resume=True))
    assert [h.loss for h in resumed.history] == [h.loss for h in full.history]
    for key, w in full_model.state_dict().items():
        assert torch.equal(resumed_model.state_dict()[key], w), key
    if model != "gin":  # a GAT of other heads is another model
        with pytest.raises(InvalidValueError, match="heads"):
            train_single(graph, replace(base, heads=4, checkpoint=ckpt, resume=True))


def test_memory_counts_attentions_per_edge_tensors() -> None:
    """``nnz x heads`` values per attention tensor and layer; none for SpMM models; an
    int64 row index per layer only where the torch path's ``index_select`` runs."""
    assert edge_bytes(config_for("gcn"), 4) == 0
    indices = 0 if native.library() is not None else 2 * 8
    assert edge_bytes(config_for("gat", heads=8), 4) == 4 * (8 + 1) * 4 + indices
    held = Holding(11, 100, 10, 5)
    plain = rank_bytes(held, 50, 4)
    attention = rank_bytes(held, 50, 4, edge_bytes=108)
    assert attention["training"] - plain["training"] == 100 * 108
    graph = load_any(SPEC, None, seed=0)
    kinds = {m: check_graph_rank_memory(graph, config_for(m, hidden=8), 100.0, 2,
                                        mode="fullgraph") for m in ("gin", "gat")}
    assert kinds["gat"]["training"] > kinds["gin"]["training"]


def test_data_info_is_unaffected(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "info", "cora", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["num_nodes"] == 2708


@pytest.mark.distributed
@pytest.mark.slow
def test_cli_trains_gat_on_a_grid_and_its_bytes_match(capsys: pytest.CaptureFixture[str],
                                                      ) -> None:
    argv = ["train", "--dataset", SPEC, "--model", "gat", "--heads", "2", "--hidden", "4",
            "--nprocs", "4", "--algo", "1.5d", "--replication", "2", "--epochs", "2",
            "--no-progress", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["model"] == "gat" and out["world_size"] == 4
    assert out["comm"]["matches_model"]
    phases = out["comm"]["per_rank"][0]["phases"]
    assert phases["forward_attention"]["sent"] > 0 and "forward_spmm" not in phases


def test_an_unknown_model_is_refused_by_the_config() -> None:
    with pytest.raises(InvalidValueError, match="unknown model"):
        TrainConfig(model="mlp")  # type: ignore[arg-type]
