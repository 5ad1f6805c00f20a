"""R-GCN's automatic choice of a distribution, checked against measurement.

The R-GCN form of ``autoconfig.py``: for a typed SBM (``hsbm:``, featureless as PyG's
entity-classification example trains, or with features), the machine is calibrated at p
ranks (``sparsegnn calibrate``'s measurements, or ``--profile``),
:func:`~sparsegnn.distributed.planning.relational_cost.choose_relational` (what
``train --model rgcn --algo auto`` calls) prices every feasible configuration (1D, 1.5D,
2D, 3D; sparse or dense comm; the partitioners asked for), and every one of them is then
trained for a few epochs in one job of p local ranks, in ``--rounds`` rounds (rotated
order, each configuration's epoch the median of the slowest rank's epochs over all
rounds, the first epoch of a run left out). Reported per configuration: predicted and
measured epoch; per case, as ``autoconfig.py`` judges it: the auto choice (the model's
first choice: R-GCN's auto runs no trials) against the best measured (timed again side
by side where they differ), and its ranks' peak resident set in a fresh job against the
predicted per-rank memory.

    python benchmarks/autoconfig_rgcn.py --json
    python benchmarks/autoconfig_rgcn.py --quick --json     # 4,096 vertices, p = 4
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, emit, make_parser
from _judge import judge
from sparsegnn.data.hetero import HeteroGraph
from sparsegnn.distributed import grid_shape, rank_session, spawn
from sparsegnn.distributed.planning.cost_profile import Profile
from sparsegnn.distributed.planning.planner import PlanConfig
from sparsegnn.distributed.planning.rank_memory import process_bytes
from sparsegnn.distributed.planning.relational_cost import RelationalPlanGraph, choose_relational
from sparsegnn.distributed.runtime.session import gather_objects
from sparsegnn.train.calibration_job import calibrate_rank
from sparsegnn.train.memory import peak_rss_bytes
from sparsegnn.train.rgcn_grid import train_rgcn_rank
from sparsegnn.train.rgcn_task import RGCNRanks, RGCNRequest, relational_problem


def _request(base: RGCNRequest, c: PlanConfig) -> RGCNRequest:
    ranks = RGCNRanks(algo=c.algo, nprocs=c.parts, replication=c.replication,
                      partition=c.partitioner, comm=c.comm, timeout_s=600)  # type: ignore[arg-type]
    return replace(base, ranks=ranks)


def _epochs(base: RGCNRequest, typed: HeteroGraph, c: PlanConfig) -> list[float]:
    """One run of ``c`` on this job's ranks: the slowest rank's epochs, the first left out."""
    run = train_rgcn_rank(_request(base, c), grid_shape(c.algo, c.parts, c.replication), typed)
    assert run is not None
    mine = [h.seconds for h in run.outcome.history]
    every = gather_objects(mine)
    return [max(e) for e in zip(*every, strict=True)][1:]


def _measure(base: RGCNRequest, typed: HeteroGraph, todo: list[PlanConfig], rounds: int,
             confirm_rounds: int, auto: int) -> tuple[list[float], dict[int, float]]:
    """Rank body: every configuration in ``rounds`` rotated rounds (median of the pooled
    epochs), then the sweep's fastest and the auto choice (index ``auto``) again, side by
    side, where they differ."""
    with rank_session("gloo", timeout_s=600):
        def pooled(configs: list[int], n: int) -> list[float]:
            got: list[list[float]] = [[] for _ in configs]
            for r in range(n):
                for k in ((r + i) % len(configs) for i in range(len(configs))):
                    got[k] += _epochs(base, typed, todo[configs[k]])
            return [statistics.median(e) for e in got]

        measured = pooled(list(range(len(todo))), rounds)
        pair = sorted({min(range(len(todo)), key=measured.__getitem__), auto})
        if len(pair) < 2 or confirm_rounds < 1:
            return measured, {}
        return measured, dict(zip(pair, pooled(pair, confirm_rounds), strict=True))


def _peak_rss(base: RGCNRequest, typed: HeteroGraph, c: PlanConfig) -> int:
    """Rank body of a fresh job: train ``c``; the largest peak resident set of its ranks."""
    with rank_session("gloo", timeout_s=600):
        _epochs(base, typed, c)
        return max(gather_objects(peak_rss_bytes()))


def run_case(source: str, p: int, profile: Profile, args: Any) -> list[Row]:
    base = RGCNRequest(source=source, hidden=args.hidden, epochs=args.epochs + 1,
                       num_bases=args.num_bases, seed=args.seed, progress=False)
    typed, rel = relational_problem(base)
    graph = RelationalPlanGraph.of(rel, typed.num_classes)
    cfg = PlanConfig(p, model="rgcn", hidden=args.hidden, num_bases=args.num_bases,
                     seed=args.seed)
    ranked = choose_relational(graph, p, profile, cfg,
                               partitioners=tuple(args.partitioners.split(",")),
                               process_bytes=process_bytes(profile))
    todo = [c.config for c in ranked]
    measured, confirmed = spawn(_measure, p, (base, typed, todo, args.rounds,
                                              args.confirm_rounds, 0), wall_timeout_s=3600)[0]
    peak = spawn(_peak_rss, p, (base, typed, todo[0]), wall_timeout_s=3600)[0]
    case = (f"{source} R={graph.num_relations} "
            f"{'featureless' if graph.featureless else 'features'} p={p}")
    return [{"what": "epoch", "case": case,
             "config": [c.config.algo, c.config.replication, c.config.comm,
                        c.config.partitioner],
             "auto_rank": k, "tried": k == 0, "auto_choice": k == 0,
             "predicted_s": c.cost.total_s, "measured_s": measured[k],
             "confirm_s": confirmed.get(k), "predicted_compute_s": c.cost.compute_s,
             "predicted_comm_s": sum(c.cost.comm_s.values()),
             "predicted_comm_by_phase_s": dict(c.cost.comm_s),
             "predicted_overhead_s": c.cost.overhead_s, "collective_calls": c.cost.calls,
             "predicted_memory_bytes": c.memory_bytes,
             "measured_peak_rss_bytes": peak if k == 0 else None}
            for k, c in enumerate(ranked)]


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__ or "", quick_help="one featureless case of 4,096 vertices, p = 4")
    ap.add_argument("--graphs", default="hsbm:nodes=8192;hsbm:nodes=8192,features=32",
                    help="typed graph specs, ';'-separated")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--num-bases", type=int, default=None)
    ap.add_argument("--epochs", type=int, default=6, help="timed epochs per run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--confirm-rounds", type=int, default=2)
    ap.add_argument("--partitioners", default="block,metis")
    ap.add_argument("--profile", default=None, help="a machine profile (default: calibrate)")
    args = ap.parse_args(argv)
    if args.quick:
        args.graphs, args.epochs, args.rounds, args.confirm_rounds = \
            "hsbm:nodes=4096", 3, 1, 1
        args.partitioners = "block"
    p = args.ranks
    profile = Profile.load(args.profile) if args.profile else \
        spawn(calibrate_rank, p, (args.quick,), wall_timeout_s=1800)[0]
    rows: list[Row] = []
    for source in args.graphs.split(";"):
        case = run_case(source, p, profile, args)
        rows += case
        top = min(case, key=lambda r: r["measured_s"])
        print(f"{case[0]['case']}: auto {case[0]['config']} {case[0]['measured_s'] * 1e3:.1f} "
              f"ms (predicted {case[0]['predicted_s'] * 1e3:.1f}), best {top['config']} "
              f"{top['measured_s'] * 1e3:.1f} ms", flush=True)
    speedups, metrics = judge(rows)
    metrics["fitted_overheads"] = {k: getattr(profile, k) for k in
                                   ("epoch_overhead_s", "call_overhead_s", "row_overhead_s",
                                    "relation_call_overhead_s")}
    metrics["profile"] = {k: v for k, v in profile.to_dict().items() if k != "notes"}
    emit(rows, speedups, metrics, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
