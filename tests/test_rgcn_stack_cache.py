"""The stacked relation operators of :class:`RGCNConv` are built once per list of
operators and direction, and rebuilt when an operator's values change."""

from __future__ import annotations

import torch

from sparsegnn.nn import RGCNConv, relation_operators
from sparsegnn.nn.rgcn import _stacked
from sparsegnn.sparse import CSRMatrix


def _ops() -> list[CSRMatrix]:
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, 30, (2, 200), generator=gen)
    edge_type = torch.randint(0, 3, (200,), generator=gen)
    return relation_operators(edge_index, edge_type, 3, 30, dtype=torch.float64)


def test_both_directions_stay_cached() -> None:
    """A model narrowing first in one layer and aggregating first in the next keeps
    both stacks (one slot for both rebuilt each, and its transpose, every epoch)."""
    ops = _ops()
    cols, rows = _stacked(ops, "cols"), _stacked(ops, "rows")
    assert _stacked(ops, "cols") is cols and _stacked(ops, "rows") is rows
    ops[1].val.mul_(2.0)  # new values: a new stack, equal to a fresh one
    again = _stacked(ops, "cols")
    assert again is not cols
    doubled = torch.where(again.col % 3 == 1, 2.0, 1.0).to(torch.float64)  # relation 1
    assert torch.equal(again.val, _stacked(_ops(), "cols").val * doubled)


def test_two_layers_of_both_orders_match_per_relation_products() -> None:
    """Stacked products through a narrowing layer then a widening one equal the
    per-relation loop, outputs and gradients, over repeated epochs."""
    ops = _ops()
    torch.manual_seed(0)
    first, second = RGCNConv(8, 4, 3).double(), RGCNConv(4, 4, 3).double()
    x = torch.randn(30, 8, dtype=torch.float64, requires_grad=True)
    for _ in range(2):
        out = second(first(x, ops).relu(), ops)
        (gx,) = torch.autograd.grad(out.square().sum(), x)
        h = first._per_relation(x, ops, True).addmm(x, first.root).add(first.bias).relu()
        ref = torch.addmm(second._per_relation(h, ops, False), h, second.root) + second.bias
        (ref_gx,) = torch.autograd.grad(ref.square().sum(), x)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(gx, ref_gx)
