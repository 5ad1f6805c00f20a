"""Vectorised building blocks shared by the samplers: stacked frontiers and blocks.

Bulk sampling stacks the vertex lists of k minibatches into one tensor (a
:class:`Stacked`), so ``Q A`` for all of them is one gather and every later step is a
handful of tensor operations over all k at once. Where minibatches must be kept apart
(LADIES candidates, ShaDow's induced edges) a vertex of minibatch b is the key
``b * n + v``; relabelling into a minibatch's local ids uses a dense map per minibatch.
No step loops over vertices in Python; the only loops run over the k minibatches.

Extraction (``Q A`` for LADIES and ShaDow, ``Q A Q^T`` for ShaDow's induced subgraph) is
a sparse product with selection matrices, so it needs no general SpGEMM: rows are
copied (``CSRMatrix.select_rows``) and columns are looked up in a per-minibatch dense map
(:func:`distinct_columns`, :func:`induced_columns`). Those maps replace sorts of every
entry of ``Q A``, which is what the profile showed LADIES and ShaDow spending their time
on (docs/sampling.md, "Kernels").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Literal

import numpy as np
import torch

from sparsegnn.errors import DuplicateEntryError, ShapeError
from sparsegnn.sparse import CSRMatrix, row_norm

Draw = Literal["uniform", "exponential"]

# Sort keys below this bound fit in 32 bits (a module constant so tests can lower it).
_INT32_KEYS = 2**31


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


def smallest_per_batch(keys: torch.Tensor, ptr: torch.Tensor, limit: int) -> torch.Tensor:
    """Mask of the ``limit`` smallest keys of each run ``keys[ptr[b]:ptr[b+1]]``.

    The same mask as :func:`smallest_per_segment` (ties to the lower index) for the few
    long segments of LADIES' candidates, without sorting them: per run, a selection
    (``kthvalue``) finds the ``limit``-th smallest key, every smaller key is kept, and
    keys equal to it fill the rest in index order.
    """
    mask = torch.zeros(keys.numel(), dtype=torch.bool, device=keys.device)
    for e0, e1 in pairwise(ptr.tolist()):
        if e1 - e0 <= limit:
            mask[e0:e1] = True
            continue
        run = keys[e0:e1]
        threshold = torch.kthvalue(run, limit).values
        below = run < threshold
        ties = (run == threshold).nonzero().flatten()[: limit - int(below.sum())]
        below[ties] = True
        mask[e0:e1] = below
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


def distinct_columns(
    col: torch.Tensor, entry_ptr: torch.Tensor, n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Distinct ``(minibatch, column)`` keys ``b * n + v`` in ascending order, and each entry's key.

    ``col[entry_ptr[b]:entry_ptr[b+1]]`` are minibatch b's entries. The result equals
    ``torch.unique(batch * n + col, return_inverse=True)``; instead of sorting every
    entry it marks them in a dense boolean map of size n per minibatch, whose nonzero
    scan lists the distinct columns already in ascending order, and numbers them
    through a dense slot map.
    """
    device = col.device
    seen = torch.zeros(n, dtype=torch.bool, device=device)
    slot = torch.empty(n, dtype=torch.long, device=device)
    inverse = torch.empty_like(col)
    keys, base = [], 0
    for b, (e0, e1) in enumerate(pairwise(entry_ptr.tolist())):
        c = col[e0:e1]
        seen[c] = True
        new = seen.nonzero().flatten()
        seen[new] = False
        # Every slot read below was written just now: no clearing needed.
        slot[new] = torch.arange(base, base + new.numel(), device=device)
        torch.index_select(slot, 0, c, out=inverse[e0:e1])
        keys.append(new + b * n)
        base += new.numel()
    return (torch.cat(keys) if keys else col[:0]), inverse


def induced_columns(p: CSRMatrix, visited: Stacked, n: int) -> torch.Tensor:
    """Local column of every entry of the stacked ``Q A`` in its minibatch's list, -1 if absent.

    Row i of ``p`` is the row of A of stacked vertex i. The entries with a local column
    are those of the induced subgraph ``Q A Q^T``. A dense map of size n (vertex ->
    position in the minibatch's list, -1 elsewhere) is filled and cleared per
    minibatch, so the lookup is one gather per entry, not a sort and a binary search.
    """
    slot = torch.full((n,), -1, dtype=torch.long, device=p.device)
    local = torch.empty_like(p.col)
    bounds = p.crow[visited.ptr].tolist()
    for b, part in enumerate(visited.split()):
        slot[part] = torch.arange(part.numel(), device=p.device)
        part_entries = slice(bounds[b], bounds[b + 1])
        torch.index_select(slot, 0, p.col[part_entries], out=local[part_entries])
        slot[part] = -1
    return local


