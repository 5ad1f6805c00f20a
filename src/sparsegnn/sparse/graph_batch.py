"""A minibatch of graphs as sparse linear algebra: one block-diagonal operator and an
assignment matrix.

Message passing over ``B`` graphs at once is one SpMM with the block-diagonal adjacency
of their disjoint union; reading a vector per graph out of the node features is one SpMM
with the ``B x n`` assignment matrix ``P`` (``P[g, i] = 1`` when node ``i`` belongs to
graph ``g``), or with ``P`` row-normalised for the mean. :func:`collate_graphs` builds
both for any list of graph ids from a set stored as one big block-diagonal CSR (graph
``g`` owning nodes ``node_ptr[g]:node_ptr[g+1]``): two run gathers and a shift of the
column ids, no Python loop over graphs, which is what makes a minibatch of 128 small
graphs cost microseconds instead of PyG's per-graph collate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from sparsegnn.sparse.csr import CSRMatrix, run_positions


@dataclass
class GraphBatch:
    """``num_graphs`` graphs merged into one disjoint union.

    ``adj`` is the block-diagonal adjacency (unit values, ``A[dst, src]``), ``assign`` the
    ``[num_graphs, num_nodes]`` assignment matrix with its transpose cached (SpMM's
    backward needs ``P^T``, which is known without sorting), ``batch`` each node's
    position among the graphs (for max pooling), ``nodes`` the set's node ids gathered.
    The mean-pooling operator is built on first use and kept with the batch, so a model
    that pools every layer's features (GIN's readout) builds it once per batch.
    """

    adj: CSRMatrix
    assign: CSRMatrix
    batch: torch.Tensor
    nodes: torch.Tensor
    graph_ids: torch.Tensor
    _mean: CSRMatrix | None = field(default=None, repr=False)

    def mean_assign(self) -> CSRMatrix:
        """``P`` row-normalised (:func:`mean_assignment`), built once per batch."""
        if self._mean is None:
            self._mean = mean_assignment(self.assign)
        return self._mean

    @property
    def num_graphs(self) -> int:
        return int(self.assign.shape[0])

    @property
    def num_nodes(self) -> int:
        return int(self.adj.shape[0])

    def to(self, device: torch.device | str) -> GraphBatch:
        return GraphBatch(self.adj.to(device=device), _assign_on(self.assign, device),
                          self.batch.to(device), self.nodes.to(device),
                          self.graph_ids.to(device))


def collate_graphs(crow: torch.Tensor, col: torch.Tensor, node_ptr: torch.Tensor,
                   graph_ids: torch.Tensor, *, symmetric: bool = False,
                   dtype: torch.dtype = torch.float32) -> GraphBatch:
    """The batch of graphs ``graph_ids`` (in that order) of a block-diagonal set.

    ``crow``/``col``: the set's CSR over all its nodes; ``node_ptr``: graph boundaries.
    ``symmetric``: the set is undirected, so the batch adjacency is its own transpose.
    ``dtype``: the value type of both operators (the features' dtype).
    """
    ids = graph_ids.to(torch.long)
    starts = node_ptr[ids]
    sizes = node_ptr[ids + 1] - starts
    batch_ptr = _exclusive_cumsum(sizes)
    nodes = run_positions(starts, sizes, batch_ptr)
    edge_starts = crow[starts]
    edge_counts = crow[starts + sizes] - edge_starts
    edge_ptr = _exclusive_cumsum(edge_counts)
    entries = run_positions(edge_starts, edge_counts, edge_ptr)
    shift = torch.repeat_interleave(batch_ptr[:-1] - starts, edge_counts,
                                    output_size=int(edge_ptr[-1]))
    degrees = crow[nodes + 1] - crow[nodes]
    n = int(batch_ptr[-1])
    adj = CSRMatrix(_exclusive_cumsum(degrees), col[entries] + shift,
                    torch.ones(int(edge_ptr[-1]), dtype=dtype), (n, n), symmetric=symmetric,
                    unit_values=True)
    batch = torch.repeat_interleave(torch.arange(ids.numel()), sizes, output_size=n)
    return GraphBatch(adj, assignment(batch_ptr, batch, dtype), batch, nodes, ids)


def assignment(batch_ptr: torch.Tensor, batch: torch.Tensor,
               dtype: torch.dtype = torch.float32) -> CSRMatrix:
    """``P`` (graphs x nodes, unit values) for nodes grouped by graph, with ``P^T`` and
    its value permutation cached: row ``i`` of ``P^T`` is node ``i``'s one graph."""
    n, g = int(batch.numel()), int(batch_ptr.numel()) - 1
    ones = torch.ones(n, dtype=dtype, device=batch.device)
    p = CSRMatrix(batch_ptr, torch.arange(n, device=batch.device), ones, (g, n),
                  unit_values=True)
    p._t = CSRMatrix(torch.arange(n + 1, device=batch.device), batch, ones, (n, g),
                     unit_values=True)
    p._t_perm = torch.arange(n, device=batch.device)
    return p


def mean_assignment(p: CSRMatrix) -> CSRMatrix:
    """``P`` with each row divided by its graph's node count (empty graphs stay zero),
    its transpose cached likewise: the mean-pooling operator."""
    counts = (p.crow[1:] - p.crow[:-1]).clamp(min=1).to(p.val.dtype)
    val = 1.0 / torch.repeat_interleave(counts, p.crow[1:] - p.crow[:-1],
                                        output_size=p.nnz)
    mean = CSRMatrix(p.crow, p.col, val, p.shape)
    t = p.t()
    mean._t = CSRMatrix(t.crow, t.col, val, t.shape)
    mean._t_perm = torch.arange(p.nnz, device=p.val.device)
    return mean


def _assign_on(p: CSRMatrix, device: torch.device | str) -> CSRMatrix:
    return assignment(p.crow.to(device), p.t().col.to(device), p.val.dtype)


def _exclusive_cumsum(counts: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(counts.numel() + 1, dtype=torch.long, device=counts.device)
    torch.cumsum(counts, 0, out=out[1:])
    return out
