"""A typed stochastic block model: a heterogeneous graph of any size, for scaling R-GCN.

Every node of every type belongs to one of ``blocks`` communities; the target type's
community is its label. Each edge type ``(s, r, d)`` draws ``degree * num_nodes[s]``
edges from random sources of type ``s``; with probability ``p_in[r]`` the destination is
a random type-``d`` node of the source's community, otherwise any type-``d`` node. Giving
relations different ``p_in`` makes some informative and some noise, which is what a
relational model has to learn to tell apart. Vectorised numpy, fully determined by
``seed``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from sparsegnn.data.hetero import EdgeType, HeteroGraph
from sparsegnn.data.limits import require_memory
from sparsegnn.data.splits import stratified_split
from sparsegnn.errors import InvalidValueError

# Default shape (a paper/author/subject-like schema): target "a" with two other types.
DEFAULT_SHARES = {"a": 0.4, "b": 0.45, "c": 0.15}
DEFAULT_EDGES: tuple[EdgeType, ...] = (("a", "cites", "a"), ("a", "by", "b"),
                                       ("a", "about", "c"), ("b", "knows", "b"))
DEFAULT_P_IN = {"cites": 0.7, "by": 0.6, "about": 0.8, "knows": 0.2}


def typed_sbm(num_nodes: int | Mapping[str, int] = 4096,
              edge_types: Sequence[EdgeType] = DEFAULT_EDGES, *, blocks: int = 4,
              degree: float = 4.0, p_in: float | Mapping[str, float] | None = None,
              num_features: int = 0, target: str | None = None, seed: int = 0,
              split: Sequence[float] = (0.1, 0.1, 0.8)) -> HeteroGraph:
    """A seeded typed SBM. ``num_nodes`` is a total (shared out as :data:`DEFAULT_SHARES`)
    or a count per type; ``target`` defaults to the first type. ``num_features > 0`` gives
    every type noisy features centred on its community (one width for all types)."""
    counts = _counts(num_nodes)
    target = target or next(iter(counts))
    _check(counts, edge_types, blocks, degree, target)
    require_memory(int(sum(degree * counts[s] for s, _, _ in edge_types)) * 32
                   + sum(counts.values()) * (8 + 4 * num_features), "typed_sbm")
    rng = np.random.default_rng(seed)
    block = {t: rng.integers(0, blocks, n) for t, n in counts.items()}
    members = {t: _members(b, blocks) for t, b in block.items()}
    probs = _p_in(p_in, edge_types)
    edges = {et: torch.from_numpy(_edges(rng, et, counts, block, members, degree, probs[et[1]]))
             for et in edge_types}
    g = HeteroGraph(num_nodes=counts, edge_index=edges, target=target, name="typed_sbm",
                    meta={"source": "typed_sbm", "blocks": blocks, "degree": degree,
                          "seed": seed})
    if num_features:
        centres = rng.normal(size=(blocks, num_features)).astype(np.float32)
        for t, b in block.items():
            noise = rng.normal(scale=2.0, size=(counts[t], num_features)).astype(np.float32)
            g.x[t] = torch.from_numpy(centres[b] + noise)
    g.y = torch.from_numpy(block[target].astype(np.int64))
    g.train_mask, g.val_mask, g.test_mask = stratified_split(g.y, split, seed=seed)
    return g.validate()


def _counts(num_nodes: int | Mapping[str, int]) -> dict[str, int]:
    if isinstance(num_nodes, Mapping):
        return {str(t): int(n) for t, n in num_nodes.items()}
    if int(num_nodes) < len(DEFAULT_SHARES):
        raise InvalidValueError(f"typed_sbm needs at least {len(DEFAULT_SHARES)} nodes, got "
                                f"{num_nodes}")
    out = {t: max(1, int(share * int(num_nodes))) for t, share in DEFAULT_SHARES.items()}
    first = next(iter(out))
    out[first] += int(num_nodes) - sum(out.values())
    return out


def _check(counts: dict[str, int], edge_types: Sequence[EdgeType], blocks: int,
           degree: float, target: str) -> None:
    if blocks < 1 or not degree >= 0 or any(n < 1 for n in counts.values()):
        raise InvalidValueError(f"typed_sbm needs blocks >= 1, degree >= 0 and every type "
                                f"non-empty; got blocks={blocks}, degree={degree}, {counts}")
    unknown = sorted({t for et in edge_types for t in (et[0], et[2])} - set(counts))
    if unknown or target not in counts:
        raise InvalidValueError(f"typed_sbm: unknown node type "
                                f"{(unknown or [target])[0]!r} (types: {', '.join(counts)})")


def _p_in(p_in: float | Mapping[str, float] | None,
          edge_types: Sequence[EdgeType]) -> dict[str, float]:
    if p_in is None:
        return {r: DEFAULT_P_IN.get(r, 0.5) for _, r, _ in edge_types}
    if isinstance(p_in, Mapping):
        return {r: float(p_in.get(r, 0.5)) for _, r, _ in edge_types}
    return {r: float(p_in) for _, r, _ in edge_types}


def _members(block: np.ndarray, blocks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nodes sorted by community, each community's first position and size."""
    order = np.argsort(block, kind="stable")
    sizes = np.bincount(block, minlength=blocks)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return order, starts, sizes


def _edges(rng: np.random.Generator, etype: EdgeType, counts: dict[str, int],
           block: dict[str, np.ndarray], members: dict[str, tuple[np.ndarray, ...]],
           degree: float, p_in: float) -> np.ndarray:
    """``[2, E]`` local ids of one edge type: intra-community with probability ``p_in``."""
    s, _, d = etype
    num = round(degree * counts[s])
    src = rng.integers(0, counts[s], num)
    dst = rng.integers(0, counts[d], num)
    order, starts, sizes = members[d]
    b = block[s][src] % len(sizes)
    inside = (rng.random(num) < p_in) & (sizes[b] > 0)
    pick = starts[b[inside]] + (rng.random(int(inside.sum())) * sizes[b[inside]]).astype(np.int64)
    dst[inside] = order[pick]
    return np.stack([src, dst]).astype(np.int64)
