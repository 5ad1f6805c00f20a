"""Multi-host full-graph training on a shaped network: epoch time per algorithm at 1, 2
and 4 hosts, bytes on the wire against the bytes we account, and the fault table.

Hosts are Linux network namespaces joined by a bridge (``testbed/netns.py``), every
link shaped in both directions with a token bucket (``tc ... tbf``). Every job is the
launch the cluster tests check (``testbed/launch.py``): ``torchrun --rdzv-backend
c10d`` on every host running ``sparsegnn train --json`` on a folder of its own that holds
only its ranks' files of one ``sparsegnn data partition`` of a generated graph.

The world size is fixed per algorithm (1D, 1.5D with c = 2 and 2D on 4 ranks, 3D on 8)
and spread over 1, 2 or 4 hosts, so a row differs from its one-host row only in which
messages cross a shaped wire instead of loopback; the machine's cores stay the same. Per
row: the median epoch (rank 0's, from the JSON), and per host the bytes its interface
carried (tx + rx, kernel counters, the whole launch) against the bytes its ranks
accounted (``comm.per_rank`` of the JSON: the epochs plus the final test forward). Their
ratio is the network's overhead (headers, ACKs, rendezvous, set-up) only where a host
runs one rank; ranks sharing a host talk over loopback, which no interface counts, so
there the ratio falls below 1 by that share.

The fault table runs the scenarios of ``testbed/faults.py`` (the cluster tests'
runners) on two unshaped hosts with ``--timeout 10``: a host cut off mid-run (its link
down), a rank stopped with SIGSTOP, and a host lost under elastic torchrun (``--nnodes
1:2 --max-restarts``, a checkpoint every epoch). Per case: seconds from the fault until
every surviving rank had ended, whether training resumed, its final test accuracy next
to the same training without a fault, and what the fault cost (epochs redone, complete
checkpoints lost); the first two cases end the job by design, so nothing resumes there.

The chaos run (``testbed/chaos.py``, issue 50) hits one 2-host job (2 ranks per
host, ``--checkpoint-every 1 --resume --timeout 10``) in turn with a cut link, a killed
host, a stopped rank, a deleted shard and a corrupted shard, each followed by a resume.
Per fault: whether every surviving rank on both hosts ended within ``--timeout`` + 30 s,
when each host had no process of the job left, what was left then, the epoch it resumed
from against the newest restorable one (epochs lost); at the end, whether the final
weights (the last manifest's ``replicated_sha256``) are bit-identical to an uninterrupted
run's.

    python benchmarks/cluster.py --json          # 1D/1.5D/2D/3D, 1/2/4 hosts at 1gbit,
                                                 # 4 hosts at 100mbit; three faults; chaos
    python benchmarks/cluster.py --quick --json  # 2D, 1 and 2 hosts, 1gbit; host cut off;
                                                 # chaos to 40 epochs
    python benchmarks/cluster.py --only chaos --json  # one part: epochs, faults or chaos

Needs root (network namespaces); elsewhere it says why, prints a JSON saying so and exits
0. No peer runs here (the reference is the same job on one host), so no speedups; the
metrics hold each epoch time over the one-host epoch time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _harness
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # testbed

from testbed.chaos import ChaosOutcome, chaos_run
from testbed.faults import (
    FaultOutcome,
    ScenarioError,
    host_cut_off,
    host_lost_elastic,
    rank_stalled,
)
from testbed.launch import PORT, accounted_bytes, across, host_folders, last_json
from testbed.netns import Cluster, available, sweep_stale

from _harness import Row, emit, make_parser, print_table, skipped

LOOPBACK = "loopback"  # the link of a one-host job: every rank talks over lo


@dataclass(frozen=True)
class Algo:
    """An algorithm and the grid it runs on: world size and 1.5D replication."""

    name: str
    world: int
    replication: int = 1

    def partition_args(self) -> list[str]:
        c = ["--replication", str(self.replication)] if self.name == "1.5d" else []
        return ["--algo", self.name, "--nprocs", str(self.world), *c]


ALGOS = {a.name: a for a in (Algo("1d", 4), Algo("1.5d", 4, 2), Algo("2d", 4), Algo("3d", 8))}


@dataclass(frozen=True)
class Setup:
    """What one benchmark run trains, and on which links: ``(hosts, tbf rate)`` pairs,
    one host meaning loopback (every algorithm runs on each)."""

    graph: str
    hidden: int
    epochs: int
    algos: tuple[str, ...]
    links: tuple[tuple[int, str], ...]
    faults: tuple[str, ...]
    chaos_epochs: int  # the chaos run's --epochs (its faults take ~25 of them)


QUICK = Setup("sbm:nodes=4096,blocks=8,degree=16,features=64", 32, 3, ("2d",),
              ((1, LOOPBACK), (2, "1gbit")), ("host cut off",), 40)
# 100 Mbit/s only at 4 hosts, where every rank's traffic crosses a link: a full run
# stays near 15 minutes on the shared 2-core machine (launching the ranks dominates).
FULL = Setup("sbm:nodes=16384,blocks=8,degree=16,features=64", 64, 5, tuple(ALGOS),
             ((1, LOOPBACK), (2, "1gbit"), (4, "1gbit"), (4, "100mbit")),
             ("host cut off", "rank stalled", "host lost, elastic restart"), 100)


# ---------------------------------------------------------------------- data
def sparsegnn(*args: str) -> str:
    """``python -m sparsegnn ARGS`` (the CLI users run, not imported here); its stdout."""
    done = subprocess.run([sys.executable, "-m", "sparsegnn", *args], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"sparsegnn {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def partitions(setup: Setup, work: Path) -> dict[str, Path]:
    """The generated graph cut once per algorithm for its grid."""
    graph = work / "graph.npz"
    sparsegnn("data", "generate", setup.graph, "--out", str(graph))
    out = {}
    for name in setup.algos:
        out[name] = work / name
        sparsegnn("data", "partition", str(graph), str(out[name]), *ALGOS[name].partition_args())
    return out


def graph_sizes(folder: Path) -> tuple[int, int]:
    """Vertices and operator nonzeros (self-loops included) from a partition's manifest."""
    manifest = json.loads((folder / "manifest.json").read_text())
    return manifest["offsets"][-1], sum(h[1] for h in manifest["rank_holdings"])


