"""Distributed full-graph training: the :func:`fit` loop on partitioned ranks.

Each rank builds the operator of the chosen algorithm over its tiles, a
:class:`~sparsegnn.distributed.DistributedTask` over its vertex block and the same model
as a single process (same seed, same initial weights), then runs the unchanged
:func:`~sparsegnn.train.fullgraph.fit`. Dropout either reproduces the single-process
masks (each rank draws the whole graph's mask and keeps its rows) or, for graphs read
from a partitioned directory, draws per vertex block from ``seed + 1_000_003 * block``
(the replicas of a block share that stream, so they stay identical). On 2D/3D each rank
holds only its column slice of the input features and the first layer runs on partial
products summed over the process row (:mod:`sparsegnn.distributed.feature_slices`).

``--checkpoint`` names a folder: every saved epoch is a sub-folder of one shard per rank
and a manifest written last (:mod:`sparsegnn.train.dist_checkpoint`); a run resumes from
the newest complete one on the same or on another grid, and refuses one of another graph,
model or dtype.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from sparsegnn.data import load_any, row_normalize
from sparsegnn.distributed import (
    ByteCounts,
    Communicator,
    DistributedOperator,
    DistributedTask,
    GridError,
    GridShape,
    ProcessGrid,
    RankResult,
    Session,
    SpmmCall,
    barrier,
    build_operator,
    close_session,
    gather_objects,
    grid_shape,
    in_torchrun,
    init_session,
    lost_peers_named,
    predict,
    spawn,
)
from sparsegnn.distributed.comm_model import input_slicing, spmm_schedule
from sparsegnn.distributed.feature_slices import slice_first_layer, use_slice_dropout
from sparsegnn.distributed.partitioned import check_manifest, load_shard
from sparsegnn.distributed.planner import PlanConfig
from sparsegnn.distributed.shard import Shard, is_shard_dir, manifest_shape, read_manifest
from sparsegnn.distributed.sparse_comm import SparseCommunicator, SparseRowOperator
from sparsegnn.distributed.spmm import SummaOperator, col_lanes
from sparsegnn.names import DEFAULT_MASK, PARTITIONERS, Algorithm
from sparsegnn.nn.dropout import dropout
from sparsegnn.train.checkpoint import graph_hash
from sparsegnn.train.dist_checkpoint import DistributedStore, Resumed, file_sha256
from sparsegnn.train.fullgraph import (
    EpochStats,
    TrainConfig,
    TrainResult,
    build_model,
    fingerprint,
    fit,
)
from sparsegnn.train.memory import RankMemory, measure_rank_memory, release_freed_memory

_SEED_STRIDE = 1_000_003


@dataclass(frozen=True)
class DistributedConfig:
    """How to distribute: algorithm, replication (1.5D), backend, timeout, partition (a
    vector file or a partitioner name), and dense or sparsity-aware SpMM communication."""

    algo: Algorithm = "1d"
    replication: int = 1
    backend: str | None = None
    timeout_s: float = 60.0
    partition: Path | str | None = None
    comm: Literal["dense", "sparse"] = "dense"
    # "global": every rank draws the whole graph's dropout mask and keeps its rows, which
    # reproduces single-process training exactly but costs an n x f mask per layer;
    # "block": each vertex block draws its own; "auto": global when the rank holds the
    # whole graph anyway (in memory), block when it reads a partitioned directory.
    dropout_masks: Literal["auto", "global", "block"] = "auto"
    # 1D/1.5D: move the next blocks (dense) or the rows (sparse) while multiplying
    # what has arrived (distributed.spmm.RowOperator, sparse_comm.SparseRowOperator).
    overlap: bool = False


@dataclass
class RankReport:
    """What one rank measured in one epoch (the last), per phase: ``sent``/``recv`` totals and
    per-collective ``<collective>_sent``/``_recv``, next to the model's ``sent``/``recv``."""

    rank: int
    coords: tuple[int, int, int]
    epoch_bytes: dict[str, dict[str, int]]
    constant_across_epochs: bool
    predicted: dict[str, dict[str, int]]
    memory: RankMemory | None = None
    resumed: Resumed | None = None  # where --resume continued from (rank 0 reports it)
    checkpoint_warnings: list[str] = field(default_factory=list)  # incomplete ones skipped
    # Seconds this rank waited on communication in its median epoch, by phase (blocking
    # collectives and what overlap left unhidden of asynchronous ones; no set-up).
    waited_s: dict[str, float] = field(default_factory=dict)

    def matches_model(self) -> bool:
        """Measured == predicted, phase by phase (the model predicts totals per phase)."""
        measured = {
            p: {"sent": v.get("sent", 0), "recv": v.get("recv", 0)}
            for p, v in self.epoch_bytes.items()
        }
        return measured == self.predicted


