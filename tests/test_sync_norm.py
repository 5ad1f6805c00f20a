"""Synced batch norm (distributed.ops.sync_norm): on one rank it is BatchNorm1d, outputs,
gradients and running statistics; on two gloo ranks GIN's data-parallel folds end with
the one-process weights (tests/test_graph_parallel.py has the GCN case)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from sparsegnn.data.graph_set import random_graph_set, stratified_folds
from sparsegnn.distributed.ops.sync_norm import SyncedBatchNorm1d, sync_batch_norms
from sparsegnn.distributed.runtime.comm import Communicator, Group
from sparsegnn.train.graph_parallel import train_fold_parallel
from sparsegnn.train.graph_task import GraphRequest, train_fold

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("momentum", [0.1, None])
def test_one_rank_equals_batch_norm(momentum: float | None) -> None:
    torch.manual_seed(0)
    plain = nn.BatchNorm1d(5, momentum=momentum).double()
    with torch.no_grad():
        plain.weight.uniform_(0.5, 1.5)
        plain.bias.uniform_(-1, 1)
    twin = nn.BatchNorm1d(5, momentum=momentum).double()
    twin.load_state_dict(plain.state_dict())
    synced = SyncedBatchNorm1d.replacing(twin, Communicator(), Group((0,), 0))
    for step in range(3):
        x = (torch.randn(17, 5, dtype=torch.float64) * 3 + 40).requires_grad_()
        x2 = x.detach().clone().requires_grad_()
        g = torch.randn(17, 5, dtype=torch.float64)
        (plain(x) * g).sum().backward()
        (synced(x2) * g).sum().backward()
        torch.testing.assert_close(x2.grad, x.grad, rtol=0, atol=1e-12, msg=f"step {step}")
    for name in ("weight", "bias"):
        torch.testing.assert_close(getattr(twin, name).grad, getattr(plain, name).grad)
    for key, value in plain.state_dict().items():
        torch.testing.assert_close(synced.state_dict()[key], value, rtol=0, atol=1e-12)
    synced.eval()
    plain.eval()
    x = torch.randn(4, 5, dtype=torch.float64)
    torch.testing.assert_close(synced(x), plain(x))


def test_replacing_shares_parameters_and_keys() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.Sequential(nn.BatchNorm1d(4)))
    before = dict(model.state_dict())
    weight = model[1][0].weight
    sync_batch_norms(model, Communicator(), Group((0,), 0))
    assert isinstance(model[1][0], SyncedBatchNorm1d)
    assert model[1][0].weight is weight
    assert model.state_dict().keys() == before.keys()
    with pytest.raises(ValueError, match="affine"):
        SyncedBatchNorm1d.replacing(nn.BatchNorm1d(4, affine=False), Communicator(),
                                    Group((0,), 0))


# The biases of the linear maps right before a batch norm: the norm subtracts them again,
# so their true gradient is zero and autograd's is rounding noise (1e-16), which Adam
# divides by its eps (1e-8) into steps of about 1e-9 that differ between any two ways of
# summing; the norms' running means follow those biases. None of it changes an output
# (the confusion and losses below are compared too).
_CANCELLED = {f"convs.{i}.nn.{j}.bias" for i in (0, 1) for j in (0, 3)} | {
    "convs.0.nn.1.running_mean", "convs.1.nn.1.running_mean",
    "norms.0.running_mean", "norms.1.running_mean"}


def test_gin_on_two_ranks_ends_with_the_weights_of_one_process() -> None:
    data = random_graph_set(30, seed=4)
    data = replace(data, x=data.x.double())
    # 15 training graphs in minibatches of 4: the last holds three, so the ranks' shares
    # differ in size (2 and 1 graphs), and the statistics must be the whole batch's
    req = GraphRequest(model="gin", hidden=8, num_layers=3, dropout=0.0, batch_size=4,
                       epochs=2, folds=2, lr_step=0)
    folds = stratified_folds(data.y, 2)
    one = train_fold(data, req, folds, 0)
    ranks = train_fold_parallel(data, req, folds, 0, nprocs=2)
    expected = one.model.state_dict()
    for result in ranks:
        weights = result.value.state_dict
        assert weights.keys() == expected.keys()
        for key, value in expected.items():
            if key in _CANCELLED:
                continue
            torch.testing.assert_close(weights[key], value, rtol=0, atol=1e-10, msg=key)
        assert torch.equal(result.value.confusion, one.confusion)
        assert [h.loss for h in result.value.state.history] == \
            pytest.approx([h.loss for h in one.state.history], rel=1e-12)
        assert result.comm.phases["norm_stats"]["sent"] > 0
