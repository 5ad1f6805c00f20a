"""R-GCN node classification on typed graphs: the featureless layer, PyG equality of the
whole model, and training through the library's request/outcome."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sparsegnn.data.typed_sbm import typed_sbm
from sparsegnn.nn.rgcn import RGCNConv, relation_operators
from sparsegnn.train.rgcn_task import (
    RelationalClassifier,
    RGCNRequest,
    featureless_forward,
    train_rgcn,
)


def _relational(features: int = 0, nodes: int = 60, seed: int = 0):
    g = typed_sbm(nodes, blocks=3, degree=2.0, num_features=features, seed=seed)
    return g.to_relational()


@pytest.mark.parametrize("num_bases", [None, 2])
def test_featureless_layer_is_the_layer_on_the_identity(num_bases: int | None) -> None:
    rel = _relational()
    ops = relation_operators(rel.edge_index, rel.edge_type, rel.num_relations, rel.num_nodes,
                             dtype=torch.float64)
    torch.manual_seed(0)
    conv = RGCNConv(rel.num_nodes, 5, rel.num_relations, num_bases=num_bases).double()
    eye = torch.eye(rel.num_nodes, dtype=torch.float64)
    torch.testing.assert_close(featureless_forward(conv, ops), conv(eye, ops))


@pytest.mark.parametrize("features", [0, 4])
def test_model_equals_pyg_rgcn_outputs_and_gradients(features: int) -> None:
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    rel = _relational(features)
    in_ch = None if rel.x is None else rel.x.shape[1]
    torch.manual_seed(1)
    first = rel.num_nodes if in_ch is None else in_ch
    pyg = torch.nn.ModuleList([pyg_nn.RGCNConv(first, 8, rel.num_relations, num_bases=3),
                               pyg_nn.RGCNConv(8, 3, rel.num_relations, num_bases=3)]).double()
    ours = RelationalClassifier(in_ch, rel.num_nodes, 8, 3, rel.num_relations,
                                num_bases=3).double()
    ours.convs.load_state_dict(pyg.state_dict())
    x = None if rel.x is None else rel.x.double()
    h = torch.relu(pyg[0](x, rel.edge_index, rel.edge_type))
    expected = pyg[1](h, rel.edge_index, rel.edge_type)
    ops = relation_operators(rel.edge_index, rel.edge_type, rel.num_relations, rel.num_nodes,
                             dtype=torch.float64)
    got = ours(x, ops)
    torch.testing.assert_close(got, expected)
    expected.square().sum().backward()
    got.square().sum().backward()
    for (name, p), q in zip(ours.convs.named_parameters(), pyg.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


@pytest.mark.slow
def test_train_rgcn_learns_a_typed_sbm_and_resumes(tmp_path: Path) -> None:
    graph = typed_sbm(800, blocks=3, degree=4.0, num_features=8, seed=0)
    request = RGCNRequest(epochs=10, lr=0.05, seed=3, checkpoint=tmp_path / "run.ckpt")
    out = train_rgcn(request, graph)
    assert out.num_relations == 8 and not out.featureless and out.epochs_run == 10
    assert out.test_accuracy > 0.8  # 3 classes: chance is about 0.33
    resumed = train_rgcn(RGCNRequest(epochs=12, lr=0.05, seed=3,
                                     checkpoint=tmp_path / "run.ckpt", resume=True), graph)
    assert resumed.epochs_run == 12 and len(resumed.history) == 12
    featureless = train_rgcn(RGCNRequest(epochs=10, lr=0.05, featureless=True, num_bases=2),
                             graph)
    assert featureless.featureless and featureless.test_accuracy > 0.5
