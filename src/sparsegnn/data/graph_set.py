"""A data set of many small graphs, stored as one block-diagonal adjacency.

Whole-graph classification (molecules, proteins: TU data sets, OGB ``ogbg-*``) trains on
thousands of graphs of tens of nodes. Keeping them as a Python list of graph objects
makes every minibatch a Python loop over graphs (PyG's collate); keeping them as one
block-diagonal CSR over all nodes, graph ``g`` owning the node range
``node_ptr[g]:node_ptr[g + 1]`` (and therefore a contiguous range of the CSR's entries),
makes a minibatch a handful of vectorised gathers
(:func:`sparsegnn.sparse.graph_batch.collate_graphs`).

Every reader ends in :meth:`GraphSet.check`, so a bad set is refused in one line when it
is read: mixed feature widths, a label outside the classes, a graph with no nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from sparsegnn.data.graph import check_features
from sparsegnn.errors import DataFormatError, InvalidValueError


@dataclass
class GraphSet:
    """``num_graphs`` graphs with node features and one class label each.

    Attributes:
        crow, col: the block-diagonal adjacency over all nodes in CSR form (int64;
            ``A[dst, src]``, columns sorted and unique within a row, no self-loops), so
            row ``i`` lists the in-neighbours of node ``i``.
        node_ptr: ``[num_graphs + 1]`` int64, graph ``g``'s nodes are
            ``node_ptr[g]:node_ptr[g + 1]``.
        x: ``[num_nodes, F]`` float32 node features.
        y: ``[num_graphs]`` int64 class ids in ``[0, num_classes)``.
        undirected: every edge is stored in both directions (the adjacency is
            symmetric), which lets SpMM's backward reuse the forward operator.
    """

    crow: torch.Tensor
    col: torch.Tensor
    node_ptr: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    num_classes: int
    name: str = "graphs"
    undirected: bool = True
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def num_graphs(self) -> int:
        return int(self.node_ptr.numel()) - 1

    @property
    def num_nodes(self) -> int:
        return int(self.node_ptr[-1])

    @property
    def num_edges(self) -> int:
        return int(self.col.numel())

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])

    def graph_sizes(self) -> torch.Tensor:
        """Nodes per graph, ``[num_graphs]``."""
        return self.node_ptr[1:] - self.node_ptr[:-1]

    def counts(self) -> dict[str, object]:
        """What ``data info`` shows first."""
        sizes = self.graph_sizes().double()
        return {"name": self.name, "graphs": self.num_graphs, "nodes": self.num_nodes,
                "edges": self.num_edges, "features": self.num_features,
                "classes": self.num_classes,
                "mean_nodes": float(sizes.mean()) if sizes.numel() else 0.0,
                "class_counts": torch.bincount(self.y, minlength=self.num_classes).tolist(),
                **({"read_from": where} if (where := self.read_from()) else {})}

    def read_from(self) -> str | None:
        """The folder or file the set was read from, with the package that ships it where
        it came from one (:mod:`sparsegnn.data.packaged`), so a report says which copy
        it trained on; None for a generated set."""
        folder = self.meta.get("folder")
        if folder is None:
            return None
        origin = self.meta.get("origin")
        return f"{folder} ({origin})" if origin else str(folder)

    def check(self, *, allow_empty: bool = False) -> None:
        """Refuse an inconsistent set in one line naming the graph (or node) at fault.

        Empty graphs are refused unless ``allow_empty``: a graph without nodes pools to
        a zero vector (its max-pool is undefined) and is almost always a reader's
        off-by-one rather than data.
        """
        g, n = self.num_graphs, self.num_nodes
        if g < 1:
            raise DataFormatError(f"{self.name}: holds no graphs")
        if self.y.shape != (g,):
            raise DataFormatError(f"{self.name}: {self.y.numel()} labels for {g} graphs")
        if self.x.dim() != 2 or self.x.shape[0] != n:
            raise DataFormatError(f"{self.name}: features of shape {list(self.x.shape)} for "
                                  f"{n} nodes")
        if self.crow.numel() != n + 1 or int(self.crow[-1]) != self.col.numel():
            raise DataFormatError(f"{self.name}: adjacency does not cover the {n} nodes")
        check_labels_in_classes(self.y, self.num_classes, self.name)
        sizes = self.graph_sizes()
        if bool((sizes < 0).any()):
            raise DataFormatError(f"{self.name}: node_ptr is not increasing")
        if not allow_empty and bool((sizes == 0).any()):
            first = int(torch.nonzero(sizes == 0)[0])
            raise DataFormatError(
                f"{self.name}: graph {first} (of {g}) has no nodes; drop it or pass "
                "allow_empty=True")
        _check_within_graphs(self)
        check_features(self.x.numpy(), self.name)


def check_labels_in_classes(y: torch.Tensor, num_classes: int, where: str) -> None:
    """Refuse a graph label outside ``0..num_classes - 1``, naming the graph."""
    bad = (y < 0) | (y >= num_classes)
    if bool(bad.any()):
        i = int(torch.nonzero(bad)[0])
        raise InvalidValueError(
            f"{where}: graph {i} has label {int(y[i])}, outside the {num_classes} classes "
            f"0..{num_classes - 1}")


def _check_within_graphs(s: GraphSet) -> None:
    """Every edge joins two nodes of the same graph (the adjacency is block-diagonal)."""
    if s.num_edges == 0:
        return
    rows = torch.repeat_interleave(torch.arange(s.num_nodes), s.crow[1:] - s.crow[:-1])
    owner = torch.repeat_interleave(torch.arange(s.num_graphs), s.graph_sizes())
    if int(s.col.min()) < 0 or int(s.col.max()) >= s.num_nodes:
        raise DataFormatError(f"{s.name}: an edge names a node outside 0..{s.num_nodes - 1}")
    cross = owner[rows] != owner[s.col]
    if bool(cross.any()):
        e = int(torch.nonzero(cross)[0])
        raise DataFormatError(f"{s.name}: edge {int(s.col[e])} -> {int(rows[e])} joins "
                              f"graphs {int(owner[s.col[e]])} and {int(owner[rows[e]])}")


def from_arrays(src: np.ndarray, dst: np.ndarray, graph_of_node: np.ndarray, x: np.ndarray,
                y: np.ndarray, *, name: str, num_classes: int | None = None,
                allow_empty: bool = False, num_graphs: int | None = None) -> GraphSet:
    """A checked :class:`GraphSet` from global edge endpoints (0-based node ids), each
    node's graph id (non-decreasing: nodes of a graph are contiguous, as TU and OGB store
    them) and per-node features / per-graph labels. Self-loops and repeated edges are
    dropped (PyG's ``TUDataset`` does the same with ``remove_self_loops`` + ``coalesce``)."""
    n = int(graph_of_node.shape[0])
    g = int(num_graphs if num_graphs is not None else y.shape[0])
    if n and (np.diff(graph_of_node) < 0).any():
        raise DataFormatError(f"{name}: nodes of a graph are not contiguous (graph ids "
                              "must not decrease from one node to the next)")
    if n and (graph_of_node.min() < 0 or graph_of_node.max() >= g):
        raise DataFormatError(f"{name}: a node's graph id is outside 0..{g - 1}")
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
        raise DataFormatError(f"{name}: an edge names a node outside 0..{n - 1}")
    crow, col = _csr(src.astype(np.int64), dst.astype(np.int64), n)
    node_ptr = np.zeros(g + 1, dtype=np.int64)
    np.cumsum(np.bincount(graph_of_node, minlength=g), out=node_ptr[1:])
    out = GraphSet(crow=torch.from_numpy(crow), col=torch.from_numpy(col),
                   node_ptr=torch.from_numpy(node_ptr),
                   x=torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)),
                   y=torch.from_numpy(np.asarray(y, dtype=np.int64)),
                   num_classes=int(num_classes if num_classes is not None
                                   else (int(y.max()) + 1 if y.size else 0)),
                   name=name, undirected=_symmetric(src, dst, n))
    out.check(allow_empty=allow_empty)
    return out


