"""A rank's memory: measured (its peak resident set and the bytes it holds by kind), and
checked against ``--max-rank-memory`` before any rank starts.

The checks build what each rank will hold from the graph, a partitioned folder's
manifest or a row-block folder's, and ask the one predictor,
:func:`sparsegnn.distributed.planning.rank_memory.rank_bytes`, which ``plan`` and ``--algo auto``
ask too.
"""

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

from sparsegnn.distributed.planning.attention_cost import model_widths
from sparsegnn.distributed.planning.rank_memory import (
    DEFAULT_PROCESS_BYTES,
    MEMORY_KINDS,
    Holding,
    activation_width,
    busiest,
    edge_bytes,
    in_flight_bytes,
    predict_rank_bytes,
    rank_bytes,
)
from sparsegnn.errors import InvalidValueError, ResourceError
from sparsegnn.nn.model_size import parameter_count
from sparsegnn.sparse import CSRMatrix

__all__ = ["MEMORY_KINDS", "RankMemory", "check_graph_rank_memory", "check_rank_memory",
           "check_row_blocks_rank_memory", "check_shards_rank_memory", "measure_rank_memory",
           "minibatch_share", "peak_memory_bytes", "peak_rss_bytes", "release_freed_memory"]


def peak_memory_bytes(device: torch.device | None = None) -> int:
    """Peak CUDA allocation on a GPU; otherwise the process's peak resident set size.

    On the CPU torch's allocations are invisible to tracemalloc, so the honest number is
    the operating system's high-water mark (``ru_maxrss``: KiB on Linux, bytes on macOS).
    """
    if device is not None and device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


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


