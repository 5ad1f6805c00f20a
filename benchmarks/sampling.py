"""Sampling and minibatch-training throughput: sparsegnn vs PyG (or a pure-torch sampler).

Run: ``python benchmarks/sampling.py [--quick] [--scales 18,20] [--json]``.

Sampling: minibatches per second of node-wise sampling (fan-outs 15,10,5, batch size
1024) on R-MAT graphs, ours at bulk sizes k in {1, 16, 64}, against PyG's
``NeighborLoader``. Training: seeds per second of 3-layer GraphSAGE, ours (our sampler,
prefetching loader and layers) against PyG's ``GraphSAGE`` fed by ``NeighborLoader``.

Before/after (``--before REV``): every sampler of ``--samplers`` (node-wise, LADIES,
ShaDow) at every bulk size k, today's code against the sampling package as it was at git
revision REV (loaded from ``git show`` beside today's, on the same sparse core), on the
same seeds and streams, interleaved over ``--rounds`` rounds, best round kept. The first
bulk of each pair is checked to be identical, so the rows compare equal work.

``NeighborLoader`` needs pyg-lib or torch-sparse. When neither imports, the benchmark
says so in its output and measures the peer side with a straightforward vectorised
pure-torch sampler instead (one random sort per frontier; PyG's model, which runs
without the extensions, is still used for training). Nothing is skipped silently:
every peer entry names what was actually measured. ``build_pyg_extensions.sh`` builds
the extension wheels.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Rate, emit, make_parser, rate_of
from sparsegnn.data import rmat
from sparsegnn.nn import GraphSAGE
from sparsegnn.sampling import NodeWiseSampler, batch_generator, epoch_permutation
from sparsegnn.sampling.loader import MinibatchLoader
from sparsegnn.sparse import CSRMatrix

FANOUTS = (15, 10, 5)
# The other samplers' sizes in the before/after comparison: LADIES draws 512 vertices per
# layer (half a batch), ShaDow takes two node-wise hops before extracting the subgraph.
LADIES_SIZES = (512, 512)
SHADOW_FANOUTS = (10, 5)
SAMPLERS = ("sage", "ladies", "shadow")
SIZES = {"sage": FANOUTS, "ladies": LADIES_SIZES, "shadow": SHADOW_FANOUTS}


@dataclass
class Setup:
    adj: CSRMatrix
    x: torch.Tensor
    y: torch.Tensor
    seeds: torch.Tensor  # enough shuffled seed vertices for every measurement


def make_graph(scale: int, features: int, classes: int) -> Setup:
    g = rmat(scale, 16, seed=0, num_features=features)
    adj = CSRMatrix.from_edge_index(g.edge_index, g.num_nodes)
    assert g.x is not None
    y = torch.randint(0, classes, (g.num_nodes,), generator=torch.Generator().manual_seed(0))
    return Setup(adj, g.x, y, epoch_permutation(g.num_nodes, 0, 0))


# ---------------------------------------------------------------------- ours
def ours_sampling(s: Setup, k: int, batches: int, batch_size: int) -> Rate:
    return rate_of(bulk_runner(NodeWiseSampler(s.adj, FANOUTS), s, k, batches, batch_size))


def bulk_runner(sampler: Any, s: Setup, k: int, batches: int, batch_size: int
                ) -> Callable[[], int]:
    """Sample ``batches`` minibatches ``k`` per call; returns how many were sampled."""
    seeds = [s.seeds[i * batch_size : (i + 1) * batch_size] for i in range(batches)]

    def run() -> int:
        for start in range(0, batches, k):
            idx = range(start, min(start + k, batches))
            sampler.sample([seeds[i] for i in idx], [batch_generator(0, 0, i) for i in idx])
        return batches

    return run


def ours_training(s: Setup, steps: int, batch_size: int, hidden: int) -> Rate:
    sampler = NodeWiseSampler(s.adj, FANOUTS)
    train = s.seeds[: steps * batch_size]
    loader = MinibatchLoader(sampler, train, s.x, s.y, batch_size=batch_size, bulk=min(steps, 64))
    model = GraphSAGE(s.x.shape[1], hidden, int(s.y.max()) + 1, len(FANOUTS), dropout=0.5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    def run() -> int:
        seen = 0
        for item in loader.epoch(0):
            opt.zero_grad()
            out = model(item.x, item.batch.operators(len(FANOUTS)))
            F.cross_entropy(out, item.y).backward()
            opt.step()
            seen += item.num_seeds
        return seen

    return rate_of(run)


# ---------------------------------------------------------------------- before / after
def load_revision(rev: str) -> ModuleType:
    """``sparsegnn.sampling.samplers`` as it was at git revision ``rev``, beside today's.

    Its ``frontier`` is loaded from the same revision and bound in place of today's
    while the old ``samplers`` executes (it imports the frontier by absolute name);
    everything else (the CSR core, streams) is today's, so only the sampling kernels
    differ between the two sides.
    """
    root = Path(__file__).resolve().parents[1]
    frontier_name = "sparsegnn.sampling.frontier"
    today = sys.modules[frontier_name]
    loaded: dict[str, ModuleType] = {}
    try:
        for name in ("frontier", "samplers"):
            source = subprocess.run(
                ["git", "-C", str(root), "show", f"{rev}:src/sparsegnn/sampling/{name}.py"],
                capture_output=True, text=True, check=True,
            ).stdout
            module = ModuleType(f"sparsegnn_sampling_at_{rev}_{name}")
            sys.modules[module.__name__] = module  # dataclasses look their module up there
            if name == "samplers":
                sys.modules[frontier_name] = loaded["frontier"]
            exec(compile(source, f"{rev}:src/sparsegnn/sampling/{name}.py", "exec"),
                 module.__dict__)
            loaded[name] = module
    finally:
        sys.modules[frontier_name] = today
    return loaded["samplers"]


def make_sampler(namespace: Any, kind: str, adj: CSRMatrix) -> Any:
    """One of the compared samplers, built from ``namespace`` (today's or a revision's)."""
    if kind == "sage":
        return namespace.NodeWiseSampler(adj, FANOUTS)
    if kind == "ladies":
        return namespace.LadiesSampler(adj, LADIES_SIZES)
    return namespace.ShadowSampler(adj, SHADOW_FANOUTS)


def same_minibatches(a: list[Any], b: list[Any], layers: int) -> bool:
    """Whether two lists of minibatches hold the same vertices and the same operators."""
    def same(x: Any, y: Any) -> bool:
        if not torch.equal(x.node_ids, y.node_ids):
            return False
        return all(p.shape == q.shape and torch.equal(p.crow, q.crow)
                   and torch.equal(p.col, q.col) and torch.equal(p.val, q.val)
                   for p, q in zip(x.operators(layers), y.operators(layers), strict=True))
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))


def before_after(s: Setup, args: argparse.Namespace, old: ModuleType, size: dict[str, Any]
                 ) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Today's samplers against revision ``args.before``'s, interleaved, best round kept."""
    rows, speedups = [], {}
    current = sys.modules["sparsegnn.sampling"]
    for kind in args.samplers:
        batches = args.batches if kind == "sage" else args.extraction_batches
        layers = 1 if kind == "shadow" else len(SIZES[kind])
        after_s, before_s = make_sampler(current, kind, s.adj), make_sampler(old, kind, s.adj)
        for k in args.bulk:
            k = min(k, batches)
            idx = range(k)
            seeds = [s.seeds[i * args.batch_size : (i + 1) * args.batch_size] for i in idx]
            identical = same_minibatches(
                after_s.sample(seeds, [batch_generator(0, 0, i) for i in idx]),
                before_s.sample(seeds, [batch_generator(0, 0, i) for i in idx]), layers)
            best = {"before": Rate(0.0, 0.0), "after": Rate(0.0, 0.0)}
            for _ in range(args.rounds):
                for side, sampler in (("before", before_s), ("after", after_s)):
                    r = rate_of(bulk_runner(sampler, s, k, batches, args.batch_size))
                    best[side] = Rate(max(best[side].wall, r.wall), max(best[side].cpu, r.cpu))
            for side in ("before", "after"):
                rows.append({"what": "sampling_before_after", "sampler": kind, "k": k,
                             "side": side, "revision": args.before if side == "before"
                             else "working tree", "ours": f"{kind} k={k} ({side})",
                             "peer": "", "minibatches_per_s": best[side].wall,
                             "minibatches_per_cpu_s": best[side].cpu, "batches": batches,
                             "rounds": args.rounds, "identical_minibatches": identical,
                             **size, "fanouts": list(SIZES[kind])})
            name = f"{size['graph'].replace(':', '')}/{kind}_k{k}_vs_{args.before}"
            speedups[name + "_cpu"] = best["after"].cpu / best["before"].cpu
            speedups[name] = best["after"].wall / best["before"].wall
    return rows, speedups


