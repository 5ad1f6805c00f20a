"""R-GCN node classification, ours vs PyG's ``RGCNConv``, side by side: accuracy and epochs.

Both models are two ``RGCNConv`` layers (hidden 16, ReLU between, mean aggregation per
relation, root weight and bias), trained with Adam (lr 0.01, weight decay 5e-4) for the
same number of epochs on the same typed graph flattened the same way
(``HeteroGraph.to_relational``): PyG's entity-classification example settings. For each
of 5 seeds the PyG model is built under ``torch.manual_seed(seed)`` and ours loads its
state dict (the parameter names are PyG's), so both start from the same weights; the two
then train alternately in one process, one epoch each in turn, so a shared machine's
drifting load falls on both. Test accuracy is taken after the last epoch; an epoch is
forward + backward + optimiser step.

Graphs:

* ``acm``: OpenHINE's ACM (papers, authors, subjects; 3 paper classes), featureless as in
  the R-GCN paper, with the seeded stratified split of ``sparsegnn.data.openhine``. Read
  from the data root (``--data-dir``, ``$SPARSEGNN_DATA``, ``shared/data``); skipped,
  saying so, where it is absent. The acceptance line (within 1 point of PyG) is taken here.
* ``hsbm``: a typed SBM (``sparsegnn.data.typed_sbm``; 3 node types, 4 edge types plus
  their inverses, 64 features), 2^16 nodes (2^13 with ``--quick``).

    python benchmarks/rgcn.py [--quick] [--json] [--data-dir DIR] [--seeds N]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, emit, make_parser, print_table
from _workloads import have_module
from sparsegnn.data.hetero import RelationalGraph
from sparsegnn.data.hetero_io import load_hetero
from sparsegnn.errors import DataFormatError
from sparsegnn.nn.rgcn import relation_operators
from sparsegnn.train.rgcn_task import RelationalClassifier

HIDDEN, LR, WEIGHT_DECAY = 16, 0.01, 5e-4


class PygRGCN(nn.Module):
    """PyG's ``RGCNConv`` in the same two-layer model (``x=None``: featureless layer 1)."""

    def __init__(self, in_channels: int | None, num_nodes: int, num_classes: int,
                 num_relations: int, num_bases: int | None):
        super().__init__()
        from torch_geometric.nn import RGCNConv

        first = num_nodes if in_channels is None else in_channels
        self.convs = nn.ModuleList([
            RGCNConv(first, HIDDEN, num_relations, num_bases=num_bases),
            RGCNConv(HIDDEN, num_classes, num_relations, num_bases=num_bases)])

    def forward(self, x: torch.Tensor | None, edge_index: torch.Tensor,
                edge_type: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.convs[0](x, edge_index, edge_type))
        return self.convs[1](h, edge_index, edge_type)


def load(graph: str, quick: bool, data_dir: str | None) -> RelationalGraph:
    if graph == "acm":
        typed = load_hetero("acm", data_dir)
        return typed.to_relational(inverse=False)  # OpenHINE lists both directions
    nodes = 1 << (13 if quick else 16)
    typed = load_hetero(f"hsbm:nodes={nodes},blocks=8,degree=8,features=64", seed=0)
    return typed.to_relational(inverse=True)


