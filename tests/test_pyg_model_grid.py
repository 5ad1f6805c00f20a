"""A model class written as for PyG, imports changed to ``sparsegnn.nn``, trains on a grid.

``train_model`` on a 2D grid of 4 real gloo ranks (and a 1.5D one for a GraphSAGE model
with PyG's ``project`` and ``normalize``) ends, after 3 epochs in float64, with the
weights of one process to 1e-10. The same class with PyG's layers gives the same logits
from the same weights, so moving a model over is the change of its imports.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from sparsegnn.data import load_any
from sparsegnn.errors import InvalidValueError
from sparsegnn.nn import GCNConv, SAGEConv
from sparsegnn.train import Grid, TrainConfig, train_model

GRAPH_SPEC = "sbm:nodes=48,blocks=3,degree=5"


class GCN(torch.nn.Module):
    """PyG's two-layer GCN example, as its users write it."""

    Conv: Any = GCNConv

    def __init__(self, in_channels: int, hidden: int, out_channels: int):
        super().__init__()
        self.conv1 = self.Conv(in_channels, hidden)
        self.conv2 = self.Conv(hidden, out_channels)

    def forward(self, x: torch.Tensor, edge_index: Any) -> torch.Tensor:
        x = self.conv1(x, edge_index).relu()
        return self.conv2(x, edge_index)


class SAGE(torch.nn.Module):
    """A GraphSAGE model with PyG's options set."""

    def __init__(self, in_channels: int, hidden: int, out_channels: int):
        super().__init__()
        self.conv1 = SAGEConv(in_channels, hidden, project=True)
        self.conv2 = SAGEConv(hidden, out_channels, normalize=True)

    def forward(self, x: torch.Tensor, edge_index: Any) -> torch.Tensor:
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


@pytest.fixture(scope="module")
def graph():
    return load_any(GRAPH_SPEC, None, seed=0)


def _cfg() -> TrainConfig:
    return TrainConfig(epochs=3, dtype="float64", progress=False, lr=0.05)


def _fresh(kind: type[torch.nn.Module], graph: Any) -> torch.nn.Module:
    torch.manual_seed(0)
    return kind(graph.num_features, 8, graph.num_classes)


@pytest.mark.distributed
@pytest.mark.parametrize(("kind", "algo", "replication"), [(GCN, "2d", 1), (SAGE, "1.5d", 2)],
                         ids=["gcn-2d", "sage-1.5d"])
def test_a_pyg_style_model_on_a_grid_equals_one_process(graph, kind, algo, replication):
    one = train_model(_fresh(kind, graph), graph, _cfg())
    grid = train_model(_fresh(kind, graph), graph, _cfg(),
                       Grid(nprocs=4, algo=algo, replication=replication, backend="gloo"))
    assert [h.loss for h in grid.result.history] == pytest.approx(
        [h.loss for h in one.result.history], rel=1e-10)
    trained = one.model.state_dict()
    for name, value in grid.model.state_dict().items():
        assert float((value - trained[name]).abs().max()) <= 1e-10, name
    start = _fresh(kind, graph).double().state_dict()
    assert any(not torch.equal(start[k], v) for k, v in trained.items())  # it trained


def test_the_class_with_pyg_layers_gives_the_same_logits(graph):
    pyg_nn = pytest.importorskip("torch_geometric.nn")

    class PygGCN(GCN):
        Conv = pyg_nn.GCNConv

    ours = _fresh(GCN, graph).double()
    theirs = PygGCN(graph.num_features, 8, graph.num_classes).double()
    theirs.load_state_dict(ours.state_dict())
    x = graph.x.double()
    torch.testing.assert_close(ours(x, graph.edge_index), theirs(x, graph.edge_index))


class Mixed(torch.nn.Module):
    def __init__(self, in_channels: int, hidden: int, out_channels: int, aggr: str = "mean"):
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden)
        self.conv2 = SAGEConv(hidden, out_channels, aggr=aggr)  # type: ignore[arg-type]

    def forward(self, x: torch.Tensor, edge_index: Any) -> torch.Tensor:
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def test_what_one_operator_cannot_serve_is_refused_before_ranks_start(graph):
    with pytest.raises(InvalidValueError, match="different operators"):
        train_model(_fresh(Mixed, graph), graph, _cfg())
    maxed = _fresh(Mixed, graph)
    maxed.conv1 = SAGEConv(graph.num_features, 8, aggr="max")
    maxed.conv2 = SAGEConv(8, graph.num_classes, aggr="max")
    with pytest.raises(InvalidValueError, match="aggr='max'"):
        train_model(maxed, graph, _cfg(), Grid(nprocs=4, algo="1d"))
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    with pytest.raises(InvalidValueError, match=r"import them from sparsegnn\.nn"):
        train_model(torch.nn.Sequential(pyg_nn.GCNConv(4, 4)), graph, _cfg())
