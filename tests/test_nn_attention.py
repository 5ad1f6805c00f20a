"""GAT, GATv2 and GIN models: built by kind, sized as predicted, trained on Cora; the
user-defined attention layer of docs/attention.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from sparsegnn.data import load_cora, row_normalize
from sparsegnn.nn import MODEL_KINDS, GATConv, build_model, operator_for
from sparsegnn.nn.model_size import parameter_count
from sparsegnn.sparse import CSRMatrix

DOC = Path(__file__).resolve().parents[1] / "docs" / "attention.md"


@pytest.mark.parametrize("kind", MODEL_KINDS)
@pytest.mark.parametrize("layers", [1, 2, 3])
def test_every_kind_builds_runs_and_has_the_predicted_size(kind: str, layers: int) -> None:
    model = build_model(kind, 6, 4, 3, layers, heads=2)
    assert parameter_count(kind, 6, 4, 3, layers, heads=2) == \
        sum(p.numel() for p in model.parameters())
    ei = torch.tensor([[0, 1, 2, 2, 4], [1, 2, 0, 0, 3]])
    op = operator_for(kind, CSRMatrix.from_edge_index(ei, 5))
    out = model(torch.randn(5, 6), op)
    assert out.shape == (5, 3)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_unknown_kind_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="gatv2"):
        build_model("transformer", 4, 4, 2)


def test_attention_models_run_on_sampled_blocks() -> None:
    """One rectangular pattern per layer, targets first, as the samplers make them."""
    model = build_model("gat", 6, 4, 3, 2, heads=2)
    full = operator_for("gat", CSRMatrix.from_edge_index(
        torch.tensor([[1, 2, 3, 4, 5], [0, 0, 1, 2, 3]]), 6))
    blocks = [full.select_rows(torch.arange(4)), full.submatrix(torch.arange(2), torch.arange(4))]
    assert model(torch.randn(6, 6), blocks).shape == (2, 3)


def test_gat_operator_adds_one_unit_loop_per_node() -> None:
    ei = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 1, 0, 0]])  # a loop listed twice, 1->0 twice
    op = operator_for("gat", CSRMatrix.from_edge_index(ei, 3))
    torch.testing.assert_close(op.to_dense(), torch.tensor([[1.0, 2, 0], [1, 1, 0], [0, 0, 1]]))


@pytest.mark.slow
def test_gat_trains_on_cora() -> None:
    """PyG's example GAT (8 heads of 8, dropout 0.6, weight decay 5e-4), 50 epochs at lr
    0.01: about 0.82 test accuracy on the standard split."""
    graph = load_cora()
    x, y = row_normalize(graph.x), graph.y
    op = operator_for("gat", CSRMatrix.from_edge_index(graph.edge_index, graph.num_nodes))
    torch.manual_seed(0)
    model = build_model("gat", x.shape[1], 8, int(y.max()) + 1, 2, 0.6, heads=8)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(50):
        model.train()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x, op)[graph.train_mask],
                                                 y[graph.train_mask])
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(x, op).argmax(1)
    accuracy = (pred[graph.test_mask] == y[graph.test_mask]).float().mean().item()
    assert accuracy > 0.75


def test_the_docs_attention_layer_runs_as_written() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 2
    namespace: dict[str, object] = {}
    torch.manual_seed(0)
    exec(compile("\n".join(blocks), str(DOC), "exec"), namespace)  # asserts inside
    layer, adj = namespace["layer"], namespace["adj"]
    assert isinstance(adj, CSRMatrix) and isinstance(layer, torch.nn.Module)


def test_gat_layer_repr_and_heads_check() -> None:
    assert repr(GATConv(3, 2, heads=4)) == "GATConv(3, 2, heads=4)"
    with pytest.raises(ValueError, match="heads"):
        GATConv(3, 2, heads=0)