def spread(folder: Path, hosts: int, per_host: int) -> list[Path]:
    """Per-host folders of ``folder`` for ``hosts`` hosts (a link to it names the set,
    since :func:`host_folders` names its folders after its argument)."""
    named = folder.with_name(f"{folder.name}-{hosts}h")
    named.symlink_to(folder.name)
    return host_folders(named, hosts, per_host)


# ---------------------------------------------------------------------- epochs
def train_args(setup: Setup) -> list[str]:
    return ["train", "--epochs", str(setup.epochs), "--patience", str(setup.epochs),
            "--hidden", str(setup.hidden), "--timeout", "120", "--json", "--no-progress"]


def epoch_row(algo: Algo, hosts: int, link: str, setup: Setup, out: dict[str, Any],
              wire: list[int], seconds: float) -> Row:
    """One job's row: epoch time, accuracy, and per host wire vs accounted bytes."""
    per_host = algo.world // hosts
    accounted = [0] * hosts
    for rank in out["comm"]["per_rank"]:
        accounted[rank["rank"] // per_host] += accounted_bytes(rank, setup.epochs)
    crossed = hosts > 1
    return {
        "what": "epoch", "algo": algo.name, "replication": algo.replication,
        "world_size": out["world_size"], "hosts": hosts, "ranks_per_host": per_host,
        "link": link, "epoch_time_s": out["epoch_time_s"], "epochs": out["epochs_run"],
        "test_accuracy": out["test_accuracy"], "launch_s": seconds,
        "accounted_bytes_per_epoch": out["comm"]["total_bytes_per_epoch"],
        "wire_bytes_per_host": wire if crossed else None,
        "accounted_bytes_per_host": accounted,
        "wire_over_accounted": sum(wire) / sum(accounted) if crossed else None,
    }


def run_epochs(setup: Setup, folders: dict[str, Path]) -> tuple[list[Row], list[Row]]:
    """Every algorithm on every link of the setup; the rows and the failed launches."""
    rows: list[Row] = []
    failed: list[Row] = []
    spreads = {(name, h): spread(folders[name], h, ALGOS[name].world // h)
               for name in setup.algos for h in {h for h, _ in setup.links}}
    for hosts, rate in setup.links:
        with Cluster(hosts, None if rate == LOOPBACK else rate) as c:
            for k, name in enumerate(setup.algos):
                algo = ALGOS[name]
                start = time.perf_counter()
                launch = across(c, algo.world // hosts, spreads[(name, hosts)],
                                train_args(setup),
                                folders[name].parent / f"logs-{name}-{hosts}h-{rate}",
                                PORT + 2 * k)
                if not launch.ok:
                    failed.append({"what": "epoch", "algo": name, "hosts": hosts, "link": rate,
                                   "codes": launch.codes, "error": _last_error(launch.logs)})
                    continue
                rows.append(epoch_row(algo, hosts, rate, setup, last_json(launch.printed),
                                      [w.tx_bytes + w.rx_bytes for w in launch.wire],
                                      time.perf_counter() - start))
                _print_epoch(rows[-1])
    return rows, failed


def _last_error(logs: Path) -> str:
    """The last line naming an error in any host's stderr (sparsegnn's one-line
    ``error:``, or a Python exception), for a failed launch."""
    lines = [line for f in sorted(logs.glob("host*.err"))
             for line in f.read_text(errors="replace").splitlines()
             if "error: " in line or "Error: " in line]
    return lines[-1] if lines else "no error line"


def _print_epoch(r: Row) -> None:
    ratio = r["wire_over_accounted"]
    print(f"{r['algo']:>4} {r['hosts']} host(s) x {r['ranks_per_host']} on {r['link']:>8}: "
          f"{r['epoch_time_s'] * 1e3:8.1f} ms/epoch, accounted "
          f"{sum(r['accounted_bytes_per_host']) / 2**20:8.2f} MiB"
          + ("" if ratio is None else f", wire/accounted {ratio:.3f}"), flush=True)


def slowdowns(rows: Sequence[Row]) -> dict[str, float]:
    """Each multi-host epoch time over the same algorithm's one-host epoch time."""
    one = {r["algo"]: r["epoch_time_s"] for r in rows if r["hosts"] == 1}
    return {f"epoch_time_vs_1host/{r['algo']}/{r['hosts']}hosts/{r['link']}":
            r["epoch_time_s"] / one[r["algo"]]
            for r in rows if r["hosts"] > 1 and r["algo"] in one}


# ---------------------------------------------------------------------- faults
# As in the cluster tests: --timeout of the fault runs, and the elastic case's graph
# (400 test vertices, so accuracy moves in steps of 0.25 pt) and epochs.
FAULT_TIMEOUT_S = 10
FAULT_GRAPH = "sbm:nodes=2000,blocks=4,degree=6"
ELASTIC_EPOCHS = 60


def fault_row(out: FaultOutcome, resumed: bool, accuracy: float | None,
              reference: float | None, lost: str | None) -> Row:
    """One line of the fault table from a runner's outcome (``lost``: what training the
    fault cost, None where the job is meant to end and nothing resumes)."""
    return {
        "what": "fault", "case": out.case, "timeout_s": out.timeout_s,
        "seconds_to_detect": out.detect_s, "seconds_to_clear": _clear_s(out),
        "resumed": resumed, "final_accuracy": accuracy,
        "uninterrupted_accuracy": reference, "data_lost": lost, "torchrun_exit": out.codes,
        "error_host0": (out.errors[0] or [None])[0], "launched_twice": out.relaunched,
    }


def _clear_s(out: FaultOutcome) -> float | None:
    """When the last watched host had no process of the job left (None: not watched, or
    one still had)."""
    clear = out.hosts_clear_s
    return None if not clear or None in clear else max(t for t in clear if t is not None)


def cut_off(c: Cluster, graph: Path, work: Path) -> Row:
    """1D, one rank per host, each host holding only its rank's file; host 1 cut off."""
    folder = work / "parts"
    sparsegnn("data", "partition", str(graph), str(folder), "--algo", "1d", "--nprocs", "2")
    out = host_cut_off(c, ["train", "--algo", "1d", "--json", "--no-progress"],
                       host_folders(folder, 2, 1), work / "logs", FAULT_TIMEOUT_S)
    return fault_row(out, False, None, None, None)


def stalled(c: Cluster, graph: Path, work: Path) -> Row:
    """1D, two ranks per host; the last rank stopped (SIGSTOP) beyond ``--timeout``."""
    out = rank_stalled(c, ["train", "--algo", "1d", "--json", "--no-progress"], graph,
                       work / "logs", FAULT_TIMEOUT_S)
    return fault_row(out, False, None, None, None)


def elastic(c: Cluster, graph: Path, work: Path) -> Row:
    """``--nnodes 1:2 --max-restarts``, checkpoint every epoch; host 1 lost after a
    complete checkpoint; host 0 resumes alone and finishes."""
    out = host_lost_elastic(c, ["train", "--seed", "0"], graph, work / "ckpt", work / "logs",
                            FAULT_TIMEOUT_S, ELASTIC_EPOCHS)
    resumed = out.codes[0] == 0 and out.resumed_epoch is not None
    lost = None
    if resumed:
        kept = "no complete checkpoint lost" if out.resumed_epoch == out.checkpoint_epoch \
            else f"resumed epoch {out.resumed_epoch}, newest complete {out.checkpoint_epoch}"
        lost = f"{out.epochs_redone} epoch(s) redone, {kept}"
    return fault_row(out, resumed, out.accuracy, out.reference_accuracy, lost)


FAULTS = {"host cut off": cut_off, "rank stalled": stalled,
          "host lost, elastic restart": elastic}


def fault_graph(work: Path) -> Path:
    """The fault runs' graph, generated once."""
    graph = work / "fault-graph.npz"
    if not graph.is_file():
        sparsegnn("data", "generate", FAULT_GRAPH, "--out", str(graph))
    return graph


def run_faults(setup: Setup, work: Path) -> list[Row]:
    """Each fault case on two fresh unshaped hosts; a case that could not reach its fault
    is a row with the reason."""
    graph = fault_graph(work)
    rows = []
    for k, case in enumerate(setup.faults):
        (work / f"fault{k}").mkdir()
        with Cluster(2) as c:
            try:
                rows.append(FAULTS[case](c, graph, work / f"fault{k}"))
            except ScenarioError as err:
                rows.append({"what": "fault", "case": case, "error": str(err).splitlines()[0]})
        print(f"fault: {rows[-1]}", flush=True)
    return rows


# ---------------------------------------------------------------------- chaos
CHAOS_TRAIN = ("train", "--seed", "0")
CHAOS_COLUMNS = ["case", "detected", "detect_s", "clear_s", "nothing_left", "saved_epoch",
                 "resumed_epoch", "epochs_lost", "source_shard"]


def chaos_metrics(out: ChaosOutcome) -> dict[str, Any]:
    """The chaos run in ``metrics``: per fault its verdicts and worst times, then the
    final weights against the uninterrupted run's."""
    metrics: dict[str, Any] = {"chaos/ok": out.ok, "chaos/epochs": out.epochs}
    for f in out.faults:
        key = f"chaos/{f.case.replace(' ', '_')}"
        times = [t for t in f.detect_s if t is not None]
        clear = [t for t in f.clear_s if t is not None]
        metrics |= {f"{key}/detected": f.detected, f"{key}/nothing_left": f.nothing_left,
                    f"{key}/epochs_lost": f.epochs_lost,
                    f"{key}/detect_s": max(times) if times else None,
                    f"{key}/clear_s": max(clear) if clear else None}
    return metrics | {
        "chaos/bit_identical": out.bit_identical, "chaos/final_sha256": out.final_sha256,
        "chaos/uninterrupted_sha256": out.reference_sha256,
        "chaos/test_accuracy": out.accuracy,
        "chaos/uninterrupted_test_accuracy": out.reference_accuracy,
    }


def run_chaos(setup: Setup, work: Path) -> tuple[list[Row], dict[str, Any]]:
    """The chaos run on two fresh unshaped hosts: a row per fault and the metrics; a run
    that could not reach its faults is one row with the reason."""
    graph = fault_graph(work)
    (work / "chaos").mkdir()
    with Cluster(2) as c:
        try:
            out = chaos_run(c, CHAOS_TRAIN, graph, work / "chaos", FAULT_TIMEOUT_S,
                            setup.chaos_epochs)
        except ScenarioError as err:
            return [{"what": "chaos", "case": "chaos run",
                     "error": str(err).splitlines()[0]}], {"chaos/ok": False}
    rows = [{"what": "chaos", **f.row()} for f in out.faults]
    for row in rows:
        print(f"chaos: {row}", flush=True)
    return rows, chaos_metrics(out)


# ---------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__ or "", quick_help="2D at 1 and 2 hosts on a 4096-vertex graph, "
                     "1gbit; host cut off; chaos to 40 epochs")
    ap.add_argument("--only", choices=("epochs", "faults", "chaos"), default=None,
                    help="run one part only")
    args = ap.parse_args(argv)
    if skipped(*available(), args.json):
        return 0
    sweep_stale()
    setup = QUICK if args.quick else FULL
    parts = {args.only} if args.only else {"epochs", "faults", "chaos"}
    started = time.perf_counter()
    rows: list[Row] = []
    failed: list[Row] = []
    faults: list[Row] = []
    chaos: list[Row] = []
    metrics: dict[str, Any] = {"graph": setup.graph, "hidden": setup.hidden,
                               "epochs": setup.epochs,
                               "links": [f"{h} x {rate}" for h, rate in setup.links]}
    with tempfile.TemporaryDirectory(prefix="sparsegnn-cluster-") as tmp:
        if "epochs" in parts:
            folders = partitions(setup, Path(tmp))
            metrics["nodes"], metrics["nonzeros"] = graph_sizes(folders[setup.algos[0]])
            rows, failed = run_epochs(setup, folders)
        if "faults" in parts:
            faults = run_faults(setup, Path(tmp))
        if "chaos" in parts:
            chaos, chaos_found = run_chaos(setup, Path(tmp))
            metrics |= chaos_found
    print()
    print_table(rows, ["algo", "hosts", "ranks_per_host", "link", "epoch_time_s",
                       "test_accuracy", "accounted_bytes_per_epoch", "wire_over_accounted"])
    print_table(faults, ["case", "seconds_to_detect", "seconds_to_clear", "resumed",
                         "final_accuracy", "uninterrupted_accuracy", "data_lost"])
    print_table(chaos, CHAOS_COLUMNS)
    metrics |= {**slowdowns(rows), "fault_graph": FAULT_GRAPH,
                "fault_timeout_s": FAULT_TIMEOUT_S, "failed": failed,
                "seconds": time.perf_counter() - started}
    emit(rows + faults + chaos, {}, metrics, args.json)
    broken = any("error" in f for f in faults + chaos) or metrics.get("chaos/ok") is False
    return 1 if failed or broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