def use_global_dropout(
    model: nn.Module, num_nodes: int, rows: slice | torch.Tensor, columns: tuple[int, int],
) -> None:
    """Make ``model`` apply the whole graph's dropout mask, restricted to this rank's rows.

    The model's own dropout is switched off and a pre-hook on each layer draws the mask
    of the full ``num_nodes x f`` input exactly as a single process would (same kind of
    mask, same shape, same RNG stream, hence the same bits) and keeps ``rows`` (original vertex
    ids of the local rows, in local order) and, for the first layer, the ``columns`` of
    the input features the rank holds (a slice of them on 2D/3D).
    """
    p = float(getattr(model, "dropout", 0.0))
    layers = getattr(model, "layers", None)
    if p == 0.0 or layers is None:
        return
    model.dropout = 0.0
    kind = getattr(model, "dropout_mask", DEFAULT_MASK)

    def hook(layer: nn.Module, args: tuple[Any, ...], cols: slice, width: int | None,
             ) -> tuple[Any, ...] | None:
        if not layer.training:
            return None
        x = args[0]
        ones = torch.ones(num_nodes, width or x.shape[1], dtype=x.dtype, device=x.device)
        return (x * dropout(ones, p, True, kind)[rows, cols], *args[1:])

    layers[0].register_forward_pre_hook(
        partial(hook, cols=slice(*columns), width=layers[0].in_channels))
    for layer in layers[1:]:
        layer.register_forward_pre_hook(partial(hook, cols=slice(None), width=None))


def train_rank(
    source: Any, cfg: TrainConfig, dcfg: DistributedConfig, session: Session,
    members: Sequence[int] | None = None,
) -> tuple[nn.Module, TrainResult, RankReport] | None:
    """Train on this rank's share of ``source``; every rank of the job calls this.

    ``source`` is a :class:`~sparsegnn.data.GraphData` or a directory written by
    ``sparsegnn data partition``. ``members``: the global ranks forming the grid (default:
    all); ranks outside it only take part in creating the groups and get ``None``.
    """
    size = session.world_size if members is None else len(members)
    shape = grid_shape(dcfg.algo, size, dcfg.replication)
    grid = ProcessGrid.create(shape, members,
                              col_lanes=col_lanes(dcfg.algo, dcfg.comm, dcfg.overlap))
    if grid is None:
        return None
    shard = load_shard(source, cfg.model, shape, grid.rank, dcfg.partition,
                       dtype=cfg.torch_dtype, seed=cfg.seed)
    shard = shard.to(session.device, cfg.torch_dtype)
    sparse = dcfg.comm == "sparse"
    op: DistributedOperator
    if sparse:
        # A named partitioner runs on every rank (in load_shard); it is seeded and
        # deterministic, so all ranks hold the same blocks and their plans agree.
        rows_comm = SparseCommunicator()
        comm: Communicator = rows_comm
        op = SparseRowOperator(grid, rows_comm, shard.part, shard.blocks, dcfg.overlap)
    else:
        comm = Communicator()
        op = build_operator(grid, comm, shard.part, shard.blocks, dcfg.overlap)
    model = build_model(cfg, shard.num_features, shard.num_classes)
    model = model.to(session.device, cfg.torch_dtype)
    sliced = shape.feature_slices > 1
    adj: DistributedOperator | list[DistributedOperator] = op
    row_sliced: list[nn.Parameter] = []
    if sliced:
        assert isinstance(op, SummaOperator)  # 2D/3D: sparse communication is 1D/1.5D only
        adj, row_sliced = slice_first_layer(model, op, shard.columns, comm, grid.row)
    task = DistributedTask(shard.x, adj, shard.y, shard.masks, comm, grid.col, row_sliced,
                           grid.row)
    global_masks = dcfg.dropout_masks == "global" or (
        dcfg.dropout_masks == "auto" and not isinstance(source, str | Path)
    )
    if global_masks:
        use_global_dropout(model, shard.part.num_nodes, _original_rows(shard, grid.coords[0]),
                           shard.columns)
    elif sliced:
        use_slice_dropout(model, grid.coords[1])
    rank_cfg = replace(
        cfg, seed=cfg.seed if global_masks else cfg.seed + _SEED_STRIDE * grid.coords[0],
    )
    meter = _EpochMeter(comm)
    store = None if cfg.checkpoint is None else DistributedStore(
        Path(cfg.checkpoint), grid, _identity(source, shard, cfg),
        _layout(shape, dcfg, source, global_masks, cfg.seed), cfg.seed,
        None if global_masks else grid.coords[0], resume=cfg.resume, restart=cfg.restart)
    result = fit(model, task, rank_cfg, is_main=grid.rank == 0, on_epoch=meter.on_epoch,
                 store=store)
    calls = spmm_schedule(cfg, shard.num_features, shard.num_classes, sliced)
    predicted = predict(
        shape, shard.part, grid.rank, [] if sparse else calls,
        value_bytes=shard.x.element_size(),
        num_params=sum(p.numel() for p in model.parameters()), nnz=shard.nnz,
        slicing=input_slicing(cfg, shard.num_features, shard.num_classes) if sliced else None,
    )
    if isinstance(op, SparseRowOperator):
        predicted.update(_planned_spmm_bytes(op, calls, shard.x.element_size()))
    tiles = [*shard.blocks.forward.values(), *shard.blocks.backward.values()]
    memory = measure_rank_memory(tiles, [shard.x], model, session.start_rss_bytes)
    report = RankReport(grid.rank, grid.coords, meter.last, meter.constant, predicted, memory,
                        store.resumed if store else None, store.skipped if store else [],
                        meter.waited_per_epoch())
    return model, result, report


