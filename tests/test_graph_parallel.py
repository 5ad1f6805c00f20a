"""Data-parallel graph classification (train.graph_parallel) on two real gloo ranks: the
weights of one process on the same minibatches, in float64."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from sparsegnn.data.graph_set import random_graph_set, stratified_folds
from sparsegnn.errors import InvalidValueError
from sparsegnn.train.graph_parallel import train_fold_parallel
from sparsegnn.train.graph_task import GraphRequest, train_fold

pytestmark = pytest.mark.usefixtures("one_thread")


def test_two_ranks_end_with_the_weights_of_one_process():
    data = random_graph_set(34, seed=2)
    data = replace(data, x=data.x.double())
    # 17 training graphs in minibatches of 8: the last holds one graph, so rank 1 has
    # none of it and adds zero gradients
    req = GraphRequest(model="gcn", hidden=8, num_layers=2, dropout=0.0, batch_size=8,
                       epochs=3, folds=2, lr_step=2)
    folds = stratified_folds(data.y, 2)
    one = train_fold(data, req, folds, 0)
    ranks = train_fold_parallel(data, req, folds, 0, nprocs=2)
    expected = one.model.state_dict()
    for result in ranks:
        weights = result.value.state_dict
        for key, value in expected.items():
            assert weights[key].dtype == torch.float64
            torch.testing.assert_close(weights[key], value, rtol=0, atol=1e-10, msg=key)
        assert torch.equal(result.value.confusion, one.confusion)
        assert [h.test_accuracy for h in result.value.state.history] == \
            [h.test_accuracy for h in one.state.history]
        assert [h.loss for h in result.value.state.history] == \
            pytest.approx([h.loss for h in one.state.history], rel=1e-12)
        assert result.comm.phases["grad_allreduce"]["sent"] > 0
    first = ranks[0].value.state_dict
    assert all(torch.equal(first[k], v) for k, v in ranks[1].value.state_dict.items())


def test_more_ranks_than_a_minibatch_is_refused():
    data = random_graph_set(12, seed=1)
    with pytest.raises(InvalidValueError, match="every rank needs a share"):
        train_fold_parallel(data, GraphRequest(batch_size=2, folds=2), [], 0, nprocs=3)