# ---------------------------------------------------------------------- peers
def pyg_status() -> str | None:
    """None when NeighborLoader can run here, else why not."""
    try:
        import torch_geometric.typing as pyg_typing
    except ImportError as err:
        return f"torch_geometric not installed ({err})"
    if not (pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE):
        return "PyG's NeighborLoader needs pyg-lib or torch-sparse, and neither is installed"
    return None


def torch_sample(
    crow: torch.Tensor, col: torch.Tensor, seeds: torch.Tensor, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference node-wise sampler in plain torch: one random sort per frontier.

    Returns the input vertex ids (seeds first) and the sampled edges as a PyG
    ``edge_index`` in local ids (source = neighbour, target = the vertex sampling it),
    which is what NeighborLoader hands to a model.
    """
    nodes, edges = seeds, []
    offset = 0  # local id of the frontier's first vertex
    for fanout in FANOUTS:
        frontier = nodes[offset:]
        start, deg = crow[frontier], crow[frontier + 1] - crow[frontier]
        rows = torch.repeat_interleave(torch.arange(frontier.numel()), deg)
        first = torch.cumsum(deg, 0) - deg
        pos = torch.arange(rows.numel()) - first[rows] + start[rows]
        order = torch.argsort(rows.double() + torch.rand(rows.numel(), generator=gen))
        rank = torch.arange(rows.numel()) - first[rows[order]]
        kept = order[rank < fanout]
        nbr = col[pos[kept]]
        new = torch.unique(nbr[~torch.isin(nbr, nodes)])
        sorted_nodes, where = torch.sort(torch.cat([nodes, new]))
        local = where[torch.searchsorted(sorted_nodes, nbr)]
        edges.append(torch.stack([local, rows[kept] + offset]))
        offset, nodes = nodes.numel(), torch.cat([nodes, new])
    return nodes, torch.cat(edges, 1)


def torch_batches(
    s: Setup, batches: int, batch_size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    for i in range(batches):
        yield torch_sample(
            s.adj.crow, s.adj.col, s.seeds[i * batch_size : (i + 1) * batch_size], gen
        )


def pyg_loader(s: Setup, batches: int, batch_size: int) -> Callable[[], Iterator]:
    """PyG's NeighborLoader over the same graph and seeds, built once (its conversion of
    the graph to CSC is set-up, like building our CSRMatrix, and is not timed)."""
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    data = Data(edge_index=s.adj.to_edge_index(), num_nodes=s.adj.shape[0])
    loader = NeighborLoader(
        data,
        num_neighbors=list(FANOUTS),
        batch_size=batch_size,
        input_nodes=s.seeds[: batches * batch_size],
        shuffle=False,
    )

    def batches_of() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for batch in loader:
            yield batch.n_id, batch.edge_index

    return batches_of


def peer_batches(s: Setup, status: str | None, batches: int, batch_size: int
                 ) -> Callable[[], Iterator]:
    """A factory of the peer's minibatch stream (built here, iterated in the timing)."""
    if status:
        return lambda: torch_batches(s, batches, batch_size)
    return pyg_loader(s, batches, batch_size)


