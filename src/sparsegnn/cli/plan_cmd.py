"""``sparsegnn plan``: exact per-rank communication volume of a distributed epoch, no ranks.

The graph is partitioned into the grid's vertex blocks, relabelled, and the volume of
every SpMM of one training epoch (the same schedule ``sparsegnn train`` runs) is computed
per rank by :func:`sparsegnn.distributed.epoch_volume`: rows and bytes sent and received,
for sparsity-aware (``--comm sparse``, 1d/1.5d) or oblivious (``--comm dense``)
communication. The numbers equal what a real run's counters measure; ``--plot`` draws
the per-rank volumes and the block-to-block heat map.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from sparsegnn.cli.common import add_json_flag, emit
from sparsegnn.data import load_any
from sparsegnn.data.graph import GraphData
from sparsegnn.distributed import BlockPartition, GridShape, epoch_volume, grid_shape
from sparsegnn.distributed.plan import RankVolume, phase_pairs, row_volume
from sparsegnn.partition import PARTITIONERS, Adjacency, partition
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.distributed import spmm_schedule
from sparsegnn.train.fullgraph import TrainConfig, operator_for


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plan", help="per-rank communication volume of distributed training, without ranks",
        description=__doc__,
    )
    p.add_argument("--graph", required=True,
                   help="graph file, dataset name or generator spec (rmat:18, sbm:nodes=...)")
    p.add_argument("--data-dir", default=None, help="folder holding the datasets")
    p.add_argument("--seed", type=int, default=0, help="generator and partitioner seed")
    p.add_argument("--parts", type=int, required=True, help="number of ranks P")
    p.add_argument("--algo", choices=("1d", "1.5d", "2d", "3d"), default="1d")
    p.add_argument("--replication", type=int, default=1, help="c for 1.5d")
    p.add_argument("--partitioner", choices=PARTITIONERS, default="block")
    p.add_argument("--comm", choices=("dense", "sparse"), default="sparse")
    p.add_argument("--model", choices=("gcn", "sage"), default="gcn")
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--num-layers", type=int, default=2)
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="per-rank volumes and the block heat map (needs matplotlib)")
    add_json_flag(p)
    p.set_defaults(func=run)


@dataclass
class Layout:
    """A graph cut into a grid's vertex blocks, and its operator (original order)."""

    graph: GraphData
    shape: GridShape
    part: BlockPartition
    operator: CSRMatrix
    partition_seconds: float
    pairs: dict[str, np.ndarray] = field(default_factory=dict)  # phase_pairs, on demand

    def phase_pairs(self) -> dict[str, np.ndarray]:
        """Block-to-block rows of both SpMM directions, computed once per layout."""
        if not self.pairs:
            self.pairs.update(phase_pairs(self.operator, self.part))
        return self.pairs


def layout(
    graph: GraphData, shape: GridShape, partitioner: str, model: str = "gcn", seed: int = 0,
    *, adj: Adjacency | None = None, operator: CSRMatrix | None = None,
) -> Layout:
    """Partition ``graph`` into ``shape.row_blocks`` blocks. ``adj`` and ``operator``
    (built from ``graph`` when not given) can be shared by many layouts of one graph."""
    start = time.perf_counter()
    adj = adj or Adjacency.from_edge_index(graph.edge_index, graph.num_nodes)
    parts = partition(adj, partitioner, shape.row_blocks, seed=seed)
    part = BlockPartition.from_parts(torch.from_numpy(parts), shape.row_blocks)
    seconds = time.perf_counter() - start
    if operator is None:
        operator = operator_for(model, CSRMatrix.from_edge_index(graph.edge_index,
                                                                 graph.num_nodes))
    return Layout(graph, shape, part, operator, seconds)


