"""Exact per-rank communication volume of an epoch, computed without launching ranks.

For the sparsity-aware 1D/1.5D SpMM (:mod:`sparsegnn.distributed.ops.sparse_comm`) the
volume is the block connectivity of the relabelled operator: ``pair[i, j]`` is how many
distinct columns of block j the rows of block i use, i.e. how many rows of ``H_j`` block
i receives per SpMM (:func:`sparsegnn.partition.pair_rows`; the backward pass uses the
transposed pattern). On a ``R x c`` grid rank ``(i, k)`` receives ``pair[i, j]`` rows
from every stage block j of replica k, the owner ``(j, k)`` sends them, and the c
replicas all-reduce ``n_i`` rows each way. The communication-oblivious 1D/1.5D volume is
the same with ``pair[i, j] = n_j``; 2D/3D reuse :func:`~sparsegnn.distributed.
comm_model.predict`. Everything is vectorised over ranks (one R x R matrix, a few
array products), and the pairs need only the operator's :class:`Pattern`, walked by
column in chunks (:func:`sparsegnn.partition.volume.column_pairs`), so P in the
thousands and 1e8 edges cost a pass over the pattern and memory for the pattern alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp
import torch

from sparsegnn.distributed.layout.block_partition import BlockPartition, split_range
from sparsegnn.distributed.layout.grid import GridShape
from sparsegnn.distributed.planning.comm_model import InputSlicing, SpmmCall, predict, tile_nnz
from sparsegnn.partition.volume import column_pairs
from sparsegnn.sparse import CSRMatrix

CommMode = Literal["dense", "sparse"]
SPMM_PHASES = ("forward_spmm", "backward_spmm")


@dataclass(frozen=True)
class RankVolume:
    """Per-rank arrays (index = grid rank) of one SpMM phase or of a whole epoch."""

    sent: np.ndarray
    recv: np.ndarray

    def __add__(self, other: RankVolume) -> RankVolume:
        return RankVolume(self.sent + other.sent, self.recv + other.recv)

    def scaled(self, factor: int) -> RankVolume:
        return RankVolume(self.sent * factor, self.recv * factor)

    @property
    def total(self) -> int:
        return int(self.sent.sum())

    @property
    def max_per_rank(self) -> int:
        return int(max(self.sent.max(initial=0), self.recv.max(initial=0)))


def vertex_blocks(part: BlockPartition) -> np.ndarray:
    """Original vertex id -> its block (the partition vector behind ``part``)."""
    sizes = np.diff(np.asarray(part.offsets, dtype=np.int64))
    block_of = np.repeat(np.arange(part.blocks, dtype=np.int64), sizes)
    if part.order is None:
        return block_of
    out = np.empty_like(block_of)
    out[np.asarray(part.order)] = block_of
    return out


@dataclass(frozen=True)
class Pattern:
    """Where an ``n x n`` SpMM operator ``A`` has nonzeros, stored by column: ``A[r, c]`` is
    stored for each ``r`` in ``rows[indptr[c]:indptr[c + 1]]`` (the CSR arrays of ``A^T``).

    The 1D/1.5D volume depends on nothing else, so the planner keeps no values and no row
    index per nonzero, and int32 ids while they fit: 1.3e8 nonzeros take 0.5 GiB here,
    against 1.5 GiB for the operator's int64 columns and float values. Self loops (GCN's
    ``+ I``) never cross blocks, so the pattern of the adjacency serves every model.
    ``symmetric``: ``A`` and ``A^T`` have the same pattern, so both SpMM directions move
    the same rows and one count serves both.
    """

    indptr: np.ndarray
    rows: np.ndarray
    symmetric: bool

    @classmethod
    def of(cls, a: CSRMatrix) -> Pattern:
        """The pattern of ``a`` (transposed here unless ``a`` is known to be symmetric)."""
        crow, col = a.crow.cpu().numpy(), a.col.cpu().numpy()
        if a.symmetric:
            return cls(crow, col, True)
        by_col = _bool_csr(crow, col, a.shape[0]).tocsc()
        return cls(by_col.indptr, by_col.indices, _same(by_col, crow, col))

    @classmethod
    def from_edge_index(cls, edge_index: torch.Tensor, num_nodes: int) -> Pattern:
        """The pattern of ``CSRMatrix.from_edge_index(edge_index, num_nodes)``: edge
        ``(s, t)`` is ``A[t, s]``, so column s holds the targets of s. One scipy counting
        sort (int32 copies of the two rows of ``edge_index``), no int64 sort key."""
        src, dst = torch.as_tensor(edge_index).cpu().numpy()
        ones = np.ones(len(src), dtype=bool)
        by_col = sp.csr_matrix((ones, (src, dst)), shape=(num_nodes, num_nodes))
        by_row = by_col.tocsc()
        return cls(by_col.indptr, by_col.indices, _same(by_col, by_row.indptr, by_row.indices))

    def matrix(self) -> sp.csr_matrix:
        """``A^T`` as a boolean scipy CSR matrix (int32 arrays are shared, not copied)."""
        return _bool_csr(self.indptr, self.rows, len(self.indptr) - 1)

    def transposed(self) -> Pattern:
        """The pattern of ``A^T``: ``A``'s rows become the columns."""
        if self.symmetric:
            return self
        by_row = self.matrix().tocsc()
        return Pattern(by_row.indptr, by_row.indices, False)


def _bool_csr(indptr: np.ndarray, indices: np.ndarray, n: int) -> sp.csr_matrix:
    ones = np.ones(len(indices), dtype=bool)
    return sp.csr_matrix((ones, indices, indptr), shape=(n, n))


