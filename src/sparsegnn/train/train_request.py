"""One library entry point for ``sparsegnn train``: a typed request in, the outcome out.

:func:`run_train` owns what a front end must not decide for itself: which mode runs (one
process full-graph, sampled minibatches on one process or on ranks, full-graph on a grid
of ranks, ``--algo auto``), whether torchrun launched this process (asked of
:mod:`sparsegnn.distributed.runtime`, the only reader of its variables), the checks made
before any rank starts (checkpoint kind, precision, the per-rank memory limit) and the
dispatch to the training functions. The command line builds a :class:`TrainRequest` from
its flags and prints the :class:`TrainOutcome`; training on a grid is
:mod:`sparsegnn.train.train_grid`'s.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from sparsegnn.data import GraphData, load_any, row_normalize
from sparsegnn.distributed.layout.row_blocks import check_row_blocks, is_row_block_dir
from sparsegnn.distributed.layout.shard import is_shard_dir
from sparsegnn.distributed.runtime.session import in_torchrun, job_world_size
from sparsegnn.errors import InvalidValueError
from sparsegnn.train.dist_checkpoint import is_checkpoint_folder
from sparsegnn.train.fullgraph import TrainConfig, TrainResult, train_single
from sparsegnn.train.memory import check_graph_rank_memory, check_row_blocks_rank_memory
from sparsegnn.train.minibatch import (
    MinibatchConfig,
    MinibatchData,
    check_minibatch_model,
    fit_minibatch,
)
from sparsegnn.train.minibatch_distributed import Handoff, run_minibatch
from sparsegnn.train.train_summary import fullgraph_summary, minibatch_summary, ogb_line, title


@dataclass(frozen=True)
class RankOptions:
    """How a run spreads over ranks: spawned ``nprocs`` (or torchrun's world), the
    full-graph grid (``algo``: an algorithm, ``"auto"``, or None for 1D or a partitioned
    folder's own), ``--algo auto``'s machine ``profile`` and trials, the minibatch
    topology, and ``max_rank_memory_gib``, checked before any rank starts."""

    nprocs: int = 1
    algo: str | None = None
    auto_trials: int | None = None
    profile: str | None = None
    calibrate: bool = False
    dropout_masks: Literal["auto", "global", "block"] | None = None
    overlap: Literal["off", "on", "auto"] = "off"
    replication: int = 1
    comm: Literal["dense", "sparse"] = "dense"
    partition: str = "block"
    backend: str | None = None
    timeout_s: float = 60.0
    max_rank_memory_gib: float | None = None
    topology: Literal["replicated", "partitioned"] = "replicated"
    feature_cache_mb: float = 0.0


@dataclass(frozen=True)
class TrainRequest:
    """A whole ``sparsegnn train`` run: the dataset (name, generator spec, graph file,
    partitioned or row-block folder), the training configuration, ``minibatch`` (None:
    full-graph), the ranks, and where it runs."""

    dataset: str
    cfg: TrainConfig
    minibatch: MinibatchConfig | None = None
    ranks: RankOptions = RankOptions()
    data_dir: str | None = None
    normalize_features: bool = True
    device: str = "cpu"


@dataclass(frozen=True)
class TrainOutcome:
    """What a run reports: its heading, the JSON ``result`` (history included), the human
    ``summary`` and warnings for standard error."""

    title: str
    result: dict[str, Any]
    summary: str
    warnings: tuple[str, ...] = field(default=())


def run_train(request: TrainRequest) -> TrainOutcome | None:
    """Check ``request``, run the mode it asks for; rank 0's outcome (None on the other
    ranks of a torchrun job, whose rank 0 reports)."""
    distributed = is_distributed(request)
    _check_checkpoint_kind(request, distributed)
    _check_precision(request, distributed)
    if request.minibatch is not None:
        if is_row_block_dir(request.dataset):
            return _minibatch_from_blocks(request, request.minibatch)
        return _minibatch(request, request.minibatch)
    if distributed:
        from sparsegnn.train.train_grid import train_on_grid  # it imports this module

        return train_on_grid(request)
    return _fullgraph(request)


def is_distributed(request: TrainRequest) -> bool:
    """Several ranks asked for, an algorithm named, a torchrun job, a sharded graph, or a
    distributed run's checkpoint folder (resumed on one rank with ``nprocs`` 1)."""
    r = request.ranks
    return (r.nprocs > 1 or r.algo is not None or in_torchrun()
            or is_shard_dir(request.dataset) or _checkpoint_folder(request.cfg.checkpoint))


def world_size(request: TrainRequest) -> int:
    """Ranks of the job: ``nprocs``, or torchrun's world."""
    return max(request.ranks.nprocs, job_world_size() if in_torchrun() else 1)


def _checkpoint_folder(path: Path | None) -> bool:
    return path is not None and path.is_dir() and is_checkpoint_folder(path)


def _check_checkpoint_kind(request: TrainRequest, distributed: bool) -> None:
    """A folder as checkpoint only for full-graph training on ranks, which keeps one
    sub-folder per saved epoch; every other mode writes one file (per rank)."""
    path = request.cfg.checkpoint
    if path is None or not path.is_dir():
        return
    if request.minibatch is not None or not distributed:
        raise InvalidValueError(
            f"--checkpoint {path} is a directory; name a file inside it (a folder holds "
            "the checkpoints of full-graph training on ranks: --nprocs, --algo)")


def _check_precision(request: TrainRequest, distributed: bool) -> None:
    """bf16 only where it is implemented: one-process full-graph training (the distributed
    and minibatch trainers build float32 features of their own)."""
    precision = request.cfg.precision
    if precision == "fp32" or (request.minibatch is None and not distributed):
        return
    raise InvalidValueError(
        f"--precision {precision} is for one-process full-graph training; drop it "
        "for --mode minibatch and for distributed runs (--nprocs, --algo)")


def training_graph(request: TrainRequest) -> GraphData:
    """The training graph, checked (a refusal names the dataset asked for, not the name
    stored in the file, often just 'graph') and with rows normalised unless asked not to."""
    graph = load_any(request.dataset, request.data_dir, seed=request.cfg.seed)
    graph.check_trainable(request.dataset)
    if request.normalize_features and graph.x is not None:
        graph.x = row_normalize(graph.x)
    return graph


def process_memory(request: TrainRequest) -> int:
    """The per-rank memory limit's part for the process itself: the profile's measured
    base and growth, else the predictor's default."""
    from sparsegnn.distributed.planning.cost_profile import Profile
    from sparsegnn.distributed.planning.rank_memory import process_bytes

    path = request.ranks.profile
    return process_bytes(None if path is None else Profile.load(path))


def predicted_total(predicted: dict[str, int]) -> dict[str, int]:
    """A memory prediction by kind with its total, for the JSON result."""
    return {**predicted, "total": sum(predicted.values())}


def plain_config(cfg: Any) -> dict[str, Any]:
    """A configuration as JSON values (paths as text)."""
    return {k: v if isinstance(v, int | float | str | bool | None) else str(v)
            for k, v in asdict(cfg).items()}


def _fullgraph(request: TrainRequest) -> TrainOutcome:
    graph, cfg, device = training_graph(request), request.cfg, request.device
    if graph.x is not None:  # store at the run's precision now: the float32 copy is freed
        graph.x = graph.x.to(cfg.feature_dtype)
    _, result = train_single(graph, cfg, device)
    out = {"dataset": graph.name, "model": cfg.model, "device": device,
           **result.to_dict(), **_class_names(graph, result.test_confusion),
           "config": plain_config(cfg)}
    ogb = _ogb_metrics(graph, result)
    if ogb is not None:
        out["ogb_evaluator"] = ogb
    return TrainOutcome(title(graph.name, cfg.model), out,
                        fullgraph_summary(graph.name, cfg.model, result) + ogb_line(out))


def _class_names(graph: GraphData, confusion: list[list[int]] | None) -> dict[str, list[str]]:
    """``class_names`` beside a confusion matrix, where the data set names its classes
    (Cora's seven topics): the report labels the matrix with them."""
    names = graph.class_names
    if confusion is None or not names or len(names) != len(confusion):
        return {}
    return {"class_names": list(names)}


def _ogb_metrics(graph: GraphData, result: TrainResult) -> dict[str, dict[str, float]] | None:
    """OGB's own Evaluator on the test predictions of the best-on-validation weights, for
    an OGB dataset where ``ogb`` is installed (None otherwise): the leaderboard's metric."""
    from sparsegnn.data.ogb import ogb_evaluate_pairs

    name = graph.meta.get("ogb_name")
    if name is None or result.test_confusion is None:
        return None
    metrics = ogb_evaluate_pairs(str(name), result.test_confusion)
    return None if metrics is None else {"test": metrics}


def _minibatch(request: TrainRequest, mb: MinibatchConfig) -> TrainOutcome | None:
    """Sampled minibatches on one process, or on ranks (``nprocs``, torchrun) that each
    sample their share of every minibatch, from the whole topology (replicated) or from
    their rows of it (partitioned)."""
    cfg = request.cfg
    check_minibatch_model(cfg.model)
    r, graph = request.ranks, training_graph(request)
    name, class_names = graph.name, graph.class_names
    world, comm, extra = 1, None, {}
    if world_size(request) > 1:
        if r.max_rank_memory_gib is not None:
            extra["predicted_memory_per_rank"] = predicted_total(check_graph_rank_memory(
                graph, cfg, r.max_rank_memory_gib, world_size(request), mode="minibatch",
                replication=r.replication, topology=r.topology,
                process=process_memory(request)))
        # Handed over so that a partitioned torchrun rank keeps only its rows.
        handoff = Handoff(MinibatchData.from_graph(graph, cfg.torch_dtype))
        del graph
        outcome = run_minibatch(handoff, cfg, mb, r.nprocs, topology=r.topology,
                                replication=r.replication, backend=r.backend,
                                timeout_s=r.timeout_s, feature_cache_mb=r.feature_cache_mb)
        if outcome is None:  # not rank 0 of a torchrun job: rank 0 reports
            return None
        summary, world = outcome.value.summary, outcome.world_size
        comm = outcome.comm.to_dict()
        extra["topology"] = r.topology
        if r.topology == "partitioned":
            extra["replication"] = r.replication
    else:
        data = MinibatchData.from_graph(graph, cfg.torch_dtype)
        summary = fit_minibatch(data, cfg, mb, request.device)[1].to_dict()
    out = {"dataset": name, "model": cfg.model, "mode": "minibatch",
           "device": request.device, "world_size": world, **extra, **summary,
           "minibatch": asdict(mb), "config": plain_config(cfg)}
    if class_names and len(class_names) == len(summary.get("test_confusion") or []):
        out["class_names"] = list(class_names)
    if comm is not None:
        out["comm_bytes"] = comm
    return TrainOutcome(title(name, cfg.model, f", {mb.sampler} minibatches"), out,
                        minibatch_summary(name, mb, summary))


def _minibatch_from_blocks(request: TrainRequest, mb: MinibatchConfig) -> TrainOutcome | None:
    """Sampled minibatches from a row-block folder: partitioned topology, every rank
    reading only its block's file; the replication factor is ranks / blocks."""
    r = request.ranks
    manifest = check_row_blocks(request.dataset)
    world, blocks = world_size(request), len(manifest["bounds"]) - 1
    replication = world // blocks
    if world % blocks or r.replication not in (1, replication):
        raise InvalidValueError(
            f"{request.dataset} has {blocks} row blocks: run it on a multiple of {blocks} "
            f"ranks (replication = ranks / blocks), not {world} with --replication "
            f"{r.replication}")
    cfg = request.cfg
    check_minibatch_model(cfg.model)
    predicted = None
    if r.max_rank_memory_gib is not None:
        predicted = predicted_total(check_row_blocks_rank_memory(
            manifest, cfg, r.max_rank_memory_gib, process_memory(request)))
    outcome = run_minibatch(Path(request.dataset), cfg, mb, r.nprocs, topology="partitioned",
                            replication=replication, backend=r.backend,
                            timeout_s=r.timeout_s, feature_cache_mb=r.feature_cache_mb)
    if outcome is None:
        return None
    summary = outcome.value.summary
    out = {"dataset": manifest["name"], "model": cfg.model, "mode": "minibatch",
           "device": request.device, "world_size": outcome.world_size,
           "topology": "partitioned", "replication": replication, "row_blocks": blocks,
           **summary, "minibatch": asdict(mb), "config": plain_config(cfg),
           "comm_bytes": outcome.comm.to_dict()}
    if predicted is not None:
        out["predicted_memory_per_rank"] = predicted
    return TrainOutcome(title(manifest["name"], cfg.model, f", {mb.sampler} minibatches"), out,
                        minibatch_summary(manifest["name"], mb, summary))