def with_plan(dcfg: DistributedConfig, config: PlanConfig) -> DistributedConfig:
    """``dcfg`` with a planner configuration's algorithm, replication, communication and
    partition (the planner names the contiguous split ``block``; training calls it no
    partition)."""
    return replace(dcfg, algo=config.algo, replication=config.replication,
                   comm=config.comm,  # type: ignore[arg-type]
                   partition=None if config.partitioner == "block" else config.partitioner)


def with_overlap_variants(candidates: Sequence[DistributedConfig],
                          twin_fits: Sequence[bool] | None = None) -> list[DistributedConfig]:
    """``--overlap auto``'s trials: every candidate without overlap (the first stays the
    reference a trial must beat, :func:`trial_winner`), then each 1D/1.5D one with it
    (only those whose ``twin_fits`` is true, where given: a memory limit).

    Why measure rather than predict: overlap pays where links are slow and every rank
    has a CPU of its own (1.15-1.9x faster epochs on shaped links, benchmarks/overlap.py),
    and can cost where ranks share CPUs, since the transfers then compete with another
    rank's multiply; the cost model prices neither."""
    plain = [replace(c, overlap=False) for c in candidates]
    fits = [True] * len(plain) if twin_fits is None else list(twin_fits)
    return plain + [replace(c, overlap=True) for c, ok in zip(plain, fits, strict=True)
                    if ok and c.algo in ("1d", "1.5d")]


def measure_epochs_s(session: Session, source: Any, cfg: TrainConfig,
                     dcfg: DistributedConfig) -> list[float]:
    """Train ``dcfg`` on ``source`` (every rank of the job calls this) and return each
    epoch's time on its slowest rank, the first epoch left out: it also builds plans and
    warms the kernels, which is not an epoch's cost. Every rank gets the same list."""
    barrier()
    got = train_rank(source, cfg, dcfg, session)
    assert got is not None  # every rank is a member of the full-world grid
    steady = [h.seconds for h in got[1].history[1:]] or [got[1].epoch_time_s]
    return [max(per_rank) for per_rank in zip(*gather_objects(steady), strict=True)]


