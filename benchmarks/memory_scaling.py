"""Per-rank memory as p grows: full-graph 1D, 1.5D, 2D, 3D and partitioned minibatch.

Generates an SBM graph (default: 4,194,304 vertices, average degree 16, so about 67M
nonzeros, and 128 float32 features: topology and features about 3 GiB), writes it once
per configuration in the partitioned on-disk formats (``data partition``: per-rank
shards, or row blocks for minibatch training), and trains each configuration with the
``sparsegnn train`` command in a process of its own, so that no rank ever holds the
whole graph and every peak is that configuration's alone. Replicated-topology minibatch
training (every rank holds the whole graph) runs beside the partitioned one at p = 4,
the throughput price of fitting in memory.

Per rank it reports the training peak (peak resident set minus the resident set right
after imports), the bytes held by kind (topology, features, model, optimiser) and the
bytes sent; per configuration the fraction of the single-process training peak the
largest rank needs, and the bound ``1.3 * single / p + 0.3 GiB`` the design promises.

    python benchmarks/memory_scaling.py --json               # 4M vertices, p in 1,2,4,8
    python benchmarks/memory_scaling.py --quick --json       # 32k vertices, p in 1,4, 1d/2d
    python benchmarks/memory_scaling.py --nodes 1048576 --ranks 1,2,4
    python benchmarks/memory_scaling.py --algos 1d,2d --ranks 1,4 --no-minibatch  # full graph
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, emit, make_parser, print_table
from sparsegnn.data import GraphData, save_graph, sbm
from sparsegnn.distributed import GridError, grid_shape
from sparsegnn.distributed.layout.partitioned import write_partitioned
from sparsegnn.distributed.layout.row_blocks import write_row_blocks
from sparsegnn.names import replicates

GIB = 2**30
BOUND_FACTOR, BOUND_SLACK = 1.3, 0.3 * GIB
FULLGRAPH = ("1d", "1.5d", "2d", "3d")
CHECKED = ("fullgraph 1d", "fullgraph 2d", "minibatch partitioned")  # held to the bound


def make_graph(nodes: int, degree: int, features: int, train: int, evaluated: int,
               seed: int) -> GraphData:
    """The benchmark graph: SBM communities as labels, ``train`` training seeds and
    ``evaluated`` validation and test vertices each (a minibatch epoch is then a fixed
    number of steps, whatever the graph's size)."""
    g = sbm(nodes, 16, degree, num_features=features, seed=seed)
    order = torch.randperm(nodes, generator=torch.Generator().manual_seed(seed))
    masks = [torch.zeros(nodes, dtype=torch.bool) for _ in range(3)]
    for mask, ids in zip(masks, torch.split(order[: train + 2 * evaluated],
                                            [train, evaluated, evaluated]), strict=True):
        mask[ids] = True
    g.train_mask, g.val_mask, g.test_mask = masks
    return g


def train(argv: list[str], timeout_s: float) -> dict[str, Any]:
    """``sparsegnn train ARGV --json`` in a fresh process; its JSON (or the error)."""
    cmd = [sys.executable, "-m", "sparsegnn", "train", *argv, "--no-progress", "--json",
           "--timeout", "900"]  # collectives wait while a peer works through gigabytes
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    out = json.loads(lines[-1])
    out["wall_s"] = time.perf_counter() - start
    return out


def memory_row(kind: str, p: int, c: int, out: dict[str, Any]) -> Row:
    """One configuration's row: per-rank training peaks, held bytes and bytes sent."""
    ranks = out["memory_per_rank"]
    row: Row = {
        "what": kind, "p": p, "replication": c,
        "training_peak_bytes_per_rank": [r["training_peak_bytes"] for r in ranks],
        "held_bytes_per_rank": [r["held_total_bytes"] for r in ranks],
        "held_by_kind_rank0": ranks[0]["held_bytes"],
        "max_training_peak_bytes": max(r["training_peak_bytes"] for r in ranks),
        "wall_s": out["wall_s"],
    }
    if "comm" in out:  # full-graph: every rank's bytes of one epoch
        row["bytes_sent_per_rank"] = [r["sent"] for r in out["comm"]["per_rank"]]
        row["matches_model"] = out["comm"]["matches_model"]
        row["epoch_time_s"] = out["epoch_time_s"]
    else:  # minibatch: rank 0's bytes of the whole run, by phase
        row["bytes_by_phase_rank0"] = {k: v["sent"] for k, v in out["comm_bytes"].items()}
        row["seeds_per_second_per_rank"] = out["seeds_per_second"]
    return row


def fullgraph_rows(g: GraphData, work: Path, ranks: list[int], args: Any) -> list[Row]:
    rows: list[Row] = []
    for algo in [a for a in args.algos.split(",") if a and a != "none"]:
        for p in ranks:
            c = 2 if replicates(algo) else 1
            if p == 1 and algo != "1d":
                continue  # every algorithm is the same single process at p = 1
            try:
                grid_shape(algo, p, c)  # type: ignore[arg-type]
            except GridError as err:
                rows.append({"what": f"fullgraph {algo}", "p": p, "skipped": str(err)})
                continue
            folder = work / f"{algo}-p{p}"
            write_partitioned(g, folder, algo, p, c, "gcn")  # type: ignore[arg-type]
            out = train(["--dataset", str(folder), "--nprocs", str(p), "--algo", algo,
                         "--replication", str(c), "--epochs", str(args.epochs),
                         "--hidden", str(args.hidden)], args.timeout)
            shutil.rmtree(folder)
            rows.append({"what": f"fullgraph {algo}", "p": p, "error": out["error"]}
                        if "error" in out else memory_row(f"fullgraph {algo}", p, c, out))
            print(_line(rows[-1]), flush=True)
    return rows


MINIBATCH = ("--mode", "minibatch", "--layers", "2", "--epochs", "1")


def minibatch_args(args: Any) -> list[str]:
    return [*MINIBATCH, "--fanouts", args.fanouts, "--batch-size", str(args.batch_size),
            "--bulk", str(args.bulk), "--hidden", str(args.hidden)]


def partitioned_rows(g: GraphData, work: Path, ranks: list[int], args: Any) -> list[Row]:
    """Partitioned minibatch training, each rank reading its row block from disk."""
    rows: list[Row] = []
    for p in ranks:
        folder = work / f"rows-p{p}"
        write_row_blocks(g, folder, p)
        out = train(["--dataset", str(folder), "--nprocs", str(p), *minibatch_args(args)],
                    args.timeout)
        shutil.rmtree(folder)
        rows.append(_row("minibatch partitioned", p, out))
    return rows


def replicated_row(work: Path, args: Any) -> Row:
    """Replicated-topology minibatch training: the launcher loads the whole graph and
    every rank gets a copy (run with the benchmark's own copy of the graph dropped)."""
    p = args.replicated_p
    out = train(["--dataset", str(work / "graph.npz"), "--nprocs", str(p),
                 *minibatch_args(args)], args.timeout)
    return _row("minibatch replicated", p, out)


def _row(kind: str, p: int, out: dict[str, Any]) -> Row:
    row = {"what": kind, "p": p, "error": out["error"]} if "error" in out \
        else memory_row(kind, p, 1, out)
    print(_line(row), flush=True)
    return row


def _line(row: Row) -> str:
    if "error" in row or "skipped" in row:
        return f"{row['what']} p={row['p']}: {row.get('error') or row.get('skipped')}"
    return (f"{row['what']} p={row['p']}: max training peak "
            f"{row['max_training_peak_bytes'] / GIB:.3f} GiB, held "
            f"{max(row['held_bytes_per_rank']) / GIB:.3f} GiB ({row['wall_s']:.0f} s)")


def judge(rows: list[Row]) -> dict[str, Any]:
    """Fractions of the single-process peak and the bound, per configuration; the
    throughput of partitioned against replicated minibatch training."""
    single = {kind.split()[0]: r["max_training_peak_bytes"] for r in rows
              if r["p"] == 1 and "max_training_peak_bytes" in r
              for kind in [r["what"]]}
    within = []
    for r in rows:
        base = single.get(r["what"].split()[0])
        if base is None or "max_training_peak_bytes" not in r:
            continue
        bound = BOUND_FACTOR * base / r["p"] + BOUND_SLACK
        r["fraction_of_single"] = r["max_training_peak_bytes"] / base
        r["bound_bytes"] = int(bound)
        r["within_bound"] = r["max_training_peak_bytes"] <= bound
        if r["what"] in CHECKED and r["p"] >= 4:
            within.append(r["within_bound"])
    metrics: dict[str, Any] = {
        "single_process_training_peak_bytes": single,
        "all_checked_within_bound": bool(within) and all(within),
        "checked_configurations": len(within),
    }
    part = [r for r in rows if r["what"] == "minibatch partitioned"]
    repl = [r for r in rows if r["what"] == "minibatch replicated"]
    for r in repl:
        same = [q for q in part if q["p"] == r["p"] and "seeds_per_second_per_rank" in q]
        if same and "seeds_per_second_per_rank" in r:
            metrics[f"minibatch_throughput_partitioned_over_replicated_p{r['p']}"] = (
                same[0]["seeds_per_second_per_rank"] / r["seeds_per_second_per_rank"])
    return metrics


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__ or "", quick_help="32k vertices, p in {1, 4}, under a minute")
    ap.add_argument("--nodes", type=int, default=4_194_304)
    ap.add_argument("--degree", type=int, default=16)
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=2, help="full-graph epochs")
    ap.add_argument("--ranks", default="1,2,4,8", help="comma-separated p values")
    ap.add_argument("--train-seeds", type=int, default=8192)
    ap.add_argument("--eval-seeds", type=int, default=8192)
    ap.add_argument("--fanouts", default="10,5")
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--bulk", type=int, default=4)
    ap.add_argument("--replicated-p", type=int, default=4,
                    help="p of the replicated-topology minibatch run shown beside (0: none)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per training run")
    ap.add_argument("--workdir", default=None, help="where the partitions go (default: temp)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--algos", default=",".join(FULLGRAPH),
                    help="full-graph algorithms ('none': minibatch only)")
    ap.add_argument("--no-minibatch", action="store_true",
                    help="full-graph rows only (no partitioned or replicated minibatch runs)")
    args = ap.parse_args(argv)
    if args.quick:
        args.nodes, args.features, args.ranks = 32768, 32, "1,4"
        args.algos = "1d,2d"
        args.train_seeds = args.eval_seeds = 1024
    ranks = [int(p) for p in args.ranks.split(",")]
    work = Path(tempfile.mkdtemp(prefix="sparsegnn-memory-", dir=args.workdir))
    try:
        g = make_graph(args.nodes, args.degree, args.features, args.train_seeds,
                       args.eval_seeds, args.seed)
        save_graph(g, work / "graph.npz")
        sizes = {"num_nodes": g.num_nodes, "num_edges": g.num_edges,
                 "num_features": int(g.x.shape[1]),
                 "feature_bytes": g.x.numel() * g.x.element_size()}
        print(f"graph: {sizes}", flush=True)
        rows = fullgraph_rows(g, work, ranks, args)
        if not args.no_minibatch:
            rows += partitioned_rows(g, work, ranks, args)
        del g  # the replicated run needs the memory: its launcher and ranks each hold it
        if args.replicated_p in ranks and not args.no_minibatch:
            rows.append(replicated_row(work, args))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    metrics = {**sizes, **judge(rows), "bound": "1.3 * single / p + 0.3 GiB",
               "fanouts": args.fanouts, "batch_size": args.batch_size, "hidden": args.hidden}
    done = [r for r in rows if "max_training_peak_bytes" in r]
    for r in done:
        r["max_training_peak_gib"] = r["max_training_peak_bytes"] / GIB
    print_table(done, ["what", "p", "replication", "max_training_peak_gib",
                       "fraction_of_single", "within_bound", "wall_s"])
    speedups = {k.replace("minibatch_throughput_partitioned_over_replicated",
                          "minibatch_partitioned_vs_replicated"): v
                for k, v in metrics.items() if k.startswith("minibatch_throughput")}
    emit(rows, speedups, metrics, args.json)
    return 0 if not any("error" in r for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