def from_graph_list(graphs: Sequence[tuple[np.ndarray, np.ndarray, int]], *, name: str,
                    num_classes: int | None = None, allow_empty: bool = False) -> GraphSet:
    """A :class:`GraphSet` from ``(edge_index [2, E] local ids, x [n, F], label)`` per
    graph; graphs whose feature widths differ are refused, naming the first that does."""
    if not graphs:
        raise DataFormatError(f"{name}: holds no graphs")
    width = _width(graphs[0][1])
    for i, (_, x, _) in enumerate(graphs):
        if _width(x) != width:
            raise DataFormatError(f"{name}: graph {i} has {_width(x)} node features, graph "
                                  f"0 has {width}; every graph needs the same width")
    sizes = np.array([np.asarray(x).shape[0] for _, x, _ in graphs], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    edges = [np.asarray(e, dtype=np.int64).reshape(2, -1) + off
             for (e, _, _), off in zip(graphs, offsets, strict=True)]
    ei = np.concatenate(edges, axis=1) if edges else np.zeros((2, 0), np.int64)
    x = np.concatenate([np.asarray(x, np.float32).reshape(-1, width) for _, x, _ in graphs])
    y = np.array([int(label) for _, _, label in graphs], dtype=np.int64)
    return from_arrays(ei[0], ei[1], np.repeat(np.arange(len(graphs)), sizes), x, y,
                       name=name, num_classes=num_classes, allow_empty=allow_empty)


def _width(x: np.ndarray) -> int:
    x = np.asarray(x)
    return int(x.shape[1]) if x.ndim == 2 else 1


def _csr(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows = destinations, sorted unique columns, self-loops dropped."""
    keep = src != dst
    key = np.unique(dst[keep] * max(n, 1) + src[keep])
    rows, col = key // max(n, 1), key % max(n, 1)
    crow = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=crow[1:])
    return crow, col.astype(np.int64)


def _symmetric(src: np.ndarray, dst: np.ndarray, n: int) -> bool:
    keep = src != dst
    fwd = np.unique(src[keep] * max(n, 1) + dst[keep])
    bwd = np.unique(dst[keep] * max(n, 1) + src[keep])
    return bool(fwd.shape == bwd.shape and (fwd == bwd).all())


def one_hot_columns(labels: np.ndarray) -> np.ndarray:
    """One-hot node labels, one block per label column, each shifted to start at 0 and
    as wide as its largest value + 1: PyG ``TUDataset``'s default node features."""
    labels = labels.reshape(labels.shape[0], -1)
    blocks = []
    for c in range(labels.shape[1]):
        col = labels[:, c] - labels[:, c].min()
        block = np.zeros((labels.shape[0], int(col.max()) + 1), dtype=np.float32)
        block[np.arange(labels.shape[0]), col] = 1.0
        blocks.append(block)
    return np.concatenate(blocks, axis=1)


def stratified_folds(y: torch.Tensor, k: int = 10, seed: int = 0) -> list[torch.Tensor]:
    """``k`` disjoint test folds covering every graph, each with (within one graph) the
    same share of every class: the GIN paper's 10-fold protocol. Each class is shuffled
    by ``seed`` and dealt round-robin, the next class starting at the fold after the last
    one dealt, so fold sizes differ by at most one."""
    labels = y.cpu().numpy()
    if k < 2 or k > labels.shape[0]:
        raise InvalidValueError(f"{k} folds for {labels.shape[0]} graphs; need 2..graphs")
    rng = np.random.default_rng(seed)
    order = np.lexsort((rng.random(labels.shape[0]), labels))
    fold_of = np.empty(labels.shape[0], dtype=np.int64)
    fold_of[order] = np.arange(labels.shape[0]) % k
    return [torch.from_numpy(np.flatnonzero(fold_of == f)) for f in range(k)]


def random_graph_set(num_graphs: int, *, min_nodes: int = 10, max_nodes: int = 30,
                     degree: float = 4.0, num_labels: int = 8, seed: int = 0,
                     name: str = "random-graphs") -> GraphSet:
    """A seeded synthetic set for tests and benchmarks: undirected random graphs of
    ``min_nodes..max_nodes`` nodes with one-hot node labels; class 1 graphs are denser
    (1.5x the degree) and favour the lower half of the node labels, so a GNN can learn
    the classes but a constant guess cannot."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(min_nodes, max_nodes + 1, num_graphs)
    y = rng.integers(0, 2, num_graphs)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    per_graph = np.maximum(1, np.rint(sizes * degree * (1 + 0.5 * y) / 2)).astype(np.int64)
    owner = np.repeat(np.arange(num_graphs), per_graph)
    a = (rng.random(owner.size) * sizes[owner]).astype(np.int64) + offsets[owner]
    b = (rng.random(owner.size) * sizes[owner]).astype(np.int64) + offsets[owner]
    n = int(offsets[-1])
    graph_of_node = np.repeat(np.arange(num_graphs), sizes)
    bias = np.where(y[graph_of_node] == 1, num_labels // 2, num_labels)
    labels = (rng.random(n) * bias).astype(np.int64)
    x = np.zeros((n, num_labels), dtype=np.float32)
    x[np.arange(n), labels] = 1.0
    return from_arrays(np.r_[a, b], np.r_[b, a], graph_of_node, x, y, name=name,
                       num_classes=2)
