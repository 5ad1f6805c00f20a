"""Vectorised building blocks shared by the samplers: stacked frontiers and blocks.

Bulk sampling stacks the vertex lists of k minibatches into one tensor (a
:class:`Stacked`), so ``Q A`` for all of them is one gather and every later step is a
handful of tensor operations over all k at once. Where minibatches must be kept apart
(LADIES candidates, ShaDow's induced edges) a vertex of minibatch b is the key
``b * n + v``; relabelling into a minibatch's local ids uses a dense map per minibatch.
No step loops over vertices in Python; the only loops run over the k minibatches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Literal

import torch

from sparsegnn.errors import DuplicateEntryError, ShapeError
from sparsegnn.sparse import CSRMatrix, row_norm

Draw = Literal["uniform", "exponential"]


@dataclass
class Stacked:
    """The vertex lists of k minibatches end to end: batch b is ``ids[ptr[b]:ptr[b+1]]``."""

    ids: torch.Tensor
    ptr: torch.Tensor
    _batch_of: torch.Tensor | None = field(default=None, repr=False)

    @classmethod
    def from_list(cls, parts: Sequence[torch.Tensor], device: torch.device) -> Stacked:
        counts = torch.tensor([p.numel() for p in parts], dtype=torch.long, device=device)
        ids = torch.cat([torch.as_tensor(p, device=device).long().flatten() for p in parts])
        return cls(ids, exclusive_cumsum(counts))

    @property
    def k(self) -> int:
        return self.ptr.numel() - 1

    @property
    def counts(self) -> torch.Tensor:
        return self.ptr[1:] - self.ptr[:-1]

    @property
    def batch_of(self) -> torch.Tensor:
        """Minibatch index of every stacked vertex, cached."""
        if self._batch_of is None:
            self._batch_of = torch.repeat_interleave(
                torch.arange(self.k, device=self.ids.device), self.counts
            )
        return self._batch_of

    def keys(self, n: int) -> torch.Tensor:
        return self.batch_of * n + self.ids

    def split(self) -> list[torch.Tensor]:
        return [self.ids[a:b] for a, b in pairwise(self.ptr.tolist())]

    def check_unique(self, n: int) -> None:
        """A minibatch must not list a vertex twice (its rows would be ambiguous)."""
        if torch.unique(self.keys(n)).numel() != self.ids.numel():
            raise DuplicateEntryError("seed vertices must be unique within each minibatch")


def exclusive_cumsum(counts: torch.Tensor) -> torch.Tensor:
    """``[0, c0, c0+c1, ...]``: the offsets (CSR row pointers) of consecutive runs."""
    out = torch.zeros(counts.numel() + 1, dtype=torch.long, device=counts.device)
    torch.cumsum(counts, 0, out=out[1:])
    return out


def draw(
    generators: Sequence[torch.Generator], counts: torch.Tensor, kind: Draw, device: torch.device
) -> torch.Tensor:
    """``counts[b]`` random keys from minibatch b's own stream, concatenated.

    The loop is over minibatches (k calls), never over vertices; drawing per minibatch is
    what makes bulk sampling equal to k single calls.
    """
    if len(generators) != counts.numel():
        raise ShapeError(
            f"need one generator per minibatch: {counts.numel()} batches, {len(generators)} given"
        )
    parts = []
    for gen, c in zip(generators, counts.tolist(), strict=True):
        if kind == "uniform":
            # float64: uniform integers in [0, degree) stay unbiased for any degree.
            parts.append(torch.rand(c, generator=gen, device=device, dtype=torch.float64))
        else:
            parts.append(
                torch.empty(c, device=device, dtype=torch.float64).exponential_(generator=gen)
            )
    if not parts:
        return torch.zeros(0, device=device, dtype=torch.float64)
    return torch.cat(parts)


def smallest_per_segment(keys: torch.Tensor, segment: torch.Tensor, limit: int) -> torch.Tensor:
    """Mask of the ``limit`` smallest keys of each segment (a segmented top-k).

    ``segment`` is non-decreasing (elements of a segment are contiguous), as the nonzeros
    of consecutive CSR rows are. Two stable sorts order by (segment, key); the rank of an
    element inside its segment is its sorted position minus the segment's start.
    """
    if keys.numel() == 0:
        return torch.zeros(0, dtype=torch.bool, device=keys.device)
    order = torch.sort(keys, stable=True).indices
    order = order[torch.sort(segment[order], stable=True).indices]
    _, counts = torch.unique_consecutive(segment, return_counts=True)
    starts = torch.repeat_interleave(exclusive_cumsum(counts)[:-1], counts)
    rank = torch.arange(keys.numel(), device=keys.device) - starts
    mask = torch.zeros(keys.numel(), dtype=torch.bool, device=keys.device)
    mask[order[rank < limit]] = True
    return mask


def extend(
    targets: Stacked, cand: torch.Tensor, cand_ptr: torch.Tensor, n: int
) -> tuple[Stacked, torch.Tensor]:
    """The next frontier of each minibatch, and each candidate's position in it.

    ``cand[cand_ptr[b]:cand_ptr[b+1]]`` are minibatch b's candidate vertices (repeats
    allowed). A frontier lists the minibatch's targets first, then the distinct
    candidates that are not targets in ascending id order, so the layout is a function
    of the sampled set alone. Targets first is the convention SAGEConv relies on (the
    first ``n_out`` inputs are the roots of the outputs).

    Relabelling goes through a dense id -> position map of size n that is filled and
    cleared per minibatch: gathers and one scan instead of sorting all candidates.
    """
    device = cand.device
    slot = torch.full((n,), -1, dtype=torch.long, device=device)
    seen = torch.zeros(n, dtype=torch.bool, device=device)
    t_parts, c_bounds = targets.split(), cand_ptr.tolist()
    ids, local = [], torch.empty_like(cand)
    for b, t in enumerate(t_parts):
        c = cand[c_bounds[b] : c_bounds[b + 1]]
        slot[t] = torch.arange(t.numel(), device=device)
        seen[c] = True
        seen[t] = False
        new = seen.nonzero().flatten()
        slot[new] = torch.arange(t.numel(), t.numel() + new.numel(), device=device)
        local[c_bounds[b] : c_bounds[b + 1]] = slot[c]
        seen[new] = False
        slot[t] = -1
        slot[new] = -1
        ids += [t, new]
    counts = torch.tensor([x.numel() for x in ids], dtype=torch.long, device=device)
    f_ptr = exclusive_cumsum(counts.view(-1, 2).sum(1))
    return Stacked(torch.cat(ids) if ids else cand[:0], f_ptr), local


def local_columns(
    frontier: Stacked, batch: torch.Tensor, vertex: torch.Tensor, n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Position of ``vertex`` inside minibatch ``batch``'s frontier, and whether it is there."""
    keys = frontier.keys(n)
    if keys.numel() == 0:
        return torch.zeros_like(vertex), torch.zeros_like(vertex, dtype=torch.bool)
    local = torch.arange(keys.numel(), device=keys.device) - frontier.ptr[frontier.batch_of]
    sorted_keys, order = torch.sort(keys)
    query = batch * n + vertex
    pos = torch.searchsorted(sorted_keys, query).clamp(max=sorted_keys.numel() - 1)
    found = sorted_keys[pos] == query
    return local[order[pos]], found


def stacked_block(
    rows: torch.Tensor, cols: torch.Tensor, vals: torch.Tensor, n_rows: int, width: int
) -> CSRMatrix:
    """Row-normalised (mean) block of all k minibatches, columns local to each minibatch."""
    return row_norm(CSRMatrix.from_coo(rows, cols, vals, (n_rows, max(width, 1))))


def split_block(block: CSRMatrix, row_ptr: torch.Tensor, col_ptr: torch.Tensor) -> list[CSRMatrix]:
    """Cut a stacked block into one ``[targets_b, frontier_b]`` CSRMatrix per minibatch."""
    rp, widths = row_ptr.tolist(), (col_ptr[1:] - col_ptr[:-1]).tolist()
    out = []
    for b, width in enumerate(widths):
        r0, r1 = rp[b], rp[b + 1]
        e0, e1 = int(block.crow[r0]), int(block.crow[r1])
        crow = block.crow[r0 : r1 + 1] - e0
        out.append(CSRMatrix(crow, block.col[e0:e1], block.val[e0:e1], (r1 - r0, width)))
    return out
