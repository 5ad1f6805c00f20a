"""Readout: one vector per graph from node features, as sparse products.

Sum pooling is ``P @ H`` with the batch's ``graphs x nodes`` assignment matrix ``P``,
mean pooling the same product with ``P`` row-normalised: both are the SpMM every layer
already runs, with their gradients (``P^T @ G``) from the transpose the batch cached.
Max pooling has no linear form; it is one ``scatter_reduce(amax)`` over the nodes' graph
ids, whose gradient flows to each graph's arg-max node (an empty graph pools to zeros).
"""

from __future__ import annotations

from typing import Literal

import torch

from sparsegnn.sparse import spmm
from sparsegnn.sparse.graph_batch import GraphBatch

PoolKind = Literal["sum", "mean", "max"]
POOLS: tuple[PoolKind, ...] = ("sum", "mean", "max")


def global_pool(h: torch.Tensor, batch: GraphBatch, kind: PoolKind = "sum") -> torch.Tensor:
    """``[num_graphs, F]`` pooled from node features ``h`` (``[num_nodes, F]``, of the
    batch's dtype: :func:`~sparsegnn.sparse.graph_batch.collate_graphs` ``dtype``)."""
    p = batch.assign
    if kind == "sum":
        return spmm(p, h)
    if kind == "mean":
        return spmm(batch.mean_assign(), h)
    if kind == "max":
        out = torch.zeros(batch.num_graphs, h.shape[1], dtype=h.dtype, device=h.device)
        index = batch.batch.unsqueeze(1).expand_as(h)
        return out.scatter_reduce(0, index, h, reduce="amax", include_self=False)
    raise ValueError(f"unknown pooling {kind!r}; choose one of {', '.join(POOLS)}")
