"""What every benchmark shares: arguments, timing, machine bandwidths, isolated memory
runs, output, and the workloads more than one benchmark measures.

Conventions: ``python benchmarks/NAME.py [--quick] [--json]`` (:func:`make_parser`,
:func:`parse_args`) prints a human-readable table and, with ``--json``, one JSON object
as the last stdout line (:func:`emit`) with ``results`` (rows: what was measured, ours
and the peer, times, sizes), ``speedups`` (name -> peer time / our time, above 1 means
sparsegnn is faster) and ``metrics`` (name -> value). ``--quick`` is a small run of
every code path, under a minute. No benchmark imports another: what two of them share
lives here.

Peak memory is measured in a fresh process per configuration (:func:`run_isolated`),
because torch's CPU allocations are invisible to tracemalloc and a process's peak never
goes down: the child resets the kernel's high-water mark of its resident set
(``/proc/self/clear_refs``) once its inputs are loaded and reads ``VmHWM`` afterwards;
where that file is unavailable, a thread samples the resident set every millisecond.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn import functional as F

from sparsegnn.data import load_cora
from sparsegnn.data.generators import rmat, sbm, uniform_random
from sparsegnn.data.graph import GraphData
from sparsegnn.nn import GCN
from sparsegnn.sparse import CSRMatrix, gcn_norm
from sparsegnn.sparse.reorder import Reordering, reorder

if TYPE_CHECKING:
    from sparsegnn.tracking.events import Event
    from sparsegnn.tracking.metrics import TrackMetrics
    from sparsegnn.tracking.pipeline import Evaluation, Reconstruction

Row = dict[str, Any]


# ---------------------------------------------------------------------- arguments, output
def make_parser(description: str, quick_help: str = "a small run, under a minute"
                ) -> argparse.ArgumentParser:
    """An argument parser with the flags every benchmark accepts (``--quick``, ``--json``,
    ``--repeats``), for benchmarks that add typed options of their own.

    ``--child`` is internal: :func:`run_isolated` passes one configuration through it.
    """
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--json", action="store_true", help="print a JSON summary last")
    parser.add_argument("--repeats", type=int, default=None, help="timed repetitions")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return parser


def parse_args(description: str, extra_flags: dict[str, str] | None = None,
               extra_values: dict[str, str] | None = None,
               argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The flags every benchmark accepts, plus boolean ``extra_flags`` and string-valued
    ``extra_values`` (name -> help; absent values are None)."""
    parser = make_parser(description)
    for name, text in (extra_flags or {}).items():
        parser.add_argument(f"--{name}", action="store_true", help=text)
    for name, text in (extra_values or {}).items():
        parser.add_argument(f"--{name}", default=None, help=text)
    return parser.parse_args(argv)


