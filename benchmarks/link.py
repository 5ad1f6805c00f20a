"""Link prediction, ours vs PyG's link-prediction example, side by side on the same splits.

For each graph and seed, one :func:`~sparsegnn.sampling.link_split.random_link_split`
(PyG's ``RandomLinkSplit`` positives: 5% validation, 10% test, one fixed negative per
held-out positive) is given to every side:

* ``ours``: :func:`sparsegnn.train.link_task.train_link` with its defaults, which are
  the example's settings (GCN 128 -> 64 on row-normalised features, dot decoder, no
  dropout, Adam lr 0.01, fresh uniform negatives each epoch, as many as the training
  positives; test AUC of the best-validation epoch). Mostly-zero features (Cora, the
  hashed TF-IDF CiteSeer) go through the first layer as a sparse matrix
  (:mod:`sparsegnn.nn.sparse_input`); ``ours_dense`` is the same run without that;
* ``pyg``: the example's model and step written with PyG (``GCNConv`` on
  ``edge_index``, ``negative_sampling(method="sparse")`` each epoch, scikit-learn's
  ``roc_auc_score``), on the same split and features;
* ``pyg_same_negatives``: the same PyG run fed, each epoch, the very negatives ours
  draws (our sampler on the same ``(seed, epoch)`` stream, timed inside its epoch as in
  ours), so the two differ only in the encoder, decoder and step.

Graphs: bundled Cora and CiteSeer (5 seeds x 100 epochs; ``--quick``: Cora, 1 seed x 20,
without ``ours_dense``) and a generated SBM of 2^15 vertices (average degree 16, 128 dense
Gaussian features; 1 seed x 10 epochs; ``--quick``: 2^11 x 3) for speed at a size where
the graph, not the feature product, dominates. Then sampled link training throughput, ours
against PyG's ``LinkNeighborLoader`` on Cora and the SBM (:mod:`_link_sampled`, where the
rows and their figure are described; where PyG's sampler is not built, its rows say so).
An epoch is the training step plus the validation AUC, for every side. Each (graph, seed,
side) runs in a fresh process, the sides interleaved seed by seed, so a drifting load
touches all alike; training peak memory is the resident-set high-water mark of the whole
run over the resident set once the graph and split are loaded (``_harness.PeakMemory``).
Reported: median test AUC over the seeds, median epoch time, fastest epoch (what a shared
machine's load disturbs least), highest peak; ``speedups`` are PyG's epoch time over ours
(median and fastest). Acceptance (issue 47): median test AUC within 1 point of PyG's on
Cora and CiteSeer and at least 0.90 on Cora; the epoch at least 1.5x PyG's (both PyG
sides) at no more than its peak memory.

    python benchmarks/link.py [--quick] [--json] [--threads N] [--seeds S]
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

from _harness import PeakMemory, Row, emit, gib, parse_args, print_table, rss_bytes, run_isolated
from _link_sampled import COLUMNS as SAMPLED_COLUMNS
from _link_sampled import sampled_rows
from _workloads import counts_like, have_module
from sparsegnn.data import load_any, row_normalize
from sparsegnn.data.generators import sbm
from sparsegnn.data.graph import GraphData
from sparsegnn.data.link_edges import LinkSplit
from sparsegnn.sampling.link_split import random_link_split
from sparsegnn.sampling.negatives import EdgeLookup, uniform_negatives
from sparsegnn.sampling.streams import batch_generator
from sparsegnn.train.link_task import LinkRequest, train_link

GRAPHS = ("cora", "citeseer")
IMPLS = ("ours", "ours_dense", "pyg", "pyg_same_negatives")
PEERS = ("pyg", "pyg_same_negatives")


def run_ours(graph: GraphData, split: LinkSplit, seed: int, epochs: int,
             sparse_features: bool = True) -> dict[str, Any]:
    assert graph.x is not None
    _, out = train_link(graph, LinkRequest(seed=seed, epochs=epochs,
                                           sparse_features=sparse_features,
                                           normalize_features=counts_like(graph.x)), split)
    return {"test_auc": out.test["auc"], "val_auc": out.val["auc"],
            "epoch_s": out.epoch_time_s, "epoch_min_s": min(h.seconds for h in out.history),
            "best_epoch": out.best_epoch}


def run_pyg(graph: GraphData, split: LinkSplit, seed: int, epochs: int,
            same_negatives: bool = False) -> dict[str, Any]:
    """PyG's link-prediction example (examples/link_pred.py) on our split; with
    ``same_negatives`` each epoch's negatives are ours (same sampler, same stream)."""
    from sklearn.metrics import roc_auc_score
    from torch_geometric.nn import GCNConv
    from torch_geometric.utils import negative_sampling

    class Net(torch.nn.Module):
        def __init__(self, cin: int) -> None:
            super().__init__()
            self.conv1, self.conv2 = GCNConv(cin, 128), GCNConv(128, 64)

        def encode(self, x: torch.Tensor, ei: torch.Tensor) -> torch.Tensor:
            return self.conv2(self.conv1(x, ei).relu(), ei)

    def auc(model: Net, ei: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor) -> float:
        model.eval()
        with torch.no_grad():
            z = model.encode(x, ei)
            pairs = torch.cat([pos, neg], dim=1)
            out = (z[pairs[0]] * z[pairs[1]]).sum(-1).sigmoid()
        label = torch.cat([torch.ones(pos.shape[1]), torch.zeros(neg.shape[1])])
        return float(roc_auc_score(label.numpy(), out.numpy()))

    def negatives(epoch: int) -> torch.Tensor:
        if same_negatives:
            return uniform_negatives(lookup, n, pos.shape[1], batch_generator(seed, epoch, 0))
        return negative_sampling(split.train_message, num_nodes=n,
                                 num_neg_samples=pos.shape[1], method="sparse")

    torch.manual_seed(seed)
    assert graph.x is not None
    x = row_normalize(graph.x) if counts_like(graph.x) else graph.x
    n = graph.num_nodes
    lookup = EdgeLookup.of(split.train_message, n)
    model = Net(x.shape[1])
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    pos = split.train.pos
    best_val, test_at_best, best_epoch, times = 0.0, 0.0, 0, []
    for epoch in range(epochs):
        start = time.perf_counter()
        model.train()
        optimizer.zero_grad()
        z = model.encode(x, split.train_message)
        neg = negatives(epoch)
        pairs = torch.cat([pos, neg], dim=1)
        label = torch.cat([torch.ones(pos.shape[1]), torch.zeros(neg.shape[1])])
        loss = F.binary_cross_entropy_with_logits((z[pairs[0]] * z[pairs[1]]).sum(-1), label)
        loss.backward()
        optimizer.step()
        val = auc(model, split.train_message, split.val.pos, split.val.neg)
        times.append(time.perf_counter() - start)
        if val > best_val:  # the example's choice: the test AUC of the best validation
            best_val, best_epoch = val, epoch
            test_at_best = auc(model, split.test_message, split.test.pos, split.test.neg)
    return {"test_auc": test_at_best, "val_auc": best_val, "epoch_s": statistics.median(times),
            "epoch_min_s": min(times), "best_epoch": best_epoch}


