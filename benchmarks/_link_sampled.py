"""Sampled link training throughput, ours vs PyG's ``LinkNeighborLoader``, side by side.

Both sides train the same kind of minibatch on the same split (:func:`random_link_split`
of the graph, seed 0): seed edges (the training positives, shuffled, ``BATCH`` per
minibatch) plus as many uniform random pairs as negatives (PyG's
``neg_sampling="binary"``, ratio 1), the endpoints' two-hop neighbourhoods over the
training message edges (fan-outs ``FANOUTS``), a GraphSAGE encoder 128 -> 64 (mean
aggregation, no dropout) on the sampled blocks, the dot decoder on the candidates, binary
cross-entropy, one Adam step (lr 0.01) per minibatch. Features are row-normalised where
they are non-negative (Cora's); the SBM's Gaussian rows, whose sums come near zero, are
used as they are.

* ``ours``: :class:`sparsegnn.sampling.link_loader.LinkMinibatchLoader` (its defaults:
  ``bulk`` 4 minibatches per sampler call, sampled by a prefetching thread) and
  :func:`sparsegnn.train.link_sampled.minibatch_step`, the step of ``train --task link
  --mode minibatch``; ``ours_serial``: the same without the prefetching thread;
* ``pyg``: ``LinkNeighborLoader`` (``num_workers=0``) and PyG's ``GraphSAGE``. It needs
  torch-sparse or pyg-lib; where neither imports, the row says so (build them with
  ``benchmarks/build_pyg_extensions.sh``) and only ours is measured.

Figure: seed (positive) edges trained per second, after ``WARMUP`` minibatches, over
``steps`` minibatches (Cora: every minibatch of an epoch; the SBM: 40), by wall clock and
by the process's CPU time (ours' prefetching thread counts in its CPU time). Each
(graph, side, round) runs in a fresh process, the sides interleaved round by round; the
median over rounds is reported and ``speedups`` are ours' rate over PyG's.

Shared by ``benchmarks/link.py`` (its last rows) and ``benchmarks/link_sampled.py`` (these
rows alone); each side's fresh process runs this file with ``--child``.

    python benchmarks/link_sampled.py [--quick] [--json] [--threads N] [--rounds R]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, emit, parse_args, print_table, run_isolated
from _workloads import counts_like
from sparsegnn.data import load_any, row_normalize
from sparsegnn.data.generators import sbm
from sparsegnn.data.graph import GraphData
from sparsegnn.data.link_edges import LinkSplit
from sparsegnn.sampling.link_loader import LinkMinibatchLoader
from sparsegnn.sampling.link_split import random_link_split
from sparsegnn.sampling.samplers import NodeWiseSampler
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.link_sampled import minibatch_step
from sparsegnn.train.link_task import LinkRequest, build_link_model

FANOUTS = (10, 5)
BATCH = 512
WARMUP = 2
IMPLS = ("ours", "ours_serial", "pyg")
NOT_BUILT = "PyG's sampler not built: run benchmarks/build_pyg_extensions.sh"


def pyg_sampler_status() -> str | None:
    """None when ``LinkNeighborLoader`` can sample here, else the line that says why not."""
    try:
        import torch_geometric.typing as pyg_typing
    except ImportError:
        return "PyG not installed"
    if not (pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE):
        return NOT_BUILT
    return None


def load_graph(name: str) -> GraphData:
    """A bundled graph by name, or ``sbm-S``: the generated SBM of 2^S vertices (128
    dense features, average degree 16, as ``benchmarks/link.py``'s)."""
    if name.startswith("sbm-"):
        n = 1 << int(name.removeprefix("sbm-"))
        return sbm(n, max(2, n >> 12), 16.0, num_features=128, seed=0)
    return load_any(name)


def timed(steps: int, run_step: Any, batches: Any) -> dict[str, float]:
    """Run ``run_step`` on the first ``WARMUP + steps`` of ``batches``, timing the last
    ``steps``: seed edges per second (wall and CPU) and the mean loss per candidate."""
    edges, loss, count = 0, 0.0, 0
    wall = cpu = 0.0
    for i, batch in enumerate(batches):
        if i == WARMUP:
            wall, cpu = time.perf_counter(), time.process_time()
        if i == WARMUP + steps:
            break
        seeds, summed, candidates = run_step(batch)
        if i >= WARMUP:
            edges, loss, count = edges + seeds, loss + summed, count + candidates
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"edges_per_s": edges / wall, "edges_per_cpu_s": edges / cpu,
            "mean_loss": loss / max(1, count), "steps_timed": steps, "seed_edges": edges}


def run_ours(graph: GraphData, x: torch.Tensor, split: LinkSplit, steps: int,
             prefetch: bool) -> dict[str, float]:
    request = LinkRequest(model="sage", seed=0)
    model = build_link_model(request, x.shape[1])
    optimizer = torch.optim.Adam(model.parameters(), lr=request.lr)
    sampler = NodeWiseSampler(CSRMatrix.from_edge_index(split.train_message, graph.num_nodes),
                              FANOUTS)
    loader = LinkMinibatchLoader(sampler, split.train.pos, x, graph.num_nodes, neg_ratio=1.0,
                                 batch_size=BATCH, bulk=4, seed=0, prefetch=prefetch)

    def step(item: Any) -> tuple[int, float, int]:
        summed = minibatch_step(model, optimizer, item, len(FANOUTS))
        return int(item.labels.sum()), summed, item.labels.numel()

    model.train()
    return timed(steps, step, loader.epoch(0))


