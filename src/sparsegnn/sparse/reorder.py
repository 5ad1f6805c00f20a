"""Vertex reorderings that make SpMM's gathers hit the cache.

``A @ X`` reads, for every nonzero ``(i, j)``, the row ``X[j]``. When ids are assigned at
random (as most real datasets and all of sparsegnn's generators do) those reads are
uniform over ``X``, which is far larger than the cache, so SpMM runs at random-gather
bandwidth. Relabelling the vertices so that rows processed together share neighbours,
and neighbours share cache lines and pages, turns many of those reads into cache hits.
Measured gains and costs are in ``docs/kernels.md``.

Convention (the same as :meth:`CSRMatrix.permute`): a permutation ``perm`` maps new ids
to old ones, new vertex ``i`` is old vertex ``perm[i]``.

Orderings:

* :func:`degree_order`: hubs first. Nearly free; packs the most-read rows together,
  but concentrates the nonzeros in the first rows, which unbalances multi-threaded
  SpMM on skewed graphs.
* :func:`rcm_order`: reverse Cuthill-McKee (scipy). Breadth-first levels, which keep
  neighbours close on mesh-like and skewed graphs; weak on graphs made of communities.
* :func:`community_order`: label propagation, then communities laid out contiguously
  (largest first, reverse Cuthill-McKee order inside each). Recovers community
  structure, which is what keeps the gathered rows of one community in cache; on
  graphs without communities it falls back to roughly the RCM order.

Use :func:`reorder` once at load time and keep training in the new order (features,
labels and masks moved with :meth:`Reordering.to_new`), or wrap the operator in
:class:`Reordered` to keep the caller's order at the price of two row gathers per SpMM.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import reverse_cuthill_mckee

from sparsegnn.errors import ShapeError
from sparsegnn.sparse.csr import CSRMatrix

Method = Literal["none", "degree", "rcm", "community"]


def degree_order(adj: CSRMatrix) -> torch.Tensor:
    """Vertices by decreasing degree (stable, so equal degrees keep their order).

    Packs the most-read rows of ``X`` together, which helps a single-threaded SpMM on
    skewed graphs; but SpMM kernels split rows evenly between threads, and on a
    power-law graph the first half of a degree-sorted matrix holds nearly all the
    nonzeros, so with several threads it can be slower than no reordering at all.
    """
    _check_square(adj)
    return torch.argsort(adj.row_degrees(), descending=True, stable=True)


def rcm_order(adj: CSRMatrix) -> torch.Tensor:
    """Reverse Cuthill-McKee order of the symmetrised sparsity pattern."""
    _check_square(adj)
    return torch.from_numpy(_rcm(_symmetric_pattern(adj))).to(adj.device)


def community_order(
    adj: CSRMatrix,
    *,
    max_iterations: int = 30,
    update_fraction: float = 0.8,
    tol: float = 1e-3,
    seed: int = 0,
) -> torch.Tensor:
    """Communities found by label propagation, laid out one after another.

    Communities are ordered largest first and, inside each, vertices follow their
    reverse Cuthill-McKee position, which keeps neighbours close without piling the
    hubs together (see :func:`degree_order` for why that matters). See
    :func:`label_propagation` for the parameters.
    """
    _check_square(adj)
    pattern = _symmetric_pattern(adj)
    labels = _label_propagation(pattern, max_iterations, update_fraction, tol, seed)
    _, community, sizes = np.unique(labels, return_inverse=True, return_counts=True)
    rcm_position = np.empty(adj.shape[0], dtype=np.int64)
    rcm_position[_rcm(pattern)] = np.arange(adj.shape[0])
    # np.lexsort sorts by the last key first: community size, community, RCM position.
    order = np.lexsort((rcm_position, community, -sizes[community]))
    return torch.from_numpy(order.astype(np.int64)).to(adj.device)


def label_propagation(
    adj: CSRMatrix,
    *,
    max_iterations: int = 30,
    update_fraction: float = 0.8,
    tol: float = 1e-3,
    seed: int = 0,
) -> np.ndarray:
    """Community label of every vertex (Raghavan et al.'s label propagation).

    Every vertex starts in its own community and repeatedly adopts the label most
    frequent among its neighbours, ties broken by a random priority drawn afresh each
    round. Only a random ``update_fraction`` of the vertices moves per round: fully
    synchronous updates oscillate on bipartite-like structure. Stops after
    ``max_iterations`` rounds or once fewer than ``tol`` of the vertices changed label.
    Each round is a handful of vectorised O(nnz) scipy/numpy passes.
    """
    _check_square(adj)
    return _label_propagation(
        _symmetric_pattern(adj), max_iterations, update_fraction, tol, seed
    )


def _label_propagation(
    pattern: sp.csr_matrix, max_iterations: int, update_fraction: float, tol: float, seed: int
) -> np.ndarray:
    n = pattern.shape[0]
    indptr, indices = pattern.indptr, pattern.indices
    degree = np.diff(indptr)
    has_neighbours = degree > 0
    rows_with = np.flatnonzero(has_neighbours)
    rng = np.random.default_rng(seed)
    labels = np.arange(n, dtype=np.int64)
    for _ in range(max_iterations):
        best = _most_frequent_neighbour_label(indptr, indices, labels, rows_with, rng)
        moving = has_neighbours & (rng.random(n) < update_fraction) & (best != labels)
        labels = np.where(moving, best, labels)
        if moving.sum() < tol * n:
            break
    return labels


def _most_frequent_neighbour_label(
    indptr: np.ndarray,
    indices: np.ndarray,
    labels: np.ndarray,
    rows_with: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """Per row, the label that occurs most often among its neighbours (random tie-break).

    Builds the row x label count matrix in CSR (scipy sums the duplicates in C), adds a
    random priority below 1 per label so that the maximum is unique, and takes each
    row's maximum with one ``reduceat``. Rows without neighbours keep their own label.
    The count matrix gets fresh arrays: ``sum_duplicates`` compacts them in place.
    """
    n = indptr.size - 1
    ones = np.ones(indices.size, dtype=np.float32)
    counts = sp.csr_matrix((ones, labels[indices], indptr.copy()), shape=(n, n))
    counts.sum_duplicates()
    priority = rng.random(n, dtype=np.float32) * np.float32(0.5)
    score = counts.data + priority[counts.indices]
    row_of = np.repeat(np.arange(n), np.diff(counts.indptr))
    row_max = np.zeros(n, dtype=np.float32)
    row_max[rows_with] = np.maximum.reduceat(score, counts.indptr[rows_with])
    winner = score == row_max[row_of]
    best = labels.copy()
    best[row_of[winner]] = counts.indices[winner]
    return best


_ORDERINGS: dict[str, Callable[[CSRMatrix], torch.Tensor]] = {
    "degree": degree_order,
    "rcm": rcm_order,
    "community": community_order,
}
METHODS: tuple[str, ...] = ("none", *_ORDERINGS)


def locality_order(adj: CSRMatrix, method: Method = "community") -> torch.Tensor:
    """The permutation of ``method`` (``"none"`` gives the identity)."""
    if method == "none":
        _check_square(adj)
        return torch.arange(adj.shape[0], device=adj.device)
    if method not in _ORDERINGS:
        raise ValueError(f"unknown reordering {method!r}; choose one of {', '.join(METHODS)}")
    return _ORDERINGS[method](adj)


def inverse_permutation(perm: torch.Tensor) -> torch.Tensor:
    """``inv`` with ``inv[perm[i]] == i``: old id -> new id."""
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel(), device=perm.device)
    return inv


def is_permutation(perm: torch.Tensor, n: int) -> bool:
    """Whether ``perm`` holds every id in ``[0, n)`` exactly once."""
    if perm.dim() != 1 or perm.numel() != n or perm.dtype != torch.long:
        return False
    return bool(torch.equal(torch.sort(perm).values, torch.arange(n, device=perm.device)))


@dataclass(frozen=True)
class Reordering:
    """A vertex relabelling and the two directions of moving per-vertex data through it.

    Attributes:
        perm: new id -> old id (new vertex ``i`` is old vertex ``perm[i]``).
        inverse: old id -> new id.
        method: the ordering that produced it.
    """

    perm: torch.Tensor
    inverse: torch.Tensor
    method: str

    @classmethod
    def from_perm(cls, perm: torch.Tensor, method: str = "custom") -> Reordering:
        perm = torch.as_tensor(perm).long()
        if not is_permutation(perm, perm.numel()):
            raise ShapeError("not a permutation: every id in [0, n) must appear exactly once")
        return cls(perm, inverse_permutation(perm), method)

    def to_new(self, data: torch.Tensor) -> torch.Tensor:
        """Rows of per-vertex data (features, labels, masks) from old order to new order."""
        return data.index_select(0, self.perm.to(data.device))

    def to_old(self, data: torch.Tensor) -> torch.Tensor:
        """Rows of per-vertex results (logits, embeddings) back to the caller's order."""
        return data.index_select(0, self.inverse.to(data.device))

    def edge_index_to_new(self, edge_index: torch.Tensor) -> torch.Tensor:
        """Relabel a ``[2, E]`` edge list (e.g. for a peer library) into the new ids."""
        return self.inverse.to(edge_index.device)[edge_index]

    def apply(self, adj: CSRMatrix) -> CSRMatrix:
        """``P A P^T`` in the new ids (keeps the ``symmetric`` flag).

        Equal to :meth:`CSRMatrix.permute`, but several times faster: the new layout is
        worked out on the CPU by scipy (moving whole rows, then sorting each short row
        by its relabelled columns) instead of a global sort of all nonzeros, and only
        the values are gathered in torch, so they stay on their device and in autograd.
        """
        _check_square(adj)
        if self.perm.numel() != adj.shape[0]:
            raise ShapeError(f"permutation of {self.perm.numel()} ids for a {adj.shape} matrix")
        n, nnz = adj.shape[0], adj.nnz
        positions = sp.csr_matrix(
            (np.arange(nnz, dtype=np.int64), adj.col.cpu().numpy(), adj.crow.cpu().numpy()),
            shape=adj.shape,
        )[self.perm.cpu().numpy()]
        positions.indices = self.inverse.cpu().numpy()[positions.indices]
        positions.has_sorted_indices = False
        positions.sort_indices()
        take = torch.from_numpy(positions.data).to(adj.device)
        return CSRMatrix(
            torch.from_numpy(positions.indptr.astype(np.int64)).to(adj.device),
            torch.from_numpy(positions.indices.astype(np.int64)).to(adj.device),
            adj.val[take], (n, n), adj.symmetric,
        )


def reorder(adj: CSRMatrix, method: Method = "community") -> tuple[CSRMatrix, Reordering]:
    """Reorder once at load time: the permuted matrix and the :class:`Reordering`.

    Move node data with ``ordering.to_new(x)`` and results back with ``ordering.to_old``.
    """
    perm = locality_order(adj, method)
    ordering = Reordering(perm, inverse_permutation(perm), method)
    return ordering.apply(adj), ordering


class Reordered:
    """An operator in the caller's vertex order that multiplies with a reordered CSR.

    ``matmul(x)`` gathers ``x`` into the new order, runs the (faster) SpMM there and
    gathers the result back: two extra row permutations per product, differentiable.
    Reordering node data once with :func:`reorder` avoids even those.
    """

    def __init__(self, adj: CSRMatrix, method: Method = "community"):
        self.adj, self.ordering = reorder(adj, method)

    @property
    def shape(self) -> tuple[int, int]:
        return self.adj.shape

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        return self.ordering.to_old(self.adj.matmul(self.ordering.to_new(x)))

    __matmul__ = matmul

    def __repr__(self) -> str:
        return f"Reordered({self.adj!r}, method={self.ordering.method!r})"


# ---------------------------------------------------------------------- helpers
def _check_square(adj: CSRMatrix) -> None:
    if adj.shape[0] != adj.shape[1]:
        raise ShapeError(f"reordering needs a square adjacency, got {adj.shape}")


def _rcm(pattern: sp.csr_matrix) -> np.ndarray:
    return reverse_cuthill_mckee(pattern, symmetric_mode=True).astype(np.int64)


def _symmetric_pattern(adj: CSRMatrix) -> sp.csr_matrix:
    """Pattern of ``A + A^T`` as scipy CSR (values are all one).

    Orderings are about which vertices touch, not about edge direction or weight; the
    transpose is skipped when the matrix is flagged symmetric.
    """
    n = adj.shape[0]
    indptr = adj.crow.cpu().numpy()
    indices = adj.col.cpu().numpy()
    ones = np.ones(indices.size, dtype=np.float32)
    pattern = sp.csr_matrix((ones, indices, indptr), shape=(n, n))
    if not adj.symmetric:
        pattern = (pattern + pattern.T).tocsr()
        pattern.data[:] = 1.0
    return pattern
