"""``GATConv``, ``GATv2Conv``, ``GINConv`` and ``RGCNConv`` equal PyG's layers of the same
name and options, in float64, outputs and gradients (input and every parameter), on
random directed multigraphs with repeated edges, repeated self-loops and isolated nodes.

Weights go from the PyG layer into ours by ``load_state_dict``, which is also the check
that a PyG checkpoint loads. Options rotate over the graphs so that every combination
meets several graphs. Attention dropout is compared in eval mode; its training-mode
behaviour has a test of its own.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
import torch

from sparsegnn.nn import (
    GATConv,
    GATv2Conv,
    GINConv,
    RGCNConv,
    operator_for,
    relation_operators,
)
from sparsegnn.sparse import CSRMatrix

pyg_nn = pytest.importorskip("torch_geometric.nn")
pytestmark = pytest.mark.usefixtures("one_thread")

NUM_GRAPHS = 120
FIN = 4
RELATIONS = 3


def multigraph(gen: torch.Generator) -> tuple[torch.Tensor, int]:
    """5-30 nodes, the last ones isolated, edges and self-loops repeated at random."""
    n = int(torch.randint(5, 31, (1,), generator=gen))
    used = int(torch.randint(1, n + 1, (1,), generator=gen))
    e = int(torch.randint(0, 3 * used, (1,), generator=gen))
    edges = torch.randint(0, used, (2, e), generator=gen)
    loops = torch.randint(0, used, (int(torch.randint(0, 4, (1,), generator=gen)),),
                          generator=gen).repeat(2, 1)
    ei = torch.cat([edges, loops, loops, edges[:, : e // 2]], dim=1)
    return ei[:, torch.randperm(ei.shape[1], generator=gen)], n


def graphs() -> list[tuple[torch.Tensor, int, torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(46)
    out = []
    for _ in range(NUM_GRAPHS):
        ei, n = multigraph(gen)
        x = torch.randn(n, FIN, dtype=torch.float64, generator=gen)
        edge_type = torch.randint(0, RELATIONS, (ei.shape[1],), generator=gen)
        out.append((ei, n, x, edge_type))
    return out


def test_the_graphs_hold_every_hard_case() -> None:
    loops = repeated = isolated = 0
    for ei, n, _, _ in graphs():
        keys, counts = (ei[0] * n + ei[1]).unique(return_counts=True)
        is_loop = keys // n == keys % n
        loops += bool((is_loop & (counts > 1)).any())
        repeated += bool((~is_loop & (counts > 1)).any())
        isolated += ei.unique().numel() < n
    assert min(loops, repeated, isolated) >= NUM_GRAPHS // 10


def _run(module: torch.nn.Module, x: torch.Tensor, *graph: object
         ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Output, input gradient and parameter gradients under a fixed random upstream."""
    module.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_(True)
    out = module(x, *graph)
    upstream = torch.randn(out.shape, dtype=out.dtype,
                           generator=torch.Generator().manual_seed(out.numel()))
    (out * upstream).sum().backward()
    grads = {k: p.grad for k, p in module.named_parameters()}
    return out.detach(), x.grad, grads


def _assert_same(ours: torch.nn.Module, theirs: torch.nn.Module, x: torch.Tensor,
                 context: str, *graph: object, our_graph: tuple | None = None) -> None:
    out, gx, grads = _run(ours, x, *(graph if our_graph is None else our_graph))
    ref, ref_gx, ref_grads = _run(theirs, x, *graph)
    msg: Callable[[str], str] = lambda m: f"{context}: {m}"  # noqa: E731
    torch.testing.assert_close(out, ref, msg=msg)
    torch.testing.assert_close(gx, ref_gx, msg=msg)
    assert grads.keys() == ref_grads.keys()
    for name, grad in grads.items():
        if ref_grads[name] is None:  # a parameter the output does not reach
            assert grad is None or not grad.any(), f"{context}: {name}"
        else:
            torch.testing.assert_close(grad, ref_grads[name], msg=msg)


def _loaded(ours: torch.nn.Module, theirs: torch.nn.Module) -> torch.nn.Module:
    """Ours with the PyG layer's weights, its zero-initialised biases made random first
    so that they are tested too."""
    theirs.double()
    with torch.no_grad():
        for name, p in theirs.named_parameters():
            if name.endswith("bias"):
                p.uniform_(-1, 1)
    ours.double().load_state_dict(theirs.state_dict())
    return ours


GAT_OPTIONS = list(itertools.product([1, 3], [True, False], [True, False], [True, False],
                                     [False, True]))  # heads, concat, loops, bias, residual