def print_table(rows: Sequence[Row], columns: Sequence[str]) -> None:
    """Left-aligned text table of ``columns`` (floats to 4 significant digits)."""
    cells = [[_fmt(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    print()


def skipped(ok: bool, why: str, as_json: bool) -> bool:
    """Whether a benchmark that needs network namespaces must skip (``ok``/``why`` from
    ``testbed.netns.available``); when it must, say why and emit the skip JSON."""
    if ok:
        return False
    print(f"skipped: needs network namespaces here ({why})")
    emit([], {}, {"skipped": why}, as_json)
    return True


def emit(
    results: list[Row], speedups: dict[str, float], metrics: dict[str, Any], as_json: bool
) -> None:
    """Print the speedups and metrics, then, with ``as_json``, the JSON summary line."""
    print("speedups (peer time / our time, > 1 = we are faster):")
    for name, value in speedups.items():
        print(f"  {name}: {value:.2f}")
    print("metrics:")
    for name, value in metrics.items():
        print(f"  {name}: {_fmt(value)}")
    if as_json:
        print(json.dumps({"results": results, "speedups": speedups, "metrics": metrics}))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


# ---------------------------------------------------------------------- timing
@dataclass(frozen=True)
class Timing:
    """Wall-clock seconds of each timed run; min is the headline (least disturbed)."""

    times: list[float]

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def time_it(fn: Callable[[], object], *, repeats: int = 5, warmup: int = 1) -> Timing:
    """Run ``fn`` ``warmup`` times untimed (caches, allocator, lazy setup), then time it."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return Timing(times)


def time_many(
    fns: dict[str, Callable[[], object]], *, repeats: int = 5, warmup: int = 1
) -> dict[str, Timing]:
    """Time several functions round-robin: one run of each per round.

    On a machine shared with other work the load drifts; interleaving exposes every
    contender to the same drift, so their ratios stay meaningful where back-to-back
    blocks of runs would not.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: Timing(t) for name, t in times.items()}


def time_once(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and the seconds it took: for one-time costs such as a reordering."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


class Stopwatch:
    """Wall-clock seconds of consecutive stages: ``lap()`` returns the time since the
    previous lap (or since creation)."""

    def __init__(self) -> None:
        self._last = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        seconds, self._last = now - self._last, now
        return seconds


@dataclass(frozen=True)
class Rate:
    """Items per second of one measurement, by wall clock and by process CPU time.

    On one thread, CPU time is the fairer figure on a machine shared with other jobs (it
    does not count the time the process waited for a core)."""

    wall: float
    cpu: float


def rate_of(fn: Callable[[], int]) -> Rate:
    """The rate of ``fn``, which returns how many items it produced."""
    start, cpu_start = time.perf_counter(), time.process_time()
    count = fn()
    return Rate(count / (time.perf_counter() - start), count / (time.process_time() - cpu_start))


# ---------------------------------------------------------------------- bandwidth
def stream_probe(nbytes: int) -> Callable[[], object]:
    """A copy of ``nbytes / 2`` bytes: ``nbytes`` of streaming traffic (read + write)."""
    src = torch.ones(max(1, nbytes // 8))
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def random_gather_probe(rows: int, width: int, gathers: int, bag: int) -> Callable[[], object]:
    """Read ``gathers`` uniformly random rows of a ``rows x width`` float32 table.

    Uses the fastest gather on hand, FBGEMM's software-prefetched embedding-bag sum on
    all threads, summing bags of ``bag`` rows: an SpMM of the same size in which no
    gathered row is ever reused, i.e. the random-access bound. Timed interleaved with
    the SpMMs it bounds, so that both see the same machine load.
    """
    table = torch.randn(rows, width)
    index = torch.randint(0, rows, (gathers,))
    offsets = torch.arange(0, gathers, max(1, bag))
    return lambda: torch.nn.functional.embedding_bag(index, table, offsets, mode="sum")


def check_same(ours: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """Fail the benchmark if a float32 product differs from torch's beyond rounding."""
    if not torch.allclose(ours, ref, rtol=1e-4, atol=1e-5):
        err = float((ours - ref).abs().max())
        raise AssertionError(f"{what}: result differs from torch's by {err}")


def spmm_stream_bytes(nnz: int, rows: int, width: int) -> int:
    """Compulsory traffic of a float32 CSR SpMM whose gathers all hit the cache.

    Indices and values (12 bytes per nonzero), row pointers, X read once and the output
    written once.
    """
    return nnz * 12 + (rows + 1) * 8 + 2 * rows * width * 4


# ---------------------------------------------------------------------- isolated runs
def run_isolated(script: Path, config: dict[str, Any], timeout: float = 1800,
                 env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``script --child CONFIG`` in a fresh interpreter; its last stdout line is JSON.

    ``env`` adds to (or overrides) this process's environment in the child: settings such
    as ``THP_MEM_ALLOC_ENABLE`` are read once per process, so an A/B needs a process each.
    """
    cmd = [sys.executable, str(script), "--child", json.dumps(config)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                          env={**os.environ, **(env or {})})
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1])


class PeakMemory:
    """Peak resident set of this process since :meth:`reset`, in bytes."""

    def __init__(self) -> None:
        self._sampler: threading.Thread | None = None
        self._stop = threading.Event()
        self._sampled = 0
        self.method = "VmHWM after clear_refs" if _can_reset_hwm() else "1 ms RSS sampling"

    def reset(self) -> None:
        """Start a new measurement from the current resident set."""
        if _can_reset_hwm():
            Path("/proc/self/clear_refs").write_text("5")
            return
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join()
        self._stop = threading.Event()
        self._sampled = rss_bytes()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def peak(self) -> int:
        if _can_reset_hwm():
            return _proc_status_kib("VmHWM") * 1024
        return max(self._sampled, rss_bytes())

    def _sample(self) -> None:
        while not self._stop.wait(0.001):
            self._sampled = max(self._sampled, rss_bytes())


def rss_bytes() -> int:
    """Current resident set of this process."""
    if Path("/proc/self/status").exists():
        return _proc_status_kib("VmRSS") * 1024
    import psutil

    return int(psutil.Process().memory_info().rss)


def _proc_status_kib(key: str) -> int:
    match = re.search(rf"^{key}:\s+(\d+)", Path("/proc/self/status").read_text(), re.M)
    if match is None:
        raise RuntimeError(f"/proc/self/status has no {key}")
    return int(match.group(1))


def _can_reset_hwm() -> bool:
    return os.access("/proc/self/clear_refs", os.W_OK) and Path("/proc/self/status").exists()


# ---------------------------------------------------------------------- shared workloads
# What spmm.py / fullgraph.py measure on the CPU and gpu_check.py on CUDA: the graphs,
# the peers' entry points and the GCN configurations, defined once here so that no
# benchmark imports another.
WIDTHS = (16, 128)
# The ordering the acceptance check uses: one choice for every graph, fixed in advance.
DEFAULT_REORDERING = "community"


@dataclass(frozen=True)
class GraphSpec:
    name: str
    build: Callable[[], GraphData]


def graph_specs(quick: bool) -> list[GraphSpec]:
    scale = 14 if quick else 18
    n = 1 << scale
    return [
        GraphSpec("rmat", lambda: rmat(scale, edge_factor=8, seed=1)),
        GraphSpec("sbm", lambda: sbm(n, n >> 12, 16.0, mixing=0.1, num_features=0, seed=1)),
        GraphSpec("uniform", lambda: uniform_random(n, 16.0, seed=1)),
    ]


def try_pyg_spmm() -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None:
    try:
        from torch_geometric.utils import spmm as pyg_spmm
    except ImportError:
        return None
    return pyg_spmm


def torch_csr(a: CSRMatrix) -> torch.Tensor:
    """A torch CSR tensor of its own (not our cached view) for the peer timings."""
    return torch.sparse_csr_tensor(a.crow.clone(), a.col.clone(), a.val.clone(), a.shape,
                                   check_invariants=False)


# GCN training (fullgraph.py, gpu_check.py)
HIDDEN = 128
DROPOUT = 0.5
REORDERING = DEFAULT_REORDERING
OURS = ("ours", "ours_unordered")


def have_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def pyg_forms() -> tuple[str, ...]:
    """PyG's own forms available here; the SparseTensor one needs torch_sparse."""
    forms = ("pyg_edge_index", "pyg_csr")
    return (*forms, "pyg_sparse_tensor") if have_module("torch_sparse") else forms


def configurations() -> tuple[str, ...]:
    """Every configuration this machine can run (ours only without PyG)."""
    if not have_module("torch_geometric"):
        return OURS
    return (*OURS, *pyg_forms(), "pyg_csr_reordered")


# ---------------------------------------------------------------------- graphs
def load_graph(name: str) -> GraphData:
    """``cora`` or ``sbm<scale>`` (2^scale vertices, 2^(scale-12) communities)."""
    if name == "cora":
        return load_cora()
    scale = int(name.removeprefix("sbm"))
    n = 1 << scale
    return sbm(n, max(2, n >> 12), 16.0, mixing=0.1, num_features=128, seed=0)


# ---------------------------------------------------------------------- models
class PygGCN(nn.Module):
    """The same architecture as ``sparsegnn.nn.GCN`` from PyG's ``GCNConv``."""

    def __init__(self, in_channels: int, hidden: int, out_channels: int):
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.conv1 = GCNConv(in_channels, hidden, cached=True)
        self.conv2 = GCNConv(hidden, out_channels, cached=True)

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        x = F.dropout(x, DROPOUT, self.training)
        x = F.relu(self.conv1(x, adj))
        x = F.dropout(x, DROPOUT, self.training)
        return self.conv2(x, adj)


def pyg_adj_t(edge_index: torch.Tensor, num_nodes: int, sparse_tensor: bool) -> Any:
    """PyG's own conversion to a transposed adjacency ``adj_t``: a torch sparse CSR
    tensor, or with ``sparse_tensor`` a torch_sparse ``SparseTensor``."""
    from torch_geometric.data import Data
    from torch_geometric.transforms import ToSparseTensor

    layout = None if sparse_tensor else torch.sparse_csr
    data = ToSparseTensor(layout=layout)(Data(edge_index=edge_index, num_nodes=num_nodes))
    return data.adj_t


def setup(
    config: str, g: GraphData, device: torch.device | None = None
) -> tuple[nn.Module, Any, GraphData]:
    """Model, the operator it takes and the graph data in the order training uses.

    Normalisation and reordering run on the CPU (the orderings use scipy); operator,
    data and model then move to ``device`` before PyG's first (caching) forward.
    """
    device = device or torch.device("cpu")
    torch.manual_seed(0)
    n, classes = g.num_nodes, g.num_classes
    if config.startswith("ours"):
        adj = gcn_norm(CSRMatrix.from_edge_index(g.edge_index, n), symmetric=True)
        if config == "ours":
            adj, ordering = reorder(adj, REORDERING)
            g = move_nodes(g, ordering)
        model = GCN(g.num_features, HIDDEN, classes, num_layers=2, dropout=DROPOUT)
        return model.to(device), adj.to(device), to_device(g, device)
    edge_index = g.edge_index
    if config == "pyg_csr_reordered":
        adj = gcn_norm(CSRMatrix.from_edge_index(edge_index, n), symmetric=True)
        _, ordering = reorder(adj, REORDERING)
        g = move_nodes(g, ordering)
        edge_index = ordering.edge_index_to_new(edge_index)
    model = PygGCN(g.num_features, HIDDEN, classes).to(device)
    if config == "pyg_edge_index":
        op = edge_index
    else:
        op = pyg_adj_t(edge_index, n, sparse_tensor=config == "pyg_sparse_tensor")
    op, g = op.to(device), to_device(g, device)
    with torch.no_grad():  # fills GCNConv's normalisation cache: PyG's one-time setup
        model(g.x, op)
    return model, op, g


def move_nodes(g: GraphData, ordering: Reordering) -> GraphData:
    """The node data training needs, in the new vertex order (old copies released)."""
    assert g.x is not None and g.y is not None and g.train_mask is not None
    return GraphData(edge_index=g.edge_index, num_nodes=g.num_nodes, x=ordering.to_new(g.x),
                     y=ordering.to_new(g.y), train_mask=ordering.to_new(g.train_mask), name=g.name)


def to_device(g: GraphData, device: torch.device) -> GraphData:
    """The node data training needs on ``device`` (no copy when already there)."""
    assert g.x is not None and g.y is not None and g.train_mask is not None
    return GraphData(edge_index=g.edge_index, num_nodes=g.num_nodes, x=g.x.to(device),
                     y=g.y.to(device), train_mask=g.train_mask.to(device), name=g.name)


def epoch_fn(model: nn.Module, op: Any, g: GraphData) -> Callable[[], float]:
    """One training epoch (forward, loss on the training vertices, backward, Adam step)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    assert g.train_mask is not None and g.y is not None
    train = g.train_mask.nonzero().flatten()
    y_train = g.y[train]
    model.train()

    def epoch() -> float:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(g.x, op)[train], y_train)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    return epoch


# ---------------------------------------------------------------------- tracking
# Simulated events on disk, rows and the report of the tracking benchmarks (tracking.py,
# tracking_sampled.py, tracking_dense.py); how they reconstruct is the library's
# (sparsegnn.tracking.settings.walkthrough_settings, pipeline.tune_and_evaluate).
TRACKING_DATA = Path(__file__).resolve().parents[1] / "out" / "bench_tracking"


@dataclass(frozen=True)
class TrackingDataset:
    """One kind of event: simulation arguments, and train/test sizes and seeds."""

    name: str
    gun: int | None  # muons per event, or None for ttbar
    pileup: int
    map_events: int  # extra events the module map is learnt from (with the training ones)
    train_events: int
    test_events: int
    seed: int


# tracking_sampled.py's large set, also tracking_dense.py's (both hold out the same events)
TTBAR_PU200 = TrackingDataset("ttbar_pu200", None, 200, 0, 4, 2, 71)
_SPLIT_SEED = {"train": 0, "test": 1, "map": 2}


def events_dir(root: Path, ds: TrackingDataset, split: str) -> Path:
    """Simulated events of ``ds``'s ``split``, simulated now unless already there."""
    from sparsegnn.tracking.events import event_files

    directory = root / ds.name / split
    count = {"train": ds.train_events, "test": ds.test_events, "map": ds.map_events}[split]
    seed = ds.seed + _SPLIT_SEED[split]
    if directory.is_dir() and len(event_files(directory)) == count:
        return directory
    if ds.gun is not None:
        from sparsegnn.tracking.simulate import GunConfig, simulate_gun

        simulate_gun(directory, GunConfig(events=count, particles=ds.gun, seed=seed))
    else:
        from sparsegnn.tracking.ttbar import TtbarConfig, simulate_ttbar

        simulate_ttbar(directory, TtbarConfig(events=count, pileup=ds.pileup, seed=seed))
    return directory


def gnn_figures(reco: Reconstruction, run: Evaluation) -> dict[str, float]:
    """A tuned reconstruction's figures on the test events of ``run``: seconds and edges
    per event, the tuned cut and track length, mean edge figures, missed particles."""
    edges = run.edges()
    return {"seconds_per_event": run.seconds_per_event,
            "edges_per_event": edges["num_edges"] / len(run.results),
            "cut": reco.config.cut, "min_track_hits": reco.config.min_track_hits,
            **{k: edges[k] for k in ("graph_efficiency", "edge_efficiency", "edge_purity")},
            **run.missed()}


def tracking_row(ds: TrackingDataset, method: str, test: list[Event], m: TrackMetrics,
                 seconds: float, extra: dict[str, Any]) -> Row:
    """One table row: a method on a dataset's test events."""
    return {"dataset": ds.name, "method": method, "events": len(test),
            "hits_per_event": sum(ev.num_hits for ev in test) / len(test),
            "tracking_efficiency": m.efficiency, "fake_rate": m.fake_rate,
            "duplicate_rate": m.duplicate_rate, "trackml_score": m.trackml_score,
            "reconstructable": m.num_reconstructable, "seconds_per_event": seconds, **extra}


def tracking_summary(rows: list[Row]) -> tuple[dict[str, float], dict[str, Any]]:
    """Speedups (CKF s / GNN s per dataset) and flat metrics of GNN and CKF rows."""
    speedups, metrics = {}, {}
    by_key = {(r["dataset"], r["method"]): r for r in rows}
    for name in dict.fromkeys(r["dataset"] for r in rows):
        gnn, ckf = by_key[(name, "gnn")], by_key[(name, "ckf")]
        speedups[f"{name}_gnn_vs_ckf"] = ckf["seconds_per_event"] / gnn["seconds_per_event"]
        for r in (gnn, ckf):
            for key in ("tracking_efficiency", "fake_rate", "duplicate_rate",
                        "seconds_per_event"):
                metrics[f"{name}_{r['method']}_{key}"] = r[key]
    return speedups, metrics


def tracking_report(rows: list[Row], as_json: bool) -> None:
    """The table, the speedups and metrics, and the JSON line of GNN and CKF rows."""
    print_table(rows, ["dataset", "method", "events", "hits_per_event", "tracking_efficiency",
                       "fake_rate", "duplicate_rate", "seconds_per_event"])
    speedups, metrics = tracking_summary(rows)
    emit(rows, speedups, metrics, as_json)


# ---------------------------------------------------------------------- misc
def gib(nbytes: float) -> float:
    return nbytes / (1 << 30)
