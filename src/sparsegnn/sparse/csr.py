"""The CSR matrix type of sparsegnn: compressed rows on plain torch tensors.

A :class:`CSRMatrix` is three tensors (``crow``, ``col``, ``val``) and a shape. Indices are
always int64 (ids above 2**31 and, unlike float-cast indices, above 2**24 stay exact);
values are float32 or float64. Column indices are sorted within each row and unique, so
every structural operation (transpose, extraction, SpGEMM) can rely on it. The transpose
is computed once and cached together with the permutation that maps this matrix's
values onto the transpose's, which is what the value gradient of SpMM needs. The checks
that enforce these invariants on input are in :mod:`sparsegnn.sparse.invariants`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
import torch

from sparsegnn.errors import DuplicateEntryError, InvalidValueError, ShapeError
from sparsegnn.sparse.invariants import (
    FLOAT_DTYPES,
    check_bounds,
    check_index_pair,
    check_values,
    validate_csr,
)

DuplicatePolicy = Literal["sum", "max", "error"]


@dataclass(eq=False)
class CSRMatrix:
    """A sparse matrix in compressed sparse row form.

    Attributes:
        crow: ``[rows + 1]`` int64 row pointers.
        col: ``[nnz]`` int64 column indices, sorted and unique within each row.
        val: ``[nnz]`` float32/float64 values.
        shape: ``(rows, cols)``.
        symmetric: set by constructors that know ``A == A^T`` (e.g. GCN normalisation of
            an undirected graph); lets SpMM's backward reuse ``A`` instead of ``A^T``.
        unit_values: set by constructors that know every stored value is 1 (incidence and
            pattern matrices); SpMM then runs an unweighted gather-sum, which skips
            reading the values (about 1.4x faster on float32 CPU, docs/kernels.md).
            :meth:`with_values` clears it.
    """

    crow: torch.Tensor
    col: torch.Tensor
    val: torch.Tensor
    shape: tuple[int, int]
    symmetric: bool = False
    unit_values: bool = False
    # Cached transpose and the permutation p with transpose.val == val[p]; filled lazily.
    _t: CSRMatrix | None = field(default=None, repr=False)
    _t_perm: torch.Tensor | None = field(default=None, repr=False)
    # Cached torch.sparse_csr_tensor view sharing our storage; filled lazily.
    _torch_csr: torch.Tensor | None = field(default=None, repr=False)
    # Cached expanded row index per nonzero (COO rows); filled lazily.
    _rows: torch.Tensor | None = field(default=None, repr=False)
    # Cached 16-bit copy of val for reduced-precision SpMM, with the (dtype, data_ptr,
    # version) of val it was cast from; filled lazily by values_as.
    _val_lowp: torch.Tensor | None = field(default=None, repr=False)
    _val_lowp_key: tuple[torch.dtype, int, int] | None = field(default=None, repr=False)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_csr(
        cls,
        crow: torch.Tensor,
        col: torch.Tensor,
        val: torch.Tensor | None,
        shape: tuple[int, int],
        *,
        check: bool = True,
        symmetric: bool = False,
    ) -> CSRMatrix:
        """Wrap existing CSR arrays, validating them unless ``check=False``.

        ``val=None`` means all ones, and marks the matrix ``unit_values``.

        Raises :class:`UnsortedIndicesError` or :class:`DuplicateEntryError` when the
        columns of a row are not strictly increasing: CSR input is a promise of
        canonical form, and silently re-sorting would reorder the caller's values.
        Use :meth:`from_coo` for arbitrary input.
        """
        crow = torch.as_tensor(crow)
        col = torch.as_tensor(col)
        nnz = int(col.numel())
        unit = val is None
        if val is None:
            val = torch.ones(nnz, dtype=torch.float32, device=col.device)
        val = torch.as_tensor(val)
        mat = cls(crow.long(), col.long(), val, (int(shape[0]), int(shape[1])), symmetric, unit)
        if check:
            mat.validate()
        return mat

    @classmethod
    def from_coo(
        cls,
        row: torch.Tensor,
        col: torch.Tensor,
        val: torch.Tensor | None = None,
        shape: tuple[int, int] | None = None,
        *,
        duplicates: DuplicatePolicy = "sum",
        symmetric: bool = False,
    ) -> CSRMatrix:
        """Build from coordinate lists in any order.

        Entries are sorted by (row, column). Repeated coordinates are combined by
        ``duplicates``: ``"sum"`` (the scipy convention), ``"max"``, or ``"error"``.
        """
        row, col = check_index_pair(row, col)
        nnz = row.numel()
        if val is None:
            val = torch.ones(nnz, dtype=torch.float32, device=row.device)
        val = torch.as_tensor(val, device=row.device)
        if val.shape != (nnz,):
            raise ShapeError(
                f"values must have shape ({nnz},) to match the indices, got {tuple(val.shape)}"
            )
        check_values(val)
        if shape is None:
            shape = (int(row.max()) + 1 if nnz else 0, int(col.max()) + 1 if nnz else 0)
        shape = (int(shape[0]), int(shape[1]))
        check_bounds(row, shape[0], "row")
        check_bounds(col, shape[1], "column")
        key = row * max(shape[1], 1) + col
        key, order = torch.sort(key, stable=True)
        row, col, val = row[order], col[order], val[order]
        if nnz > 1:
            first = torch.ones(nnz, dtype=torch.bool, device=row.device)
            first[1:] = key[1:] != key[:-1]
            if not bool(first.all()):
                if duplicates == "error":
                    dup = int((~first).nonzero()[0, 0])
                    raise DuplicateEntryError(
                        f"entry ({int(row[dup])}, {int(col[dup])}) appears more than once; "
                        "pass duplicates='sum' or 'max' to combine repeated entries"
                    )
                group = torch.cumsum(first.long(), 0) - 1
                n_unique = int(group[-1]) + 1
                reduce = "sum" if duplicates == "sum" else "amax"
                combined = torch.zeros(n_unique, dtype=val.dtype, device=val.device)
                combined = combined.scatter_reduce(0, group, val, reduce=reduce, include_self=False)
                row, col, val = row[first], col[first], combined
        crow = _rows_to_crow(row, shape[0])
        return cls(crow, col, val, shape, symmetric)

    @classmethod
    def from_edge_index(
        cls,
        edge_index: torch.Tensor,
        num_nodes: int | None = None,
        values: torch.Tensor | None = None,
        *,
        duplicates: DuplicatePolicy = "sum",
        symmetric: bool = False,
    ) -> CSRMatrix:
        """Adjacency for message passing from a PyG-style ``[2, E]`` edge_index.

        Edge ``(src, dst)`` becomes entry ``A[dst, src]`` so that ``A @ X`` aggregates the
        features of each node's in-neighbours into that node (PyG's default
        ``source_to_target`` flow). For an undirected graph stored in both directions,
        this is the usual symmetric adjacency.
        """
        edge_index = torch.as_tensor(edge_index)
        if edge_index.dim() != 2 or edge_index.shape[0] != 2:
            raise ShapeError(f"edge_index must have shape [2, E], got {tuple(edge_index.shape)}")
        if num_nodes is None:
            num_nodes = int(edge_index.max()) + 1 if edge_index.numel() else 0
        return cls.from_coo(
            edge_index[1],
            edge_index[0],
            values,
            (num_nodes, num_nodes),
            duplicates=duplicates,
            symmetric=symmetric,
        )

    @classmethod
    def from_scipy(
        cls, mat: sp.spmatrix | sp.sparray, *, duplicates: DuplicatePolicy = "sum"
    ) -> CSRMatrix:
        """Convert any scipy.sparse matrix (duplicates combined by ``duplicates``)."""
        coo = sp.coo_matrix(mat)
        val = torch.from_numpy(np.asarray(coo.data))
        if val.dtype not in FLOAT_DTYPES:
            val = val.to(torch.float32)
        return cls.from_coo(
            torch.from_numpy(coo.row.astype(np.int64)),
            torch.from_numpy(coo.col.astype(np.int64)),
            val,
            coo.shape,
            duplicates=duplicates,
        )

    @classmethod
    def from_pyg(cls, data: Any, *, duplicates: DuplicatePolicy = "sum") -> CSRMatrix:
        """Adjacency of a ``torch_geometric.data.Data`` (uses ``edge_weight`` if present)."""
        weight = getattr(data, "edge_weight", None)
        return cls.from_edge_index(data.edge_index, data.num_nodes, weight, duplicates=duplicates)

    @classmethod
    def identity(
        cls, n: int, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"
    ) -> CSRMatrix:
        """The n x n identity."""
        idx = torch.arange(n, device=device)
        crow = torch.arange(n + 1, device=device)
        return cls(crow, idx, torch.ones(n, dtype=dtype, device=device), (n, n), True)

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Check every invariant; raise the documented error on the first violation."""
        validate_csr(self)

    # ------------------------------------------------------------------ properties
    @property
    def nnz(self) -> int:
        return int(self.col.numel())

    @property
    def dtype(self) -> torch.dtype:
        return self.val.dtype

    @property
    def device(self) -> torch.device:
        return self.col.device

    def __repr__(self) -> str:
        return (
            f"CSRMatrix(shape={self.shape}, nnz={self.nnz}, dtype={self.dtype}, "
            f"device={self.device})"
        )

    def row_indices(self) -> torch.Tensor:
        """Row of each nonzero (the COO row array), cached."""
        if self._rows is None:
            counts = self.crow[1:] - self.crow[:-1]
            self._rows = torch.repeat_interleave(
                torch.arange(self.shape[0], device=self.device), counts
            )
        return self._rows

    def row_degrees(self) -> torch.Tensor:
        """Number of stored entries per row."""
        return self.crow[1:] - self.crow[:-1]

    def row_sums(self) -> torch.Tensor:
        """Sum of the values of each row."""
        out = torch.zeros(self.shape[0], dtype=self.dtype, device=self.device)
        return out.index_add_(0, self.row_indices(), self.val)

    # ------------------------------------------------------------------ conversion
    def to(
        self, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> CSRMatrix:
        """Copy to another device and/or value dtype (indices stay int64)."""
        if dtype is not None and dtype not in FLOAT_DTYPES:
            raise InvalidValueError(f"value dtype must be float32 or float64, got {dtype}")
        val = self.val.to(device=device, dtype=dtype)
        return CSRMatrix(self.crow.to(device), self.col.to(device), val, self.shape,
                         self.symmetric, self.unit_values)

    def with_values(self, val: torch.Tensor) -> CSRMatrix:
        """Same sparsity pattern, new values; shares the cached transpose structure."""
        if val.shape != self.val.shape:
            raise ShapeError(
                f"new values must have shape {tuple(self.val.shape)}, got {tuple(val.shape)}"
            )
        out = CSRMatrix(self.crow, self.col, val, self.shape, False, _rows=self._rows)
        return out

    def values_as(self, dtype: torch.dtype) -> torch.Tensor:
        """The values cast to ``dtype`` (detached), cached until ``val`` changes.

        Why: a kernel on 16-bit features needs 16-bit weights (FBGEMM's embedding bag
        takes one dtype), but the matrix keeps float32 values, so the operator itself
        loses nothing; casting once per matrix instead of once per product saves a pass
        over the nonzeros every SpMM. The key includes ``val``'s version counter, so an
        in-place update of learnt values is never served a stale copy.
        """
        if dtype == self.val.dtype:
            return self.val.detach()
        key = (dtype, self.val.data_ptr(), self.val._version)
        if self._val_lowp is None or self._val_lowp_key != key:
            self._val_lowp = self.val.detach().to(dtype)
            self._val_lowp_key = key
        return self._val_lowp

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """``A @ X`` with autograd: the operator protocol every layer calls."""
        from sparsegnn.sparse.ops import spmm

        return spmm(self, x)

    __matmul__ = matmul

    def to_torch(self) -> torch.Tensor:
        """A ``torch.sparse_csr_tensor`` sharing this matrix's storage, cached."""
        if self._torch_csr is None or self._torch_csr.values().data_ptr() != self.val.data_ptr():
            with warnings.catch_warnings():
                warnings.filterwarnings(
                    "ignore", message=".*Sparse CSR tensor support is in beta.*"
                )
                self._torch_csr = torch.sparse_csr_tensor(
                    self.crow, self.col, self.val.detach(), self.shape, check_invariants=False
                )
        return self._torch_csr

    def to_scipy(self) -> sp.csr_matrix:
        """A scipy CSR copy (values detached, on the CPU)."""
        return sp.csr_matrix(
            (self.val.detach().cpu().numpy(), self.col.cpu().numpy(), self.crow.cpu().numpy()),
            shape=self.shape,
        )

    def to_dense(self) -> torch.Tensor:
        out = torch.zeros(self.shape, dtype=self.dtype, device=self.device)
        out[self.row_indices(), self.col] = self.val
        return out

    def to_edge_index(self) -> torch.Tensor:
        """Inverse of :meth:`from_edge_index`: ``[2, nnz]`` with (src=col, dst=row)."""
        return torch.stack([self.col, self.row_indices()])

    # ------------------------------------------------------------------ transpose
    def transpose_perm(self) -> torch.Tensor:
        """Permutation p such that ``self.t().val == self.val[p]``."""
        self.t()
        assert self._t_perm is not None
        return self._t_perm

    def has_cached_transpose(self) -> bool:
        """Whether :meth:`t` has built and kept a transpose (what it costs in memory)."""
        return self._t is not None

    def forget_transpose(self) -> None:
        """Drop the cached transpose and its permutation (:meth:`t` builds them again on
        demand): about 28 bytes a nonzero that a matrix known to equal its transpose
        never reads."""
        self._t = self._t_perm = None

    def t(self) -> CSRMatrix:
        """The transpose, computed once and cached (the symmetric case returns self)."""
        if self.symmetric:
            if self._t_perm is None:
                self._t_perm = torch.arange(self.nnz, device=self.device)
            return self
        if self._t is None:
            rows = self.row_indices()
            # CSR lists the nonzeros by row, so a stable sort by column alone gives (column,
            # row) order; 32-bit keys, where the columns fit, sort in half the time.
            key = self.col.int() if self.shape[1] <= torch.iinfo(torch.int32).max else self.col
            perm = torch.argsort(key, stable=True)
            crow = _rows_to_crow(self.col[perm], self.shape[1])
            self._t = CSRMatrix(crow, rows[perm], self.val[perm], (self.shape[1], self.shape[0]),
                                unit_values=self.unit_values)
            self._t._rows = self.col[perm]
            self._t_perm = perm
        return self._t

    # ------------------------------------------------------------------ extraction
    def select_rows(self, rows: torch.Tensor, ones: bool = False) -> CSRMatrix:
        """``A[rows, :]`` in the order given (rows may repeat): the sampler's ``Q A``.
        ``ones``: A's values are all 1 (a pattern), so they are filled, not gathered."""
        rows = torch.as_tensor(rows, device=self.device).long()
        check_bounds(rows, self.shape[0], "row")
        starts = self.crow[rows]
        counts = self.crow[rows + 1] - starts
        crow = torch.zeros(rows.numel() + 1, dtype=torch.long, device=self.device)
        torch.cumsum(counts, 0, out=crow[1:])
        take = run_positions(starts, counts, crow)
        val = torch.ones(take.numel(), dtype=self.dtype, device=self.device) if ones \
            else self.val[take]
        return CSRMatrix(crow, self.col[take], val, (rows.numel(), self.shape[1]))

    def select_cols(self, cols: torch.Tensor) -> CSRMatrix:
        """``A[:, cols]`` with columns renumbered to positions in ``cols`` (unique ids)."""
        cols = torch.as_tensor(cols, device=self.device).long()
        check_bounds(cols, self.shape[1], "column")
        mapping = torch.full((self.shape[1],), -1, dtype=torch.long, device=self.device)
        mapping[cols] = torch.arange(cols.numel(), device=self.device)
        if int((mapping >= 0).sum()) != cols.numel():
            raise DuplicateEntryError("select_cols needs unique column ids")
        new_col = mapping[self.col]
        keep = new_col >= 0
        rows = self.row_indices()[keep]
        return CSRMatrix.from_coo(
            rows, new_col[keep], self.val[keep], (self.shape[0], cols.numel())
        )

    def submatrix(self, rows: torch.Tensor, cols: torch.Tensor) -> CSRMatrix:
        """``A[rows][:, cols]``: the induced subgraph when rows == cols."""
        return self.select_rows(rows).select_cols(cols)

    def permute(self, perm: torch.Tensor) -> CSRMatrix:
        """Symmetric relabelling ``P A P^T``: new vertex i is old vertex ``perm[i]``."""
        perm = torch.as_tensor(perm, device=self.device).long()
        if self.shape[0] != self.shape[1] or perm.numel() != self.shape[0]:
            raise ShapeError(
                "permute needs a square matrix and a full permutation, "
                f"got {self.shape} and {perm.numel()}"
            )
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.numel(), device=self.device)
        out = self.select_rows(perm)
        rows = out.row_indices()
        res = CSRMatrix.from_coo(rows, inv[out.col], out.val, self.shape)
        res.symmetric = self.symmetric
        return res


