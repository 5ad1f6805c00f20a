"""How many weights a GCN or GraphSAGE of given widths has, without building it.

The memory predictor (:mod:`sparsegnn.distributed.planning.rank_memory`) counts a rank's
parameters, their gradients and Adam's moments from this count; it must not build the
model to learn it (a planner prices thousands of configurations, and the launcher
refuses an oversized one before any weight is allocated). tests/test_memory.py checks it
against ``sum(p.numel() for p in model.parameters())`` of the built models.
"""

from __future__ import annotations

import itertools

# Weight matrices per layer: GCNConv has one linear map, SAGEConv a neighbour and a root
# map (nn.conv); each layer has one bias vector.
MATRICES_PER_LAYER = {"gcn": 1, "sage": 2}


def layer_widths(in_dim: int, hidden: int, out_dim: int, num_layers: int) -> list[int]:
    """``[in_dim, hidden, ..., hidden, out_dim]``: the widths ``num_layers`` layers map
    between."""
    return [in_dim] + [hidden] * (num_layers - 1) + [out_dim]


def parameter_count(model: str, in_dim: int, hidden: int, out_dim: int,
                    num_layers: int) -> int:
    """The number of weights of ``model`` (``gcn`` or ``sage``, GraphSAGE with its root
    weight, as :func:`~sparsegnn.train.fullgraph.build_model` makes them)."""
    if model not in MATRICES_PER_LAYER:
        raise ValueError(f"unknown model {model!r}; choose 'gcn' or 'sage'")
    matrices = MATRICES_PER_LAYER[model]
    widths = layer_widths(in_dim, hidden, out_dim, num_layers)
    return sum(matrices * a * b + b for a, b in itertools.pairwise(widths))
