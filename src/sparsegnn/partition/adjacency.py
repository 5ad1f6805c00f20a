"""The symmetric, loop-free adjacency structure every partitioner works on.

Partitioners only need which vertices touch which, so a graph is reduced once to the
``(indptr, indices)`` arrays of its symmetric pattern without self loops or duplicate
edges (the form METIS and KaHIP read). Self loops never cross a part boundary, so
dropping them changes no communication volume.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch


@dataclass(frozen=True)
class Adjacency:
    """Symmetric CSR pattern: neighbours of v are ``indices[indptr[v]:indptr[v + 1]]``."""

    indptr: np.ndarray
    indices: np.ndarray

    @property
    def num_nodes(self) -> int:
        return len(self.indptr) - 1

    @property
    def num_edges(self) -> int:
        """Directed edges (each undirected edge counts twice)."""
        return len(self.indices)

    def sources(self) -> np.ndarray:
        """The source vertex of every stored edge, aligned with ``indices``."""
        return np.repeat(np.arange(self.num_nodes, dtype=np.int64), np.diff(self.indptr))

    @classmethod
    def from_edge_index(cls, edge_index: torch.Tensor | np.ndarray, num_nodes: int) -> Adjacency:
        """Symmetrise, drop self loops and duplicates."""
        e = np.asarray(edge_index, dtype=np.int64)
        keep = e[0] != e[1]
        src, dst = e[0][keep], e[1][keep]
        ones = np.ones(2 * len(src), dtype=np.int32)
        mat = sp.csr_matrix(
            (ones, (np.concatenate([src, dst]), np.concatenate([dst, src]))),
            shape=(num_nodes, num_nodes),
        )
        mat.sum_duplicates()
        return cls(mat.indptr.astype(np.int64), mat.indices.astype(np.int64))