def _same(m: sp.csr_matrix | sp.csc_matrix, indptr: np.ndarray, indices: np.ndarray) -> bool:
    """Whether ``m``'s arrays equal these (both canonical: sorted, no duplicates)."""
    return np.array_equal(m.indptr, indptr) and np.array_equal(m.indices, indices)


def block_pairs(
    a: CSRMatrix | Pattern, part: BlockPartition, transpose: bool = False
) -> np.ndarray:
    """``R x R`` rows block i receives from block j per SpMM by ``a`` (or ``a^T``).

    ``a`` is in the original vertex order: relabelling would only permute the ids that
    the partition vector then maps back to the same blocks, so it is skipped.
    """
    pattern = a if isinstance(a, Pattern) else Pattern.of(a)
    if transpose:
        pattern = pattern.transposed()
    block_of = vertex_blocks(part)
    return column_pairs(pattern.indptr, pattern.rows, block_of, block_of, part.blocks)


def row_volume(
    shape: GridShape, part: BlockPartition, pair: np.ndarray | None
) -> RankVolume:
    """Rows each rank of a 1D/1.5D grid sends/receives in one SpMM (all-reduce included).

    ``pair`` is :func:`block_pairs` for sparsity-aware communication, ``None`` for the
    oblivious broadcast of whole blocks.
    """
    r, c = shape.rows, shape.cols
    sizes = np.diff(np.asarray(part.offsets, dtype=np.int64))
    chunk = np.zeros(r, dtype=np.int64)
    for k, (lo, hi) in enumerate(split_range(0, r, c)):
        chunk[lo:hi] = k
    owns = chunk[:, None] == np.arange(c)[None, :]  # R x c: block i is a stage of replica k
    if r == 1:
        need = np.zeros((1, 1), dtype=np.int64)
    elif pair is None:
        need = np.broadcast_to(sizes[None, :], (r, r)) - np.diag(sizes)
    else:
        need = pair
    recv = need @ owns.astype(np.int64)
    sent = owns * need.sum(0)[:, None]
    reduce = ((c - 1) * sizes)[:, None]
    return RankVolume((sent + reduce).reshape(-1), (recv + reduce).reshape(-1))


def phase_pairs(a: CSRMatrix | Pattern, part: BlockPartition) -> dict[str, np.ndarray]:
    """:func:`block_pairs` of the forward (``a``) and backward (``a^T``) SpMMs; one count
    when the pattern is symmetric."""
    pattern = a if isinstance(a, Pattern) else Pattern.of(a)
    forward = block_pairs(pattern, part)
    backward = forward if pattern.symmetric else block_pairs(pattern, part, True)
    return {"forward_spmm": forward, "backward_spmm": backward}


def rowwise_volume(
    shape: GridShape, part: BlockPartition, calls: list[SpmmCall], value_bytes: int,
    pairs: dict[str, np.ndarray] | None,
) -> dict[str, RankVolume]:
    """1D/1.5D bytes per rank of ``calls``, per phase: sparsity-aware given the
    :func:`phase_pairs`, oblivious given ``None``. Needs no operator at all."""
    rows = {
        phase: row_volume(shape, part, pairs[phase] if pairs is not None else None)
        for phase in SPMM_PHASES
    }
    out: dict[str, RankVolume] = {}
    for call in calls:
        add = rows[call.phase].scaled(call.width * value_bytes)
        out[call.phase] = out[call.phase] + add if call.phase in out else add
    return out


def epoch_volume(
    shape: GridShape, part: BlockPartition, a: CSRMatrix, calls: list[SpmmCall], *,
    value_bytes: int, comm: CommMode = "sparse", pairs: dict[str, np.ndarray] | None = None,
    slicing: InputSlicing | None = None,
) -> dict[str, RankVolume]:
    """Bytes per rank of an epoch's SpMMs, per phase, for the operator ``a`` (original
    vertex order; relabelled here only where 2D/3D need its tiles). ``pairs``: the
    :func:`phase_pairs` of ``a`` and ``part`` when the caller already has them;
    ``slicing`` (2D/3D): the input features are cut by columns, which adds the first
    layer's row all-reduces (phase ``input_allreduce``)."""
    if shape.row_wise:
        if comm == "sparse" and pairs is None:
            pairs = phase_pairs(a, part)
        return rowwise_volume(shape, part, calls, value_bytes, pairs)
    if comm == "sparse":
        raise ValueError("sparsity-aware communication is implemented for 1d and 1.5d only")
    return _summa_volume(shape, part, relabelled(a, part), calls, value_bytes, slicing)


def _summa_volume(
    shape: GridShape, part: BlockPartition, a: CSRMatrix, calls: list[SpmmCall],
    value_bytes: int, slicing: InputSlicing | None,
) -> dict[str, RankVolume]:
    """2D/3D: the comm model's per-rank formulas (loops over q stages, not vertices)."""
    nnz = {"forward_spmm": tile_nnz(a, part, shape), "backward_spmm": tile_nnz(a.t(), part, shape)}
    per = [predict(shape, part, r, calls, value_bytes=value_bytes, num_params=0, nnz=nnz,
                   slicing=slicing) for r in range(shape.size)]
    out: dict[str, RankVolume] = {}
    for phase in (*SPMM_PHASES, "input_allreduce"):
        if any(phase in v for v in per):
            sent = np.array([v.get(phase, {}).get("sent", 0) for v in per], dtype=np.int64)
            recv = np.array([v.get(phase, {}).get("recv", 0) for v in per], dtype=np.int64)
            out[phase] = RankVolume(sent, recv)
    return out


def relabelled(a: CSRMatrix, part: BlockPartition) -> CSRMatrix:
    """``a`` in the partition's vertex order (what the ranks hold)."""
    return a if part.order is None else a.permute(torch.as_tensor(part.order))
