"""Layers and models against plain dense formulas."""

from __future__ import annotations

import pytest
import torch

from sparsegnn.nn import GCN, GCNConv, GraphSAGE, SAGEConv
from sparsegnn.sparse import CSRMatrix, gcn_norm, row_norm


@pytest.fixture
def graph():
    g = torch.Generator().manual_seed(0)
    ei = torch.randint(0, 12, (2, 40), generator=g)
    ei = ei[:, ei[0] != ei[1]]
    ei = torch.cat([ei, ei.flip(0)], 1)
    adj = CSRMatrix.from_edge_index(ei, 12, duplicates="max").to(dtype=torch.float64)
    x = torch.randn(12, 6, dtype=torch.float64, generator=g)
    return ei, adj, x


@pytest.mark.parametrize(("fin", "fout"), [(6, 3), (6, 9)])
def test_gcnconv_matches_dense(graph, fin, fout):
    _, adj, x = graph
    conv = GCNConv(fin, fout).double()
    with torch.no_grad():
        conv.bias.uniform_()
    norm = gcn_norm(adj)
    expected = norm.to_dense() @ x @ conv.lin.weight.T + conv.bias
    torch.testing.assert_close(conv(x, norm), expected)


def test_gcnconv_accepts_edge_index_and_caches(graph):
    _, adj, x = graph
    conv = GCNConv(6, 4, cached=True).double()
    out_ei = conv(x, adj.to_edge_index())
    assert conv._cache is not None
    torch.testing.assert_close(out_ei, conv(x, gcn_norm(adj)))


def test_gcnconv_matches_pyg(graph):
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    _, adj, x = graph
    ours = GCNConv(6, 4).double()
    theirs = pyg_nn.GCNConv(6, 4).double()
    with torch.no_grad():
        theirs.lin.weight.copy_(ours.lin.weight)
        theirs.bias.copy_(ours.bias)
    ei_unique = adj.to_edge_index()
    torch.testing.assert_close(ours(x, gcn_norm(adj)), theirs(x, ei_unique))


@pytest.mark.parametrize("aggr", ["mean", "sum", "max"])
def test_sageconv_matches_dense(graph, aggr):
    _, adj, x = graph
    conv = SAGEConv(6, 4, aggr=aggr).double()
    d = adj.to_dense()
    if aggr == "mean":
        agg = row_norm(adj).to_dense() @ x
        op = row_norm(adj)
    elif aggr == "sum":
        agg, op = d @ x, adj
    else:
        agg = torch.stack(
            [
                (x[d[i] > 0].max(0).values if (d[i] > 0).any() else torch.zeros(6, dtype=x.dtype))
                for i in range(12)
            ]
        )
        op = adj
    expected = agg @ conv.lin_l.weight.T + x @ conv.lin_r.weight.T + conv.lin_l.bias
    torch.testing.assert_close(conv(x, op), expected)


def test_sageconv_rectangular_block_uses_first_rows_as_targets(graph):
    _, adj, x = graph
    block = row_norm(adj.select_rows(torch.arange(5)))
    conv = SAGEConv(6, 3).double()
    out = conv(x, block)
    assert out.shape == (5, 3)
    torch.testing.assert_close(out, conv(x, row_norm(adj))[:5])


@pytest.mark.parametrize("layers", [1, 2, 4])
def test_models_any_depth_and_gradients(graph, layers):
    _, adj, x = graph
    for model, op in (
        (GCN(6, 7, 3, layers, dropout=0.0), gcn_norm(adj)),
        (GraphSAGE(6, 7, 3, layers, dropout=0.0), row_norm(adj)),
    ):
        model = model.double()
        out = model(x, op)
        assert out.shape == (12, 3)
        out.sum().backward()
        assert all(p.grad is not None for p in model.parameters())


def test_model_rejects_wrong_number_of_blocks(graph):
    _, adj, x = graph
    with pytest.raises(ValueError, match="per-layer operators"):
        GraphSAGE(6, 4, 2, 3).double()(x, [row_norm(adj)])
