"""GAT, GATv2 and GIN on sampled minibatches: each sampler's blocks become the operator the
model kind needs, training runs on one process and resumes bit-identically, and on ranks
a partitioned-topology run ends with the weights of the replicated one."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data import sbm
from sparsegnn.distributed import Group, close_session, init_session, spawn
from sparsegnn.distributed.ops.sampled import GradientSum
from sparsegnn.distributed.runtime.comm import Communicator
from sparsegnn.errors import InvalidValueError
from sparsegnn.nn import block_operator
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.fullgraph import TrainConfig
from sparsegnn.train.minibatch import MinibatchConfig, MinibatchData, fit_minibatch
from sparsegnn.train.minibatch_distributed import Handoff, fit_partitioned


@pytest.fixture(scope="module")
def data() -> MinibatchData:
    return MinibatchData.from_graph(sbm(150, 3, 6, num_features=8, seed=2))


def _cfg(model: str, **overrides: object) -> TrainConfig:
    return TrainConfig(model=model, hidden=4, heads=2, num_layers=2,  # type: ignore[arg-type]
                       progress=False, **overrides)  # type: ignore[arg-type]


def test_blocks_become_each_kinds_operator() -> None:
    """A row-normalised block ``[2, 4]`` (targets 0, 1 first): the mean stays, GIN sums
    the drawn edges, attention gets them with one unit self-loop per target."""
    block = CSRMatrix.from_coo(torch.tensor([0, 0, 1]), torch.tensor([2, 3, 1]),
                               torch.tensor([0.5, 0.5, 1.0]), (2, 4))
    assert block_operator("sage", block) is block
    gin = block_operator("gin", block).to_dense()
    assert torch.equal(gin, torch.tensor([[0.0, 0, 1, 1], [0, 1, 0, 0]]))
    gat = block_operator("gat", block).to_dense()
    assert torch.equal(gat, torch.tensor([[1.0, 0, 1, 1], [0, 1, 0, 0]]))


@pytest.mark.parametrize("model", ["gat", "gatv2", "gin"])
@pytest.mark.parametrize("sampler", ["sage", "ladies", "shadow"])
def test_every_sampler_trains_the_new_models(data: MinibatchData, model: str,
                                             sampler: str) -> None:
    mb = MinibatchConfig(sampler, (4, 3), 50, 2, prefetch=False)  # type: ignore[arg-type]
    model_out, result = fit_minibatch(data, _cfg(model, epochs=2, lr=0.02), mb)
    assert result.epochs_run == 2 and 0.0 <= result.test_accuracy <= 1.0
    assert all(torch.isfinite(torch.tensor(h.loss)) for h in result.history)
    assert type(model_out).__name__ == {"gat": "GAT", "gatv2": "GAT", "gin": "GIN"}[model]


def test_gcn_is_refused_on_minibatches(data: MinibatchData) -> None:
    with pytest.raises(InvalidValueError, match="not 'gcn'"):
        fit_minibatch(data, _cfg("gcn", epochs=1), MinibatchConfig("sage", (3, 3), 50, 1))


def test_interrupted_gat_minibatch_run_resumes_bit_identically(data, tmp_path) -> None:
    mb = MinibatchConfig("sage", (4, 3), 50, 2)
    base = {"lr": 0.02, "seed": 3, "patience": 100}
    full_model, full = fit_minibatch(data, _cfg("gat", epochs=4, **base), mb)
    ckpt = tmp_path / "gat.pt"
    fit_minibatch(data, _cfg("gat", epochs=2, checkpoint=ckpt, **base), mb)
    resumed_model, resumed = fit_minibatch(
        data, _cfg("gat", epochs=4, checkpoint=ckpt, resume=True, **base), mb)
    assert [h.loss for h in resumed.history] == [h.loss for h in full.history]
    for a, b in zip(full_model.state_dict().values(), resumed_model.state_dict().values(),
                    strict=True):
        assert torch.equal(a, b)
    other = replace(_cfg("gat", epochs=5, checkpoint=ckpt, resume=True, **base), heads=4)
    with pytest.raises(InvalidValueError, match="heads 2 in the file, 4 in this run"):
        fit_minibatch(data, other, mb)


def test_cli_trains_gat_on_minibatches(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["train", "--mode", "minibatch", "--model", "gat", "--heads", "2",
            "--dataset", "sbm:nodes=120,blocks=2,degree=6", "--fanouts", "3,3",
            "--layers", "2", "--epochs", "1", "--batch-size", "32", "--no-progress", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["model"] == "gat" and out["mode"] == "minibatch"
    assert out["config"]["hidden"] == 8 and out["config"]["lr"] == 0.005  # GAT's paper


def _both_topologies(data: MinibatchData, cfg: TrainConfig, mb: MinibatchConfig,
                     replication: int) -> dict[str, object]:
    """Rank body: replicated training, then partitioned training from the same seeds."""
    session = init_session("gloo", timeout_s=60)
    try:
        comm = Communicator()
        world = Group(tuple(range(session.world_size)), session.rank)
        model, rep = fit_minibatch(data, cfg, mb, rank=session.rank,
                                   world_size=session.world_size, sync=GradientSum(comm, world))
        rep_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        part = fit_partitioned(session, Handoff(data), cfg, mb, replication)
        return {"replicated": (rep.to_dict(), rep_state),
                "partitioned": (part.value.summary, part.value.state)}
    finally:
        close_session()


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("model, sampler, nprocs, replication", [
    ("gat", "sage", 4, 2), ("gat", "shadow", 2, 1), ("gatv2", "ladies", 2, 1),
    ("gin", "sage", 2, 1),
])
def test_partitioned_topology_ends_with_the_replicated_weights(
    model: str, sampler: str, nprocs: int, replication: int
) -> None:
    data = MinibatchData.from_graph(sbm(160, 2, 6, num_features=6, seed=3), torch.float64)
    cfg = _cfg(model, epochs=3, patience=5, dtype="float64")
    mb = MinibatchConfig(sampler, (3, 2), batch_size=40, bulk=2, prefetch=True)  # type: ignore[arg-type]
    per_rank = spawn(_both_topologies, nprocs, (data, cfg, mb, replication),
                     wall_timeout_s=300)
    for r in per_rank:
        rep_summary, rep_state = r["replicated"]
        part_summary, part_state = r["partitioned"]
        for name, value in rep_state.items():
            torch.testing.assert_close(part_state[name], value, rtol=0, atol=1e-10)
        assert part_summary["losses"] == pytest.approx(rep_summary["losses"], abs=1e-9)
        for key in ("epochs_run", "best_epoch", "best_val_accuracy", "test_accuracy"):
            assert part_summary[key] == rep_summary[key], key
