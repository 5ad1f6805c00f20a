"""CUDA check: correctness against the CPU, then SpMM and GCN timings, in a few minutes.

Correctness (float64 CPU references): SpMM and both of its gradients on random
matrices with empty rows at several widths, ``gcn_norm``, a reordered operator, and one
GCN forward/backward with identical weights, the byte dropout mask's drop rate and gradient,
and reduced precision (issue 26.3): float16/bfloat16 SpMM with float32 accumulation
and its gradients, and a GCN on float16 features against float32.
Timings (2^18-vertex graphs as in
``spmm.py`` and ``fullgraph.py``): ours vs torch ``A @ X`` and PyG's ``spmm`` with and
without reordering, and GCN epochs ours vs PyG with ``torch.cuda.max_memory_allocated``
peaks. Without a CUDA device it says so and exits with status 0 having run nothing.

With ``--tracking-model M --tracking-events DIR`` (a reconstruction saved by
``benchmarks/tracking.py --save-model``, and TrackML events such as pileup-200 ttbar
ones) it also times the whole reconstruction of each event, stage by stage, on the CPU
and on CUDA: graph construction (NumPy on the CPU in both), the doublet filter, the
Interaction Network and track building, each stage synchronised, median of
``--repeats``; and checks that CUDA's edge scores match the CPU's.

    python benchmarks/gpu_check.py [--quick] [--json] [--tracking-model M --tracking-events DIR]
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, emit, gib, parse_args, print_table, time_it, time_many
from _workloads import (
    DEFAULT_REORDERING,
    WIDTHS,
    configurations,
    epoch_fn,
    graph_specs,
    load_graph,
    setup,
    torch_csr,
    try_pyg_spmm,
)
from sparsegnn.nn import GCN
from sparsegnn.nn.dropout import dropout
from sparsegnn.sparse import CSRMatrix, gcn_norm, spmm
from sparsegnn.sparse.reorder import Reordered, reorder


def synced(fn: Callable[[], object]) -> Callable[[], None]:
    """``fn`` followed by a device synchronisation, so wall time covers the kernel."""

    def run() -> None:
        fn()
        torch.cuda.synchronize()

    return run


# ---------------------------------------------------------------------- correctness
def random_csr(rows: int, cols: int, nnz: int, seed: int) -> CSRMatrix:
    """Random float64 matrix whose last rows are empty (an edge case for kernels)."""
    g = torch.Generator().manual_seed(seed)
    r = torch.randint(0, rows - 3, (nnz,), generator=g)
    c = torch.randint(0, cols, (nnz,), generator=g)
    return CSRMatrix.from_coo(r, c, torch.rand(nnz, generator=g, dtype=torch.float64), (rows, cols))


def close(a: torch.Tensor, b: torch.Tensor, what: str, failures: list[str]) -> None:
    if not torch.allclose(a.cpu().double(), b.cpu().double(), rtol=1e-5, atol=1e-6):
        err = float((a.cpu().double() - b.cpu().double()).abs().max())
        failures.append(f"{what}: max error {err}")


def check_correctness(dev: torch.device) -> list[str]:
    """Every CUDA result against its CPU float64 reference; returns the failures."""
    failures: list[str] = []
    for width in (1, 16, 128):
        a = random_csr(300, 200, 3000, seed=width)
        x = torch.randn(200, width, dtype=torch.float64)
        w = torch.randn(300, width, dtype=torch.float64)
        val = a.val.clone().requires_grad_()
        xg = x.clone().requires_grad_()
        (spmm(a.with_values(val), xg) * w).sum().backward()
        a_d = a.to(dev)
        val_d = a_d.val.clone().requires_grad_()
        xg_d = x.to(dev).requires_grad_()
        out_d = spmm(a_d.with_values(val_d), xg_d)
        (out_d * w.to(dev)).sum().backward()
        close(out_d, a.to_dense() @ x, f"spmm f={width}", failures)
        assert xg.grad is not None and xg_d.grad is not None
        assert val.grad is not None and val_d.grad is not None
        close(xg_d.grad, xg.grad, f"spmm grad x f={width}", failures)
        close(val_d.grad, val.grad, f"spmm grad values f={width}", failures)
    sym = random_csr(400, 400, 4000, seed=7)
    sym = CSRMatrix.from_coo(torch.cat([sym.row_indices(), sym.col]),
                             torch.cat([sym.col, sym.row_indices()]), None, sym.shape)
    close(gcn_norm(sym.to(dev)).to_dense(), gcn_norm(sym).to_dense(), "gcn_norm", failures)
    norm = gcn_norm(sym.to(dtype=torch.float64))
    op = Reordered(norm, "community")
    op.adj = op.adj.to(dev)
    x = torch.randn(400, 32, dtype=torch.float64)
    close(op.matmul(x.to(dev)), norm.to_dense() @ x, "reordered operator", failures)
    check_gcn(norm, dev, failures)
    check_dropout(dev, failures)
    check_reduced(norm.to(dtype=torch.float32), dev, failures)
    return failures


def check_reduced(adj: CSRMatrix, dev: torch.device, failures: list[str]) -> None:
    """16-bit features on the device (cuSPARSE, float32 compute): the product and the
    feature gradient within 16-bit rounding of the float64 ones, row sums that a 16-bit
    accumulator could not reach, and a GCN whose float32 logits follow float32's."""
    a = adj.to(dev)
    x = torch.randn(adj.shape[0], 32, dtype=torch.float64)
    ref = adj.to(dtype=torch.float64).to_dense() @ x
    for dtype in (torch.float16, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        xr = x.to(dev, dtype).requires_grad_()
        out = spmm(a, xr)
        out.float().sum().backward()
        near(out, ref, 2.0**-6, f"spmm {name}", failures)
        assert xr.grad is not None
        near(xr.grad, adj.to(dtype=torch.float64).to_dense().sum(0, keepdim=True).t()
             .expand(-1, 32), 2.0**-6, f"spmm {name} grad x", failures)
        n = 4096
        ones = CSRMatrix.from_csr(torch.tensor([0, n]), torch.arange(n), torch.ones(n), (1, n))
        total = spmm(ones.to(dev), torch.ones(n, 4, device=dev, dtype=dtype))
        if not bool((total.float() == n).all()):
            failures.append(f"spmm {name}: 4096 ones sum to {float(total[0, 0])}")
    torch.manual_seed(0)
    model = GCN(32, 64, 5, dropout=0.0).to(dev).eval()
    with torch.no_grad():
        full, half = model(x.float().to(dev), a), model(x.to(dev, torch.float16), a)
    if half.dtype != torch.float32:
        failures.append(f"GCN float16: logits are {half.dtype}, expected float32")
    near(half, full.double(), 2.0**-5, "GCN float16 logits", failures)


def near(a: torch.Tensor, b: torch.Tensor, rel: float, what: str, failures: list[str]) -> None:
    """Within ``rel`` of the largest reference entry (16-bit storage tolerances)."""
    err = float((a.detach().cpu().double() - b.cpu().double()).abs().max())
    if err > rel * float(b.abs().max()):
        failures.append(f"{what}: max error {err}")


def check_dropout(dev: torch.device, failures: list[str]) -> None:
    """The byte mask (the models' default) on the device: drop rate near p, gradient is
    the mask, scaled."""
    x = (torch.rand(1000, 64, device=dev) + 1.0).requires_grad_()
    y = dropout(x, 0.5, True, "bytes")
    y.backward(torch.ones_like(y))
    rate = float((y == 0).float().mean())
    if abs(rate - 0.5) > 0.01:
        failures.append(f"bytes dropout: drop rate {rate}, expected 0.5")
    assert x.grad is not None
    close(x.grad, (y != 0).float() * 2.0, "bytes dropout grad", failures)


def check_gcn(adj: CSRMatrix, dev: torch.device, failures: list[str]) -> None:
    """Same weights on CPU and device: logits and weight gradients agree."""
    torch.manual_seed(0)
    cpu_model = GCN(32, 64, 5, dropout=0.0).double()
    dev_model = GCN(32, 64, 5, dropout=0.0).double().to(dev)
    dev_model.load_state_dict(cpu_model.state_dict())
    x = torch.randn(adj.shape[0], 32, dtype=torch.float64)
    cpu_out, dev_out = cpu_model(x, adj), dev_model(x.to(dev), adj.to(dev))
    close(dev_out, cpu_out, "GCN logits", failures)
    cpu_out.square().sum().backward()
    dev_out.square().sum().backward()
    for (name, p_cpu), p_dev in zip(cpu_model.named_parameters(), dev_model.parameters(),
                                    strict=True):
        assert p_cpu.grad is not None and p_dev.grad is not None
        close(p_dev.grad, p_cpu.grad, f"GCN grad {name}", failures)


# ---------------------------------------------------------------------- timings
def spmm_timings(dev: torch.device, quick: bool, repeats: int) -> list[Row]:
    pyg_spmm = try_pyg_spmm()
    rows: list[Row] = []
    for spec in graph_specs(quick):
        g = spec.build()
        a = gcn_norm(CSRMatrix.from_edge_index(g.edge_index, g.num_nodes), symmetric=True)
        a_new, _ = reorder(a, DEFAULT_REORDERING)
        rows += spmm_rows(spec.name, a.to(dev), a_new.to(dev), pyg_spmm, repeats)
    return rows


def spmm_rows(
    name: str, a: CSRMatrix, a_new: CSRMatrix, pyg_spmm: Callable | None, repeats: int
) -> list[Row]:
    """One row per width: ours on the graph as given and reordered, torch, PyG."""
    t_csr = torch_csr(a)
    rows: list[Row] = []
    for f in WIDTHS:
        x = torch.randn(a.shape[0], f, device=a.device)
        xh = x.half()
        fns = {"ours": synced(lambda x=x: spmm(a, x)),
               f"ours_{DEFAULT_REORDERING}": synced(lambda x=x: spmm(a_new, x)),
               f"ours_fp16_{DEFAULT_REORDERING}": synced(lambda xh=xh: spmm(a_new, xh)),
               "torch_csr": synced(lambda x=x: torch.sparse.mm(t_csr, x))}
        if pyg_spmm is not None:
            fns["pyg_spmm"] = synced(lambda x=x: pyg_spmm(t_csr, x))
        timings = time_many(fns, repeats=repeats)
        rows.append({"what": "spmm", "graph": name, "f": f, "nnz": a.nnz,
                     **{k: t.min for k, t in timings.items()}})
    return rows


def gcn_timings(dev: torch.device, quick: bool, repeats: int) -> list[Row]:
    graph = "sbm14" if quick else "sbm18"
    rows: list[Row] = []
    for impl in configurations():
        g = load_graph(graph)
        model, op, g = setup(impl, g, dev)
        epoch = epoch_fn(model, op, g)
        epoch()
        torch.cuda.reset_peak_memory_stats(dev)
        t = time_it(synced(epoch), repeats=repeats, warmup=0)
        rows.append({"what": "gcn_epoch", "graph": graph, "impl": impl, "epoch_s": t.min,
                     "peak_gib": gib(torch.cuda.max_memory_allocated(dev))})
        del model, op, g, epoch
        torch.cuda.empty_cache()
    return rows


# Stages of one event's reconstruction, in order (Reconstruction.graph = graph + filter).
TRACKING_STAGES = ("graph", "filter", "score", "build")


def reconstruction_stages(reco: Any, event: Any, dev: torch.device, repeats: int
                          ) -> tuple[dict[str, float], Any]:
    """Median seconds of each of :data:`TRACKING_STAGES` on ``event`` (``reco`` on
    ``dev``), and the edge scores."""
    from sparsegnn.tracking.graph_construction import module_map_graph

    out: dict[str, Any] = {}
    steps = {"graph": lambda: module_map_graph(event, reco.module_map, reco.config.cuts,
                                               reco.targets),
             "filter": lambda: (out["graph"] if reco.edge_filter is None
                                else reco.edge_filter.prune(out["graph"])),
             "score": lambda: reco.score(out["filter"]),
             "build": lambda: reco.build(out["score"], event)}
    seconds = {}
    for stage in TRACKING_STAGES:
        step = synced(steps[stage]) if dev.type == "cuda" else steps[stage]
        out[stage] = steps[stage]()  # warm-up, and the next stage's input
        seconds[stage] = time_it(step, repeats=repeats, warmup=0).median
    return seconds, out["score"]


# Largest CUDA-vs-CPU difference of an edge probability, by scoring precision: float32
# sums in another order; bfloat16 rounds every product (its scores differ from float32's
# by up to 0.115 on a pileup-200 event, docs/results/tracking.md).
SCORE_TOLERANCE = {"fp32": 1e-3, "bf16": 0.15}


def tracking_timings(dev: torch.device, model: str, events: str, repeats: int,
                     failures: list[str]) -> list[Row]:
    """One row per event: every stage's seconds on the CPU and on ``dev``, and the largest
    difference between the two devices' edge probabilities (above
    :data:`SCORE_TOLERANCE` of the model's scoring precision is a failure)."""
    from sparsegnn.tracking.events import read_events
    from sparsegnn.tracking.pipeline import Reconstruction

    cpu = torch.device("cpu")
    recos = {d: Reconstruction.from_model(model, d) for d in (cpu, dev)}
    rows: list[Row] = []
    for event in read_events(events):
        (ours, scores), (peer, peer_scores) = (
            reconstruction_stages(recos[d], event, d, repeats) for d in (dev, cpu))
        diff = float(abs(scores.scores - peer_scores.scores).max(initial=0.0))
        if diff > SCORE_TOLERANCE[recos[cpu].config.precision]:
            failures.append(f"tracking {event.name}: CUDA edge scores differ from the CPU's "
                            f"by up to {diff:.2g}")
        rows.append({"what": "track reconstruction", "event": event.name,
                     "hits": event.num_hits, "edges": int(scores.scores.size),
                     "max_score_diff": diff,
                     **{f"{s}_s": ours[s] for s in TRACKING_STAGES},
                     **{f"cpu_{s}_s": peer[s] for s in TRACKING_STAGES},
                     "ours": sum(ours.values()), "peer": sum(peer.values()),
                     "cpu_threads": torch.get_num_threads()})
    return rows


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra_values={
        "tracking-model": "a saved reconstruction (benchmarks/tracking.py --save-model)",
        "tracking-events": "TrackML events to reconstruct with it (e.g. pileup-200 ttbar)"})
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device (torch.cuda.is_available() is False); nothing was run.")
        emit([], {}, {"cuda_available": False}, args.json)
        return
    dev = torch.device("cuda")
    repeats = args.repeats or 10
    print(f"device: {torch.cuda.get_device_name(dev)}, torch {torch.__version__}", flush=True)
    failures = check_correctness(dev)
    print("correctness: " + ("all checks passed" if not failures else "; ".join(failures)),
          flush=True)
    spmm_rows = spmm_timings(dev, args.quick, repeats)
    print_table(spmm_rows, [c for c in ("graph", "f", "nnz", "ours", "ours_community",
                                        "ours_fp16_community", "torch_csr", "pyg_spmm")
                            if c in spmm_rows[0]])
    gcn_rows = gcn_timings(dev, args.quick, repeats)
    print_table(gcn_rows, ["graph", "impl", "epoch_s", "peak_gib"])
    track_rows = []
    if args.tracking_model and args.tracking_events:
        track_rows = tracking_timings(dev, args.tracking_model, args.tracking_events,
                                      min(repeats, 5), failures)
        print_table(track_rows, ["event", "hits", "edges", *(f"{s}_s" for s in TRACKING_STAGES),
                                 "ours", "peer", "max_score_diff"])
    speedups = summarize(spmm_rows, gcn_rows)
    if track_rows:
        speedups["tracking/reconstruction_cuda_vs_cpu"] = (
            sum(r["peer"] for r in track_rows) / sum(r["ours"] for r in track_rows))
    emit([*spmm_rows, *gcn_rows, *track_rows], speedups,
         {"cuda_available": True, "device": torch.cuda.get_device_name(dev),
          "correctness_failures": failures}, args.json)
    if failures:
        sys.exit(1)


def summarize(spmm_rows: list[Row], gcn_rows: list[Row]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in spmm_rows:
        key = f"spmm/{r['graph']}/f{r['f']}"
        out[f"{key}/ours_vs_torch"] = r["torch_csr"] / r["ours"]
        out[f"{key}/ours_community_vs_torch"] = r["torch_csr"] / r["ours_community"]
        out[f"{key}/fp16_vs_fp32_community"] = r["ours_community"] / r["ours_fp16_community"]
    epochs: dict[str, Any] = {r["impl"]: r["epoch_s"] for r in gcn_rows}
    for impl, t in epochs.items():
        if impl != "ours":
            out[f"gcn/ours_vs_{impl}"] = t / epochs["ours"]
    return out


if __name__ == "__main__":
    main()
