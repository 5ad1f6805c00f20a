"""The automatic choice of a distribution on shaped links between hosts.

``autoconfig.py`` checks the cost model and ``--algo auto`` with local ranks, whose
"network" is loopback. Here four hosts (network namespaces, ``testbed/netns.py``),
one rank each, talk over links shaped with a token bucket (``tc ... tbf``), and every
step is the command a user runs under torchrun on each host: ``sparsegnn calibrate``
(which measures these links), then ``train`` of every feasible configuration, then
``train --algo auto --profile``, then the same with ``--overlap auto`` (the trials also
decide overlap: an ``auto_overlap`` row per link, against the best plain configuration).
Per link: predicted (from that link's profile) and
measured epoch of each configuration (rank 0's median without the first epoch), the best
measured, the auto choice (after its trials) relative to the best, and the default's
(1D dense). The ranking of the algorithms changes with the link, which is the point:
one fixed choice cannot be right on every network.

    python benchmarks/autoconfig_cluster.py --json            # 100mbit and 1gbit
    python benchmarks/autoconfig_cluster.py --quick --json    # 1gbit, 3 epochs

Needs root (network namespaces); elsewhere it says so, prints a JSON saying so and exits 0.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _harness, autoconfig
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # testbed

from testbed.launch import EXIT_ABORT, PORT, last_json, log_tails, torchrun, wait_all
from testbed.netns import Cluster, available, sweep_stale

from _harness import Row, emit, make_parser, skipped
from _judge import judge
from sparsegnn.data import load_any
from sparsegnn.distributed.planning.autoplan import auto_plan
from sparsegnn.distributed.planning.cost_profile import Profile
from sparsegnn.distributed.planning.planner import PlanConfig, PlanGraph

HOSTS = 4
GRAPH = "sbm:nodes=16384,blocks=16,degree=16,features=64"


class Launcher:
    """``torchrun -m sparsegnn ARGS`` on every host of a cluster, one rank each, on a
    fresh port per launch; rank 0's JSON result."""

    def __init__(self, cluster: Cluster, logs: Path) -> None:
        self.cluster, self.logs, self.port = cluster, logs, PORT

    def __call__(self, *args: str) -> dict[str, Any]:
        for attempt in range(2):  # once more after a teardown abort of a finished rank
            self.port += 1
            logs = self.logs / f"launch{self.port}"
            logs.mkdir(parents=True)
            procs = [torchrun(self.cluster, i, 1, self.port, args, logs)
                     for i in range(HOSTS)]
            codes = wait_all(procs, 600)
            printed = (logs / "host0.out").read_text()
            if codes == [0] * HOSTS:
                return last_json(printed)
            aborted = any(EXIT_ABORT in f.read_text(errors="replace")
                          for f in logs.glob("host*.err"))
            for i in range(HOSTS):
                self.cluster.kill(i)
            if attempt or not aborted:
                raise RuntimeError(f"sparsegnn {' '.join(args)} failed ({codes}):\n"
                                   f"{log_tails(logs)}")
        raise AssertionError("unreachable")


def steady(out: dict[str, Any]) -> float:
    """Rank 0's median epoch, the first (plans, warm-up) left out."""
    seconds = [h["seconds"] for h in out["history"][1:]] or [out["epoch_time_s"]]
    return statistics.median(seconds)


