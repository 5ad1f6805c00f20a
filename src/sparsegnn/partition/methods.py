"""Graph partitioners: vertex -> part vectors for the distributed trainer.

Every partitioner returns an int64 vector ``parts`` with one id in ``[0, nparts)`` per
vertex, which :meth:`sparsegnn.distributed.BlockPartition.from_parts` turns into a
relabelling plus contiguous block boundaries. Part sizes respect
``ceil((1 + imbalance) * n / nparts)`` (block and random are exactly even).

* ``block``: contiguous id ranges, the layout the trainer uses by default.
* ``random``: a seeded random balanced assignment, the worst case for locality.
* ``metis`` (pymetis) and ``kahip`` (the kahip wheel): minimum edge cut, which makes the
  off-diagonal blocks of A sparse and so the sparsity-aware volume small.
* ``balanced``: METIS refined by :func:`sparsegnn.partition.balance.refine_max_volume`
  to lower the *maximum* per-part volume, which is what bounds an SpMM's time, with the
  total kept within 1.1x METIS's.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sparsegnn.errors import SparseGNNError
from sparsegnn.names import PARTITIONERS
from sparsegnn.optional import require
from sparsegnn.partition.adjacency import Adjacency
from sparsegnn.partition.balance import refine_max_volume
from sparsegnn.partition.volume import part_volume


class PartitionError(SparseGNNError, ValueError):
    """An unknown partitioner or a bad part count (a missing package is a
    :class:`~sparsegnn.errors.MissingDependencyError`)."""


def block_parts(adj: Adjacency, nparts: int, seed: int = 0, imbalance: float = 0.03) -> np.ndarray:
    """Contiguous ranges whose sizes differ by at most one, the larger ones first: the
    even split training uses for ``block`` (seed and imbalance unused)."""
    base, extra = divmod(adj.num_nodes, nparts)
    sizes = np.full(nparts, base, dtype=np.int64)
    sizes[:extra] += 1
    return np.repeat(np.arange(nparts, dtype=np.int64), sizes)


def random_parts(
    adj: Adjacency, nparts: int, seed: int = 0, imbalance: float = 0.03
) -> np.ndarray:
    """A random permutation of the block assignment: even sizes, no locality."""
    return np.random.default_rng(seed).permutation(block_parts(adj, nparts))


def metis_parts(adj: Adjacency, nparts: int, seed: int = 0, imbalance: float = 0.03) -> np.ndarray:
    """METIS k-way, minimum edge cut (pymetis, the ``partition`` extra)."""
    if nparts == 1:
        return np.zeros(adj.num_nodes, dtype=np.int64)
    pymetis = require("pymetis", "for the metis partitioner")
    opts = pymetis.Options(seed=seed, ufactor=max(1, round(imbalance * 1000)))
    graph = pymetis.CSRAdjacency(adj.indptr, adj.indices)
    _, parts = pymetis.part_graph(nparts, graph, options=opts)
    return np.asarray(parts, dtype=np.int64)


def kahip_parts(adj: Adjacency, nparts: int, seed: int = 0, imbalance: float = 0.03) -> np.ndarray:
    """KaHIP KaFFPa (``fast`` mode), minimum edge cut (the kahip wheel, ``partition`` extra)."""
    if nparts == 1:
        return np.zeros(adj.num_nodes, dtype=np.int64)
    kahip = require("kahip", "for the kahip partitioner")
    fast = 0  # KaFFPa's FAST preconfiguration: seconds on million-edge graphs
    _, parts = kahip.kaffpa(
        [], adj.indptr.tolist(), [], adj.indices.tolist(), nparts, imbalance, True, seed, fast
    )
    return np.asarray(parts, dtype=np.int64)


def balanced_parts(
    adj: Adjacency, nparts: int, seed: int = 0, imbalance: float = 0.03
) -> np.ndarray:
    """METIS, then vertex moves that lower the maximum per-part send/receive volume.

    The moves start from the better (lower maximum, then lower total) of two METIS runs:
    with the caller's size tolerance, and with the tightest (0.1%). Given room to fill
    parts unevenly METIS can pile high-degree vertices or whole communities into a few
    parts; the tight run cannot, and leaves every part room to take vertices in, but on
    some graphs it costs more total volume than it saves at the maximum. The refinement
    (:func:`sparsegnn.partition.balance.refine_max_volume`) works under the caller's
    ``imbalance`` and may let the total volume grow to 1.1x that of the plain ``metis``
    partition, which is returned instead when the refinement does not beat its maximum.
    """
    plain = metis_parts(adj, nparts, seed, imbalance)
    tight = metis_parts(adj, nparts, seed, 0.001)
    reference = part_volume(adj.indptr, adj.indices, plain, nparts)
    tight_volume = part_volume(adj.indptr, adj.indices, tight, nparts)
    start = min((reference.max_per_rank, reference.total, 0),
                (tight_volume.max_per_rank, tight_volume.total, 1))
    refined = refine_max_volume(adj, (plain, tight)[start[2]], nparts, imbalance,
                                max_total=1.1 * reference.total, seed=seed)
    after = part_volume(adj.indptr, adj.indices, refined, nparts)
    better = after.max_per_rank < reference.max_per_rank and after.total <= 1.1 * reference.total
    return refined if better else plain


_METHODS: dict[str, Callable[..., np.ndarray]] = {
    "block": block_parts, "random": random_parts, "metis": metis_parts,
    "kahip": kahip_parts, "balanced": balanced_parts,
}


def partition(
    adj: Adjacency, method: str, nparts: int, *, seed: int = 0, imbalance: float = 0.03
) -> np.ndarray:
    """``parts`` (vertex -> part id) of ``adj`` by the named partitioner."""
    if method not in _METHODS:
        raise PartitionError(
            f"unknown partitioner {method!r}; choose one of {', '.join(PARTITIONERS)}"
        )
    if nparts < 1:
        raise PartitionError(f"need at least one part, got {nparts}")
    return _METHODS[method](adj, nparts, seed, imbalance)
