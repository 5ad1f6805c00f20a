"""Synthetic graphs of any size, for scaling benchmarks and tests.

All three generators are vectorised numpy, sample edges in fixed-size chunks (memory
proportional to the edge count, not more) and are fully determined by ``seed``. R-MAT gives
the skewed degrees of real web and social graphs; the stochastic block model gives
learnable labels with tunable community structure; the uniform graph has neither skew nor
locality and is the worst case for caches. R-MAT and SBM number their vertices in random
order by default: a generator that emits community-contiguous ids would hand locality
for free to the very reordering and partitioning code the benchmarks are meant to measure.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from sparsegnn.data.edges import directed_edge_index, undirected_edge_index
from sparsegnn.data.graph import GraphData
from sparsegnn.data.limits import require_memory
from sparsegnn.data.splits import stratified_split
from sparsegnn.errors import DataFormatError, InvalidValueError

# Edges sampled per step: large enough to amortise numpy call overhead, small enough that
# the per-step temporaries stay around 50 MiB.
_CHUNK = 1 << 21


def rmat(
    scale: int,
    edge_factor: int = 16,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    *,
    seed: int = 0,
    undirected: bool = True,
    shuffle: bool = True,
    num_features: int = 0,
    progress: bool = False,
) -> GraphData:
    """Recursive-matrix (Graph500-style) graph on ``2**scale`` vertices.

    ``edge_factor * 2**scale`` edges are sampled by descending ``scale`` levels of the
    adjacency matrix, picking quadrant (top-left, top-right, bottom-left, bottom-right) with
    probability (a, b, c, 1-a-b-c). Self-loops and duplicates are dropped, so the result has
    somewhat fewer edges; ``undirected`` stores both directions. ``shuffle`` relabels
    vertices at random, because unpermuted R-MAT puts all hubs at low ids.
    ``num_features > 0`` adds standard-normal features (no labels).
    """
    d = 1.0 - a - b - c
    if not 0 <= scale <= 40 or edge_factor < 0 or not all(
            math.isfinite(p) and p >= 0 for p in (a, b, c, d)):
        raise InvalidValueError(
            f"rmat needs 0 <= scale <= 40, edge_factor >= 0 and non-negative a, b, c with "
            f"a + b + c <= 1; got scale={scale}, edge_factor={edge_factor}, a={a}, b={b}, c={c}"
        )
    num_nodes = 1 << scale
    num_samples = edge_factor * num_nodes
    # int32 ids while they fit: the samples (1 GiB at scale 22 as int64) live through the
    # whole edge build, which reads int32 without widening it.
    ids = np.int32 if scale <= 31 else np.int64
    id_bytes = np.dtype(ids).itemsize
    require_memory(
        num_samples * (2 * id_bytes + _edge_build_bytes(undirected))
        + num_nodes * (8 + 4 * num_features),
        f"rmat with scale={scale}, edge_factor={edge_factor}",
    )
    rng = _rng(seed)
    src = np.empty(num_samples, dtype=ids)
    dst = np.empty(num_samples, dtype=ids)
    for lo, hi in _chunk_ranges(num_samples, progress, "rmat"):
        src[lo:hi], dst[lo:hi] = _rmat_chunk(rng, hi - lo, scale, a, b, c)
    if shuffle:
        perm = rng.permutation(num_nodes)
        _relabel(src, perm)
        _relabel(dst, perm)
    build = undirected_edge_index if undirected else directed_edge_index
    return GraphData(
        edge_index=build(src, dst, num_nodes),
        num_nodes=num_nodes,
        x=_random_features(rng, num_nodes, num_features),
        name=f"rmat:scale={scale},edge_factor={edge_factor},seed={seed}",
        meta={"generator": "rmat", "scale": scale, "edge_factor": edge_factor, "a": a, "b": b,
              "c": c, "seed": seed, "undirected": undirected, "shuffle": shuffle},
    )


def sbm(
    num_nodes: int,
    num_blocks: int,
    avg_degree: float,
    mixing: float = 0.1,
    *,
    powerlaw: float = 0.0,
    num_features: int = 32,
    feature_noise: float = 3.0,
    split: Sequence[float] = (0.6, 0.2, 0.2),
    seed: int = 0,
    shuffle: bool = True,
    progress: bool = False,
) -> GraphData:
    """Stochastic block model with labels a GNN can learn.

    Vertices fall into ``num_blocks`` near-equal blocks (the labels). Each of the
    ``num_nodes * avg_degree / 2`` sampled edges joins a uniform vertex to a uniform vertex
    of its own block, or with probability ``mixing`` of another block, so about
    ``1 - mixing`` of the edges stay inside a block. ``powerlaw = gamma > 1`` makes it
    degree-corrected (Karrer and Newman): both ends are drawn in proportion to Pareto
    propensities with tail exponent gamma instead of uniformly, so degrees follow a power
    law inside every community, as in real graphs (hubs, and the skewed communication
    volumes they cause). Features are the block's random mean
    (standard normal) plus Gaussian noise of std ``feature_noise``: noisy enough that
    averaging over neighbours helps, which is what makes the graph worth a GNN.
    Masks are a stratified random ``split``. ``shuffle`` numbers vertices in random order
    rather than block by block.
    """
    if num_nodes < 1 or not 1 <= num_blocks <= num_nodes or not 0 <= avg_degree < math.inf \
            or not 0 <= mixing <= 1 or num_features < 0 or not 0 <= feature_noise < math.inf \
            or not (powerlaw == 0 or 1 < powerlaw < math.inf):
        raise InvalidValueError(
            f"sbm needs num_nodes >= 1, 1 <= num_blocks <= num_nodes, avg_degree >= 0, "
            f"0 <= mixing <= 1, num_features >= 0, feature_noise >= 0 and powerlaw 0 or "
            f"> 1; got num_nodes={num_nodes}, num_blocks={num_blocks}, "
            f"avg_degree={avg_degree}, mixing={mixing}, num_features={num_features}, "
            f"feature_noise={feature_noise}, powerlaw={powerlaw}"
        )
    num_samples = round(num_nodes * avg_degree / 2)
    # Per vertex: features, their noise and shuffled copy, labels and their copy, the
    # permutation, propensities and masks; per block: its mean and class name.
    require_memory(
        num_samples * (16 + _edge_build_bytes(True)) + num_nodes * (12 * num_features + 43)
        + num_blocks * (4 * num_features + 64),
        f"sbm with nodes={num_nodes}, blocks={num_blocks}, degree={avg_degree:g}, "
        f"features={num_features}",
    )
    rng = _rng(seed)
    # Block k holds the ids [starts[k], starts[k + 1]) before shuffling.
    starts = -(-np.arange(num_blocks + 1, dtype=np.int64) * num_nodes // num_blocks)
    sizes = np.diff(starts)
    src = np.empty(num_samples, dtype=np.int64)
    dst = np.empty(num_samples, dtype=np.int64)
    cum = _propensity_cdf(rng, num_nodes, powerlaw) if powerlaw else None
    for lo, hi in _chunk_ranges(num_samples, progress, "sbm"):
        src[lo:hi], dst[lo:hi] = _sbm_chunk(rng, hi - lo, starts, sizes, mixing, cum)
    y = np.repeat(np.arange(num_blocks, dtype=np.int64), sizes)
    means = rng.standard_normal((num_blocks, num_features), dtype=np.float32)
    x = means[y] + np.float32(feature_noise) * rng.standard_normal(
        (num_nodes, num_features), dtype=np.float32)
    if shuffle:
        perm = rng.permutation(num_nodes)
        src, dst = perm[src], perm[dst]
        y[perm], x[perm] = y.copy(), x.copy()
    y_t = torch.from_numpy(y)
    train_mask, val_mask, test_mask = stratified_split(y_t, split, seed)
    return GraphData(
        edge_index=undirected_edge_index(src, dst, num_nodes),
        num_nodes=num_nodes,
        x=torch.from_numpy(x),
        y=y_t,
        train_mask=train_mask,
        val_mask=val_mask,
        test_mask=test_mask,
        name=f"sbm:nodes={num_nodes},blocks={num_blocks},degree={avg_degree:g},"
             f"mixing={mixing:g},{f'powerlaw={powerlaw:g},' if powerlaw else ''}seed={seed}",
        class_names=[f"block{k}" for k in range(num_blocks)],
        meta={"generator": "sbm", "num_nodes": num_nodes, "num_blocks": num_blocks,
              "avg_degree": avg_degree, "mixing": mixing, "powerlaw": powerlaw,
              "num_features": num_features,
              "feature_noise": feature_noise, "seed": seed, "shuffle": shuffle},
    )


def uniform_random(
    num_nodes: int,
    avg_degree: float,
    *,
    seed: int = 0,
    num_features: int = 0,
    progress: bool = False,
) -> GraphData:
    """Erdős–Rényi-style graph: ``num_nodes * avg_degree / 2`` uniform vertex pairs.

    No degree skew and no locality under any vertex order: the baseline against which
    reordering and partitioning gains are measured. ``num_features > 0`` adds
    standard-normal features (no labels).
    """
    if num_nodes < 1 or not 0 <= avg_degree < math.inf or num_features < 0:
        raise InvalidValueError(
            f"uniform_random needs num_nodes >= 1, avg_degree >= 0 and num_features >= 0; "
            f"got num_nodes={num_nodes}, avg_degree={avg_degree}, num_features={num_features}"
        )
    num_samples = round(num_nodes * avg_degree / 2)
    require_memory(
        num_samples * (16 + _edge_build_bytes(True)) + num_nodes * 4 * num_features,
        f"uniform with nodes={num_nodes}, degree={avg_degree:g}, features={num_features}",
    )
    rng = _rng(seed)
    src = np.empty(num_samples, dtype=np.int64)
    dst = np.empty(num_samples, dtype=np.int64)
    for lo, hi in _chunk_ranges(num_samples, progress, "uniform"):
        src[lo:hi] = rng.integers(0, num_nodes, hi - lo)
        dst[lo:hi] = rng.integers(0, num_nodes, hi - lo)
    return GraphData(
        edge_index=undirected_edge_index(src, dst, num_nodes),
        num_nodes=num_nodes,
        x=_random_features(rng, num_nodes, num_features),
        name=f"uniform:nodes={num_nodes},degree={avg_degree:g},seed={seed}",
        meta={"generator": "uniform", "num_nodes": num_nodes, "avg_degree": avg_degree,
              "seed": seed},
    )


# ---------------------------------------------------------------------- spec strings
# kind -> (generator, {spec key: (parameter name, parser)}, key of a bare first value)
_Parser = Callable[[str], Any]


def _parse_int(text: str) -> int:
    """Integers, also written as powers of two (``2^18``, ``2**18``) or ``1e6``."""
    for op in ("**", "^"):
        if op in text:
            base, exp = (int(part) for part in text.split(op, 1))
            if not 0 <= exp <= 64:  # 2**1000000000 would take minutes to compute
                raise ValueError(f"{text}: exponent must lie in [0, 64]")
            return base**exp
    value = float(text) if any(ch in text for ch in ".eE") else int(text)
    if value != int(value):
        raise ValueError(f"{text} is not an integer")
    return int(value)


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{text} is not a boolean")


_SPECS: dict[str, tuple[Callable[..., GraphData], dict[str, tuple[str, _Parser]], str]] = {
    "rmat": (rmat, {
        "scale": ("scale", _parse_int),
        "edge_factor": ("edge_factor", _parse_int),
        "a": ("a", float), "b": ("b", float), "c": ("c", float),
        "undirected": ("undirected", _parse_bool),
        "shuffle": ("shuffle", _parse_bool),
        "features": ("num_features", _parse_int),
        "seed": ("seed", _parse_int),
    }, "scale"),
    "sbm": (sbm, {
        "nodes": ("num_nodes", _parse_int),
        "blocks": ("num_blocks", _parse_int),
        "degree": ("avg_degree", float),
        "mixing": ("mixing", float),
        "powerlaw": ("powerlaw", float),
        "features": ("num_features", _parse_int),
        "noise": ("feature_noise", float),
        "shuffle": ("shuffle", _parse_bool),
        "seed": ("seed", _parse_int),
    }, "nodes"),
    "uniform": (uniform_random, {
        "nodes": ("num_nodes", _parse_int),
        "degree": ("avg_degree", float),
        "features": ("num_features", _parse_int),
        "seed": ("seed", _parse_int),
    }, "nodes"),
}
GENERATOR_KINDS = tuple(_SPECS)


def is_spec(text: str) -> bool:
    """Whether ``text`` names a generator (``kind:...``), as opposed to a dataset or path."""
    kind, sep, _ = text.partition(":")
    return bool(sep) and kind.strip().lower() in _SPECS


def parse_spec(spec: str) -> tuple[Callable[..., GraphData], dict[str, Any]]:
    """``"sbm:nodes=1000,blocks=8,degree=10"`` to (generator, keyword arguments)."""
    kind, sep, body = spec.partition(":")
    kind = kind.strip().lower()
    if not sep or kind not in _SPECS:
        raise DataFormatError(
            f"generator spec {spec!r}: expected KIND:ARGS with KIND one of "
            f"{', '.join(GENERATOR_KINDS)} (e.g. 'rmat:18', 'sbm:nodes=4096,blocks=8,degree=16')"
        )
    func, keys, bare = _SPECS[kind]
    kwargs: dict[str, Any] = {}
    for i, item in enumerate(filter(None, (s.strip() for s in body.split(",")))):
        key, eq, value = item.partition("=")
        if not eq and i == 0:  # "rmat:18" means "rmat:scale=18"
            key, eq, value = bare, "=", item
        key = key.strip().lower()
        if not eq or key not in keys:
            raise DataFormatError(
                f"generator spec {spec!r}: unknown or valueless argument {item!r}; "
                f"{kind} accepts {', '.join(f'{k}=' for k in keys)}"
            )
        name, parse = keys[key]
        try:
            kwargs[name] = parse(value.strip())
        except (ValueError, OverflowError) as err:
            raise DataFormatError(f"generator spec {spec!r}: bad value for {key} ({err})") from err
    required = [p.name for p in inspect.signature(func).parameters.values()
                if p.default is inspect.Parameter.empty]
    missing = [k for k, (name, _) in keys.items() if name in required and name not in kwargs]
    if missing:
        raise DataFormatError(
            f"generator spec {spec!r}: missing {', '.join(f'{k}=' for k in missing)}"
        )
    return func, kwargs


def from_spec(spec: str, *, seed: int | None = None, progress: bool = False) -> GraphData:
    """Generate the graph a spec string describes; ``seed`` overrides the spec's seed.

    Spec strings let a benchmark or a CLI call name a synthetic graph in one token:
    ``rmat:18``, ``rmat:scale=20,edge_factor=16``, ``sbm:nodes=262144,blocks=64,degree=16``,
    ``uniform:nodes=100000,degree=8``.
    """
    func, kwargs = parse_spec(spec)
    if seed is not None:
        kwargs["seed"] = seed
    return func(progress=progress, **kwargs)


# ---------------------------------------------------------------------- internals
def _edge_build_bytes(undirected: bool) -> int:
    """Bytes per sampled pair that the edge build holds at its peak: one int64 key and the
    int64 output columns (both directions when ``undirected``)."""
    return 8 + (32 if undirected else 16)


def _rng(seed: int) -> np.random.Generator:
    """The generator's random stream; a negative seed is a user error, not numpy's."""
    if seed < 0:
        raise InvalidValueError(f"seed must be >= 0, got {seed}")
    return np.random.default_rng(seed)


def _chunk_ranges(total: int, progress: bool, desc: str) -> Iterator[tuple[int, int]]:
    """``[lo, hi)`` slices of ``_CHUNK`` samples, with a progress bar when asked for one."""
    with tqdm(total=total, desc=desc, unit="edge", unit_scale=True,
              disable=None if progress else True, leave=False) as bar:
        for lo in range(0, total, _CHUNK):
            hi = min(lo + _CHUNK, total)
            yield lo, hi
            bar.update(hi - lo)


def _relabel(ids: np.ndarray, perm: np.ndarray) -> None:
    """``ids = perm[ids]`` in place, ``_CHUNK`` at a time (no second full-size array)."""
    for lo in range(0, ids.size, _CHUNK):
        ids[lo:lo + _CHUNK] = perm[ids[lo:lo + _CHUNK]]


def _rmat_chunk(
    rng: np.random.Generator, n: int, scale: int, a: float, b: float, c: float
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` R-MAT samples: one uniform draw per level picks the quadrant bits."""
    src = np.zeros(n, dtype=np.int64)
    dst = np.zeros(n, dtype=np.int64)
    ab, abc = np.float32(a + b), np.float32(a + b + c)
    fa = np.float32(a)
    for _ in range(scale):
        r = rng.random(n, dtype=np.float32)
        row_bit = r >= ab  # bottom half: quadrants c and d
        # right half: quadrant b ([a, a+b)) or d ([a+b+c, 1))
        col_bit = (r >= fa) ^ row_bit ^ (r >= abc)
        src <<= 1
        src |= row_bit
        dst <<= 1
        dst |= col_bit
    return src, dst


