"""Peak memory of the current process, as users read it (resident set or CUDA allocator)."""

from __future__ import annotations

import ctypes
import gc
import itertools
import resource
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from sparsegnn.errors import ResourceError
from sparsegnn.sparse import CSRMatrix


def peak_memory_bytes(device: torch.device | None = None) -> int:
    """Peak CUDA allocation on a GPU; otherwise the process's peak resident set size.

    On the CPU torch's allocations are invisible to tracemalloc, so the honest number is
    the operating system's high-water mark (``ru_maxrss``: KiB on Linux, bytes on macOS).
    """
    if device is not None and device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


MEMORY_KINDS = ("topology", "features", "model", "optimiser")
_INDEX_BYTES = 8  # CSR row pointers and column indices are int64


@dataclass(frozen=True)
class RankMemory:
    """One rank's memory: its process's peak resident set and the bytes it holds by kind
    (``topology``: its CSR tiles or row block, crow + col + val; ``features``: its feature
    rows, cached remote rows included; ``model``: parameters; ``optimiser``: Adam's two
    moments once stepped, twice the parameters)."""

    peak_rss_bytes: int
    held_bytes: dict[str, int]
    start_rss_bytes: int = 0

    @property
    def training_peak_bytes(self) -> int:
        """Peak resident set minus the resident set after imports: what training added."""
        return self.peak_rss_bytes - self.start_rss_bytes

    def to_dict(self) -> dict[str, Any]:
        return {"peak_rss_bytes": self.peak_rss_bytes, "start_rss_bytes": self.start_rss_bytes,
                "training_peak_bytes": self.training_peak_bytes,
                "held_bytes": dict(self.held_bytes),
                "held_total_bytes": sum(self.held_bytes.values())}