def median_epoch_over_rounds(session: Session, source: Any, cfg: TrainConfig,
                             candidates: Sequence[DistributedConfig], rounds: int
                             ) -> list[float]:
    """Each candidate's median epoch over ``rounds`` rounds that each train every
    candidate once (in a rotated order), all rounds' epochs pooled.

    With several ranks sharing a core, one epoch's time scatters by +-25% around its
    typical value and a whole run's median by +-15% (R-MAT, 16384 vertices, p = 4: the
    same configuration's run medians 36.9-50.5 ms over 8 rounds). Rounds spread a burst
    of someone else's work over the candidates instead of landing it on one; the pooled
    median ignores a burst that spoils fewer than half the epochs and, unlike the least
    of the rounds' medians, does not reward the one lucky run (which made two equal
    configurations measure 30% apart)."""
    n = len(candidates)
    epochs: list[list[float]] = [[] for _ in range(n)]
    for r in range(max(1, rounds)):
        for k in ((r + i) % n for i in range(n)):
            epochs[k] += measure_epochs_s(session, source, cfg, candidates[k])
            release_freed_memory()
    return [statistics.median(e) for e in epochs]


TRIAL_MARGIN = 0.1  # a trial overrules the model's first choice only this much faster


def trial_winner(times: Sequence[float], margin: float = TRIAL_MARGIN) -> int:
    """The candidate to train given each one's trial time, the model's first choice at
    index 0: the fastest, if it beat the first by more than ``margin``, else the first.
    A few trial epochs scatter by about 10% on a shared host; a closer win is noise, and
    the model (median error 6-11% against longer runs) is the better judge there. Seen:
    trials that picked a configuration 1.19x slower than the model's choice."""
    if not times:
        return 0
    best = min(range(len(times)), key=times.__getitem__)
    return best if times[best] < (1.0 - margin) * times[0] else 0


def choose_by_trial(session: Session, source: Any, cfg: TrainConfig,
                    candidates: Sequence[DistributedConfig], epochs: int = 4,
                    rounds: int = 2) -> tuple[int, list[float]]:
    """The index of the candidate to train (:func:`trial_winner`) and each one's time.

    A cost model ranks configurations well when they differ by more than its error;
    between those it predicts within ~30% of each other, measured epochs decide where
    they differ by more than the measurement's own noise (as FFTW's planner and cuDNN's
    autotuner do). The trials run ``epochs`` epochs each (the first, warm-up, not
    counted) in ``rounds`` rounds (see :func:`median_epoch_over_rounds`), without checkpoints
    or progress; all ranks measure the same times, so all choose the same."""
    trial = replace(cfg, epochs=max(2, epochs), patience=max(2, epochs), checkpoint=None,
                    resume=False, progress=False, logdir=None)
    times = median_epoch_over_rounds(session, source, trial, candidates, rounds)
    return trial_winner(times), times


def _identity(source: Any, shard: Shard, cfg: TrainConfig) -> dict[str, str | int]:
    """What a checkpoint must match to be resumed, whatever the grid: model, sizes, dtype
    and the graph (its hash when in memory; a partitioned folder's own fingerprint, which
    covers its grid too, since a rank reads only its share of it)."""
    if isinstance(source, str | Path):
        graph = str(read_manifest(source)["fingerprint"])[:16]
    else:
        graph = graph_hash(source.num_nodes, source.edge_index, tuple(source.x.shape))
    return fingerprint(cfg, graph=graph, classes=shard.num_classes)


def _layout(shape: GridShape, dcfg: DistributedConfig, source: Any, global_masks: bool,
            seed: int) -> dict[str, Any]:
    """How this run is distributed, as a checkpoint manifest records it: a checkpoint of
    the same layout resumes each rank from its own shard, bit-identically."""
    return {"world_size": shape.size, "algo": shape.algo,
            "grid": [shape.rows, shape.cols, shape.layers],
            "replication": shape.cols if shape.algo == "1.5d" else 1,
            "partition": _partition_label(dcfg.partition, source, seed),
            "dropout_masks": "global" if global_masks else "block"}


def _partition_label(partition: Path | str | None, source: Any, seed: int) -> str:
    """The vertex blocks' origin: even, a seeded partitioner, a file's content, a folder."""
    if isinstance(source, str | Path):
        return "partitioned folder"
    if partition is None:
        return "even"
    if str(partition) in PARTITIONERS and not Path(partition).is_file():
        return f"{partition} seed {seed}"
    return f"file sha256 {file_sha256(Path(partition))[:16]}"


def _planned_spmm_bytes(
    op: SparseRowOperator, calls: list[SpmmCall], value_bytes: int
) -> dict[str, dict[str, int]]:
    """What this rank's sparse plan sends and receives per epoch, per SpMM phase."""
    out: dict[str, dict[str, int]] = {}
    reduce = (op.grid.shape.cols - 1) * op.n_local
    for call in calls:
        sent, recv = op.rows_per_spmm(call.phase == "backward_spmm")
        row_bytes = call.width * value_bytes
        v = out.setdefault(call.phase, {"sent": 0, "recv": 0})
        v["sent"] += (sent + reduce) * row_bytes
        v["recv"] += (recv + reduce) * row_bytes
    return {p: v for p, v in out.items() if v["sent"] or v["recv"]}


