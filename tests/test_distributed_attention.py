"""Attention on process grids: a GAT (2 layers, 2 heads) trained for 3 epochs of Adam on
1D, 1.5D, 2D and 3D grids ends with the one-process weights (float64, 1e-10), its bytes
per phase equal the analytic model; so does a GATv2 on 2D, and a user-defined layer
written only against the edge protocol trains unchanged on a 2D grid.

One job of 8 gloo ranks runs every case on a sub-grid (starting processes dominates on a
small machine); the graph is a random directed multigraph of 40 vertices.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from sparsegnn.distributed import (
    BlockPartition,
    DistributedTask,
    ProcessGrid,
    build_operator,
    close_session,
    grid_shape,
    init_session,
    local_blocks,
    predict,
    spawn,
)
from sparsegnn.distributed.ops.row_exchange import SparseCommunicator
from sparsegnn.distributed.planning.attention_model import (
    EdgeCall,
    distinct_columns,
    edge_volume,
    fetch_rows,
    gat_calls,
)
from sparsegnn.nn import GATConv, GATv2Conv, operator_for
from sparsegnn.nn.edge_operator import CSREdges, EdgeOperator, edge_operator
from sparsegnn.sparse import CSRMatrix

N, FEATURES, CLASSES, HEADS, HIDDEN, EPOCHS = 40, 6, 3, 2, 3, 3
CASES = [("1d", 4, 1), ("1.5d", 4, 2), ("2d", 4, 1), ("3d", 8, 1)]
PHASES = ("forward_attention", "backward_attention", "grad_allreduce", "metrics")
pytestmark = [pytest.mark.distributed, pytest.mark.slow]


class DotAttention(nn.Module):
    """A user's layer, written only against the edge protocol: scaled dot-product
    attention over the graph's edges, ``heads`` heads averaged."""

    def __init__(self, fin: int, fout: int, heads: int = HEADS) -> None:
        super().__init__()
        self.heads, self.fout = heads, fout
        self.q, self.k, self.v = (nn.Linear(fin, heads * fout) for _ in range(3))

    def forward(self, x: torch.Tensor, adj: Any) -> torch.Tensor:
        op = edge_operator(adj)
        q, k, v = (lin(x).view(-1, self.heads, self.fout) for lin in (self.q, self.k, self.v))
        alpha = op.edge_softmax(op.sddmm_dot(q, k) / math.sqrt(self.fout))
        return op.edge_matmul(alpha, v).mean(1)


