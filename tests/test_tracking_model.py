"""Interaction Network on CSR SpMM against the same weights with dense incidence matrices."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sparsegnn.errors import InvalidValueError
from sparsegnn.tracking import model as model_module
from sparsegnn.tracking.infer import scoring_model
from sparsegnn.tracking.model import EdgeOperators, INConfig, InteractionNetwork, weighted_bce
from sparsegnn.tracking.pipeline import Reconstruction
from sparsegnn.tracking.settings import RecoConfig
from tracking_toys import toy_graphs

pytestmark = pytest.mark.usefixtures("one_thread")


def dense_reference(model: InteractionNetwork, x: torch.Tensor, edge_attr: torch.Tensor,
                    edge_index: torch.Tensor) -> torch.Tensor:
    """The IN written the textbook way: dense [N, E] incidence matmuls for aggregation,
    plain indexing and concatenation ``[h[src], h[dst], e]`` into unsplit MLPs."""
    src, dst = edge_index
    e_ids = torch.arange(edge_index.shape[1])
    to_dst = torch.zeros(x.shape[0], e_ids.numel(), dtype=x.dtype)
    to_src = torch.zeros(x.shape[0], e_ids.numel(), dtype=x.dtype)
    to_dst[dst, e_ids] = 1.0
    to_src[src, e_ids] = 1.0
    h, e = model.node_encoder(x), model.edge_encoder(edge_attr)
    for node_update, edge_update in zip(model.node_updates, model.edge_updates, strict=True):
        h = h + node_update(torch.cat([h, to_dst @ e, to_src @ e], dim=1))
        e = e + edge_update(torch.cat([h[src], h[dst], e], dim=1))
    return model.decoder(torch.cat([h[src], h[dst], e], dim=1)).squeeze(1)


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
    for sparse in (True, False):
        model.zero_grad()
        xs = x.clone().requires_grad_()
        logits = (model(xs, edge_attr, EdgeOperators(edge_index, 9, torch.float64)) if sparse
                  else dense_reference(model, xs, edge_attr, edge_index))
        weighted_bce(logits, target, weight, pos_weight=3.0).backward()
        outs.append(logits.detach())
        grads.append([xs.grad.clone()] + [p.grad.clone() for p in model.parameters()])
    torch.testing.assert_close(outs[0], outs[1])
    for sparse_grad, dense_grad in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(sparse_grad, dense_grad)


def test_chunked_inference_is_the_same_function(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(2)
    model = InteractionNetwork(INConfig(hidden=16, iterations=3)).double()
    edge_index, x, edge_attr, _ = _problem()
    ops = EdgeOperators(edge_index, 9, torch.float64)
    reference = model(x, edge_attr, ops).detach()  # autograd path, whole edge list
    monkeypatch.setattr(model_module, "INFER_CHUNK", 3)  # chunks end mid-list and short
    with torch.no_grad():
        chunked = model(x, edge_attr, ops)
    torch.testing.assert_close(chunked, reference)
    with torch.no_grad():  # no edges at all
        empty = model(x, edge_attr[:0], EdgeOperators(edge_index[:, :0], 9, torch.float64))
    assert empty.shape == (0,)


def test_aggregation_is_a_sum_over_incident_edges() -> None:
    edge_index = torch.tensor([[0, 0, 1], [1, 2, 2]])
    ops = EdgeOperators(edge_index, 4)
    e = torch.tensor([[1.0], [10.0], [100.0]])
    into, out_of = ops.aggregate(e).split(1, dim=1)
    assert into.squeeze(1).tolist() == [0.0, 1.0, 110.0, 0.0]
    assert out_of.squeeze(1).tolist() == [11.0, 100.0, 0.0, 0.0]


def test_gather_adds_destination_and_source_halves() -> None:
    edge_index = torch.tensor([[0, 2, 1], [1, 0, 1]])  # includes a self loop (1 -> 1)
    p = torch.tensor([[1.0, 1000.0], [10.0, 2000.0], [100.0, 3000.0]])  # [to-dst | from-src]
    out = EdgeOperators(edge_index, 3).gather(p).squeeze(1)
    assert out.tolist() == [10.0 + 1000.0, 1.0 + 3000.0, 10.0 + 2000.0]


def test_weighted_bce_ignores_zero_weight_edges() -> None:
    logits = torch.tensor([2.0, -1.0, 5.0])
    target = torch.tensor([True, False, False])
    full = weighted_bce(logits[:2], target[:2], torch.ones(2), pos_weight=2.0)
    masked = weighted_bce(logits, target, torch.tensor([1.0, 1.0, 0.0]), pos_weight=2.0)
    torch.testing.assert_close(full, masked)
    softplus = torch.nn.functional.softplus
    by_hand = (2.0 * softplus(-logits[0]) + softplus(logits[1])) / 2
    torch.testing.assert_close(full, by_hand)


def test_bf16_scoring_copy_keeps_float32_encoders_and_close_scores() -> None:
    torch.manual_seed(3)
    model = InteractionNetwork(INConfig(hidden=16, iterations=3)).eval()
    edge_index, x, edge_attr, _ = _problem()
    x, edge_attr = x.float(), edge_attr.float()
    ops = EdgeOperators(edge_index, 9)
    assert scoring_model(model, "fp32") is model
    scorer = scoring_model(model, "bf16")
    assert scorer.node_encoder[0].weight.dtype == torch.float32
    assert scorer.edge_updates[0][0].weight.dtype == torch.bfloat16
    assert scorer.decoder[0].weight.dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in model.parameters())  # original untouched
    with torch.no_grad():
        exact = torch.sigmoid(model(x, edge_attr, ops))
        reduced = scorer(x, edge_attr, ops)
    assert reduced.dtype == torch.bfloat16
    torch.testing.assert_close(torch.sigmoid(reduced.float()), exact, atol=0.02, rtol=0)
    with pytest.raises(InvalidValueError, match="precision"):
        scoring_model(model, "fp16")


def test_a_reconstruction_scores_at_its_precision() -> None:
    graph = toy_graphs([6])[0]
    torch.manual_seed(4)
    model = InteractionNetwork(INConfig(hidden=16, iterations=2))
    exact = Reconstruction(RecoConfig(), model)
    reduced = exact.with_config(precision="bf16")
    assert exact.scorer is model
    assert reduced.scorer.decoder[0].weight.dtype == torch.bfloat16
    a, b = exact.score(graph).scores, reduced.score(graph).scores
    assert b.dtype == np.float64 and 0 < np.abs(a - b).max() < 0.02
    first = reduced.scorer
    assert reduced.scorer is first  # made once ...
    reduced.model = InteractionNetwork(INConfig(hidden=16, iterations=2))
    assert reduced.scorer is not first  # ... and again for a new model
    assert np.abs(reduced.score(graph).scores - b).max() > 0
    with pytest.raises(ValueError, match="precision"):
        RecoConfig(precision="fp16").checked()