def load_graph(name: str) -> GraphData:
    """A bundled graph by name, or ``sbm-S``: the generated SBM of 2^S vertices."""
    if name.startswith("sbm-"):
        n = 1 << int(name.removeprefix("sbm-"))
        return sbm(n, max(2, n >> 12), 16.0, num_features=128, seed=0)
    return load_any(name)


def child(config: dict[str, Any]) -> dict[str, Any]:
    """One side on one graph and seed, in this fresh process: its figures and peak."""
    if have_module("torch_geometric"):  # every child imports PyG: the same heap state
        import torch_geometric.nn  # noqa: F401
    if config["threads"] is not None:
        torch.set_num_threads(config["threads"])
    graph = load_graph(config["graph"])
    split = random_link_split(graph.edge_index, graph.num_nodes, seed=config["seed"])
    mem, base = PeakMemory(), rss_bytes()
    mem.reset()
    impl, seed, epochs = config["impl"], config["seed"], config["epochs"]
    if impl.startswith("ours"):
        out = run_ours(graph, split, seed, epochs, sparse_features=impl == "ours")
    else:
        out = run_pyg(graph, split, seed, epochs, same_negatives=impl != "pyg")
    return {**out, "train_peak_gib": gib(mem.peak() - base), "memory_method": mem.method}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra_values={
        "threads": "intra-op threads for every side (default: torch's); 1 on a shared machine",
        "seeds": "seeds per bundled graph (default 5; the acceptance needs 5)"})
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    threads = None if args.threads is None else int(args.threads)
    have_pyg = have_module("torch_geometric") and have_module("sklearn")
    if not have_pyg:
        print("PyG or scikit-learn is not installed: only our runs.")
    impls = [i for i in IMPLS if (have_pyg or i.startswith("ours"))
             and not (args.quick and i == "ours_dense")]
    # --quick: every code path (Cora, 1 seed x 20 epochs; SBM 2^11), not the acceptance
    seeds = 5 if args.seeds is None else int(args.seeds)
    plan = [(name, range(seeds), 100) for name in GRAPHS] if not args.quick else \
        [("cora", range(1), 20)]
    plan.append((f"sbm-{11 if args.quick else 15}", range(1), 3 if args.quick else 10))
    results: list[Row] = []
    for name, seeds, epochs in plan:
        runs: dict[str, list[dict[str, Any]]] = {impl: [] for impl in impls}
        for seed in seeds:
            for impl in impls:
                config = {"graph": name, "impl": impl, "seed": seed, "epochs": epochs,
                          "threads": threads}
                out = run_isolated(Path(__file__), config)
                if "error" in out:
                    raise SystemExit(f"[{name}] seed {seed} {impl} failed: {out['error']}")
                runs[impl].append(out)
                print(f"[{name}] seed {seed} {impl}: test AUC {out['test_auc']:.4f}, epoch "
                      f"{1000 * out['epoch_s']:.1f} ms, peak {out['train_peak_gib']:.3f} GiB",
                      flush=True)
        results += [summary_row(name, impl, r, epochs) for impl, r in runs.items()]
    print_table(results, ["graph", "impl", "test_auc_median", "epoch_median_s",
                          "epoch_fastest_s", "train_peak_gib", "seeds"])
    speedups, metrics = summarize(results, accept_speed=not args.quick,
                                  accept_auc=not args.quick and seeds == 5)
    sampled, sampled_speedups, sampled_metrics = sampled_rows(args.quick, threads,
                                                              1 if args.quick else 3)
    print_table(sampled, SAMPLED_COLUMNS)
    emit(results + sampled, speedups | sampled_speedups, metrics | sampled_metrics, args.json)


