"""GraphSAGE, LADIES and ShaDow sampling as sparse matrix algebra, k minibatches per call.

A minibatch's seeds are the rows of a selection matrix Q; ``Q A`` (``select_rows``) holds
their neighbourhoods. Node-wise sampling keeps min(fan-out, degree) nonzeros of every row
of ``Q A`` without replacement; layer-wise sampling (LADIES) draws s columns of ``Q A``
per minibatch with probability proportional to their squared norms; ShaDow does
node-wise hops and then extracts the submatrix of A induced by every vertex it visited.
Each call takes k seed lists and k generators and treats the k minibatches as one
stacked Q, so k minibatches cost one extraction and a few vectorised passes per layer.

Fan-outs are listed from the seeds outwards (``fanouts[0]`` for the seeds' own
neighbours), PyG's convention. The blocks of a :class:`SampledBatch` are listed in model
order, the opposite: ``layers[0]`` consumes ``node_ids`` and the last layer outputs the
seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from sparsegnn.errors import InvalidValueError, ShapeError
from sparsegnn.sampling.frontier import (
    Stacked,
    distinct_columns,
    draw,
    exclusive_cumsum,
    extend,
    induced_block,
    induced_columns,
    smallest_per_batch,
    smallest_per_segment,
    sort_values,
    split_block,
    stacked_block,
)
from sparsegnn.sparse import CSRMatrix, row_norm


@dataclass
class SampledBatch:
    """One node-wise or layer-wise minibatch, ready for a GraphSAGE stack.

    Attributes:
        seeds: the b output vertices (global ids).
        node_ids: global ids of the input vertices; ``node_ids[:b] == seeds``.
        layers: one row-normalised block per model layer; ``layers[l]`` is
            ``[n_{l+1}, n_l]`` and maps the l-th frontier onto the next; the targets of a
            block are the first rows of its input frontier.
    """

    seeds: torch.Tensor
    node_ids: torch.Tensor
    layers: list[CSRMatrix]

    def operators(self, num_layers: int) -> list[CSRMatrix]:
        if num_layers != len(self.layers):
            raise ShapeError(
                f"batch was sampled for {len(self.layers)} layers, model has {num_layers}"
            )
        return self.layers


@dataclass
class SampledSubgraph:
    """One ShaDow minibatch: the row-normalised subgraph induced by the visited vertices.

    Every model layer multiplies by the same ``adj`` (``[m, m]``); the seeds are the
    first b of ``node_ids``, so the predictions are the first b output rows.
    """

    seeds: torch.Tensor
    node_ids: torch.Tensor
    adj: CSRMatrix

    def operators(self, num_layers: int) -> list[CSRMatrix]:
        return [self.adj] * num_layers


Minibatch = SampledBatch | SampledSubgraph


class Topology(Protocol):
    """Where sampling reads A: row degrees, single entries and whole rows, nothing else.

    Node-wise sampling needs only degrees and the drawn entries (Floyd's algorithm);
    LADIES and ShaDow extract whole rows (``Q A``). That is what lets the distributed
    package serve the same samplers from a partitioned A (rows fetched from their
    owners) with results identical to a local one.
    """

    @property
    def shape(self) -> tuple[int, int]: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def unit_values(self) -> bool:
        """True when every stored value is 1 (then drawn entries' values are known)."""
        ...

    def degree(self, rows: torch.Tensor) -> torch.Tensor: ...

    def entries(
        self, rows: torch.Tensor, offsets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def rows(self, rows: torch.Tensor) -> CSRMatrix:
        """``Q A``: the whole rows ``rows`` of A, in that order."""
        ...


class LocalTopology:
    """A :class:`Topology` over a whole local CSRMatrix.

    For a pattern matrix (every value 1, the usual unweighted graph) the values of drawn
    entries are known without reading them: skipping that random gather into A's values
    saves a third of the memory traffic of a hop.
    """

    def __init__(self, adj: CSRMatrix):
        self.adj = adj
        self._unit = adj.nnz > 0 and bool((adj.val == 1).all())

    @property
    def unit_values(self) -> bool:
        return self._unit

    @property
    def shape(self) -> tuple[int, int]:
        return self.adj.shape

    @property
    def device(self) -> torch.device:
        return self.adj.device

    @property
    def dtype(self) -> torch.dtype:
        return self.adj.dtype

    def degree(self, rows: torch.Tensor) -> torch.Tensor:
        return self.adj.crow[rows + 1] - self.adj.crow[rows]

    def entries(
        self, rows: torch.Tensor, offsets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Column and value of the ``offsets[i]``-th stored entry of row ``rows[i]``."""
        pos = self.adj.crow[rows] + offsets
        if self._unit:
            return self.adj.col[pos], self.adj.val.new_ones(()).expand(pos.numel())
        return self.adj.col[pos], self.adj.val[pos]

    def rows(self, rows: torch.Tensor) -> CSRMatrix:
        return self.adj.select_rows(rows, ones=self._unit)


class Sampler:
    """Base of the samplers: ``sample`` maps k seed lists and k streams to k minibatches.

    ``adj`` is the square adjacency (``A[dst, src]``, as ``CSRMatrix.from_edge_index``
    builds it) or, for node-wise sampling, any :class:`Topology`.
    """

    def __init__(self, adj: CSRMatrix | Topology, sizes: Sequence[int], what: str):
        if adj.shape[0] != adj.shape[1]:
            raise ShapeError(f"sampling needs a square adjacency, got {adj.shape}")
        sizes = [int(s) for s in sizes]
        if not sizes or min(sizes) < 1:
            raise InvalidValueError(f"{what} must be positive integers, got {sizes}")
        self.adj, self.sizes = adj, sizes

    @property
    def num_layers(self) -> int:
        return len(self.sizes)

    def _stack(
        self, seeds: Sequence[torch.Tensor], generators: Sequence[torch.Generator]
    ) -> Stacked:
        if len(seeds) != len(generators):
            raise ShapeError(f"{len(seeds)} seed lists but {len(generators)} generators")
        stacked = Stacked.from_list(seeds, self.adj.device)
        n = self.adj.shape[0]
        if stacked.ids.numel() and (int(stacked.ids.min()) < 0 or int(stacked.ids.max()) >= n):
            raise InvalidValueError(f"seed ids must lie in [0, {n})")
        stacked.check_unique(n)
        return stacked

    def sample(
        self, seeds: Sequence[torch.Tensor], generators: Sequence[torch.Generator]
    ) -> list[Minibatch]:
        raise NotImplementedError

    def sample_one(self, seeds: torch.Tensor, generator: torch.Generator) -> Minibatch:
        """One minibatch; identical to the same minibatch inside any bulk call."""
        return self.sample([seeds], [generator])[0]


def _topology(adj: CSRMatrix | Topology) -> Topology:
    return LocalTopology(adj) if isinstance(adj, CSRMatrix) else adj


def _local(adj: CSRMatrix | Topology, who: str) -> CSRMatrix:
    """Weighted sampling draws keys over every entry of a row: it needs A local."""
    if not isinstance(adj, CSRMatrix):
        raise TypeError(f"{who} needs the whole adjacency as a local CSRMatrix")
    return adj


def _row_entries(
    adj: CSRMatrix, vertices: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every nonzero of ``A[vertices]``: its row in ``vertices``, position in A, rank in row."""
    start = adj.crow[vertices]
    counts = adj.crow[vertices + 1] - start
    first = exclusive_cumsum(counts)
    rank = torch.arange(int(first[-1]), device=adj.device) - torch.repeat_interleave(
        first[:-1], counts
    )
    rows = torch.repeat_interleave(torch.arange(vertices.numel(), device=adj.device), counts)
    return rows, start[rows] + rank, rank


def _floyd(
    degree: torch.Tensor,
    batch: torch.Tensor,
    k: int,
    fanout: int,
    generators: Sequence[torch.Generator],
) -> torch.Tensor:
    """``fanout`` distinct offsets in ``[0, degree)`` per row, uniform (Floyd's algorithm).

    Step i draws t uniformly in ``[0, j]`` with ``j = degree - fanout + i`` and takes j
    instead when t was already taken; every fanout-subset comes out equally likely. The
    loop runs over the fan-out, each step vectorised over all rows, so the work is
    O(rows * fanout^2) instead of a sort of every neighbour of every row.
    """
    counts = torch.bincount(batch, minlength=k)
    chosen = torch.empty(degree.numel(), fanout, dtype=torch.long, device=degree.device)
    for i in range(fanout):
        j = degree - fanout + i
        u = draw(generators, counts, "uniform", degree.device)
        t = torch.minimum((u * (j + 1).double()).long(), j)
        taken = (chosen[:, :i] == t.unsqueeze(1)).any(1)
        chosen[:, i] = torch.where(taken, j, t)
    return chosen


def _nodewise_draw(
    topo: Topology,
    targets: Stacked,
    fanout: int,
    generators: Sequence[torch.Generator],
    weighted: CSRMatrix | None,
) -> torch.Tensor:
    """Offsets (within each row) of the kept nonzeros of ``Q A``, ``[rows, fanout]``, -1 padded.

    Rows with at most ``fanout`` nonzeros keep them all and use no randomness. Other rows
    draw ``fanout`` distinct offsets: unweighted by Floyd's algorithm, which needs only
    the degree; weighted (``weighted`` is then A itself) by Efraimidis-Spirakis keys
    (exponential over the edge weight, smallest win) on every entry of those rows.
    """
    ids = targets.ids
    degree = topo.degree(ids)
    slot = torch.arange(fanout, device=ids.device)
    offsets = torch.where(slot < degree.unsqueeze(1), slot, -1)
    hrows = (degree > fanout).nonzero().flatten()
    if hrows.numel() and weighted is not None:
        h_rows, h_pos, h_rank = _row_entries(weighted, ids[hrows])
        counts = torch.bincount(targets.batch_of[hrows[h_rows]], minlength=targets.k)
        keys = draw(generators, counts, "exponential", ids.device) / weighted.val[h_pos]
        keep = smallest_per_segment(keys, h_rows, fanout)
        offsets[hrows] = h_rank[keep].view(-1, fanout)
    elif hrows.numel():
        offsets[hrows] = _floyd(
            degree[hrows], targets.batch_of[hrows], targets.k, fanout, generators
        )
    return offsets


def _nodewise_hop(
    topo: Topology, targets: Stacked, offsets: torch.Tensor
) -> tuple[Stacked, CSRMatrix]:
    """The next frontier and the stacked row-normalised block of the drawn edges.

    The block's columns must be sorted within rows; with at most ``fanout`` entries per
    row that is a sort along the short second axis of the padded ``[rows, fanout]`` grid
    (padding sorts last), not a sort of all edges.
    """
    valid = offsets >= 0
    counts = valid.sum(1)
    # Kept entries fill the first counts[r] slots of row r, before and after the sort.
    slots = valid.view(-1).nonzero().flatten()
    rows = targets.ids[slots // offsets.shape[1]]
    cols, vals = topo.entries(rows, offsets.view(-1)[slots])
    ptr = exclusive_cumsum(counts)
    frontier, local = extend(targets, cols, ptr[targets.ptr], topo.shape[0])
    grid = torch.full_like(offsets, torch.iinfo(torch.long).max)
    grid.view(-1)[slots] = local
    width = int(frontier.counts.max()) if frontier.k else 0
    shape = (offsets.shape[0], max(width, 1))
    if topo.unit_values:  # the mean of unit entries: 1 / count each, as row_norm computes
        grid = sort_values(grid)  # no permutation needed: every value is the same
        mean = (1.0 / counts.to(topo.dtype)).repeat_interleave(counts)
        return frontier, CSRMatrix(ptr, grid.view(-1)[slots], mean, shape)
    grid, order = torch.sort(grid, dim=1)
    values = torch.zeros(offsets.shape, dtype=vals.dtype, device=vals.device)
    values.view(-1)[slots] = vals
    values = torch.gather(values, 1, order)
    block = CSRMatrix(ptr, grid.view(-1)[slots], values.view(-1)[slots], shape)
    return frontier, row_norm(block)


def _block(
    frontier: Stacked,
    targets: Stacked,
    rows: torch.Tensor,
    local: torch.Tensor,
    vals: torch.Tensor,
) -> CSRMatrix:
    """Stacked block of the sampled edges (columns already local to each frontier)."""
    width = int(frontier.counts.max()) if frontier.k else 0
    return stacked_block(rows, local, vals, targets.ids.numel(), width)


def _to_batches(
    seeds: Stacked, frontiers: list[Stacked], blocks: list[CSRMatrix]
) -> list[Minibatch]:
    """Split stacked hops into per-minibatch outputs, blocks in model order."""
    per_hop = [
        split_block(block, inner.ptr, outer.ptr)
        for block, inner, outer in zip(blocks, [seeds, *frontiers[:-1]], frontiers, strict=True)
    ]
    node_ids = frontiers[-1].split()
    out: list[Minibatch] = [
        SampledBatch(s, node_ids[b], [hop[b] for hop in reversed(per_hop)])
        for b, s in enumerate(seeds.split())
    ]
    return out


class NodeWiseSampler(Sampler):
    """GraphSAGE sampling: per layer, at most ``fanouts[l]`` distinct neighbours per vertex.

    With ``weighted=True`` neighbours are drawn with probability proportional to A's
    values (successive sampling without replacement; needs a local CSRMatrix);
    otherwise uniformly, from a local CSRMatrix or any :class:`Topology`.
    """

    def __init__(
        self, adj: CSRMatrix | Topology, fanouts: Sequence[int], *, weighted: bool = False
    ):
        super().__init__(adj, fanouts, "fan-outs")
        self.topology = _topology(adj)
        self.weights = _local(adj, "weighted sampling") if weighted else None
        if self.weights is not None and self.weights.nnz and float(self.weights.val.min()) <= 0:
            raise InvalidValueError("weighted sampling needs positive edge weights")

    def sample(
        self, seeds: Sequence[torch.Tensor], generators: Sequence[torch.Generator]
    ) -> list[Minibatch]:
        targets = stacked_seeds = self._stack(seeds, generators)
        frontiers, blocks = [], []
        for fanout in self.sizes:
            offsets = _nodewise_draw(self.topology, targets, fanout, generators, self.weights)
            frontier, block = _nodewise_hop(self.topology, targets, offsets)
            blocks.append(block)
            frontiers.append(frontier)
            targets = frontier
        return _to_batches(stacked_seeds, frontiers, blocks)


def _ladies_candidates(
    p: CSRMatrix, targets: Stacked, n: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Distinct (minibatch, column) keys of ``Q A``, each nonzero's key index, and probabilities.

    The probability of column v in minibatch b is its squared norm in ``Q_b A`` over the
    squared Frobenius norm of ``Q_b A``.
    """
    cand, inv = distinct_columns(p.col, p.crow[targets.ptr], n)
    weight = torch.zeros(cand.numel(), dtype=torch.float64, device=p.device)
    weight.index_add_(0, inv, p.val.double() ** 2)
    cand_batch = cand // n
    total = torch.zeros(targets.k, dtype=torch.float64, device=p.device).index_add_(
        0, cand_batch, weight
    )
    return cand, inv, weight / total[cand_batch]


def ladies_probabilities(
    adj: CSRMatrix, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The vertices LADIES may draw for ``targets`` and the probability of each (float64)."""
    n = adj.shape[0]
    stacked = Stacked.from_list([targets], adj.device)
    cand, _, prob = _ladies_candidates(adj.select_rows(stacked.ids), stacked, n)
    return cand % n, prob


class LadiesSampler(Sampler):
    """Layer-wise sampling (LADIES): ``layer_sizes[l]`` vertices per minibatch per layer.

    Vertices are drawn without replacement from the squared-column-norm distribution of
    ``Q A`` (exponential keys over the probability; with one draw this is exactly that
    distribution). The block keeps the targets' edges into the drawn vertices, divides
    each by the drawn vertex's probability (importance weighting) and row-normalises.
    """

    def __init__(self, adj: CSRMatrix | Topology, layer_sizes: Sequence[int]):
        super().__init__(adj, layer_sizes, "layer sizes")
        self.topology = _topology(adj)

    def sample(
        self, seeds: Sequence[torch.Tensor], generators: Sequence[torch.Generator]
    ) -> list[Minibatch]:
        n = self.adj.shape[0]
        targets = stacked_seeds = self._stack(seeds, generators)
        frontiers, blocks = [], []
        for size in self.sizes:
            p = self.topology.rows(targets.ids)
            cand, inv, prob = _ladies_candidates(p, targets, n)
            cand_batch = cand // n
            counts = torch.bincount(cand_batch, minlength=targets.k)
            keys = draw(generators, counts, "exponential", self.adj.device).double() / prob
            chosen = smallest_per_batch(keys, exclusive_cumsum(counts), size)
            edge = chosen[inv]
            rows = p.row_indices()[edge]
            per_batch = torch.bincount(targets.batch_of[rows], minlength=targets.k)
            frontier, local = extend(targets, p.col[edge], exclusive_cumsum(per_batch), n)
            vals = (p.val[edge].double() / prob[inv[edge]]).to(p.dtype)
            blocks.append(_block(frontier, targets, rows, local, vals))
            frontiers.append(frontier)
            targets = frontier
        return _to_batches(stacked_seeds, frontiers, blocks)


class ShadowSampler(Sampler):
    """ShaDow: node-wise hops with ``fanouts`` from the seeds, then the induced subgraph.

    The subgraph contains every edge of A between visited vertices, not only the sampled
    ones; ``node_ids`` lists the seeds first, then each hop's new vertices.
    """

    def __init__(self, adj: CSRMatrix | Topology, fanouts: Sequence[int]):
        super().__init__(adj, fanouts, "fan-outs")
        self.topology = _topology(adj)

    def sample(
        self, seeds: Sequence[torch.Tensor], generators: Sequence[torch.Generator]
    ) -> list[Minibatch]:
        n = self.adj.shape[0]
        stacked_seeds = visited = self._stack(seeds, generators)
        for fanout in self.sizes:
            offsets = _nodewise_draw(self.topology, visited, fanout, generators, None)
            visited = _nodewise_hop(self.topology, visited, offsets)[0]
        p = self.topology.rows(visited.ids)
        local = induced_columns(p, visited, n)
        block = induced_block(p, visited, local, self.topology.unit_values)
        adjs = split_block(block, visited.ptr, visited.ptr)
        return [
            SampledSubgraph(s, ids, a)
            for s, ids, a in zip(stacked_seeds.split(), visited.split(), adjs, strict=True)
        ]