def _original_rows(shard: Shard, block: int) -> slice | torch.Tensor:
    """Original vertex ids of a block's rows, in local order (a slice when not relabelled)."""
    lo, hi = shard.part.block(block)
    order = shard.part.order
    return slice(lo, hi) if order is None else order[lo:hi].to(shard.x.device)


class _EpochMeter:
    """Bytes per epoch: the counter difference between consecutive ``on_epoch`` calls;
    and the seconds waited on communication in each epoch, by phase."""

    def __init__(self, comm: Communicator) -> None:
        self.comm, self.previous = comm, comm.counts().phases
        self.last: dict[str, dict[str, int]] = {}
        self.constant = True
        self.waited_before = comm.waited_seconds()
        self.waits: list[dict[str, float]] = []

    def waited_per_epoch(self) -> dict[str, float]:
        """The median epoch's wait per phase (set-up and the final test pass left out),
        comparable to the median epoch time the run reports."""
        phases = {k for w in self.waits for k in w} - {"setup"}
        return {k: statistics.median(w.get(k, 0.0) for w in self.waits) for k in sorted(phases)}

    def on_epoch(self, stats: EpochStats) -> None:
        waited = self.comm.waited_seconds()
        self.waits.append({k: v - self.waited_before.get(k, 0.0) for k, v in waited.items()})
        self.waited_before = waited
        now = self.comm.counts().phases
        delta = {}
        for phase, counts in now.items():
            before = self.previous.get(phase, {})
            diff = {key: n - before.get(key, 0) for key, n in counts.items()}
            if phase != "setup" and any(diff.values()):
                delta[phase] = {k: v for k, v in diff.items() if v}
        if self.last and delta != self.last:
            self.constant = False
        self.last, self.previous = delta, now


def comm_summary(reports: list[RankReport]) -> dict[str, Any]:
    """Per-rank and total bytes of one epoch, measured, and the comm model's prediction."""

    def rank_entry(r: RankReport, phases: dict[str, dict[str, int]]) -> dict[str, Any]:
        return {"rank": r.rank, "coords": list(r.coords), "sent": _total([phases]),
                "recv": _total([phases], "recv"), "phases": phases}

    return {
        "per_rank": [
            {**rank_entry(r, r.epoch_bytes), "constant_across_epochs": r.constant_across_epochs}
            for r in reports
        ],
        "total_bytes_per_epoch": _total(r.epoch_bytes for r in reports),
        "comm_model": {
            "per_rank": [rank_entry(r, r.predicted) for r in reports],
            "total_bytes_per_epoch": _total(r.predicted for r in reports),
        },
        "matches_model": all(r.matches_model() for r in reports),
    }


def _total(volumes: Iterable[dict[str, dict[str, int]]], key: str = "sent") -> int:
    """Bytes sent (or received) by the given ranks together over all phases."""
    return sum(v.get(key, 0) for vol in volumes for v in vol.values())


@dataclass(frozen=True)
class DistributedJob:
    """A whole distributed run: what to train on, how, and over how many ranks.

    ``dataset`` is a dataset name, generator spec or graph file (every rank loads it) or
    a partitioned folder (each rank reads its own file). Picklable for spawned ranks.
    """

    dataset: str
    cfg: TrainConfig
    dcfg: DistributedConfig
    nprocs: int = 1
    data_dir: str | None = None
    normalize_features: bool = True
    # ``--algo auto``'s shortlist: when given, the ranks train each for ``trial_epochs``
    # and then train the fastest measured (``dcfg`` is then only the first of them).
    trials: tuple[DistributedConfig, ...] = ()
    trial_epochs: int = 4

    @classmethod
    def for_dataset(cls, dataset: str, cfg: TrainConfig, dcfg: DistributedConfig,
                    nprocs: int, algo: Algorithm | None = None, **kw: Any) -> DistributedJob:
        """The job, with a partitioned folder's own grid filling what was not given
        (``algo`` None, ``nprocs`` 1, replication 1 for 1.5D); else ``algo`` or 1D."""
        dcfg = replace(dcfg, algo=algo or "1d")
        if is_shard_dir(dataset):
            written = manifest_shape(read_manifest(dataset))
            algo = algo or written.algo
            replication = (written.cols if algo == "1.5d" and dcfg.replication == 1
                           else dcfg.replication)
            dcfg = replace(dcfg, algo=algo, replication=replication)
            nprocs = written.size if nprocs == 1 else nprocs
        if dcfg.comm == "sparse" and dcfg.algo not in ("1d", "1.5d"):
            raise GridError(f"--comm sparse supports --algo 1d and 1.5d, not {dcfg.algo}")
        return cls(dataset, cfg, dcfg, nprocs, **kw)


