"""Interaction Network training-epoch time: sparsegnn's SpMM aggregation vs PyG MessagePassing.

Run: ``python benchmarks/interaction_network.py [--quick] [--json] [--events DIR]
[--max-sample-nodes 4000] [--epochs 3]``.

Both sides compute the *same* function with the *same* weights (the peer wraps our
:class:`InteractionNetwork`'s modules) on the *same* ShaDow subgraphs of module-map
graphs, in the same order. Ours: incidence CSR matrices and SpMM for aggregation and for
gathering node rows onto edges (built once per subgraph, cached transposes for the
backward), and edge MLPs whose first layer is split so node projections are made per
node (see ``sparsegnn.tracking.model``). The peer is the IN as one writes it in PyG:
``MessagePassing`` layers with ``aggr="add"`` (source-to-target and target-to-source)
for the aggregations, and ``edge_updater`` with ``edge_update(x_i, x_j, e)`` applying
the edge MLP to ``cat([x_j, x_i, e])``. Operator set-up (building incidence matrices)
is inside the timed epoch. Before timing, the logits of both on the first subgraph are
compared, so the numbers are for two implementations of one function.

Default events: the TrackML sample (module map learnt from the event itself). ``--quick``
times one epoch of the first 8 subgraphs (1000-hit bound): a smoke run, not a measurement.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import emit, make_parser
from sparsegnn.tracking.doublet_cuts import DoubletCuts
from sparsegnn.tracking.events import read_events
from sparsegnn.tracking.graph_construction import module_map_graph
from sparsegnn.tracking.hit_graph import HitGraph
from sparsegnn.tracking.model import EdgeOperators, INConfig, InteractionNetwork, weighted_bce
from sparsegnn.tracking.module_map import ModuleMap
from sparsegnn.tracking.sampling import EdgeSubgraph, shadow_subgraphs
from sparsegnn.tracking.train import loss_weights

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "trackml_sample"


class PygInteractionNetwork(torch.nn.Module):
    """The same network written the PyG way, sharing ``net``'s weights."""

    def __init__(self, net: InteractionNetwork):
        super().__init__()
        from torch_geometric.nn import MessagePassing

        class EdgeSum(MessagePassing):
            def __init__(self, flow: str):
                super().__init__(aggr="add", flow=flow)

            def forward(self, edge_index: torch.Tensor, e: torch.Tensor, n: int) -> torch.Tensor:
                return self.propagate(edge_index, e=e, size=(n, n))

            def message(self, e: torch.Tensor) -> torch.Tensor:
                return e

        class EdgeUpdate(MessagePassing):
            def forward(self, edge_index: torch.Tensor, h: torch.Tensor, e: torch.Tensor,
                        mlp: torch.nn.Module) -> torch.Tensor:
                return self.edge_updater(edge_index, h=h, e=e, mlp=mlp)

            def edge_update(self, h_i: torch.Tensor, h_j: torch.Tensor, e: torch.Tensor,
                            mlp: torch.nn.Module) -> torch.Tensor:
                return mlp(torch.cat([h_j, h_i, e], dim=1))  # j = source, i = target

        self.net = net
        self.into, self.out_of = EdgeSum("source_to_target"), EdgeSum("target_to_source")
        self.edges = EdgeUpdate()

    def forward(self, x: torch.Tensor, edge_attr: torch.Tensor, edge_index: torch.Tensor
                ) -> torch.Tensor:
        n, net = x.shape[0], self.net
        h, e = net.node_encoder(x), net.edge_encoder(edge_attr)
        for node_update, edge_update in zip(net.node_updates, net.edge_updates, strict=True):
            m_in, m_out = self.into(edge_index, e, n), self.out_of(edge_index, e, n)
            h = h + node_update(torch.cat([h, m_in, m_out], dim=1))
            e = e + self.edges(edge_index, h, e, edge_update)
        return self.edges(edge_index, h, e, net.decoder).squeeze(1)


def load_graphs(events_dir: Path, limit: int | None) -> list[HitGraph]:
    events = read_events(events_dir, limit)
    mm = ModuleMap.learn(events)
    return [module_map_graph(ev, mm, DoubletCuts(phi_slope=0.01)) for ev in events]


def make_batches(graphs: list[HitGraph], max_nodes: int, fanouts: tuple[int, ...],
                 device: torch.device, limit: int | None = None) -> list[dict]:
    """The epoch's subgraphs (the first ``limit`` of them) as device tensors, shared by
    both implementations."""
    batches: list[dict] = []
    for g in graphs:
        weight = loss_weights(g)
        for sub in shadow_subgraphs(g, max_nodes, fanouts, seed=0, epoch=0):
            if limit is not None and len(batches) >= limit:
                return batches
            batches.append(_tensors(g, sub, weight, device))
    return batches


def _tensors(g: HitGraph, sub: EdgeSubgraph, weight: np.ndarray, device: torch.device) -> dict:
    return {
        "x": torch.from_numpy(g.node_features[sub.nodes]).to(device),
        "edge_attr": torch.from_numpy(g.edge_features[sub.edges]).to(device),
        "edge_index": torch.from_numpy(sub.edge_index).to(device),
        "target": torch.from_numpy(g.target[sub.edges]).to(device),
        "weight": torch.from_numpy(weight[sub.edges] * sub.loss_mask).to(device),
        "n": int(sub.nodes.size),
    }