def minibatch_share(
    num_nodes: int, nnz: int, num_features: int, nprocs: int, *, replication: int = 1,
    topology: str = "replicated",
) -> tuple[int, int, int]:
    """``(rows, nonzeros, feature columns)`` a minibatch rank holds: the whole graph
    (``replicated``) or ``1 / (p / c)`` of its rows and nonzeros (``partitioned``), every
    feature column."""
    if topology == "replicated" or nprocs == 1:
        return num_nodes, nnz, num_features
    blocks = max(1, nprocs // replication)
    return -(-num_nodes // blocks), -(-nnz // blocks), num_features


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
    replication: int = 1, topology: str = "replicated", comm: str = "sparse",
    overlap: bool = False, partition: Any = "block", process: int = DEFAULT_PROCESS_BYTES,
) -> dict[str, int]:
    """Predict the busiest rank's peak for training ``cfg`` on ``graph`` (a
    :class:`~sparsegnn.data.GraphData` every rank loads whole) over ``nprocs`` ranks, and
    refuse it above ``limit_gib`` GiB; the prediction by kind when it fits.

    Full-graph: the ranks' own partition (``partition``: a partitioner name, ``block``
    for even blocks, or a vector file) of the grid of ``algo``, the tiles each rank
    multiplies, its feature rows and slice, and the whole graph each rank loads and
    builds its operator from. Minibatch: the whole graph (``replicated``) or a row
    block (``partitioned``), without the sampled batches' activations (not modelled).
    ``process``: the process's own part
    (:func:`~sparsegnn.distributed.planning.rank_memory.process_bytes`)."""
    if mode == "fullgraph":
        from sparsegnn.distributed.layout.grid import grid_shape
        from sparsegnn.distributed.layout.partitioned import partition_for
        from sparsegnn.distributed.planning.planner import Layout, PlanConfig, PlanGraph

        shape = grid_shape(algo, nprocs, replication)  # type: ignore[arg-type]
        part = partition_for(int(graph.num_nodes), shape, partition, graph.edge_index,
                             cfg.seed)
        plan = PlanConfig(nprocs, algo, replication, comm=comm,  # type: ignore[arg-type]
                          model=cfg.model, hidden=cfg.hidden, num_layers=cfg.num_layers,
                          heads=cfg.heads, overlap=overlap)
        lay = Layout(PlanGraph.of(graph, cfg.model), shape, part, 0.0)
        predicted = predict_rank_bytes(lay, plan, _value_bytes(cfg), process, whole_graph=True)
    else:
        f = int(graph.num_features)
        rows, nnz, cols = minibatch_share(int(graph.num_nodes), int(graph.num_edges), f,
                                          nprocs, replication=replication, topology=topology)
        predicted = rank_bytes(Holding(rows + 1, nnz, rows, cols),
                               _num_params(cfg, f, int(graph.num_classes)), _value_bytes(cfg),
                               process_bytes=process)
    check_rank_memory(predicted, limit_gib)
    return predicted


def check_row_blocks_rank_memory(
    manifest: dict[str, Any], cfg: Any, limit_gib: float, process: int = DEFAULT_PROCESS_BYTES,
) -> dict[str, int]:
    """The same prediction and refusal for a row-block folder (``data partition --mode
    minibatch``), from its manifest alone: the largest block's rows and nonzeros."""
    bounds, nnz = manifest["bounds"], manifest["nnz"]
    rows = max(b - a for a, b in itertools.pairwise(bounds))
    f = int(manifest["num_features"])
    predicted = rank_bytes(Holding(rows + 1, max(nnz), rows, f),
                           _num_params(cfg, f, int(manifest["num_classes"])), _value_bytes(cfg),
                           process_bytes=process)
    check_rank_memory(predicted, limit_gib)
    return predicted


def check_shards_rank_memory(
    manifest: dict[str, Any], cfg: Any, limit_gib: float, *, comm: str = "sparse",
    overlap: bool = False, process: int = DEFAULT_PROCESS_BYTES,
) -> dict[str, int]:
    """The prediction and refusal for a full-graph partitioned folder, from the holdings
    its manifest records per rank (each rank reads only its own file: no whole graph);
    folders written before the manifest recorded them are refused with a way out."""
    from sparsegnn.distributed.layout.shard import manifest_shape

    holdings = manifest.get("rank_holdings")
    if not holdings:
        raise InvalidValueError("--max-rank-memory: this partitioned folder does not record "
                                "its ranks' holdings; write it again with `data partition`")
    shape = manifest_shape(manifest)
    f, classes = int(manifest["num_features"]), int(manifest["num_classes"])
    params = _num_params(cfg, f, classes)
    widths = model_widths(cfg, f, classes)
    block_values = max(b - a for a, b in itertools.pairwise(manifest["offsets"])) * max(widths)
    flight, vb = _Flight(comm, overlap), _value_bytes(cfg)
    # 2D/3D: the tiles of each row a SUMMA stage broadcasts ([i, k, m, nonzeros] of A, A^T).
    stage: dict[tuple[int, int], int] = {}
    for table in manifest.get("nnz", {}).values():
        for i, _, m, n in table:
            stage[i, m] = max(stage.get((i, m), 0), int(n))

    def stage_tile(rank: int) -> tuple[int, int]:
        i, _, m = shape.coords(rank)
        rows = manifest["offsets"][i + 1] - manifest["offsets"][i]
        return (rows + 1, stage[i, m]) if (i, m) in stage else (0, 0)

    predicted = busiest(
        rank_bytes(Holding(*held), params, vb, process_bytes=process,
                   activation_width=activation_width(shape.algo, held[3], widths),
                   edge_bytes=edge_bytes(cfg, vb),
                   in_flight_bytes=in_flight_bytes(shape, rank, flight, block_values,
                                                   stage_tile(rank), vb))
        for rank, held in enumerate(holdings))
    check_rank_memory(predicted, limit_gib)
    return predicted


@dataclass(frozen=True)
class _Flight:
    """What :func:`~sparsegnn.distributed.planning.rank_memory.in_flight_bytes` reads of a run."""

    comm: str
    overlap: bool


def _num_params(cfg: Any, num_features: int, num_classes: int) -> int:
    return parameter_count(cfg.model, num_features, cfg.hidden, num_classes, cfg.num_layers,
                           cfg.heads)


def _value_bytes(cfg: Any) -> int:
    return torch.empty(0, dtype=cfg.torch_dtype).element_size()
