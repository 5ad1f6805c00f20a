"""A model written against PyG's layer signatures, trained on one process or a grid of ranks.

Why it works unchanged: a model class with ``forward(self, x, edge_index)`` built from our
:class:`~sparsegnn.nn.GCNConv`/:class:`~sparsegnn.nn.SAGEConv` hands its second argument
to the layers, and the layers take whatever it is: PyG's ``edge_index``, our
:class:`~sparsegnn.sparse.CSRMatrix`, or a distributed operator whose ``matmul``
communicates. So :func:`train_model` builds the operator the model's layers would build
from the graph's ``edge_index`` (all of them must agree on it), and calls the model with
it: on one process, or with this rank's share of it on 1D, 1.5D, 2D or 3D ranks (the
CAGNET operators of :mod:`sparsegnn.distributed`), under the unchanged
:func:`~sparsegnn.train.fullgraph.fit` loop (Adam, early stopping on validation
accuracy, the best weights kept).

Every rank holds the full feature rows of its vertex block: the model is opaque here, so
its first layer is not split by feature columns as the built-in models' are on 2D/3D
(:mod:`sparsegnn.distributed.ops.feature_slices`). Dropout inside the model draws per
vertex block (each block row of the grid seeds ``seed + 1_000_003 * block``, so the
replicas of a block agree); a grid therefore equals one process exactly only without
dropout, as the test of this module checks (``tests/test_pyg_model_grid.py``).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from sparsegnn.data import GraphData
from sparsegnn.distributed import (
    BlockPartition,
    Communicator,
    DistributedTask,
    ProcessGrid,
    build_operator,
    grid_shape,
    rank_session,
    ranks_for,
    run_on_ranks,
)
from sparsegnn.distributed.layout.shard import make_shard
from sparsegnn.errors import InvalidValueError
from sparsegnn.names import Algorithm
from sparsegnn.nn import GATConv, GATv2Conv, GCNConv, GINConv, RGCNConv, SAGEConv
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.fullgraph import LocalTask, TrainConfig, TrainResult, fit

_SEED_STRIDE = 1_000_003  # as rank_train: block b's dropout stream is seed + stride * b
_OTHER_LAYERS = (GATConv, GATv2Conv, GINConv, RGCNConv)


@dataclass
class ModelRun:
    """The trained model (the best-on-validation weights; every rank holds the same)
    and what the run measured."""

    model: nn.Module
    result: TrainResult


@dataclass(frozen=True)
class Grid:
    """Where to train: ``nprocs`` local ranks (torchrun's world under torchrun) on
    ``algo`` with ``replication`` (1.5D); one process when ``nprocs`` is 1."""

    nprocs: int = 1
    algo: Algorithm = "1d"
    replication: int = 1
    backend: str | None = None
    timeout_s: float = 60.0


def train_model(model: nn.Module, graph: GraphData, cfg: TrainConfig | None = None,
                grid: Grid | None = None) -> ModelRun:
    """Train ``model`` (``forward(x, edge_index)`` returning logits, using our layers)
    on ``graph``'s node labels and masks; ``cfg`` gives the loop's settings (``lr``,
    ``weight_decay``, ``epochs``, ``patience``, ``seed``, ``dtype``; the built-in model
    fields such as ``hidden`` and ``dropout`` are the model's own business here)."""
    cfg = TrainConfig(progress=False) if cfg is None else cfg
    grid = Grid() if grid is None else grid
    graph.check_trainable()
    model = model.to(cfg.torch_dtype)
    x = graph.x.to(cfg.torch_dtype)
    op = model_operator(model, x, graph.edge_index)
    world = ranks_for(grid.nprocs)
    if world == 1:
        masks = {s: getattr(graph, f"{s}_mask") for s in ("train", "val", "test")}
        return ModelRun(model, fit(model, LocalTask(x, op, graph.y, masks), cfg))
    _check_grid_model(model, cfg)
    shape = grid_shape(grid.algo, world, grid.replication)
    threads = max(1, (os.cpu_count() or 1) // shape.size)
    args = (model, replace(graph, x=x), op, cfg, grid)
    out = run_on_ranks(_train_rank, shape.size, args, threads=threads,
                       heartbeat_timeout_s=grid.timeout_s).results[0]
    model.load_state_dict(out["weights"])
    return ModelRun(model, out["result"])


def model_operator(model: nn.Module, x: torch.Tensor, edge_index: torch.Tensor) -> CSRMatrix:
    """The operator every graph layer of ``model`` builds from ``edge_index`` (each
    layer's :meth:`operator`); refused where they differ, since one operator is what a
    grid distributes."""
    unsupported = sorted({type(m).__name__ for m in model.modules()
                          if isinstance(m, _OTHER_LAYERS) or _is_pyg_layer(m)})
    if unsupported:
        raise InvalidValueError(
            f"train_model runs models of sparsegnn.nn.GCNConv and SAGEConv layers; this one "
            f"has {', '.join(unsupported)} (PyG's own layers: import them from sparsegnn.nn)")
    layers = [m for m in model.modules() if isinstance(m, GCNConv | SAGEConv)]
    if not layers:
        raise InvalidValueError("the model has no GCNConv or SAGEConv layer to give the "
                                "graph to")
    op = layers[0].operator(x, edge_index)
    for layer in layers[1:]:
        other = layer.operator(x, edge_index)
        if not _same(op, other):
            raise InvalidValueError(
                f"the model's layers aggregate with different operators ({layers[0]!r} and "
                f"{layer!r}, or the same layer with other options); one operator serves "
                "a model here, so give them the same kind and options")
    assert isinstance(op, CSRMatrix)
    return op


def _is_pyg_layer(module: nn.Module) -> bool:
    """A PyG message-passing layer, which would not take our operators."""
    return type(module).__module__.startswith("torch_geometric.") and hasattr(
        module, "propagate")


def _same(a: Any, b: Any) -> bool:
    return (isinstance(a, CSRMatrix) and isinstance(b, CSRMatrix) and a.shape == b.shape
            and torch.equal(a.crow, b.crow) and torch.equal(a.col, b.col)
            and torch.equal(a.val, b.val))


def _check_grid_model(model: nn.Module, cfg: TrainConfig) -> None:
    """What a grid cannot do yet, refused before any rank starts."""
    if any(isinstance(m, SAGEConv) and m.aggr == "max" for m in model.modules()):
        raise InvalidValueError("SAGEConv(aggr='max') needs each row's neighbours, which a "
                                "grid's operator does not expose; use mean or sum on ranks")
    if cfg.checkpoint is not None:
        raise InvalidValueError("train_model checkpoints on one process only; on a grid, "
                                "leave cfg.checkpoint unset")


def _train_rank(model: nn.Module, graph: GraphData, op: CSRMatrix, cfg: TrainConfig,
                grid: Grid) -> dict[str, Any]:
    """One rank: its block of the operator and of the vertices, the unchanged loop."""
    with rank_session(grid.backend, grid.timeout_s) as session:
        shape = grid_shape(grid.algo, session.world_size, grid.replication)
        ranks = ProcessGrid.create(shape)
        assert ranks is not None  # the grid spans the whole job
        part = BlockPartition.even(graph.num_nodes, shape.row_blocks)
        rows = {"x": graph.x, "y": graph.y}
        rows.update({f"{s}_mask": getattr(graph, f"{s}_mask") for s in ("train", "val", "test")})
        shard = make_shard(graph.name, op, rows, part, shape, ranks.rank).to(
            session.device, cfg.torch_dtype)
        lo, hi = part.block(ranks.coords[0])
        comm = Communicator()
        task = DistributedTask(graph.x[lo:hi].to(session.device), build_operator(
            ranks, comm, part, shard.blocks), shard.y, shard.masks, comm, ranks.col)
        # torch.multiprocessing hands every rank the launcher's parameter storage (shared
        # memory): training that in place would apply every rank's step to one tensor.
        model = copy.deepcopy(model).to(session.device)
        block_cfg = replace(cfg, seed=cfg.seed + _SEED_STRIDE * ranks.coords[0])
        result = fit(model, task, block_cfg, is_main=ranks.rank == 0)
    return {"weights": dict(model.state_dict()), "result": result}