def run_link(link: str, epochs: int, work: Path, quick: bool = False
             ) -> tuple[list[Row], dict[str, Any]]:
    """Calibrate, train every configuration and ``--algo auto`` over ``link``; the rows
    and the link's profile (kept in the result, to refit the model from one run)."""
    profile_file = work / f"profile-{link}.json"
    graph = load_any(GRAPH, seed=0)
    common = ["--dataset", GRAPH, "--epochs", str(epochs), "--patience", str(epochs),
              "--timeout", "120", "--dropout-masks", "block", "--history", "--json",
              "--no-progress"]
    with Cluster(HOSTS, link) as c:
        launch = Launcher(c, work / f"logs-{link}")
        # The full calibration's sizes reach 16 MiB: a token bucket lets small messages
        # through at line rate (its burst), so small sizes alone overstate the bandwidth.
        launch("calibrate", *(["--quick"] if quick else []), "--out", str(profile_file),
               "--json")
        profile = Profile.load(profile_file)
        ranked = auto_plan(PlanGraph.of(graph, "gcn"), HOSTS, profile, PlanConfig(HOSTS))
        measured = []
        for cand in ranked:
            cfg = cand.config
            out = launch("train", "--algo", cfg.algo, "--replication", str(cfg.replication),
                         "--comm", cfg.comm, *common)
            measured.append(steady(out))
            print(f"{link:>8} {cfg.algo:>4} c={cfg.replication} {cfg.comm:>6}: predicted "
                  f"{cand.cost.total_s * 1e3:7.1f} ms, measured {measured[-1] * 1e3:7.1f} ms",
                  flush=True)
        auto = launch("train", "--algo", "auto", "--profile", str(profile_file), *common)
        # The whole automatic choice: the distribution and, by trial, overlap on or off.
        both = launch("train", "--algo", "auto", "--profile", str(profile_file),
                      "--overlap", "auto", *common)
    chosen = (auto["algo"], auto["auto"]["replication"], auto["auto"]["comm"])
    tried = {(t["algo"], t["replication"], t["comm"]) for t in auto["auto"]["trials"]}
    peak = max(r["peak_rss_bytes"] for r in auto["memory_per_rank"])
    rows = []
    for k, (cand, seconds) in enumerate(zip(ranked, measured, strict=True)):
        c = cand.config
        key = (c.algo, c.replication, c.comm)
        rows.append({"what": "epoch", "case": f"{link} sbm n={graph.num_nodes} p={HOSTS}",
                     "config": [c.algo, c.replication, c.comm, c.partitioner],
                     "auto_rank": k, "tried": key in tried, "auto_choice": key == chosen,
                     "predicted_s": cand.cost.total_s, "measured_s": seconds,
                     "predicted_comm_s": sum(cand.cost.comm_s.values()),
                     "bytes_per_rank": cand.bytes_per_rank,
                     "predicted_memory_bytes": cand.memory_bytes,
                     "measured_peak_rss_bytes": peak if key == chosen else None,
                     "auto_epoch_s": steady(auto) if key == chosen else None})
    best = min(measured)
    rows.append({"what": "auto_overlap", "case": rows[0]["case"],
                 "config": [both["algo"], both["auto"]["replication"], both["auto"]["comm"],
                            both["auto"]["partitioner"]],
                 "overlap": both["overlap"], "measured_s": steady(both),
                 "best_plain_s": best, "best_plain_over_auto_overlap": best / steady(both),
                 "trials": [[t["algo"], t["replication"], t["comm"], t["overlap"],
                             t["trial_epoch_s"]] for t in both["auto"]["trials"]]})
    print(f"{link:>8} --algo auto --overlap auto: {' '.join(map(str, rows[-1]['config']))}, "
          f"overlap {'on' if both['overlap'] else 'off'}, {steady(both) * 1e3:.1f} ms "
          f"(best plain configuration {best * 1e3:.1f} ms)", flush=True)
    return rows, profile.to_dict()


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__ or "", quick_help="1gbit only, 3 epochs")
    ap.add_argument("--links", default="100mbit,1gbit")
    ap.add_argument("--epochs", type=int, default=6)
    args = ap.parse_args(argv)
    if skipped(*available(), args.json):
        return 0
    sweep_stale()
    links = ["1gbit"] if args.quick else args.links.split(",")
    epochs = 3 if args.quick else args.epochs
    rows: list[Row] = []
    profiles = {}
    with tempfile.TemporaryDirectory(prefix="sparsegnn-autoconfig-") as tmp:
        for link in links:
            found, profiles[link] = run_link(link, epochs, Path(tmp), args.quick)
            rows += found
    epoch_rows = [r for r in rows if r["what"] == "epoch"]
    speedups, metrics = judge(epoch_rows)
    for r in rows:
        if r["what"] == "auto_overlap":
            speedups[f"auto_overlap_vs_best_plain {r['case']}"] = r["best_plain_over_auto_overlap"]
    metrics["profiles"] = profiles
    metrics["graph"], metrics["hosts"] = GRAPH, HOSTS
    metrics["ranking_by_link"] = {
        link: [r["config"][:3] for r in sorted(
            (r for r in epoch_rows if r["case"].startswith(link)), key=lambda r: r["measured_s"])]
        for link in links}
    print(json.dumps(metrics["ranking_by_link"]))
    emit(rows, speedups, metrics, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
