"""R-GCN, ours vs PyG's ``RGCNConv``, side by side: node classification and knowledge-graph
link prediction, accuracy and epochs.

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
  saying so, where it is absent.
* ``cora_words``, ``citeseer_words``: the bundled Cora and CiteSeer as typed graphs of
  papers and words (``sparsegnn.data.word_graph``: citations, paper-has-word from the
  bag-of-words nonzeros and its reverse; 3 relations), featureless, with the data set's
  own labels and split (Cora's 140/500/1000; CiteSeer's seeded 60/20/20). Read from the
  package (or ``shared/data``), not ``--data-dir``.
* ``hsbm``: a typed SBM (``sparsegnn.data.typed_sbm``; 3 node types, 4 edge types plus
  their inverses, 64 features), 2^16 nodes (2^13 with ``--quick``).

Link prediction (Schlichtkrull et al.'s second task) on the knowledge graphs PyKEEN's
wheel ships (``sparsegnn.data.kg``; the ``datasets`` extra), ``umls`` (the acceptance
line: filtered MRR within 1 point, x 100, of PyG's) and ``kinships``: both encoders are
two ``RGCNConv`` layers over the training triples with inverse relations, featureless
first layer, basis decomposition, ReLU and dropout between (``sparsegnn.train.kg_link``'s
defaults); the decoder is DistMult, ours ``DistMultDecoder``, PyG's written plainly here.
Same seeded initial weights (ours loads PyG's state dict), the same corruptions per
epoch (one ``(seed, epoch)`` stream) and the same dropout draws (the global generator
reseeded before each model's step); after the last epoch both are ranked by the same
filtered ranking (both sides of each test triple).

    python benchmarks/rgcn.py [--quick] [--json] [--data-dir DIR] [--seeds N]
                              [--graphs umls,kinships,acm,cora_words,citeseer_words,hsbm]
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
from sparsegnn.data.kg import KnowledgeGraph, load_kg
from sparsegnn.data.word_graph import WORD_GRAPHS
from sparsegnn.errors import DataFormatError
from sparsegnn.nn.rgcn import relation_operators
from sparsegnn.sampling.streams import batch_generator
from sparsegnn.train.kg_link import (
    KGRequest,
    build_kg_model,
    corrupt_triples,
    decoder_rows,
    message_operators,
)
from sparsegnn.train.kg_metrics import KnownTriples, rank_metrics, rank_triples
from sparsegnn.train.rgcn_task import RelationalClassifier

HIDDEN, LR, WEIGHT_DECAY = 16, 0.01, 5e-4
NODE_GRAPHS, KG_GRAPHS = ("acm", *WORD_GRAPHS, "hsbm"), ("umls", "kinships")


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
    if graph in ("acm", *WORD_GRAPHS):
        typed = load_hetero(graph, data_dir if graph == "acm" else None)
        # Both list each edge type's reverse already (meta 'reverse_edges').
        return typed.to_relational(inverse=not typed.meta.get("reverse_edges"))
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


class PygKG(nn.Module):
    """PyG's two ``RGCNConv`` layers (``x=None``) and DistMult written plainly, under the
    parameter names of ours (``encoder.convs.*``, ``decoder.relations``)."""

    def __init__(self, request: KGRequest, kg: KnowledgeGraph):
        super().__init__()
        from torch_geometric.nn import RGCNConv

        rels, width, bases = 2 * kg.num_relations, request.hidden, request.num_bases
        self.encoder = nn.Module()
        self.encoder.convs = nn.ModuleList([
            RGCNConv(kg.num_entities, width, rels, num_bases=bases),
            RGCNConv(width, width, rels, num_bases=bases)])
        self.decoder = nn.Module()
        self.decoder.relations = nn.Parameter(torch.empty(kg.num_relations, width))
        nn.init.xavier_uniform_(self.decoder.relations)
        self.dropout = request.dropout

    def encode(self, edge_index: torch.Tensor, edge_type: torch.Tensor) -> torch.Tensor:
        first, second = self.encoder.convs
        h = F.relu(first(None, edge_index, edge_type))
        h = F.dropout(h, self.dropout, self.training)
        return second(h, edge_index, edge_type)

    def decode(self, z: torch.Tensor, triples: torch.Tensor) -> torch.Tensor:
        return (z[triples[0]] * self.decoder.relations[triples[1]] * z[triples[2]]).sum(-1)


def kg_run_seed(kg: KnowledgeGraph, request: KGRequest, seed: int, epochs: int
                ) -> dict[str, dict[str, Any]]:
    """Train ours and PyG's from the same weights on the same corruptions and dropout
    draws, one epoch each in turn; filtered test metrics and epoch times of each."""
    request = KGRequest(**{**request.__dict__, "seed": seed})
    torch.manual_seed(seed)
    pyg = PygKG(request, kg)
    ours = build_kg_model(request, kg)
    ours.load_state_dict(pyg.state_dict())
    ops = message_operators(kg)
    rel = kg.message_graph()
    encoders = {"ours": lambda: ours.encode(None, ops),  # type: ignore[arg-type]
                "pyg": lambda: pyg.encode(rel.edge_index, rel.edge_type)}
    decoders = {"ours": lambda z, t: ours.decode(z, t[[0, 2]], t[1]), "pyg": pyg.decode}
    models = {"ours": ours, "pyg": pyg}
    opts = {k: torch.optim.Adam(m.parameters(), lr=request.lr) for k, m in models.items()}
    times: dict[str, list[float]] = {k: [] for k in models}
    for epoch in range(epochs):
        neg = corrupt_triples(kg.train, kg.num_entities, request.neg_ratio,
                              batch_generator(seed, epoch, 0))
        batch = torch.cat([kg.train, neg], dim=1)
        for key, model in models.items():
            torch.manual_seed(seed * 100_003 + epoch)  # the same dropout draws for both
            start = time.perf_counter()
            model.train()
            opts[key].zero_grad()
            z = encoders[key]()
            logits = decoders[key](z, batch)
            labels = torch.zeros_like(logits)
            labels[: kg.train.shape[1]] = 1
            penalty = z.pow(2).mean() + model.decoder.relations.pow(2).mean()
            loss = F.binary_cross_entropy_with_logits(logits, labels) + request.reg * penalty
            loss.backward()
            opts[key].step()
            times[key].append(time.perf_counter() - start)
    known = KnownTriples(kg.all_triples(), kg.num_entities, kg.num_relations)
    out = {}
    for key, model in models.items():
        model.eval()
        with torch.no_grad():
            z = encoders[key]()
            ranks = rank_triples(decoder_rows(model, z), kg.test, known)  # type: ignore[arg-type]
        out[key] = {**rank_metrics(ranks), "epoch_times": times[key][1:] or times[key]}
    return out


def bench_kg(graph: str, kg: KnowledgeGraph, seeds: int, epochs: int) -> list[Row]:
    request = KGRequest(dataset=graph)
    per_seed = [kg_run_seed(kg, request, seed, epochs) for seed in range(seeds)]
    rows = []
    for impl in ("ours", "pyg"):
        mrrs = [s[impl]["mrr"] for s in per_seed]
        hits = [s[impl]["hits@10"] for s in per_seed]
        times = [t for s in per_seed for t in s[impl]["epoch_times"]]
        rows.append({"what": "rgcn_kg_link_prediction", "graph": graph, "impl": impl,
                     "nodes": kg.num_entities, "edges": 2 * int(kg.train.shape[1]),
                     "relations": 2 * kg.num_relations, "featureless": True,
                     "seeds": seeds, "epochs": epochs, "hidden": request.hidden,
                     "num_bases": request.num_bases,
                     "test_mrr_median": statistics.median(mrrs), "test_mrrs": mrrs,
                     "test_hits_at_10_median": statistics.median(hits), "test_hits_at_10": hits,
                     "epoch_median_s": statistics.median(times), "epoch_min_s": min(times)})
        print(f"[{graph}] {impl}: filtered test MRR median {rows[-1]['test_mrr_median']:.4f} "
              f"{[round(m, 4) for m in mrrs]}, Hits@10 {rows[-1]['test_hits_at_10_median']:.4f}"
              f", epoch {rows[-1]['epoch_median_s']:.4f} s", flush=True)
    return rows


def summarize(results: list[Row]) -> tuple[dict[str, float], dict[str, Any]]:
    speedups: dict[str, float] = {}
    metrics: dict[str, Any] = {}
    graphs = sorted({r["graph"] for r in results})
    for graph in graphs:
        rows = {r["impl"]: r for r in results if r["graph"] == graph}
        ours, pyg = rows["ours"], rows["pyg"]
        speedups[f"{graph}/ours_vs_pyg_epoch"] = pyg["epoch_median_s"] / ours["epoch_median_s"]
        metrics[f"{graph}/epoch_speedup_ok_1.5x"] = bool(
            speedups[f"{graph}/ours_vs_pyg_epoch"] >= 1.5)
        score = "test_mrr" if graph in KG_GRAPHS else "test_accuracy"
        diff = ours[f"{score}_median"] - pyg[f"{score}_median"]
        metrics[f"{graph}/{score}_ours"] = ours[f"{score}_median"]
        metrics[f"{graph}/{score}_pyg"] = pyg[f"{score}_median"]
        metrics[f"{graph}/{score.removeprefix('test_')}_diff_points"] = 100 * diff
        if graph in KG_GRAPHS:
            metrics[f"{graph}/test_hits_at_10_ours"] = ours["test_hits_at_10_median"]
            metrics[f"{graph}/test_hits_at_10_pyg"] = pyg["test_hits_at_10_median"]
        if graph == "umls":  # the real heterogeneous set of the acceptance line
            metrics["accept/rgcn_within_1pt_of_pyg"] = bool(abs(diff) <= 0.01)
        if graph in WORD_GRAPHS:  # real typed node classification, the same line
            metrics[f"accept/{graph}/rgcn_within_1pt_of_pyg"] = bool(abs(diff) <= 0.01)
    return speedups, metrics


def main() -> None:
    parser = make_parser(__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="data root holding acm/")
    parser.add_argument("--seeds", type=int, default=None, help="seeds (default 5, 2 quick)")
    parser.add_argument("--graphs", default=",".join(KG_GRAPHS + NODE_GRAPHS),
                        help="comma-separated subset of " + ", ".join(KG_GRAPHS + NODE_GRAPHS))
    args = parser.parse_args()
    if not have_module("torch_geometric"):
        print("PyG (torch_geometric) is not installed: nothing to compare against.")
        emit([], {}, {"skipped": "torch_geometric not installed"}, args.json)
        return
    seeds = args.seeds or (2 if args.quick else 5)
    results: list[Row] = []
    metrics_extra: dict[str, Any] = {"threads": torch.get_num_threads()}
    for graph in args.graphs.split(","):
        if graph not in KG_GRAPHS + NODE_GRAPHS:
            parser.error(f"unknown graph {graph!r}")
        try:
            if graph in KG_GRAPHS:
                epochs = args.repeats or (5 if args.quick else 50)
                results += bench_kg(graph, load_kg(graph), seeds, epochs)
                continue
            rel = load(graph, args.quick, args.data_dir)
        except DataFormatError as err:
            print(f"[{graph}] skipped: {err}")
            metrics_extra[f"{graph}/skipped"] = str(err)
            continue
        epochs = args.repeats or (10 if args.quick else 50)
        results += bench_graph(graph, rel, seeds, epochs, num_bases=None)
    print_table(results, ["graph", "impl", "nodes", "edges", "relations",
                          "test_accuracy_median", "test_mrr_median", "epoch_median_s"])
    speedups, metrics = summarize(results)
    emit(results, speedups, {**metrics, **metrics_extra}, args.json)


if __name__ == "__main__":
    main()