def run_epoch(model: InteractionNetwork, batches: list[dict], kind: str,
              device: torch.device) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one epoch; CPU time resists machine load."""
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    peer = PygInteractionNetwork(model) if kind == "pyg" else None
    _sync(device)
    start, cpu_start = time.perf_counter(), time.process_time()
    for b in batches:
        if peer is None:
            logits = model(b["x"], b["edge_attr"], EdgeOperators(b["edge_index"], b["n"]))
        else:
            logits = peer(b["x"], b["edge_attr"], b["edge_index"])
        optim.zero_grad()
        loss = weighted_bce(logits, b["target"], b["weight"], 10.0)
        loss.backward()
        optim.step()
    _sync(device)
    return time.perf_counter() - start, time.process_time() - cpu_start


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_same_function(cfg: INConfig, batch: dict) -> float:
    """Max |logit difference| of ours vs PyG on one subgraph, same weights."""
    torch.manual_seed(0)
    model = InteractionNetwork(cfg).to(batch["x"].device)
    with torch.no_grad():
        ours = model(batch["x"], batch["edge_attr"], EdgeOperators(batch["edge_index"], batch["n"]))
        peer = PygInteractionNetwork(model)(batch["x"], batch["edge_attr"], batch["edge_index"])
    return float((ours - peer).abs().max())


def bench(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    graphs = load_graphs(args.events, args.limit)
    fanouts = tuple(int(f) for f in args.fanouts.split(","))
    batches = make_batches(graphs, args.max_sample_nodes, fanouts, device, args.max_subgraphs)
    cfg = INConfig(hidden=args.hidden, iterations=args.iterations)
    diff = check_same_function(cfg, batches[0])
    times: dict[str, list[float]] = {"ours": [], "pyg": []}
    cpu: dict[str, list[float]] = {"ours": [], "pyg": []}
    for _ in range(args.epochs):
        for kind in ("ours", "pyg"):  # interleaved, so machine load hits both alike
            torch.manual_seed(0)
            model = InteractionNetwork(cfg).to(device)
            wall, used = run_epoch(model, batches, kind, device)
            times[kind].append(wall)
            cpu[kind].append(used)
    ours, pyg = statistics.median(times["ours"]), statistics.median(times["pyg"])
    return {
        "device": str(device), "events": len(graphs), "subgraphs": len(batches),
        "max_sample_nodes": args.max_sample_nodes, "fanouts": list(fanouts),
        "mean_subgraph_nodes": float(np.mean([b["n"] for b in batches])),
        "mean_subgraph_edges": float(np.mean([b["edge_index"].shape[1] for b in batches])),
        "hidden": args.hidden, "iterations": args.iterations, "epochs": args.epochs,
        "max_abs_logit_diff": diff, "epoch_s_ours": ours, "epoch_s_pyg": pyg,
        "speedup": pyg / ours if ours > 0 else float("nan"),
        "epoch_cpu_s_ours": statistics.median(cpu["ours"]),
        "epoch_cpu_s_pyg": statistics.median(cpu["pyg"]),
        "all_epoch_s": times, "all_epoch_cpu_s": cpu, "torch_threads": torch.get_num_threads(),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = make_parser(__doc__, quick_help="one epoch of the first 8 subgraphs of at most 1000 "
                    "hits, seconds: a smoke run, not a measurement")
    p.add_argument("--events", type=Path, default=SAMPLE, help="TrackML events directory")
    p.add_argument("--limit", type=int, default=None, help="first N events only")
    p.add_argument("--max-sample-nodes", type=int, default=None,
                   help="ShaDow subgraph bound (default 4000: what sampled training uses at "
                        "pileup 200; --quick 1000)")
    p.add_argument("--fanouts", default="4,2", help="ShaDow fan-outs per hop")
    p.add_argument("--max-subgraphs", type=int, default=None,
                   help="time only the first N subgraphs of the epoch (large events)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--iterations", type=int, default=6)
    p.add_argument("--epochs", type=int, default=None,
                   help="timed epochs per implementation (default --repeats, else 2; "
                        "--quick 1)")
    p.add_argument("--device", default=None)
    args = p.parse_args(argv)
    if args.max_sample_nodes is None:
        args.max_sample_nodes = 1000 if args.quick else 4000
    if args.epochs is None:
        args.epochs = args.repeats or (1 if args.quick else 2)
    if args.quick and args.max_subgraphs is None:
        args.max_subgraphs = 8
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    r = bench(args)
    print(f"IN epoch on {r['subgraphs']} ShaDow subgraphs ({r['device']}, hidden {r['hidden']}, "
          f"{r['iterations']} iterations): ours {r['epoch_s_ours']:.3f} s, PyG "
          f"{r['epoch_s_pyg']:.3f} s, speedup {r['speedup']:.2f}x; CPU time ours "
          f"{r['epoch_cpu_s_ours']:.3f} s, PyG {r['epoch_cpu_s_pyg']:.3f} s "
          f"(max |logit diff| {r['max_abs_logit_diff']:.2e})")
    emit(*as_summary(r), args.json)
    return 0


def as_summary(r: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, float],
                                           dict[str, Any]]:
    """The standard benchmark JSON: one row per implementation, the speedups, the rest."""
    sizes = {k: r[k] for k in ("subgraphs", "mean_subgraph_nodes", "mean_subgraph_edges",
                               "hidden", "iterations")}
    results = [{"what": "interaction_network_training_epoch", "implementation": kind,
                "ours": kind == "ours", "epoch_s": r[f"epoch_s_{kind}"],
                "epoch_cpu_s": r[f"epoch_cpu_s_{kind}"], "all_epoch_s": r["all_epoch_s"][kind],
                **sizes} for kind in ("ours", "pyg")]
    speedups = {"training_epoch": r["speedup"],
                "training_epoch_cpu": r["epoch_cpu_s_pyg"] / r["epoch_cpu_s_ours"]}
    skip = {"all_epoch_s", "all_epoch_cpu_s", "speedup"}
    return results, speedups, {k: v for k, v in r.items() if k not in skip}


if __name__ == "__main__":
    raise SystemExit(main())