class TwoLayers(nn.Module):
    """GAT or GATv2 (hidden heads concatenated, output heads averaged) or the user's
    layer."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        torch.manual_seed(7)
        if kind in ("gat", "gatv2"):
            conv = GATConv if kind == "gat" else GATv2Conv
            self.one = conv(FEATURES, HIDDEN, heads=HEADS)
            self.two = conv(HIDDEN * HEADS, CLASSES, heads=HEADS, concat=False)
        else:
            self.one, self.two = DotAttention(FEATURES, HIDDEN), DotAttention(HIDDEN, CLASSES)
        self.double()

    def forward(self, x: torch.Tensor, op: Any) -> torch.Tensor:
        return self.two(F.elu(self.one(x, op)), op)


def layer_calls(kind: str, grad: bool) -> list[EdgeCall]:
    """The edge-protocol calls of one forward pass of :class:`TwoLayers`."""
    if kind == "gat":
        return gat_calls(HEADS, HIDDEN, grad) + gat_calls(HEADS, CLASSES, grad)
    score = "sddmm_leaky" if kind == "gatv2" else "sddmm_dot"
    return [call for width in (HIDDEN, CLASSES) for call in (
        EdgeCall(score, HEADS, width, grad), EdgeCall("edge_softmax", HEADS, 1, grad),
        EdgeCall("edge_matmul", HEADS, width, grad))]


def make_problem() -> dict[str, Any]:
    """A random directed multigraph (repeated edges count twice), no self-loops of its own;
    the GAT operator adds one per node."""
    g = torch.Generator().manual_seed(3)
    src, dst = torch.randint(0, N, (2, 5 * N), generator=g)
    keep = src != dst
    edge_index = torch.stack([src[keep], dst[keep]])
    adj = CSRMatrix.from_edge_index(edge_index, N).to(dtype=torch.float64)
    masks = torch.rand(N, generator=g)
    return {"a": operator_for("gat", adj), "x": torch.randn(N, FEATURES, generator=g,
            dtype=torch.float64), "y": torch.randint(0, CLASSES, (N,), generator=g),
            "masks": {"train": masks < 0.5, "val": (masks >= 0.5) & (masks < 0.75),
                      "test": masks >= 0.75}}


def _epoch(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, op: Any,
           loss_fn: Any, sync: Any, metric: Any) -> None:
    """Train forward, backward, gradient sum, step; then an evaluation forward and two
    accuracies (what an epoch of the training loop does)."""
    opt.zero_grad()
    model.train()
    loss_fn(model(x, op)).backward()
    sync(model)
    opt.step()
    model.eval()
    with torch.no_grad():
        logits = model(x, op)
    metric(logits, "val")
    metric(logits, "test")


def train_single(problem: dict[str, Any], kind: str) -> dict[str, torch.Tensor]:
    model = TwoLayers(kind)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    m, y = problem["masks"]["train"], problem["y"]

    def loss(logits: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits[m], y[m])

    for _ in range(EPOCHS):
        _epoch(model, opt, problem["x"], problem["a"], loss, lambda _: None,
               lambda *_: None)
    return {k: v.clone() for k, v in model.state_dict().items()}


def _train_on_grid(grid: ProcessGrid, problem: dict[str, Any], kind: str) -> dict[str, Any]:
    comm = SparseCommunicator()
    part = BlockPartition.even(N, grid.shape.row_blocks)
    op = build_operator(grid, comm, part, local_blocks(problem["a"], part, grid.shape,
                                                       grid.rank))
    lo, hi = part.block(grid.coords[0])
    task = DistributedTask(problem["x"][lo:hi], op, problem["y"][lo:hi],
                           {s: v[lo:hi] for s, v in problem["masks"].items()}, comm, grid.col)
    model = TwoLayers(kind)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    epochs = []
    for _ in range(EPOCHS):
        before = comm.counts().phases
        _epoch(model, opt, task.x, op, lambda z: task.loss(z, "train"), task.sync_gradients,
               task.accuracy)
        after = comm.counts().phases
        epochs.append({p: {k: after.get(p, {}).get(k, 0) - before.get(p, {}).get(k, 0)
                           for k in ("sent", "recv")} for p in PHASES})
    return {"weights": {k: v.clone() for k, v in model.state_dict().items()},
            "bytes": epochs}


def _all_cases(problem: dict[str, Any], cases: list[tuple[str, str, str, int, int]]
               ) -> dict[str, Any]:
    """Rank body: every case on the first p ranks of the job."""
    init_session("gloo", timeout_s=120)
    out = {}
    try:
        for name, kind, algo, p, c in cases:
            grid = ProcessGrid.create(grid_shape(algo, p, c), members=range(p))
            if grid is not None:
                out[name] = _train_on_grid(grid, problem, kind)
    finally:
        close_session()
    return out


ALL = [(f"gat-{a}-{p}", "gat", a, p, c) for a, p, c in CASES] + [
    ("gatv2-2d-4", "gatv2", "2d", 4, 1), ("dot-2d-4", "dot", "2d", 4, 1)]


@pytest.fixture(scope="module")
def problem() -> dict[str, Any]:
    return make_problem()


@pytest.fixture(scope="module")
def rank_outputs(problem):
    return spawn(_all_cases, 8, (problem, ALL), wall_timeout_s=500)


def _predicted(problem: dict[str, Any], kind: str, algo: str, p: int, c: int,
               num_params: int) -> list[dict[str, dict[str, int]]]:
    shape = grid_shape(algo, p, c)
    part = BlockPartition.even(N, shape.row_blocks)
    sent, recv = fetch_rows(shape, part, distinct_columns(problem["a"], part, shape.layers))
    calls = layer_calls(kind, True) + layer_calls(kind, False)
    out = []
    for rank in range(p):
        v = edge_volume(shape, part, rank, calls, (int(sent[rank]), int(recv[rank])), 8)
        v.update(predict(shape, part, rank, [], value_bytes=8, num_params=num_params))
        out.append({ph: v.get(ph, {"sent": 0, "recv": 0}) for ph in PHASES})
    return out


@pytest.mark.parametrize("case", ALL, ids=[c[0] for c in ALL])
def test_grid_training_equals_one_process(problem, rank_outputs, case):
    name, kind, _, p, _ = case
    ref = train_single(problem, kind)
    for rank in range(p):
        got = rank_outputs[rank][name]["weights"]
        for key, w in ref.items():
            assert (got[key] - w).abs().max() <= 1e-10, (rank, key)


@pytest.mark.parametrize("case", ALL, ids=[c[0] for c in ALL])
def test_measured_bytes_equal_the_model(problem, rank_outputs, case):
    name, kind, algo, p, c = case
    params = sum(t.numel() for t in TwoLayers(kind).parameters())
    predicted = _predicted(problem, kind, algo, p, c, params)
    for rank in range(p):
        for epoch in rank_outputs[rank][name]["bytes"]:
            assert epoch == predicted[rank], rank
        moved = rank_outputs[rank][name]["bytes"][0]
        if algo != "1d":
            assert moved["forward_attention"]["sent"] > 0


def test_local_operators_speak_the_protocol(problem):
    """A local CSR is wrapped; the wrapper and every grid operator satisfy the protocol;
    an operator with ``matmul`` only is refused by name."""
    op = edge_operator(problem["a"])
    assert isinstance(op, CSREdges) and isinstance(op, EdgeOperator)
    assert edge_operator(op) is op

    class MatmulOnly:
        shape = (N, N)

        def matmul(self, x: torch.Tensor) -> torch.Tensor:
            return x

    with pytest.raises(TypeError, match="MatmulOnly has no edge protocol"):
        edge_operator(MatmulOnly())
