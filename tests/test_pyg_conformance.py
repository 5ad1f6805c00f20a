"""``GCNConv``/``SAGEConv`` given an ``edge_index`` equal PyG's layers on messy multigraphs.

Random directed multigraphs with duplicate edges, self-loops, repeated self-loops and
isolated nodes, in float64: outputs and the gradients of the input and of every
parameter must agree with PyG's, since users pass PyG ``edge_index`` tensors unchanged.
"""

from __future__ import annotations

import pytest
import torch

from sparsegnn.nn import GCNConv, SAGEConv

pyg_nn = pytest.importorskip("torch_geometric.nn")
pytestmark = pytest.mark.usefixtures("one_thread")

NUM_GRAPHS = 200
FIN, FOUT = 3, 2


def random_multigraph(gen: torch.Generator) -> tuple[torch.Tensor, int]:
    """An edge_index over n nodes where the last nodes are isolated, with repeated edges
    and (repeated) self-loops mixed in at random positions."""
    n = int(torch.randint(1, 10, (1,), generator=gen))
    used = int(torch.randint(1, n + 1, (1,), generator=gen))  # nodes >= used are isolated
    e = int(torch.randint(0, 4 * used, (1,), generator=gen))
    edges = torch.randint(0, used, (2, e), generator=gen)
    loops = torch.randint(0, used, (int(torch.randint(0, 4, (1,), generator=gen)),),
                          generator=gen).repeat(2, 1)
    parts = [edges, loops, loops, edges[:, : e // 2]]  # duplicates of loops and of edges
    ei = torch.cat(parts, dim=1)
    return ei[:, torch.randperm(ei.shape[1], generator=gen)], n


def _grads(module: torch.nn.Module, x: torch.Tensor, ei: torch.Tensor,
           upstream: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
    x = x.clone().requires_grad_(True)
    out = module(x, ei)
    (out * upstream).sum().backward()
    return out.detach(), {k: p.grad for k, p in module.named_parameters()}, x.grad


def _graphs() -> list[tuple[torch.Tensor, int, torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(25)
    graphs = []
    for _ in range(NUM_GRAPHS):
        ei, n = random_multigraph(gen)
        x = torch.randn(n, FIN, dtype=torch.float64, generator=gen)
        upstream = torch.randn(n, FOUT, dtype=torch.float64, generator=gen)
        graphs.append((ei, n, x, upstream))
    return graphs


def test_generator_covers_the_hard_cases() -> None:
    """The sample holds repeated self-loops, repeated edges and isolated nodes."""
    repeated_loop = repeated_edge = isolated = 0
    for ei, n, _, _ in _graphs():
        keys, counts = (ei[0] * n + ei[1]).unique(return_counts=True)
        loops = keys // n == keys % n
        repeated_loop += bool((loops & (counts > 1)).any())
        repeated_edge += bool((~loops & (counts > 1)).any())
        isolated += ei.unique().numel() < n
    assert min(repeated_loop, repeated_edge, isolated) >= NUM_GRAPHS // 10


def test_gcnconv_equals_pyg_on_multigraphs() -> None:
    for ei, n, x, upstream in _graphs():
        ours = GCNConv(FIN, FOUT).double()
        theirs = pyg_nn.GCNConv(FIN, FOUT).double()
        with torch.no_grad():
            ours.bias.uniform_()
            theirs.lin.weight.copy_(ours.lin.weight)
            theirs.bias.copy_(ours.bias)
        out, grads, gx = _grads(ours, x, ei, upstream)
        ref, ref_grads, ref_gx = _grads(theirs, x, ei, upstream)
        context = f"n={n} edge_index={ei.tolist()}"
        torch.testing.assert_close(out, ref, msg=lambda m, c=context: f"{c}: {m}")
        torch.testing.assert_close(gx, ref_gx)
        torch.testing.assert_close(grads["lin.weight"], ref_grads["lin.weight"])
        torch.testing.assert_close(grads["bias"], ref_grads["bias"])


@pytest.mark.parametrize("aggr", ["mean", "sum", "max"])
def test_sageconv_equals_pyg_on_multigraphs(aggr: str) -> None:
    for ei, n, x, upstream in _graphs():
        ours = SAGEConv(FIN, FOUT, aggr=aggr).double()  # type: ignore[arg-type]
        theirs = pyg_nn.SAGEConv(FIN, FOUT, aggr=aggr).double()
        with torch.no_grad():
            ours.lin_l.bias.uniform_()
            theirs.lin_l.weight.copy_(ours.lin_l.weight)
            theirs.lin_l.bias.copy_(ours.lin_l.bias)
            theirs.lin_r.weight.copy_(ours.lin_r.weight)
        out, grads, gx = _grads(ours, x, ei, upstream)
        ref, ref_grads, ref_gx = _grads(theirs, x, ei, upstream)
        context = f"{aggr} n={n} edge_index={ei.tolist()}"
        torch.testing.assert_close(out, ref, msg=lambda m, c=context: f"{c}: {m}")
        torch.testing.assert_close(gx, ref_gx)
        torch.testing.assert_close(grads["lin_l.weight"], ref_grads["lin_l.weight"])
        torch.testing.assert_close(grads["lin_r.weight"], ref_grads["lin_r.weight"])
        torch.testing.assert_close(grads["lin_l.bias"], ref_grads["lin_l.bias"])
