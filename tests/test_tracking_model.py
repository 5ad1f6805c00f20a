"""Interaction Network on CSR SpMM against the same weights with dense incidence matrices."""

from __future__ import annotations

import pytest
import torch

from sparsegnn.tracking.model import EdgeOperators, INConfig, InteractionNetwork, weighted_bce


@pytest.fixture(autouse=True)
def _one_thread():
    """These tensors are tiny: extra intra-op threads only add contention on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class DenseOperators:
    """Reference aggregation: dense [N, E] incidence matrices and plain matmuls."""

    def __init__(self, edge_index: torch.Tensor, num_nodes: int):
        self.src, self.dst = edge_index
        e = torch.arange(edge_index.shape[1])
        self.to_dst = torch.zeros(num_nodes, e.numel(), dtype=torch.float64)
        self.to_src = torch.zeros(num_nodes, e.numel(), dtype=torch.float64)
        self.to_dst[self.dst, e] = 1.0
        self.to_src[self.src, e] = 1.0

    def gather(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        one_hot_src = self.to_src.t()
        one_hot_dst = self.to_dst.t()
        return one_hot_src @ h, one_hot_dst @ h

    def aggregate(self, e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.to_dst @ e, self.to_src @ e


def _problem() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    n, m = 9, 20
    edge_index = torch.randint(0, n, (2, m), generator=g)
    edge_index[:, 0] = torch.tensor([8, 8])  # a self-loop and an isolated-looking node 8
    x = torch.randn(n, 3, generator=g, dtype=torch.float64)
    edge_attr = torch.randn(m, 4, generator=g, dtype=torch.float64)
    target = torch.rand(m, generator=g) < 0.3
    return edge_index, x, edge_attr, target


def test_forward_and_backward_match_dense_reference() -> None:
    torch.manual_seed(1)
    model = InteractionNetwork(INConfig(hidden=16, iterations=3)).double()
    edge_index, x, edge_attr, target = _problem()
    weight = torch.ones(edge_index.shape[1], dtype=torch.float64)
    grads = []
    outs = []
    for ops in (EdgeOperators(edge_index, 9, torch.float64), DenseOperators(edge_index, 9)):
        model.zero_grad()
        xs = x.clone().requires_grad_()
        logits = model(xs, edge_attr, ops)
        weighted_bce(logits, target, weight, pos_weight=3.0).backward()
        outs.append(logits.detach())
        grads.append([xs.grad.clone()] + [p.grad.clone() for p in model.parameters()])
    torch.testing.assert_close(outs[0], outs[1])
    for sparse_grad, dense_grad in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(sparse_grad, dense_grad)


def test_aggregation_is_a_sum_over_incident_edges() -> None:
    edge_index = torch.tensor([[0, 0, 1], [1, 2, 2]])
    ops = EdgeOperators(edge_index, 4)
    e = torch.tensor([[1.0], [10.0], [100.0]])
    into, out_of = ops.aggregate(e)
    assert into.squeeze(1).tolist() == [0.0, 1.0, 110.0, 0.0]
    assert out_of.squeeze(1).tolist() == [11.0, 100.0, 0.0, 0.0]


def test_weighted_bce_ignores_zero_weight_edges() -> None:
    logits = torch.tensor([2.0, -1.0, 5.0])
    target = torch.tensor([True, False, False])
    full = weighted_bce(logits[:2], target[:2], torch.ones(2), pos_weight=2.0)
    masked = weighted_bce(logits, target, torch.tensor([1.0, 1.0, 0.0]), pos_weight=2.0)
    torch.testing.assert_close(full, masked)
    softplus = torch.nn.functional.softplus
    by_hand = (2.0 * softplus(-logits[0]) + softplus(logits[1])) / 2
    torch.testing.assert_close(full, by_hand)