def peak_rss_bytes() -> int:
    """This process's peak resident set (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def release_freed_memory() -> None:
    """Hand what a finished run freed back to the operating system.

    Why: glibc keeps freed heap memory for reuse, so a process that trains several
    configurations one after another (``--algo auto``'s trials) grows well past what
    any one of them needs (a 65k-vertex graph, 4 ranks: 717-963 MiB after six trial
    runs against 479-519 MiB for one), and a memory limit caps the resident set."""
    gc.collect()
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None) if sys.platform == "linux" else None
    if trim is not None:  # glibc's; musl and other platforms have none
        trim(0)


def _tensor_bytes(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.numel() * t.element_size()


def csr_bytes(matrices: Iterable[CSRMatrix]) -> int:
    """Bytes of ``crow + col + val`` of each distinct matrix (one shared object counts once)."""
    seen: set[int] = set()
    total = 0
    for m in matrices:
        if id(m) in seen:
            continue
        seen.add(id(m))
        total += _tensor_bytes(m.crow) + _tensor_bytes(m.col) + _tensor_bytes(m.val)
    return total


def measure_rank_memory(
    topology: Iterable[CSRMatrix], features: Iterable[torch.Tensor], model: nn.Module,
    start_rss_bytes: int = 0,
) -> RankMemory:
    """The :class:`RankMemory` of a rank holding these tiles, feature tensors and model;
    ``start_rss_bytes``: its resident set after imports (the session's)."""
    params = sum(_tensor_bytes(p) for p in model.parameters())
    held = {"topology": csr_bytes(topology),
            "features": sum(_tensor_bytes(x) for x in features),
            "model": params, "optimiser": 2 * params}
    return RankMemory(peak_rss_bytes(), held, start_rss_bytes)


def predict_rank_memory(
    num_nodes: int, nnz: int, num_features: int, num_params: int, value_bytes: int, *,
    block_rows: int, block_nnz: int, symmetric: bool = True, block_cols: int | None = None,
) -> dict[str, int]:
    """Predicted bytes one rank holds by kind, for a rank holding ``block_rows`` rows of the
    features (``block_cols`` of their columns, default all) and CSR tiles with
    ``block_nnz`` nonzeros over ``block_rows`` rows (twice when A^T is stored apart from
    A, ``symmetric`` False)."""
    del num_nodes, nnz  # the whole graph's sizes enter through block_rows/block_nnz
    tiles = 1 if symmetric else 2
    topo = tiles * ((block_rows + 1) * _INDEX_BYTES + block_nnz * (_INDEX_BYTES + value_bytes))
    model = num_params * value_bytes
    cols = num_features if block_cols is None else block_cols
    return {"topology": topo, "features": block_rows * cols * value_bytes,
            "model": model, "optimiser": 2 * model}


def rank_share(
    num_nodes: int, nnz: int, num_features: int, nprocs: int, *, mode: str,
    algo: str = "1d", replication: int = 1, topology: str = "replicated",
) -> tuple[int, int, int]:
    """``(rows, nonzeros, feature columns)`` of the largest share one rank holds.

    Full-graph (``mode`` ``fullgraph``): rows of its vertex block, ``ceil(n / p_rows)``,
    and ``ceil(nnz / p)`` nonzeros (1D, 1.5D, 2D and 3D alike, with even blocks), and on
    2D/3D ``ceil(f / q)`` feature columns (its slice), else all f.
    Minibatch: the whole graph (``replicated``) or ``1 / (p / c)`` of its rows and
    nonzeros (``partitioned``), every feature column.
    """
    def ceil(a: int, b: int) -> int:
        return -(-a // b)

    if mode == "minibatch":
        if topology == "replicated" or nprocs == 1:
            return num_nodes, nnz, num_features
        blocks = max(1, nprocs // replication)
        return ceil(num_nodes, blocks), ceil(nnz, blocks), num_features
    from sparsegnn.distributed import grid_shape

    shape = grid_shape(algo, nprocs, replication)  # type: ignore[arg-type]
    return (ceil(num_nodes, shape.rows), ceil(nnz, nprocs),
            ceil(num_features, shape.feature_slices))


def check_rank_memory(predicted: dict[str, int], limit_gib: float) -> None:
    """Refuse (:class:`~sparsegnn.errors.ResourceError`) a predicted per-rank footprint
    above ``limit_gib`` GiB, naming the bytes of each kind and the limit."""
    total = sum(predicted.values())
    limit = int(limit_gib * 2**30)
    if total > limit:
        kinds = ", ".join(f"{k} {v}" for k, v in predicted.items())
        raise ResourceError(
            f"predicted per-rank memory {total} bytes ({total / 2**30:.3f} GiB: {kinds}) "
            f"exceeds --max-rank-memory {limit_gib:g} GiB ({limit} bytes)"
        )


def check_graph_rank_memory(
    graph: Any, cfg: Any, limit_gib: float, nprocs: int, *, mode: str, algo: str = "1d",
    replication: int = 1, topology: str = "replicated",
) -> dict[str, int]:
    """Predict one rank's footprint for training ``cfg`` on ``graph`` (a
    :class:`~sparsegnn.data.GraphData`) over ``nprocs`` ranks and refuse it above
    ``limit_gib`` GiB; the prediction by kind when it fits."""
    # Full-graph GCN adds a self loop per vertex; its normalised A is symmetric (one set
    # of tiles), other full-graph operators store A^T apart.
    gcn = mode == "fullgraph" and cfg.model == "gcn"
    n = int(graph.num_nodes)
    nnz = int(graph.num_edges) + (n if gcn else 0)
    f, classes = int(graph.num_features), int(graph.num_classes)
    rows, block_nnz, cols = rank_share(n, nnz, f, nprocs, mode=mode, algo=algo,
                                       replication=replication, topology=topology)
    symmetric = mode == "minibatch" or gcn
    predicted = predict_rank_memory(n, nnz, f, _num_params(cfg, f, classes),
                                    _value_bytes(cfg), block_rows=rows, block_nnz=block_nnz,
                                    symmetric=symmetric, block_cols=cols)
    check_rank_memory(predicted, limit_gib)
    return predicted


def check_row_blocks_rank_memory(
    manifest: dict[str, Any], cfg: Any, limit_gib: float,
) -> dict[str, int]:
    """The same prediction and refusal for a row-block folder (``data partition --mode
    minibatch``), from its manifest alone: the largest block's rows and nonzeros."""
    bounds, nnz = manifest["bounds"], manifest["nnz"]
    rows = max(b - a for a, b in itertools.pairwise(bounds))
    f = int(manifest["num_features"])
    predicted = predict_rank_memory(
        int(manifest["num_nodes"]), sum(nnz), f,
        _num_params(cfg, f, int(manifest["num_classes"])), _value_bytes(cfg),
        block_rows=rows, block_nnz=max(nnz))
    check_rank_memory(predicted, limit_gib)
    return predicted


def check_shards_rank_memory(
    manifest: dict[str, Any], cfg: Any, limit_gib: float,
) -> dict[str, int]:
    """The prediction and refusal for a full-graph partitioned folder, from the holdings
    its manifest records per rank (the largest rank's); folders written before the
    manifest recorded them are refused with a way out."""
    from sparsegnn.errors import InvalidValueError

    holdings = manifest.get("rank_holdings")
    if not holdings:
        raise InvalidValueError("--max-rank-memory: this partitioned folder does not record "
                                "its ranks' holdings; write it again with `data partition`")
    vb = _value_bytes(cfg)
    f = int(manifest["num_features"])
    model = _num_params(cfg, f, int(manifest["num_classes"])) * vb
    predicted = max(({"topology": crow * _INDEX_BYTES + nnz * (_INDEX_BYTES + vb),
                      "features": rows * cols * vb, "model": model, "optimiser": 2 * model}
                     for crow, nnz, rows, cols in holdings), key=lambda k: sum(k.values()))
    check_rank_memory(predicted, limit_gib)
    return predicted


def _num_params(cfg: Any, num_features: int, num_classes: int) -> int:
    from sparsegnn.train.fullgraph import build_model

    return sum(p.numel() for p in build_model(cfg, num_features, num_classes).parameters())


def _value_bytes(cfg: Any) -> int:
    return torch.empty(0, dtype=cfg.torch_dtype).element_size()