def induced_block(
    p: CSRMatrix, visited: Stacked, local: torch.Tensor, unit: bool
) -> CSRMatrix:
    """The stacked row-normalised ``Q A Q^T`` from :func:`induced_columns`' lookup.

    Equal to :func:`stacked_block` over the found entries (the previous path), built
    without its general COO sort: rows are already in order, so the row pointers are a
    cumsum of the kept-entry mask read at ``p.crow``, and only the columns inside each
    row need ordering (:func:`_sort_within_rows`). A unit-valued matrix gets the mean's
    values ``1 / count`` directly, as ``row_norm`` computes them.
    """
    keep = local >= 0
    crow = exclusive_cumsum(keep)[p.crow]
    counts = crow[1:] - crow[:-1]
    width = int(visited.counts.max()) if visited.k else 0
    shape = (p.shape[0], max(width, 1))
    cols, order = _sort_within_rows(local[keep], counts, crow, visited.ptr, visited.counts, unit)
    if unit:
        mean = (1.0 / counts.to(p.dtype)).repeat_interleave(counts)
        return CSRMatrix(crow, cols, mean, shape)
    assert order is not None
    return row_norm(CSRMatrix(crow, cols, p.val[keep][order], shape))


def _sort_within_rows(
    cols: torch.Tensor,
    counts: torch.Tensor,
    crow: torch.Tensor,
    row_ptr: torch.Tensor,
    widths: torch.Tensor,
    values_only: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``cols`` sorted inside each CSR row (distinct per row) and, unless ``values_only``,
    the permutation that does it.

    Minibatch b owns rows ``row_ptr[b]:row_ptr[b+1]``, whose columns are below
    ``widths[b]``; its keys ``row * width + column`` are sorted on their own, so they fit
    in 32 bits whenever ``rows * width`` does. Sorting the keys moves every entry only
    inside its row (rows are already in order), so a sorted key minus ``row * width`` is
    the sorted column. On the CPU the sort is numpy's (x86-simd-sort, measured about 7x
    faster than ``torch.sort`` on 2.3M int32 keys); the permutation travels in the low 32
    bits of int64 keys, so one value sort gives both.
    """
    out = torch.empty_like(cols)
    order = None if values_only else torch.empty_like(cols)
    bounds, rp = crow[row_ptr].tolist(), row_ptr.tolist()
    for b, width in enumerate(widths.tolist()):
        e0, e1, r0, r1 = bounds[b], bounds[b + 1], rp[b], rp[b + 1]
        fits = (r1 - r0) * width < _INT32_KEYS and e1 - e0 < 2**32
        dtype = torch.int32 if fits and order is None else torch.long
        starts = torch.arange(r1 - r0, dtype=dtype, device=cols.device) * width
        row_base = starts.repeat_interleave(counts[r0:r1], output_size=e1 - e0)
        key = cols[e0:e1].to(dtype)
        key += row_base
        if order is None:
            out[e0:e1] = sort_values(key).sub_(row_base)
        elif fits:
            key <<= 32
            key |= torch.arange(e1 - e0, device=key.device)
            packed = sort_values(key)
            out[e0:e1] = (packed >> 32).sub_(row_base)
            order[e0:e1] = packed.bitwise_and_(0xFFFFFFFF).add_(e0)
        else:
            sorted_key, idx = torch.sort(key)
            out[e0:e1] = sorted_key.sub_(row_base)
            order[e0:e1] = idx.add_(e0)
    return out, order


def sort_values(x: torch.Tensor) -> torch.Tensor:
    """``torch.sort(x).values`` (along the last dimension) without the permutation.

    On the CPU numpy sorts (x86-simd-sort where the CPU has AVX2/AVX-512): measured 2-7x
    faster than ``torch.sort`` on flat int32/int64 keys and on short rows of a 2-D
    grid. Integer keys only, where every sort gives the same result.
    """
    if x.device.type != "cpu":
        return torch.sort(x).values
    return torch.from_numpy(np.sort(x.numpy(), axis=-1))


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