def peer_sampling(s: Setup, status: str | None, batches: int, batch_size: int) -> Rate:
    stream = peer_batches(s, status, batches, batch_size)
    return rate_of(lambda: sum(1 for _ in stream()))


def peer_training(s: Setup, status: str | None, steps: int, batch_size: int, hidden: int) -> Rate:
    from torch_geometric.nn.models import GraphSAGE as PygSAGE

    model = PygSAGE(s.x.shape[1], hidden, len(FANOUTS), int(s.y.max()) + 1, dropout=0.5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    stream = peer_batches(s, status, steps, batch_size)

    def run() -> int:
        seen = 0
        for i, (n_id, edge_index) in enumerate(stream()):
            seeds = s.seeds[i * batch_size : (i + 1) * batch_size]
            opt.zero_grad()
            out = model(s.x[n_id], edge_index)[: seeds.numel()]
            F.cross_entropy(out, s.y[seeds]).backward()
            opt.step()
            seen += seeds.numel()
        return seen

    return rate_of(run)


# ---------------------------------------------------------------------- driver
def bench_graph(scale: int, args: argparse.Namespace, status: str | None
                ) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Result rows of one graph and its speedups (ours at the largest k vs the peer)."""
    s = make_graph(scale, args.features, args.classes)
    peer_name = "pure-torch sampler (one sort per frontier)" if status else "PyG NeighborLoader"
    size = {"graph": f"rmat:{scale}", "num_nodes": s.adj.shape[0], "nnz": s.adj.nnz,
            "batch_size": args.batch_size, "fanouts": list(FANOUTS)}
    rows = []
    for k in args.bulk:
        r = ours_sampling(s, k, args.batches, args.batch_size)
        rows.append({"what": "sampling", "ours": f"NodeWiseSampler k={k}", "peer": peer_name,
                     "side": "ours", "k": k, "minibatches_per_s": r.wall,
                     "minibatches_per_cpu_s": r.cpu, **size})
    r = peer_sampling(s, status, args.batches, args.batch_size)
    rows.append({"what": "sampling", "ours": "", "peer": peer_name, "side": "peer",
                 "minibatches_per_s": r.wall, "minibatches_per_cpu_s": r.cpu, **size})
    top = max(args.bulk)
    ours_top = next(x for x in rows if x.get("k") == top)
    speedups = {
        f"rmat{scale}/sampling_k{top}": ours_top["minibatches_per_s"] / r.wall,
        f"rmat{scale}/sampling_k{top}_cpu": ours_top["minibatches_per_cpu_s"] / r.cpu,
    }
    if args.train_steps:
        ours_t = ours_training(s, args.train_steps, args.batch_size, args.hidden)
        peer_t = peer_training(s, status, args.train_steps, args.batch_size, args.hidden)
        for side, t, model in (("ours", ours_t, "sparsegnn GraphSAGE + MinibatchLoader"),
                               ("peer", peer_t, "torch_geometric GraphSAGE + " + peer_name)):
            rows.append({"what": "training", "side": side, "ours": model if side == "ours"
                         else "", "peer": model if side == "peer" else "",
                         "seeds_per_s": t.wall, "seeds_per_cpu_s": t.cpu,
                         "hidden": args.hidden, "features": args.features, **size})
        speedups[f"rmat{scale}/training"] = ours_t.wall / peer_t.wall
        speedups[f"rmat{scale}/training_cpu"] = ours_t.cpu / peer_t.cpu
    if args.before:
        ba_rows, ba_speedups = before_after(s, args, load_revision(args.before), size)
        rows += ba_rows
        speedups.update(ba_speedups)
    return rows, speedups


def summary(rows: list[dict[str, Any]], status: str | None) -> str:
    lines = [f"peer: {'PyG NeighborLoader' if status is None else 'UNAVAILABLE - ' + status}"]
    if status:
        lines.append(
            "comparing with a pure-torch vectorised sampler instead (PyG's model for training)"
        )
    for r in rows:
        label = r["ours"] or r["peer"]
        if r["what"] == "sampling_before_after":
            lines.append(f"{r['graph']} {r['sampler']:<7} k={r['k']:<3} {r['side']:<6} "
                         f"({r['revision']}) {r['minibatches_per_s']:8.2f} minibatches/s "
                         f"({r['minibatches_per_cpu_s']:.2f} per CPU s)"
                         + ("" if r["identical_minibatches"] else "  NOT IDENTICAL"))
        elif r["what"] == "sampling":
            lines.append(f"{r['graph']} sampling  {label:<45} {r['minibatches_per_s']:8.2f} "
                         f"minibatches/s ({r['minibatches_per_cpu_s']:.2f} per CPU s)")
        else:
            lines.append(f"{r['graph']} training  {label:<45} {r['seeds_per_s']:8.0f} "
                         f"seeds/s ({r['seeds_per_cpu_s']:.0f} per CPU s)")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = make_parser(__doc__ or "", quick_help="a 2^14 graph, a few minibatches")
    p.add_argument("--scales", default="18,20", help="R-MAT scales (2^scale vertices)")
    p.add_argument("--bulk", default="1,16,64", help="bulk sizes k of our sampler")
    p.add_argument("--batches", type=int, default=64, help="minibatches per sampling measurement")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument(
        "--train-steps", type=int, default=8, help="minibatches per training measurement (0: skip)"
    )
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--classes", type=int, default=16)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (0: torch's default; PyG's sampler uses one)")
    p.add_argument("--before", default=None, metavar="REV",
                   help="also measure every sampler against the git revision REV's samplers")
    p.add_argument("--samplers", default=",".join(SAMPLERS),
                   help="samplers of the before/after comparison (sage, ladies, shadow)")
    p.add_argument("--extraction-batches", type=int, default=16,
                   help="minibatches per before/after measurement of LADIES and ShaDow")
    p.add_argument("--rounds", type=int, default=3,
                   help="interleaved before/after rounds (the best is kept)")
    args = p.parse_args(argv)
    if args.quick:
        args.scales, args.bulk, args.batches, args.train_steps = "14", "1,4", 8, 2
        args.extraction_batches, args.rounds = 4, 1
    args.scales = [int(x) for x in args.scales.split(",")]
    args.bulk = [int(x) for x in args.bulk.split(",")]
    args.samplers = [x for x in args.samplers.split(",") if x]
    unknown = set(args.samplers) - set(SAMPLERS)
    if unknown:
        p.error(f"unknown samplers {sorted(unknown)}; choose from {', '.join(SAMPLERS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    status = pyg_status()
    rows: list[dict[str, Any]] = []
    speedups: dict[str, float] = {}
    for scale in args.scales:
        graph_rows, graph_speedups = bench_graph(scale, args, status)
        rows += graph_rows
        speedups.update(graph_speedups)
    print(summary(rows, status))
    config = {k: v for k, v in vars(args).items() if k not in ("json", "child")}
    metrics = {"peer_status": status or "available", "config": config,
               "torch_threads": torch.get_num_threads()}
    emit(rows, speedups, metrics, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