def hstack(tiles: list[CSRMatrix]) -> CSRMatrix:
    """``[T_0 T_1 ...]``: tiles of the same rows side by side, one matrix.

    One product with the stacked matrix replaces a product per tile, each of which
    allocates a full output that is then added: for a 2048-row block at width 16, one
    tile plus seven stacked took 0.17 ms where eight separate products took 0.45 ms."""
    if not tiles:
        raise ShapeError("hstack needs at least one tile")
    rows = tiles[0].shape[0]
    if any(t.shape[0] != rows for t in tiles):
        raise ShapeError(f"hstack: tiles of {sorted({t.shape[0] for t in tiles})} rows, "
                         "expected one row count")
    offsets = np.cumsum([0] + [t.shape[1] for t in tiles]).tolist()
    return CSRMatrix.from_coo(
        torch.cat([t.row_indices() for t in tiles]),
        torch.cat([t.col + off for t, off in zip(tiles, offsets[:-1], strict=True)]),
        torch.cat([t.val for t in tiles]), (rows, offsets[-1]), duplicates="error")


# ---------------------------------------------------------------------- helpers
def run_positions(starts: torch.Tensor, counts: torch.Tensor, crow: torch.Tensor
                   ) -> torch.Tensor:
    """The positions ``starts[i], ..., starts[i] + counts[i] - 1`` of every run, in order
    (``crow``: the exclusive cumsum of ``counts``). One cumsum over a step array (1
    inside a run, the jump to the next run at its first entry) writes them: fewer passes
    than an arange plus a repeat_interleave of offsets, which the samplers' row
    extraction measured, and no integer division (the tracking graph's candidate pairs:
    1.4x faster than with one)."""
    total = int(crow[-1])
    if total == 0:
        return torch.zeros(0, dtype=torch.long, device=starts.device)
    nonempty = counts > 0
    first, begin, length = crow[:-1][nonempty], starts[nonempty], counts[nonempty]
    step = torch.ones(total, dtype=torch.long, device=starts.device)
    # From the last entry of one run (begin + length - 1) to the first of the next.
    step[first[1:]] = begin[1:] - (begin[:-1] + length[:-1]) + 1
    step[0] = begin[0]
    return torch.cumsum(step, 0)


def _rows_to_crow(sorted_rows: torch.Tensor, n_rows: int) -> torch.Tensor:
    counts = torch.bincount(sorted_rows, minlength=n_rows)
    crow = torch.zeros(n_rows + 1, dtype=torch.long, device=sorted_rows.device)
    torch.cumsum(counts, 0, out=crow[1:])
    return crow