@pytest.mark.parametrize("v2", [False, True], ids=["GATConv", "GATv2Conv"])
def test_gat_layers_equal_pyg(v2: bool) -> None:
    for i, (ei, n, x, _) in enumerate(graphs()):
        heads, concat, loops, bias, residual = GAT_OPTIONS[i % len(GAT_OPTIONS)]
        kw = dict(heads=heads, concat=concat, add_self_loops=loops, bias=bias,
                  residual=residual, negative_slope=0.05 + 0.1 * (i % 4), dropout=0.3)
        if v2:
            kw["share_weights"] = i % 3 == 0
        ours_cls, theirs_cls = (GATv2Conv, pyg_nn.GATv2Conv) if v2 else (GATConv, pyg_nn.GATConv)
        theirs = theirs_cls(FIN, 2, **kw).eval()
        ours = _loaded(ours_cls(FIN, 2, **kw), theirs).eval()
        _assert_same(ours, theirs, x, f"graph {i} n={n} {kw} edge_index={ei.tolist()}", ei)


def test_gat_on_our_operator_equals_the_edge_index_path() -> None:
    """The operator ``operator_for('gat', A)`` (repeated edges stored once with their
    count, one self-loop per node) gives PyG's result from the edge_index."""
    for i, (ei, n, x, _) in enumerate(graphs()[:30]):
        theirs = pyg_nn.GATConv(FIN, 2, heads=2).eval()
        ours = _loaded(GATConv(FIN, 2, heads=2), theirs).eval()
        op = operator_for("gat", CSRMatrix.from_edge_index(ei, n).to(dtype=torch.float64))
        _assert_same(ours, theirs, x, f"graph {i}", ei, our_graph=(op,))


def test_gin_equals_pyg() -> None:
    for i, (ei, n, x, _) in enumerate(graphs()):
        train_eps = i % 2 == 0
        mlp = torch.nn.Sequential(torch.nn.Linear(FIN, 5), torch.nn.ReLU(),
                                  torch.nn.Linear(5, 3))
        theirs = pyg_nn.GINConv(mlp, eps=0.1 * (i % 5) - 0.2, train_eps=train_eps)
        ours = _loaded(GINConv(torch.nn.Sequential(torch.nn.Linear(FIN, 5), torch.nn.ReLU(),
                                                   torch.nn.Linear(5, 3)),
                               train_eps=train_eps), theirs)
        _assert_same(ours, theirs, x, f"graph {i} n={n}", ei)
        if i < 20:  # our operator (raw adjacency, repeated edges summed) agrees too
            op = operator_for("gin", CSRMatrix.from_edge_index(ei, n).to(dtype=torch.float64))
            _assert_same(ours, theirs, x, f"graph {i} operator", ei, our_graph=(op,))


RGCN_OPTIONS = list(itertools.product([{}, {"num_bases": 2}, {"num_blocks": 2}],
                                      [True, False], [True, False]))  # root, bias


@pytest.mark.parametrize("out_channels", [2, 6])
def test_rgcn_equals_pyg(out_channels: int) -> None:
    """Both orders of our products (narrowing first or aggregating first) agree."""
    for i, (ei, n, x, edge_type) in enumerate(graphs()):
        decomposition, root, bias = RGCN_OPTIONS[i % len(RGCN_OPTIONS)]
        kw = dict(decomposition, root_weight=root, bias=bias)
        theirs = pyg_nn.RGCNConv(FIN, out_channels, RELATIONS, **kw)
        ours = _loaded(RGCNConv(FIN, out_channels, RELATIONS, **kw), theirs)
        _assert_same(ours, theirs, x, f"graph {i} n={n} {kw}", ei, edge_type)
        if i < 20:
            ops = relation_operators(ei, edge_type, RELATIONS, n, dtype=torch.float64)
            _assert_same(ours, theirs, x, f"graph {i} operators", ei, edge_type,
                         our_graph=(ops,))


def test_attention_dropout_drops_and_keeps_the_expectation() -> None:
    """With self-loops only, every attention weight is 1: training-mode dropout must
    zero about ``p`` of the rows, scale the kept ones by ``1 / (1 - p)`` (so the mean over
    nodes, draws or not, is the eval output), and repeat under the same seed."""
    n, p = 4000, 0.4
    layer = GATConv(3, 2, dropout=p, bias=False).double()
    x = torch.randn(n, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    empty = torch.zeros(2, 0, dtype=torch.long)
    expected = layer.eval()(x, empty)
    layer.train()
    torch.manual_seed(0)
    first = layer(x, empty)
    torch.manual_seed(0)
    torch.testing.assert_close(layer(x, empty), first)
    dropped = (first == 0).all(dim=1)
    assert abs(dropped.float().mean().item() - p) < 0.03
    torch.testing.assert_close(first[~dropped], expected[~dropped] / (1 - p))
    assert abs((first / expected).mean().item() - 1) < 0.05  # the expectation is kept
