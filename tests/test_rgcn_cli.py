"""``sparsegnn train --model rgcn`` on ranks and on sampled minibatches, in-process through
``main``: a 2-rank 1D run reports its grid and bytes equal to the model, a sampled run its
sampler; what R-GCN does not take is refused in one line before any rank starts."""

from __future__ import annotations

import json

import pytest

from sparsegnn.cli.main import main

HSBM = "hsbm:nodes=120,blocks=3,degree=4,features=8"


def test_rgcn_trains_on_a_grid(capsys):
    code = main(["train", "--dataset", HSBM, "--model", "rgcn", "--nprocs", "2",
                 "--epochs", "3", "--num-bases", "2", "--comm", "sparse", "--overlap",
                 "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["model"] == "rgcn" and result["algo"] == "1d"
    assert result["grid"] == [2, 1, 1] and result["world_size"] == 2
    assert result["epochs_run"] == 3 and result["config"]["ranks"]["nprocs"] == 2
    assert result["config"]["ranks"]["comm"] == "sparse" and result["config"]["ranks"]["overlap"]
    comm = result["comm"]
    assert comm["matches_model"] and comm["total_bytes_per_epoch"] > 0
    assert all(r["phases"]["forward_spmm"]["sent"] > 0 for r in comm["per_rank"])


def test_rgcn_trains_on_sampled_minibatches(capsys):
    code = main(["train", "--dataset", HSBM, "--model", "rgcn", "--mode", "minibatch",
                 "--sampler", "ladies", "--fanouts", "8,8", "--batch-size", "32",
                 "--epochs", "2", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["mode"] == "minibatch" and result["sampler"] == "ladies"
    assert result["epochs_run"] == 2 and result["config"]["num_layers"] == 2
    assert result["config"]["minibatch"]["fanouts"] == [8, 8]


@pytest.mark.parametrize(("flags", "words"), [
    (["--nprocs", "2", "--topology", "partitioned"], "drop --topology partitioned"),
    (["--mode", "minibatch", "--nprocs", "2", "--feature-cache-mb", "1"],
     "drop --feature-cache-mb"),
    (["--mode", "minibatch", "--nprocs", "2", "--algo", "1d"], "drop --algo"),
    (["--mode", "minibatch", "--fanouts", "5,5", "--layers", "3"], "2 fan-outs for a 3-layer"),
    (["--algo", "auto"], "needs a machine profile"),
    (["--nprocs", "4", "--algo", "2d", "--comm", "sparse"], "apply to --algo 1d and 1.5d"),
    (["--nprocs", "2", "--overlap", "auto"], "drop --overlap auto"),
    (["--mode", "minibatch", "--nprocs", "2", "--comm", "sparse"], "drop --comm sparse"),
    (["--mode", "minibatch", "--nprocs", "2", "--max-rank-memory", "1"],
     "drop --max-rank-memory"),
    (["--mode", "minibatch", "--nprocs", "2", "--checkpoint", "run.ckpt"],
     "checkpoints on one process only"),
    (["--nprocs", "3", "--algo", "2d"], "2d needs a square number of ranks"),
    (["--nprocs", "2", "--partition", "no-such-file"], "neither a partitioner"),
])
def test_rgcn_grid_refusals_are_one_line(capsys, flags, words):
    assert main(["train", "--dataset", HSBM, "--model", "rgcn", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sparsegnn train: error:"), err
    assert words in err[0]
