"""What the cost model adds for GAT, GATv2 and GIN: widths, dense maps, edge kernels, calls.

The SpMM models' epoch (:mod:`sparsegnn.distributed.planning.cost`) is priced from their
SpMMs and one linear map per layer of the layer widths. The other models differ in
three ways, each priced here:

* widths: a GAT/GATv2 hidden layer outputs ``heads`` times its channels (concatenated),
  so its dense maps, elementwise passes and activations are that wide
  (:func:`model_widths`); GATv2 has two maps per layer, GIN an MLP of two
  (:func:`dense_macs`);
* edge kernels: an attention layer runs no SpMM but the edge protocol's calls
  (:func:`~sparsegnn.distributed.planning.attention_model.model_calls`), each priced on
  the edges a rank holds at the profile's measured rate of its kernel
  (:meth:`~sparsegnn.distributed.planning.cost_profile.Profile.kernel_time`), plus
  the per-edge passes between them (the edge counts' logarithm, GAT's LeakyReLU, the
  attention dropout) (:func:`edge_seconds`), and the ELU between the layers
  (:func:`activation_seconds`);
* communication: the edge protocol's bytes per rank
  (:func:`~sparsegnn.distributed.planning.attention_model.edge_volume`, which the
  planner adds as phases ``forward_attention`` and ``backward_attention``), moved by an
  all-to-all (the fetches) and all-reduces and all-gathers over the groups that split a
  row (:func:`attention_call_counts`).
"""

from __future__ import annotations

import itertools
from typing import Any

from sparsegnn.distributed.layout.grid import GridShape
from sparsegnn.distributed.planning.attention_model import (
    BACKWARD,
    FORWARD,
    EdgeCall,
    call_moves,
)
from sparsegnn.distributed.planning.cost_profile import Profile
from sparsegnn.names import ATTENTION_MODELS
from sparsegnn.nn.model_size import layer_widths

ATTENTION_PHASES = (FORWARD, BACKWARD)
# The kernel that prices each call of the edge protocol, and whether its values are per
# edge and head (False: per edge, head and channel).
_KERNEL = {"sddmm_add": ("sddmm_add", True), "sddmm_leaky": ("sddmm_leaky", False),
           "sddmm_dot": ("sddmm_leaky", False), "edge_softmax": ("edge_softmax", True),
           "edge_matmul": ("heads_spmm", False)}


def model_widths(cfg: Any, in_dim: int, out_dim: int) -> list[int]:
    """Each layer's input and output width as the model computes them: an attention
    hidden layer concatenates ``cfg.heads`` heads of ``cfg.hidden`` channels."""
    widths = layer_widths(in_dim, cfg.hidden, out_dim, cfg.num_layers)
    if cfg.model not in ATTENTION_MODELS:
        return widths
    return [widths[0], *(w * cfg.heads for w in widths[1:-1]), widths[-1]]


def dense_macs(model: str, widths: list[int]) -> int:
    """Multiply-adds per row of one forward pass's linear maps: GATv2's ``lin_l`` and
    ``lin_r``, GIN's two-layer MLP, one map per layer otherwise."""
    pairs = list(itertools.pairwise(widths))
    macs = sum(a * b for a, b in pairs)
    if model == "gatv2":
        return 2 * macs
    if model == "gin":
        return macs + sum(b * b for _, b in pairs)
    return macs


def edge_seconds(calls: list[EdgeCall], nnz: float, profile: Profile,
                 columns: float = 0.0) -> float:
    """A rank's attention kernels on its ``nnz`` stored edges, whose sources are among
    ``columns`` rows, for the epoch's ``calls`` (a call that needs gradients priced
    forward and backward); each softmax brings the
    passes over its scores around it: the edge counts' logarithm added and GAT's
    LeakyReLU (GATv2's is inside its SDDMM), forward and, in training, backward, and in
    training the attention dropout of its output."""
    seconds = 0.0
    passes = 2 if any(c.kind == "sddmm_add" for c in calls) else 1
    for call in calls:
        kernel, per_head = _KERNEL[call.kind]
        values = nnz * call.heads * (1 if per_head else call.channels)
        seconds += profile.kernel_time(kernel, values, call.grad, columns)
        if call.kind == "edge_softmax":
            seconds += values * passes * (2 if call.grad else 1) * profile.elementwise_s
            if call.grad:
                seconds += profile.kernel_time("edge_dropout", values, True, columns)
    return seconds


def activation_seconds(model: str, rows: int, widths: list[int], profile: Profile) -> float:
    """GAT's and GATv2's ELU between the layers on a rank's ``rows``: forward and
    backward in training, forward in evaluation (the other models' ReLU is an
    elementwise pass of the cost model's)."""
    if model not in ATTENTION_MODELS:
        return 0.0
    values = rows * sum(widths[1:-1])
    return (profile.kernel_time("elu", values, True, rows)
            + profile.kernel_time("elu", values, False, rows))


def attention_call_counts(shape: GridShape, calls: list[EdgeCall]) -> dict[str, dict[str, int]]:
    """Collective calls per attention phase and kind in one epoch, as
    :class:`~sparsegnn.distributed.ops.edge_exchange.EdgeExchange` makes them: a fetch
    is one all-to-all (and one back, with a sum, for its gradient); a sum over the
    split groups one all-reduce per group, a max one all-gather per group; none of
    the sums on a grid whose ranks hold whole rows (1D)."""
    splits = int(shape.layers > 1) + int(shape.cols > 1)
    out: dict[str, dict[str, int]] = {}

    def add(phase: str, kind: str, n: int) -> None:
        if n:
            into = out.setdefault(phase, {})
            into[kind] = into.get(kind, 0) + n

    for call in calls:
        for move, _, _ in call_moves(call):
            if move == "fetch":
                add(FORWARD, "all_to_all", 1)
                if call.grad:
                    add(BACKWARD, "all_to_all", 1)
                    add(BACKWARD, "all_reduce", splits)
            elif move == "enter" and call.grad:
                add(BACKWARD, "all_reduce", splits)
            elif move == "leave":
                add(FORWARD, "all_reduce", splits)
            elif move == "max":
                add(FORWARD, "all_gather", splits)
            elif move == "total":
                add(FORWARD, "all_reduce", splits)
                if call.grad:
                    add(BACKWARD, "all_reduce", splits)
    return out