def run_seed(rel: RelationalGraph, seed: int, epochs: int, num_bases: int | None
             ) -> dict[str, dict[str, Any]]:
    """Train both models from the same initial weights; accuracy and epoch times of each."""
    classes = int(rel.y.max()) + 1
    in_ch = None if rel.x is None else rel.x.shape[1]
    torch.manual_seed(seed)
    pyg = PygRGCN(in_ch, rel.num_nodes, classes, rel.num_relations, num_bases)
    ours = RelationalClassifier(in_ch, rel.num_nodes, HIDDEN, classes, rel.num_relations,
                                num_bases=num_bases)
    ours.load_state_dict(pyg.state_dict())
    ops = relation_operators(rel.edge_index, rel.edge_type, rel.num_relations, rel.num_nodes)
    ids = rel.target_ids()
    runs = {"ours": (ours, lambda: ours(rel.x, ops)),
            "pyg": (pyg, lambda: pyg(rel.x, rel.edge_index, rel.edge_type))}
    opts = {k: torch.optim.Adam(m.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
            for k, (m, _) in runs.items()}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(epochs):
        for key, (model, forward) in runs.items():
            times[key].append(_epoch(model, forward, opts[key], ids, rel))
    out = {}
    for key, (model, forward) in runs.items():
        model.eval()
        with torch.no_grad():
            pred = forward()[ids].argmax(1)
        test = rel.test_mask
        out[key] = {"test_accuracy": float((pred[test] == rel.y[test]).float().mean()),
                    "epoch_times": times[key][1:] or times[key]}  # first epoch: warm-up
    return out


def _epoch(model: nn.Module, forward: Any, opt: torch.optim.Optimizer, ids: torch.Tensor,
           rel: RelationalGraph) -> float:
    start = time.perf_counter()
    model.train()
    opt.zero_grad()
    out = forward()[ids]
    F.cross_entropy(out[rel.train_mask], rel.y[rel.train_mask]).backward()
    opt.step()
    return time.perf_counter() - start


def bench_graph(graph: str, rel: RelationalGraph, seeds: int, epochs: int,
                num_bases: int | None) -> list[Row]:
    per_seed = [run_seed(rel, seed, epochs, num_bases) for seed in range(seeds)]
    rows = []
    for impl in ("ours", "pyg"):
        accs = [s[impl]["test_accuracy"] for s in per_seed]
        times = [t for s in per_seed for t in s[impl]["epoch_times"]]
        rows.append({"what": "rgcn_node_classification", "graph": graph, "impl": impl,
                     "nodes": rel.num_nodes, "edges": int(rel.edge_index.shape[1]),
                     "relations": rel.num_relations, "featureless": rel.x is None,
                     "seeds": seeds, "epochs": epochs,
                     "test_accuracy_median": statistics.median(accs), "test_accuracies": accs,
                     "epoch_median_s": statistics.median(times), "epoch_min_s": min(times)})
        print(f"[{graph}] {impl}: test accuracy median {rows[-1]['test_accuracy_median']:.4f} "
              f"{[round(a, 4) for a in accs]}, epoch {rows[-1]['epoch_median_s']:.4f} s",
              flush=True)
    return rows


def summarize(results: list[Row]) -> tuple[dict[str, float], dict[str, Any]]:
    speedups: dict[str, float] = {}
    metrics: dict[str, Any] = {}
    graphs = sorted({r["graph"] for r in results})
    for graph in graphs:
        rows = {r["impl"]: r for r in results if r["graph"] == graph}
        ours, pyg = rows["ours"], rows["pyg"]
        speedups[f"{graph}/ours_vs_pyg_epoch"] = pyg["epoch_median_s"] / ours["epoch_median_s"]
        diff = ours["test_accuracy_median"] - pyg["test_accuracy_median"]
        metrics[f"{graph}/test_accuracy_ours"] = ours["test_accuracy_median"]
        metrics[f"{graph}/test_accuracy_pyg"] = pyg["test_accuracy_median"]
        metrics[f"{graph}/accuracy_diff_points"] = 100 * diff
        if graph == "acm":  # the real heterogeneous set of the acceptance line
            metrics["accept/rgcn_within_1pt_of_pyg"] = bool(abs(diff) <= 0.01)
        metrics[f"{graph}/epoch_speedup_ok_1.5x"] = bool(
            speedups[f"{graph}/ours_vs_pyg_epoch"] >= 1.5)
    return speedups, metrics


def main() -> None:
    parser = make_parser(__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="data root holding acm/")
    parser.add_argument("--seeds", type=int, default=None, help="seeds (default 5, 2 quick)")
    args = parser.parse_args()
    if not have_module("torch_geometric"):
        print("PyG (torch_geometric) is not installed: nothing to compare against.")
        emit([], {}, {"skipped": "torch_geometric not installed"}, args.json)
        return
    seeds = args.seeds or (2 if args.quick else 5)
    epochs = args.repeats or (10 if args.quick else 50)
    results: list[Row] = []
    metrics_extra: dict[str, Any] = {"threads": torch.get_num_threads()}
    for graph in ("acm", "hsbm"):
        try:
            rel = load(graph, args.quick, args.data_dir)
        except DataFormatError as err:
            print(f"[{graph}] skipped: {err}")
            metrics_extra[f"{graph}/skipped"] = str(err)
            continue
        results += bench_graph(graph, rel, seeds, epochs, num_bases=None)
    print_table(results, ["graph", "impl", "nodes", "edges", "relations",
                          "test_accuracy_median", "epoch_median_s", "epoch_min_s"])
    speedups, metrics = summarize(results)
    emit(results, speedups, {**metrics, **metrics_extra}, args.json)


if __name__ == "__main__":
    main()