@dataclass
class DistributedRun:
    """Rank 0's view of a finished job: its training result and every rank's bytes."""

    graph: str
    shape: GridShape
    backend: str
    device: str
    result: TrainResult
    reports: list[RankReport]
    dcfg: DistributedConfig  # what was trained (the trials' winner where there were trials)
    trials: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self, job: DistributedJob) -> dict[str, Any]:
        """The JSON result of ``sparsegnn train`` on ranks."""
        config = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(job.cfg).items()}
        return {
            "dataset": self.graph, "model": job.cfg.model, "algo": self.dcfg.algo,
            "grid": [self.shape.rows, self.shape.cols, self.shape.layers],
            "world_size": self.shape.size, "backend": self.backend, "device": self.device,
            **self.result.to_dict(), "comm": comm_summary(self.reports),
            "resumed_from": (None if self.reports[0].resumed is None
                             else asdict(self.reports[0].resumed)),
            "memory_per_rank": [
                {"rank": r.rank, **r.memory.to_dict()} for r in self.reports
                if r.memory is not None
            ],
            "overlap": self.dcfg.overlap,
            "trials": self.trials,
            "comm_wait_s_per_epoch": [r.waited_s for r in self.reports],
            "config": config,
        }


def run_distributed(job: DistributedJob) -> DistributedRun | None:
    """Run ``job`` on ``job.nprocs`` spawned local ranks, or as this process's rank under
    torchrun; rank 0's :class:`DistributedRun` (``None`` on other torchrun ranks)."""
    if in_torchrun():  # the grid is torchrun's world, checked when the ranks build it
        mine = _run_job(job)
        return mine.value if mine.rank == 0 else None
    shape = grid_shape(job.dcfg.algo, job.nprocs, job.dcfg.replication)
    if is_shard_dir(job.dataset):
        check_manifest(job.dataset, shape, job.cfg.model)
    threads = max(1, (os.cpu_count() or 1) // shape.size)
    return spawn(_run_job, shape.size, (job,), threads=threads,
                 heartbeat_timeout_s=job.dcfg.timeout_s)[0].value


def _run_job(job: DistributedJob) -> RankResult[DistributedRun]:
    """One rank of a job: load (or read its shard), train, gather every rank's bytes; its
    own bytes are those of its last epoch."""
    session = init_session(job.dcfg.backend, job.dcfg.timeout_s)
    try:
        if is_shard_dir(job.dataset):
            source: Any = Path(job.dataset)
            name = read_manifest(source)["name"]
        else:
            source = load_any(job.dataset, job.data_dir, seed=job.cfg.seed)
            name = source.name
            if job.normalize_features and source.x is not None:
                source.x = row_normalize(source.x)
        with lost_peers_named():
            dcfg, trials = job.dcfg, []
            if job.trials:
                won, times = choose_by_trial(session, source, job.cfg, job.trials,
                                             job.trial_epochs)
                dcfg = job.trials[won]
                trials = [{"algo": c.algo, "replication": c.replication, "comm": c.comm,
                           "partition": None if c.partition is None else str(c.partition),
                           "overlap": c.overlap, "measured_epoch_s": t}
                          for c, t in zip(job.trials, times, strict=True)]
            trained = train_rank(source, job.cfg, dcfg, session)
            assert trained is not None  # the grid spans the whole job
            _, result, report = trained
            reports = gather_objects(report)
    finally:
        close_session()
    shape = grid_shape(dcfg.algo, len(reports), dcfg.replication)
    run = DistributedRun(name, shape, session.backend, str(session.device), result, reports,
                         dcfg, trials)
    return RankResult(session.rank, session.world_size, run, ByteCounts(report.epoch_bytes))
