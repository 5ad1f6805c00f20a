"""Communication volume of distributed full-graph training: dense vs sparsity-aware.

Part 1 (no ranks, :func:`sparsegnn.distributed.epoch_volume`): for an SBM graph with
community structure and an R-MAT graph, P ranks and the block, random, METIS and
load-balanced partitions, the total and maximum per-rank rows of H moved per SpMM, and
the bytes of one epoch (GCN, 2 layers, hidden 16, float32), for oblivious 1D, sparse 1D
and sparse 1.5D (c = 2, 4; the graph is then cut into P / c blocks).

Part 2 (real gloo ranks, p <= 8, a small graph): epoch time and measured bytes of dense
vs sparse 1D under block and METIS partitions, and (full mode) Cora on 4 ranks trained
with both, to the same accuracy.

    python benchmarks/communication.py --quick --json     # small graphs, about a minute
    python benchmarks/communication.py --medium --json    # 64k-vertex graphs, P to 256
    python benchmarks/communication.py --json             # ~1M-vertex graphs, P to 1024
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from _harness import Row, emit, parse_args, print_table
from sparsegnn.data import load_any, row_normalize
from sparsegnn.distributed import barrier, grid_shape, rank_session, spawn
from sparsegnn.distributed.planning.planner import layout, plan_epoch
from sparsegnn.nn import operator_for
from sparsegnn.partition import Adjacency, partition, size_cap
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.fullgraph import TrainConfig
from sparsegnn.train.rank_train import DistributedConfig, train_rank

PARTITIONERS = ("block", "random", "metis", "balanced")
# (label, algo, replication, comm)
SCHEMES = [("dense-1d", "1d", 1, "dense"), ("sparse-1d", "1d", 1, "sparse"),
           ("sparse-1.5d-c2", "1.5d", 2, "sparse"), ("sparse-1.5d-c4", "1.5d", 4, "sparse")]
PLAN_CFG = TrainConfig(model="gcn", hidden=16, num_layers=2)


def volume_rows(spec: str, ranks: list[int],
                partitioners: tuple[str, ...] = PARTITIONERS) -> list[Row]:
    """Planned volumes of every scheme and partitioner at every P (one partition per
    distinct block count, shared by the schemes that use it)."""
    graph = load_any(spec, None, seed=0)
    adj = Adjacency.from_edge_index(graph.edge_index, graph.num_nodes)
    operator = operator_for("gcn", CSRMatrix.from_edge_index(graph.edge_index, graph.num_nodes))
    rows = []
    degree = np.diff(adj.indptr)
    for p in ranks:
        bound = max_load_bound(degree, p)
        for partitioner in partitioners:
            layouts: dict[int, Any] = {}
            for label, algo, c, comm in SCHEMES:
                shape = grid_shape(algo, p, c)  # type: ignore[arg-type]
                if shape.rows not in layouts:
                    layouts[shape.rows] = layout(graph, grid_shape("1d", shape.rows), partitioner,
                                                 adj=adj, operator=operator)
                lay = replace(layouts[shape.rows], shape=shape)
                got = plan_epoch(lay, comm, PLAN_CFG, value_bytes=4)
                rows.append({
                    "graph": spec, "nodes": graph.num_nodes, "edges": graph.num_edges,
                    "p": p, "partitioner": partitioner, "scheme": label,
                    "rows_total": got["rows_per_spmm"]["total"],
                    "rows_max": got["rows_per_spmm"]["max_per_rank"],
                    "epoch_mib_total": got["bytes_per_epoch"]["total"] / 2**20,
                    "epoch_mib_max": got["bytes_per_epoch"]["max_per_rank"] / 2**20,
                    "partition_s": round(lay.partition_seconds, 2),
                    "max_lower_bound": bound if label == "sparse-1d" else None,
                })
                print(f"  {json.dumps(rows[-1])}", flush=True)
    return rows


def max_load_bound(degree: np.ndarray, p: int, imbalance: float = 0.03) -> int:
    """A floor under any sparse-1D partition's maximum per-rank rows: the part holding
    vertex v receives every neighbour of v outside it, at least ``deg(v) - cap + 1``
    with ``cap`` the largest part size the tolerance allows. One hub can thus fix the
    maximum whatever the partitioner does."""
    return max(0, int(degree.max()) - size_cap(len(degree), p, imbalance) + 1)


def _gloo_body(spec: str, cfg: TrainConfig, todo: list[tuple], work: str) -> list[Row]:
    """Rank body: each (p, partitioner, comm) on the first p ranks of one job."""
    out = []
    with rank_session("gloo", timeout_s=300) as session:
        graph = load_any(spec, None, seed=0)
        if graph.x is not None:
            graph.x = row_normalize(graph.x)
        for p, partitioner, comm in todo:
            barrier()
            parts = Path(work) / f"{partitioner}-{p}.npy"
            dcfg = DistributedConfig(algo="1d", backend="gloo", comm=comm,
                                     partition=parts if partitioner != "block" else None)
            got = train_rank(graph, cfg, dcfg, session, members=range(p))
            if got is None:
                continue
            _, result, report = got
            out.append({"graph": spec, "p": p, "partitioner": partitioner, "comm": comm,
                        "rank": report.rank, "epoch_time_s": result.epoch_time_s,
                        "test_accuracy": result.test_accuracy,
                        "sent": report.epoch_bytes.sent,
                        "matches_plan": report.matches_model()})
    return out


def gloo_rows(spec: str, ranks: list[int], cfg: TrainConfig) -> list[Row]:
    """Measured epoch time (slowest rank) and bytes of dense vs sparse 1D on real ranks."""
    graph = load_any(spec, None, seed=0)
    adj = Adjacency.from_edge_index(graph.edge_index, graph.num_nodes)
    todo = [(p, part, comm) for p in ranks for part in ("block", "metis")
            for comm in ("dense", "sparse")]
    with tempfile.TemporaryDirectory() as work:
        for p in ranks:
            np.save(Path(work) / f"metis-{p}.npy", partition(adj, "metis", p))
        world = max(ranks)
        threads = max(1, (os.cpu_count() or 1) // world)
        per_rank = spawn(_gloo_body, world, (spec, cfg, todo, work), threads=threads,
                         wall_timeout_s=3000)
    flat = [r for rows in per_rank for r in rows]
    rows = []
    for p, part, comm in todo:
        mine = [r for r in flat if (r["p"], r["partitioner"], r["comm"]) == (p, part, comm)]
        rows.append({"graph": spec, "p": p, "partitioner": part, "comm": comm,
                     "epoch_time_s": max(r["epoch_time_s"] for r in mine),
                     "test_accuracy": mine[0]["test_accuracy"],
                     "sent_mib_total": sum(r["sent"] for r in mine) / 2**20,
                     "matches_plan": all(r["matches_plan"] for r in mine)})
    return rows


def acceptance(volumes: list[Row], graphs: dict[str, str], p: int) -> dict[str, Any]:
    """The ratios the issue asks for, per named graph at P = ``p`` (absent if not run)."""
    out: dict[str, Any] = {}
    for name, spec in graphs.items():
        def pick(partitioner: str, scheme: str, spec: str = spec) -> Row | None:
            return next((r for r in volumes if (r["graph"], r["p"], r["partitioner"],
                                                r["scheme"]) == (spec, p, partitioner, scheme)),
                        None)

        # Dense 1D moves every row whatever the partition: any partitioner's row will do.
        dense = next((r for r in volumes if (r["graph"], r["p"], r["scheme"])
                      == (spec, p, "dense-1d")), None)
        metis, bal = pick("metis", "sparse-1d"), pick("balanced", "sparse-1d")
        if dense is None or metis is None:
            continue
        out[f"{name}_p{p}/sparse1d_metis_over_dense1d_total"] = (
            metis["rows_total"] / dense["rows_total"])
        if bal is None:
            continue
        out.update({
            f"{name}_p{p}/balanced_over_metis_max": bal["rows_max"] / metis["rows_max"],
            f"{name}_p{p}/balanced_over_metis_total": bal["rows_total"] / metis["rows_total"],
            f"{name}_p{p}/max_lower_bound_over_metis_max":
                metis["max_lower_bound"] / metis["rows_max"],
        })
    return out


def main() -> int:
    args = parse_args(__doc__ or "", {"no-gloo": "skip the real-rank runs",
                                      "medium": "64k-vertex graphs, P to 256"},
                      {"graphs": "comma-separated subset of sbm,dcsbm,rmat (default: all)",
                       "partitioners": "comma-separated subset of block,random,metis,balanced "
                                       "(default: all)",
                       "ranks": "comma-separated part counts P (default: 16,64,256,1024; "
                                "--medium to 256, --quick 16,64)"})
    torch.set_num_threads(1)  # the volume part is sorts of index arrays: threads only contend
    # sbm: equal communities, uniform degrees; dcsbm: the same, degree-corrected (power-law
    # degrees inside communities, hubs); rmat: skewed, no planted communities.
    if args.quick:
        n, blocks, rmat, ranks = 8192, 64, "rmat:13", [16, 64]
        gloo_spec, gloo_ranks, epochs = "sbm:nodes=2048,blocks=8,degree=16", [2, 4], 3
    elif args.medium:
        n, blocks, rmat, ranks = 65536, 256, "rmat:16", [16, 64, 256]
        gloo_spec, gloo_ranks, epochs = "sbm:nodes=16384,blocks=16,degree=16", [2, 4, 8], 5
    else:
        n, blocks, rmat, ranks = 1048576, 1024, "rmat:20", [16, 64, 256, 1024]
        gloo_spec, gloo_ranks, epochs = "sbm:nodes=16384,blocks=16,degree=16", [2, 4, 8], 5
    graphs = {"sbm": f"sbm:nodes={n},blocks={blocks},degree=20",
              "dcsbm": f"sbm:nodes={n},blocks={blocks // 4},degree=20,powerlaw=2.5",
              "rmat": rmat}
    if args.graphs:
        graphs = {name: graphs[name] for name in args.graphs.split(",")}
    if args.ranks:
        ranks = [int(r) for r in args.ranks.split(",")]
    start = time.perf_counter()
    partitioners = tuple(args.partitioners.split(",")) if args.partitioners else PARTITIONERS
    volumes = [row for spec in graphs.values() for row in volume_rows(spec, ranks, partitioners)]
    print_table(volumes, ["graph", "p", "partitioner", "scheme", "rows_total", "rows_max",
                          "max_lower_bound", "epoch_mib_total", "epoch_mib_max",
                          "partition_s"])
    metrics: dict[str, Any] = acceptance(volumes, graphs, 256 if not args.quick else max(ranks))
    speedups: dict[str, float] = {}
    results = [{"what": "volume", **r} for r in volumes]
    if not args.no_gloo:
        cfg = TrainConfig(hidden=16, num_layers=2, dropout=0.0, epochs=epochs,
                          patience=epochs, progress=False)
        timed = gloo_rows(gloo_spec, gloo_ranks, cfg)
        if not args.quick:
            cora = TrainConfig(hidden=16, num_layers=2, epochs=200, progress=False)
            for r in gloo_rows("cora", [4], cora):
                metrics[f"cora_p4_{r['partitioner']}_{r['comm']}/test_accuracy"] = r[
                    "test_accuracy"]
        print_table(timed, ["graph", "p", "partitioner", "comm", "epoch_time_s",
                            "sent_mib_total", "matches_plan"])
        for r in timed:
            if r["comm"] == "sparse":
                dense = next(d for d in timed if (d["p"], d["partitioner"], d["comm"])
                             == (r["p"], r["partitioner"], "dense"))
                key = f"gloo_p{r['p']}_{r['partitioner']}/sparse_vs_dense_epoch"
                speedups[key] = dense["epoch_time_s"] / r["epoch_time_s"]
        metrics["gloo_bytes_match_plan"] = all(r["matches_plan"] for r in timed)
        results += [{"what": "gloo", **r} for r in timed]
    metrics["wall_s"] = round(time.perf_counter() - start, 1)
    emit(results, speedups, metrics, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
