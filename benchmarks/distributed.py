"""Distributed full-graph training: epoch time and bytes per rank, measured vs modelled.

For each algorithm and p in {1, 2, 4, 8} that the algorithm's grid admits, trains a GCN
for a few epochs on an SBM graph and reports the median epoch time and, per rank, the
bytes sent and received in one epoch next to the analytic prediction of
:mod:`sparsegnn.distributed.planning.comm_model`. All cases run on sub-grids of one job of
``max(p)`` local gloo ranks (one process start-up for everything); a barrier separates
the cases so that idle ranks do not disturb the timings.

    python benchmarks/distributed.py --json
    python benchmarks/distributed.py --quick --json    # 1024 vertices, p in {1, 2, 4}, 2 epochs
    python benchmarks/distributed.py --nodes 8192 --degree 16 --hidden 64 --ranks 1,2,4,8
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, emit, make_parser
from sparsegnn.data import load_any
from sparsegnn.distributed import (
    ALGORITHMS,
    GridError,
    barrier,
    grid_shape,
    rank_session,
    spawn,
)
from sparsegnn.names import replicates
from sparsegnn.train.fullgraph import TrainConfig
from sparsegnn.train.rank_train import DistributedConfig, train_rank

Case = tuple[str, int, int]  # (algorithm, p, replication)


def cases(ranks: list[int], replication: int) -> tuple[list[Case], list[Row]]:
    """Runnable ``(algo, p, c)`` cases and the skipped ones with the grid's reason."""
    run, skipped = [], []
    for algo in ALGORITHMS:
        c = replication if replicates(algo) else 1
        for p in ranks:
            try:
                grid_shape(algo, p, c)
            except GridError as err:
                skipped.append({"algo": algo, "p": p, "replication": c, "skipped": str(err)})
                continue
            run.append((algo, p, c))
    return run, skipped


def _rank_body(spec: str, cfg: TrainConfig, todo: list[Case]) -> list[Row]:
    rows = []
    with rank_session("gloo", timeout_s=300) as session:
        graph = load_any(spec, None, seed=cfg.seed)
        for algo, p, c in todo:
            barrier()
            dcfg = DistributedConfig(algo=algo, replication=c, backend="gloo")
            got = train_rank(graph, cfg, dcfg, session, members=range(p))
            if got is None:
                continue
            _, result, report = got
            rows.append({
                "algo": algo, "p": p, "replication": c, "rank": report.rank,
                "epoch_time_s": result.epoch_time_s,
                "measured": report.epoch_bytes.to_dict(), "model": report.predicted.to_dict(),
                "matches_model": report.matches_model(),
            })
    return rows


def _sent(volume: dict[str, dict[str, int]]) -> int:
    return sum(v.get("sent", 0) for v in volume.values())


def _recv(volume: dict[str, dict[str, int]]) -> int:
    return sum(v.get("recv", 0) for v in volume.values())


def summarise(per_rank: list[list[Row]], todo: list[Case]) -> list[Row]:
    """One row per case: slowest rank's epoch time, bytes per rank, model per rank."""
    flat = [row for rows in per_rank for row in rows]
    out = []
    for algo, p, c in todo:
        mine = (r for r in flat if (r["algo"], r["p"]) == (algo, p))
        rows = sorted(mine, key=lambda r: r["rank"])
        out.append({
            "what": "epoch", "algo": algo, "p": p, "replication": c,
            "epoch_time_s": max(r["epoch_time_s"] for r in rows),
            "sent_bytes_per_rank": [_sent(r["measured"]) for r in rows],
            "recv_bytes_per_rank": [_recv(r["measured"]) for r in rows],
            "model_sent_bytes_per_rank": [_sent(r["model"]) for r in rows],
            "model_recv_bytes_per_rank": [_recv(r["model"]) for r in rows],
            "bytes_by_phase_rank0": rows[0]["measured"],
            "matches_model": all(r["matches_model"] for r in rows),
        })
    return out


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__ or "", quick_help="1024 vertices, p in {1, 2, 4}, 2 epochs")
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--blocks", type=int, default=8, help="SBM communities (= classes)")
    ap.add_argument("--degree", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--ranks", default="1,2,4,8", help="comma-separated p values")
    ap.add_argument("--replication", type=int, default=2, help="c for 1.5d")
    args = ap.parse_args(argv)
    if args.quick:
        args.nodes, args.epochs, args.ranks = 1024, 2, "1,2,4"
    spec = f"sbm:nodes={args.nodes},blocks={args.blocks},degree={args.degree}"
    cfg = TrainConfig(hidden=args.hidden, num_layers=args.layers, dropout=0.0,
                      epochs=args.epochs, patience=args.epochs, progress=False)
    todo, skipped = cases([int(p) for p in args.ranks.split(",")], args.replication)
    world = max(p for _, p, _ in todo)
    threads = max(1, (os.cpu_count() or 1) // world)
    results = summarise(spawn(_rank_body, world, (spec, cfg, todo), threads=threads), todo)
    for r in results:
        print(f"{r['algo']:>4} p={r['p']}: {r['epoch_time_s'] * 1e3:8.1f} ms/epoch, "
              f"max sent/rank {max(r['sent_bytes_per_rank']) / 2**20:8.3f} MiB "
              f"(model {max(r['model_sent_bytes_per_rank']) / 2**20:8.3f} MiB) "
              f"{'= model' if r['matches_model'] else '!= MODEL'}")
    # No peer runs here (the reference is the communication model), so no speedups.
    emit(results, {}, {"graph": spec, "hidden": cfg.hidden, "layers": cfg.num_layers,
                       "epochs": cfg.epochs, "dtype": str(cfg.dtype), "skipped": skipped,
                       "all_match_model": all(r["matches_model"] for r in results)},
         args.json)
    return 0 if all(r["matches_model"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