def _propensity_cdf(rng: np.random.Generator, num_nodes: int, gamma: float) -> np.ndarray:
    """Cumulative Pareto(gamma) propensities, float64: vertex v is drawn when a uniform
    point of ``[cum[v - 1], cum[v])`` is hit, i.e. in proportion to its propensity."""
    theta = (1.0 - rng.random(num_nodes)) ** (-1.0 / (gamma - 1.0))
    return np.cumsum(theta)


def _sbm_chunk(
    rng: np.random.Generator, n: int, starts: np.ndarray, sizes: np.ndarray, mixing: float,
    cum: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` SBM samples: a source, and a target in its block or (``mixing``) another.

    Vertices are drawn uniformly, or in proportion to their propensities when ``cum``
    (their cumulative sum, see :func:`_propensity_cdf`) is given."""
    num_blocks = sizes.size
    num_nodes = int(starts[-1])
    if cum is None:
        src = rng.integers(0, num_nodes, n)
    else:
        src = np.searchsorted(cum, rng.random(n) * cum[-1], side="right")
    block = np.searchsorted(starts, src, side="right") - 1
    if num_blocks > 1:
        leave = rng.random(n) < mixing
        block[leave] = (block[leave] + rng.integers(1, num_blocks, int(leave.sum()))) \
            % num_blocks
    if cum is None:
        return src, starts[block] + rng.integers(0, sizes[block])
    lo = np.where(starts[block] > 0, cum[starts[block] - 1], 0.0)
    hi = cum[starts[block + 1] - 1]
    dst = np.searchsorted(cum, lo + rng.random(n) * (hi - lo), side="right")
    return src, np.minimum(dst, starts[block + 1] - 1)


def _random_features(rng: np.random.Generator, num_nodes: int, dim: int) -> torch.Tensor | None:
    if dim < 0:
        raise InvalidValueError(f"num_features must be >= 0, got {dim}")
    if dim == 0:
        return None
    return torch.from_numpy(rng.standard_normal((num_nodes, dim), dtype=np.float32))