def plan_epoch(
    lay: Layout, comm: str, cfg: TrainConfig, value_bytes: int
) -> dict[str, Any]:
    """Per-rank bytes of one epoch (all SpMMs) and, for 1d/1.5d, rows of one SpMM.

    A graph without features or labels (R-MAT) is planned with ``cfg.hidden`` as its
    input and output widths, so its bytes are those of a model of that width."""
    g = lay.graph
    calls = spmm_schedule(cfg, g.num_features or cfg.hidden, g.num_classes or cfg.hidden)
    start = time.perf_counter()
    rowwise = lay.shape.algo in ("1d", "1.5d")
    pairs = lay.phase_pairs() if rowwise and comm == "sparse" else None
    phases = epoch_volume(lay.shape, lay.part, lay.operator, calls, value_bytes=value_bytes,
                          comm=comm, pairs=pairs)  # type: ignore[arg-type]
    total = RankVolume(np.zeros(lay.shape.size, np.int64), np.zeros(lay.shape.size, np.int64))
    for vol in phases.values():
        total = total + vol
    out: dict[str, Any] = {
        "bytes_per_epoch": {"total": total.total, "max_per_rank": total.max_per_rank,
                            "sent": total.sent.tolist(), "recv": total.recv.tolist()},
        "phases": {p: {"total": v.total, "max_per_rank": v.max_per_rank}
                   for p, v in phases.items()},
    }
    if rowwise:
        rows = row_volume(lay.shape, lay.part, pairs["forward_spmm"] if pairs else None)
        out["rows_per_spmm"] = {"total": rows.total, "max_per_rank": rows.max_per_rank,
                                "sent": rows.sent.tolist(), "recv": rows.recv.tolist()}
    out["plan_seconds"] = round(time.perf_counter() - start, 3)
    return out


def run(args: argparse.Namespace) -> int:
    graph = load_any(args.graph, args.data_dir, seed=args.seed, progress=True)
    shape = grid_shape(args.algo, args.parts, args.replication)
    lay = layout(graph, shape, args.partitioner, args.model, args.seed)
    cfg = TrainConfig(model=args.model, hidden=args.hidden, num_layers=args.num_layers)
    value_bytes = 4 if args.dtype == "float32" else 8
    result = {
        "graph": args.graph, "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
        "algo": args.algo, "grid": [shape.rows, shape.cols, shape.layers], "ranks": shape.size,
        "partitioner": args.partitioner, "comm": args.comm, "value_bytes": value_bytes,
        "partition_seconds": round(lay.partition_seconds, 3),
        **plan_epoch(lay, args.comm, cfg, value_bytes),
    }
    if args.plot:
        plot(result, lay, args.comm, args.plot)
        result["plot"] = args.plot
    vol = result["bytes_per_epoch"]
    text = (f"{shape.describe()}, {args.partitioner} partition, {args.comm} comm: "
            f"{vol['total'] / 2**20:.2f} MiB sent per epoch in all, "
            f"{vol['max_per_rank'] / 2**20:.2f} MiB at the busiest rank")
    return emit(args, result, text)


def plot(result: dict[str, Any], lay: Layout, comm: str, path: str) -> None:
    """Per-rank sent/received bytes and, for 1d/1.5d, the block-to-block row counts."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise SystemExit("--plot needs matplotlib: pip install 'sparsegnn[plot]'") from err
    rowwise = lay.shape.algo in ("1d", "1.5d")
    fig, axes = plt.subplots(1, 2 if rowwise else 1, figsize=(12 if rowwise else 6, 4.5),
                             squeeze=False)
    vol = result["bytes_per_epoch"]
    ranks = np.arange(len(vol["sent"]))
    ax = axes[0, 0]
    ax.plot(ranks, np.asarray(vol["sent"]) / 2**20, label="sent", drawstyle="steps-mid")
    ax.plot(ranks, np.asarray(vol["recv"]) / 2**20, label="received", drawstyle="steps-mid")
    ax.set(xlabel="rank", ylabel="MiB per epoch",
           title=f"{lay.shape.describe()}, {result['partitioner']}, {comm}")
    ax.legend()
    if rowwise:
        pair = lay.phase_pairs()["forward_spmm"] if comm == "sparse" else _dense_pairs(lay)
        im = axes[0, 1].imshow(pair, cmap="viridis", interpolation="nearest")
        axes[0, 1].set(xlabel="sending block j", ylabel="receiving block i",
                       title="rows of H per SpMM")
        fig.colorbar(im, ax=axes[0, 1])
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _dense_pairs(lay: Layout) -> np.ndarray:
    sizes = np.diff(np.asarray(lay.part.offsets, dtype=np.int64))
    return np.broadcast_to(sizes[None, :], (len(sizes), len(sizes))) - np.diag(sizes)
