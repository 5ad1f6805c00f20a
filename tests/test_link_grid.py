"""Link prediction on grids of gloo ranks: the weights after 3 epochs are one process's
(float64, every grid) and every rank's bytes, every epoch, are the closed-form model's."""

from __future__ import annotations

import json

import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data.generators import sbm
from sparsegnn.errors import InvalidValueError
from sparsegnn.sampling.link_split import random_link_split
from sparsegnn.train.link_grid import LinkGridRequest, one_process_weights, train_link_grid
from sparsegnn.train.link_task import LinkRequest

pytestmark = pytest.mark.usefixtures("one_thread")

EPOCHS = 3


@pytest.fixture(scope="module")
def graph():
    return sbm(64, 4, 5.0, mixing=0.1, seed=2, num_features=12, feature_noise=1.0)


@pytest.mark.parametrize(("algo", "ranks", "replication", "decoder", "partition"), [
    ("1d", 4, 1, "dot", "block"), ("1.5d", 4, 2, "mlp", "block"),
    ("2d", 4, 1, "dot", "random"), ("3d", 8, 1, "distmult", "block")])
def test_grid_weights_equal_one_process_and_bytes_the_model(
        graph, algo: str, ranks: int, replication: int, decoder: str, partition: str) -> None:
    link = LinkRequest(hidden=8, out_channels=6, epochs=EPOCHS, decoder=decoder, lr=0.05)
    split = random_link_split(graph.edge_index, graph.num_nodes, seed=0)
    reference, _ = one_process_weights(graph, split, link)
    request = LinkGridRequest(link, algo=algo, nprocs=ranks, replication=replication,
                              partition=partition, dtype="float64")
    out = train_link_grid(graph, request, split)
    assert out is not None and len(out.ranks) == ranks
    assert set(out.weights) == set(reference)
    for name, value in reference.items():
        assert torch.allclose(out.weights[name], value, rtol=0, atol=1e-10), name
    assert out.link.epochs_run == EPOCHS
    assert out.matches_model, [(r.measured[-1], r.predicted[-1]) for r in out.ranks]
    moved = [r.measured[-1].get("forward_link", {}).get("recv", 0) for r in out.ranks]
    assert sum(moved) > 0  # candidates' source rows did cross ranks
    assert out.to_dict()["comm"]["matches_model"] is True


def test_cli_trains_on_ranks_and_reports_bytes(capsys) -> None:
    code = main(["train", "--task", "link", "--dataset", "sbm:nodes=64,blocks=4,degree=5",
                 "--algo", "1.5d", "--replication", "2", "--nprocs", "4", "--epochs", "2",
                 "--hidden", "8", "--out-channels", "6", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["task"] == "link" and result["algo"] == "1.5d"
    assert result["grid"] == [2, 2, 1] and result["world_size"] == 4
    assert result["comm"]["matches_model"] is True
    assert {"test_auc", "test_ap", "test_mrr", "val_auc"} <= set(result)
    assert result["epochs_run"] == 2


@pytest.mark.parametrize(("argv", "words"), [
    (["--algo", "2d", "--nprocs", "3"], "square number of ranks"),
    (["--algo", "auto", "--nprocs", "4"], "drop --algo auto"),
    (["--nprocs", "2", "--mode", "minibatch", "--algo", "1d"], "drop --algo"),
    (["--nprocs", "2", "--checkpoint", "run.pt"], "no checkpoints"),
])
def test_refusals_are_one_line(capsys, argv: list[str], words: str) -> None:
    assert main(["train", "--task", "link", "--dataset", "sbm:nodes=40,blocks=2,degree=4",
                 *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    with pytest.raises(InvalidValueError, match="checkpoints"):
        LinkGridRequest(LinkRequest(resume=True))
