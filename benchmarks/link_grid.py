"""Link prediction at scale on grids of ranks: weights against one process, bytes against
the closed-form model, epoch times.

A generated SBM graph (``--log2-nodes``, default 20: 2^20 vertices, average degree 8, 16
features) is split as PyG's ``RandomLinkSplit`` does it, and a GCN encoder with the dot
decoder (hidden 32, 16 out) trains 3 epochs in float64, on one process
(:func:`~sparsegnn.train.link_grid.one_process_weights`: the peer) and on each grid:
1D, 1.5D (c = 2) and 2D on 4 ranks, 3D on 8 (its grid is a cube). For each grid it reports
the largest weight difference from the one process, whether every rank's bytes of every
epoch equal :mod:`sparsegnn.distributed.planning.link_model`'s, the bytes all ranks sent
per epoch and the median epoch time (validation AUC included). ``speedups``: one
process's median epoch time over the grid's; ranks share this machine's cores, so it is no scaling
measurement. Every rank generates the graph from the spec (seeded).

    python benchmarks/link_grid.py [--quick] [--json] [--log2-nodes N] [--algos 1d,2d]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, emit, make_parser, print_table
from sparsegnn.sampling.link_split import random_link_split
from sparsegnn.train.link_grid import LinkGridRequest, one_process_weights, train_link_grid
from sparsegnn.train.link_task import LinkRequest, link_data

GRIDS = {"1d": (4, 1), "1.5d": (4, 2), "2d": (4, 1), "3d": (8, 1)}
EPOCHS = 3


def _spec(log2_nodes: int) -> str:
    return f"sbm:nodes={2 ** log2_nodes},blocks=64,degree=8,features=16"


def _one_process(spec: str, link: LinkRequest) -> tuple[dict[str, torch.Tensor], float]:
    graph, _ = link_data(spec)
    split = random_link_split(graph.edge_index, graph.num_nodes, val=link.val,
                              test=link.test, neg_ratio=link.neg_ratio, seed=link.seed)
    weights, history = one_process_weights(graph, split, link)
    return weights, statistics.median(h.seconds for h in history)


def _grid(spec: str, link: LinkRequest, algo: str,
          reference: dict[str, torch.Tensor]) -> Row:
    ranks, replication = GRIDS[algo]
    request = LinkGridRequest(link, algo=algo, nprocs=ranks, replication=replication,  # type: ignore[arg-type]
                              dtype="float64", timeout_s=600.0)
    start = time.perf_counter()
    out = train_link_grid(spec, request)
    assert out is not None
    diff = max(float((out.weights[k] - v).abs().max()) for k, v in reference.items())
    epoch_s = statistics.median(h.seconds for h in out.link.history)
    return {"algo": algo, "ranks": ranks, "grid": "x".join(map(str, out.grid)),
            "max_weight_diff": diff, "bytes_match_model": out.matches_model,
            "mib_per_epoch": out.bytes_per_epoch() / 2**20, "epoch_s": epoch_s,
            "run_s": time.perf_counter() - start, "test_auc": out.link.test["auc"]}


def main() -> None:
    parser = make_parser(__doc__.split("\n\n")[0], "2^12 vertices, every grid")
    parser.add_argument("--log2-nodes", type=int, default=20)
    parser.add_argument("--algos", default=",".join(GRIDS))
    args = parser.parse_args()
    log2 = 12 if args.quick else args.log2_nodes
    spec = _spec(log2)
    link = LinkRequest(hidden=32, out_channels=16, epochs=EPOCHS, progress=False)
    reference, one_epoch_s = _one_process(spec, link)
    rows: list[Row] = [{"algo": "one process", "ranks": 1, "grid": "-",
                        "max_weight_diff": 0.0, "bytes_match_model": True,
                        "mib_per_epoch": 0.0, "epoch_s": one_epoch_s}]
    rows += [_grid(spec, link, algo, reference) for algo in args.algos.split(",")]
    columns = ["algo", "ranks", "grid", "max_weight_diff", "bytes_match_model",
               "mib_per_epoch", "epoch_s"]
    if not args.json:
        print(f"{spec}, GCN 16-32-16 + dot, {EPOCHS} epochs, float64")
        print_table(rows, columns)
    grids = rows[1:]
    metrics: dict[str, Any] = {
        "num_nodes": 2 ** log2, "epochs": EPOCHS,
        "max_weight_diff": max(r["max_weight_diff"] for r in grids),
        "all_bytes_match_model": all(r["bytes_match_model"] for r in grids)}
    speedups = {f"{r['algo']}_vs_one_process": one_epoch_s / r["epoch_s"] for r in grids}
    emit(rows, speedups, metrics, args.json)


if __name__ == "__main__":
    main()