def run_pyg(graph: GraphData, x: torch.Tensor, split: LinkSplit, steps: int
            ) -> dict[str, float]:
    from torch_geometric.data import Data
    from torch_geometric.loader import LinkNeighborLoader
    from torch_geometric.nn.models import GraphSAGE

    torch.manual_seed(0)
    data = Data(x=x, edge_index=split.train_message, num_nodes=graph.num_nodes)
    loader = LinkNeighborLoader(data, num_neighbors=list(FANOUTS),
                                edge_label_index=split.train.pos, neg_sampling="binary",
                                batch_size=BATCH, shuffle=True)
    model = GraphSAGE(x.shape[1], 128, num_layers=2, out_channels=64)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def step(batch: Any) -> tuple[int, float, int]:
        optimizer.zero_grad()
        z = model(batch.x, batch.edge_index)
        src, dst = batch.edge_label_index
        loss = F.binary_cross_entropy_with_logits((z[src] * z[dst]).sum(-1), batch.edge_label,
                                                  reduction="sum")
        (loss / batch.edge_label.numel()).backward()
        optimizer.step()
        return int(batch.edge_label.sum()), float(loss.detach()), batch.edge_label.numel()

    model.train()
    return timed(steps, step, iter(loader))


def steps_for(name: str, split: LinkSplit) -> int:
    """Every timed minibatch of an epoch on a bundled graph, 40 on a generated one."""
    whole = -(-split.train.num_pos // BATCH) - WARMUP
    return min(whole, 40) if name.startswith("sbm-") else whole


def child(config: dict[str, Any]) -> dict[str, Any]:
    """One side on one graph, in this fresh process."""
    if config["threads"] is not None:
        torch.set_num_threads(config["threads"])
    graph = load_graph(config["graph"])
    assert graph.x is not None
    x = graph.x.to(torch.float32)
    x = row_normalize(x) if counts_like(x) else x
    split = random_link_split(graph.edge_index, graph.num_nodes, seed=0)
    steps, impl = steps_for(config["graph"], split), config["impl"]
    if impl == "pyg":
        return run_pyg(graph, x, split, steps)
    return run_ours(graph, x, split, steps, prefetch=impl == "ours")


def sampled_rows(quick: bool, threads: int | None, rounds: int
                 ) -> tuple[list[Row], dict[str, float], dict[str, Any]]:
    """The throughput rows of every graph and side, their speedups and the peer's status."""
    status = pyg_sampler_status()
    if status is not None:
        print(f"sampled link training: {status}; only ours is measured.")
    impls = [i for i in IMPLS if i != "pyg" or status is None]
    results: list[Row] = []
    speedups: dict[str, float] = {}
    for name in ("cora", f"sbm-{11 if quick else 15}"):
        runs: dict[str, list[dict[str, Any]]] = {impl: [] for impl in impls}
        for r in range(rounds):
            for impl in impls:
                out = run_isolated(Path(__file__), {"graph": name, "impl": impl,
                                                    "threads": threads})
                if "error" in out:
                    raise SystemExit(f"[{name}] sampled {impl} failed: {out['error']}")
                runs[impl].append(out)
                print(f"[{name}] sampled round {r} {impl}: {out['edges_per_s']:.0f} edges/s "
                      f"({out['edges_per_cpu_s']:.0f} per CPU s), loss {out['mean_loss']:.4f}",
                      flush=True)
        rows = {impl: _summary(name, impl, r) for impl, r in runs.items()}
        if status is not None:
            rows["pyg"] = {"what": "link_sampled_sage_dot", "graph": name, "impl": "pyg",
                           "status": status}
        results += rows.values()
        for ours in (i for i in ("ours", "ours_serial") if "edges_per_s" in rows["pyg"]):
            for rate in ("edges_per_s", "edges_per_cpu_s"):
                speedups[f"{name}/sampled_{ours}_vs_pyg_{rate}"] = (
                    rows[ours][f"{rate}_median"] / rows["pyg"][f"{rate}_median"])
    return results, speedups, {"sampled/pyg_status": status or "LinkNeighborLoader measured"}


def _summary(graph: str, impl: str, runs: list[dict[str, Any]]) -> Row:
    return {"what": "link_sampled_sage_dot", "graph": graph, "impl": impl,
            "rounds": len(runs), "batch_size": BATCH, "fanouts": list(FANOUTS),
            "steps_timed": runs[0]["steps_timed"],
            "edges_per_s_median": statistics.median(r["edges_per_s"] for r in runs),
            "edges_per_cpu_s_median": statistics.median(r["edges_per_cpu_s"] for r in runs),
            "edges_per_s": [r["edges_per_s"] for r in runs],
            "mean_loss": [r["mean_loss"] for r in runs]}


COLUMNS = ["graph", "impl", "edges_per_s_median", "edges_per_cpu_s_median", "steps_timed",
           "rounds", "status"]


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra_values={
        "threads": "intra-op threads for every side (default: torch's); 1 on a shared machine",
        "rounds": "fresh-process rounds per side and graph (default 3; --quick 1)"})
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    threads = None if args.threads is None else int(args.threads)
    rounds = int(args.rounds) if args.rounds else (1 if args.quick else 3)
    results, speedups, metrics = sampled_rows(args.quick, threads, rounds)
    print_table(results, COLUMNS)
    emit(results, speedups, metrics, args.json)


if __name__ == "__main__":
    main()