def summary_row(graph: str, impl: str, runs: list[dict[str, Any]], epochs: int) -> Row:
    aucs = [r["test_auc"] for r in runs]
    return {"what": "link_gcn_dot", "graph": graph, "impl": impl, "seeds": len(runs),
            "epochs": epochs, "test_auc_median": statistics.median(aucs), "test_aucs": aucs,
            "val_aucs": [r["val_auc"] for r in runs],
            "epoch_median_s": statistics.median(r["epoch_s"] for r in runs),
            "epoch_fastest_s": min(r["epoch_min_s"] for r in runs),
            "train_peak_gib": max(r["train_peak_gib"] for r in runs),
            "memory_method": runs[0]["memory_method"]}


def summarize(results: list[Row], accept_speed: bool, accept_auc: bool
              ) -> tuple[dict[str, float], dict[str, Any]]:
    """Epoch speedups and peak ratios against each PyG side, AUC gaps, and the acceptance
    checks: speed and memory on a full run, the AUC ones on 5 seeds."""
    speedups: dict[str, float] = {}
    metrics: dict[str, Any] = {}
    for graph in dict.fromkeys(r["graph"] for r in results):
        rows = {r["impl"]: r for r in results if r["graph"] == graph}
        ours = rows["ours"]
        metrics[f"{graph}/ours_test_auc_median"] = ours["test_auc_median"]
        if "ours_dense" in rows:
            speedups[f"{graph}/ours_vs_ours_dense_epoch"] = (
                rows["ours_dense"]["epoch_median_s"] / ours["epoch_median_s"])
        if graph == "cora" and accept_auc:
            metrics["accept/cora_auc_ge_0.90"] = bool(ours["test_auc_median"] >= 0.90)
        for peer in (p for p in PEERS if p in rows):
            speedup = rows[peer]["epoch_median_s"] / ours["epoch_median_s"]
            peak = ours["train_peak_gib"] / rows[peer]["train_peak_gib"]
            speedups[f"{graph}/ours_vs_{peer}_epoch"] = speedup
            speedups[f"{graph}/ours_vs_{peer}_fastest_epoch"] = (
                rows[peer]["epoch_fastest_s"] / ours["epoch_fastest_s"])
            metrics[f"{graph}/peak_ours_over_{peer}"] = peak
            if accept_speed:
                metrics[f"accept/{graph}_epoch_ge_1.5x_{peer}_at_le_peak"] = bool(
                    speedup >= 1.5 and peak <= 1.0)
        if "pyg" not in rows or graph not in GRAPHS:
            continue
        gap = ours["test_auc_median"] - rows["pyg"]["test_auc_median"]
        metrics[f"{graph}/pyg_test_auc_median"] = rows["pyg"]["test_auc_median"]
        metrics[f"{graph}/auc_gap_points"] = 100 * gap
        if accept_auc:
            metrics[f"accept/{graph}_auc_within_1_point"] = bool(abs(gap) <= 0.01)
    return speedups, metrics


if __name__ == "__main__":
    main()
