"""How many weights a model of given widths has, without building it.

The memory predictor (:mod:`sparsegnn.distributed.planning.rank_memory`) counts a rank's
parameters, their gradients and Adam's moments from this count; it must not build the
model to learn it (a planner prices thousands of configurations, and the launcher
refuses an oversized one before any weight is allocated). tests/test_memory.py checks it
against ``sum(p.numel() for p in model.parameters())`` of the built models.
"""

from __future__ import annotations

import itertools

from sparsegnn.names import MODEL_KINDS

# Weight matrices per layer: GCNConv has one linear map, SAGEConv a neighbour and a root
# map (nn.conv); each layer has one bias vector.
MATRICES_PER_LAYER = {"gcn": 1, "sage": 2}



def layer_widths(in_dim: int, hidden: int, out_dim: int, num_layers: int) -> list[int]:
    """``[in_dim, hidden, ..., hidden, out_dim]``: the widths ``num_layers`` layers map
    between."""
    return [in_dim] + [hidden] * (num_layers - 1) + [out_dim]


def parameter_count(model: str, in_dim: int, hidden: int, out_dim: int,
                    num_layers: int, heads: int = 8, out_heads: int = 1) -> int:
    """The number of weights of ``model`` as :func:`~sparsegnn.nn.models.build_model`
    makes it: ``gcn`` or ``sage`` (GraphSAGE with its root weight), ``gin`` (a two-layer
    MLP per layer), ``gat`` or ``gatv2`` (``heads`` heads of ``hidden`` channels
    concatenated in hidden layers, ``out_heads`` averaged in the last)."""
    widths = layer_widths(in_dim, hidden, out_dim, num_layers)
    pairs = list(itertools.pairwise(widths))
    if model in MATRICES_PER_LAYER:
        return sum(MATRICES_PER_LAYER[model] * a * b + b for a, b in pairs)
    if model == "gin":
        return sum(a * b + b + b * b + b for a, b in pairs)
    if model in ("gat", "gatv2"):
        return sum(_attention_count(model, a, b, h, concat)
                   for a, b, h, concat in _attention_layers(pairs, heads, out_heads))
    raise ValueError(f"unknown model {model!r}; choose one of {', '.join(MODEL_KINDS)}")


def _attention_layers(pairs: list[tuple[int, int]], heads: int, out_heads: int
                      ) -> list[tuple[int, int, int, bool]]:
    """``(in, channels per head, heads, concat)`` of each attention layer: hidden layers
    concatenate ``heads`` heads, so the next one reads ``heads`` times as many inputs."""
    layers = []
    for i, (a, b) in enumerate(pairs):
        last = i == len(pairs) - 1
        width_in = a if i == 0 else a * heads
        layers.append((width_in, b, out_heads if last else heads, not last))
    return layers


def _attention_count(model: str, a: int, c: int, h: int, concat: bool) -> int:
    bias = h * c if concat else c
    if model == "gat":  # lin (no bias), att_src, att_dst, bias
        return a * h * c + 2 * h * c + bias
    return 2 * (a * h * c + h * c) + h * c + bias  # lin_l, lin_r with biases, att, bias
