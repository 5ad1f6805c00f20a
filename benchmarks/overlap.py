"""How much communication overlap hides, on links shaped like a cluster network.

Four hosts (network namespaces, ``testbed/netns.py``), one rank each, so that all
of a rank's traffic crosses a link shaped with a token bucket (``tc ... tbf``); each job
is the launch the cluster tests check (``torchrun --rdzv-backend c10d`` per host,
``testbed/launch.py``). Each host runs on its own share of the CPUs (``taskset``;
``--shared-cpus`` lets every host use all of them), as separate machines do: a rank
blocked on its link must not also be waiting for another host's compute on its CPU,
which overlap cannot hide and a real cluster does not have (with more hosts than CPUs
hosts still share, round robin). Every configuration (1D and 1.5D with c = 2; dense and
sparse communication) trains twice on the same partition, without and with
``--overlap``, then a third time with ``--overlap auto``, whose short trials of both
decide (the row says what it chose and whether that was the faster of the two runs).
Per configuration and link: the median epoch of each, the share of the
plain epoch rank 0 spent waiting on communication, and the hidden fraction of that
wait per phase and in all (``1 - waited with overlap / waited without``, each rank's
``comm_wait_s_per_epoch``, its median epoch's waits, averaged over the ranks), and the
plain epoch's compute over its communication, and the most any schedule could hide on
these links (``hidden_at_most``: the epoch cannot be shorter than its compute or than its
busiest link's measured bytes at the shaped rate; it takes the plain epoch's compute, so
a run whose overlap adds compute can land a little above it); the losses of both runs must be
equal (overlap changes no result).

    python benchmarks/overlap.py --json          # 4 configurations x 2 links
    python benchmarks/overlap.py --quick --json  # 1D dense at 1gbit, a lighter graph

Needs root (network namespaces); elsewhere it says so, prints a JSON saying so and exits 0.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _harness
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # testbed

from testbed.launch import PORT, across, host_folders, last_json
from testbed.netns import Cluster, available, sweep_stale

from _harness import Row, emit, make_parser, print_table, skipped
from sparsegnn.names import replicates

HOSTS = 4
# Dense enough that a rank's SpMM is compute worth hiding a transfer behind.
GRAPH = "sbm:nodes=16384,blocks=16,degree=256,features=128"
QUICK_GRAPH = "sbm:nodes=16384,blocks=16,degree=32,features=128"
_SI = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}
# A full TCP segment on these veths: 1448 bytes of payload (MTU 1500 less IP and TCP
# headers with timestamps) in a 1514-byte frame, which is what tbf meters.
SEGMENT_PAYLOAD, FRAME_BYTES = 1448, 1514
CONFIGS = (("1d", 1, "dense"), ("1d", 1, "sparse"), ("1.5d", 2, "dense"), ("1.5d", 2, "sparse"))


def sparsegnn(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "sparsegnn", *args], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"sparsegnn {' '.join(args)} failed: {done.stderr.strip()}")


def waits(out: dict[str, Any]) -> dict[str, float]:
    """Seconds the median epoch waited on communication, by phase, averaged over the ranks
    (the one-off set-up, which overlap does not touch, is not in them)."""
    per_rank = out["comm_wait_s_per_epoch"]
    phases = sorted({k for r in per_rank for k in r})
    return {k: statistics.mean(r.get(k, 0.0) for r in per_rank) for k in phases}


def link_bytes_per_s(link: str) -> float:
    """A tc rate (``100mbit``, ``1gbit``: SI prefixes, bits) in bytes a second."""
    number = link.rstrip("abcdefghijklmnopqrstuvwxyz")
    return float(number) * _SI[link[len(number):].removesuffix("bit")] / 8


def wire_seconds(out: dict[str, Any], link: str) -> float:
    """The least time one epoch's traffic needs on these links, whatever the schedule:
    the busiest link direction (each rank's measured bytes sent or received per epoch,
    one rank per host) at the shaped rate, in full-size frames."""
    busiest = max(max(r["sent"], r["recv"]) for r in out["comm"]["per_rank"])
    return busiest * FRAME_BYTES / SEGMENT_PAYLOAD / link_bytes_per_s(link)


def compare(cfg: tuple[str, int, str], link: str, plain: dict[str, Any],
            overlapped: dict[str, Any]) -> Row:
    """One row: epochs, the plain epoch's communication share, hidden fraction per phase,
    and the most any overlap could hide on these links."""
    before, after = waits(plain), waits(overlapped)
    hidden = {k: 1 - after.get(k, 0.0) / v for k, v in before.items() if v > 0}
    total_before, total_after = sum(before.values()), sum(after.values())
    compute = max(0.0, plain["epoch_time_s"] - total_before)
    wire = wire_seconds(plain, link)
    return {
        "what": "overlap", "algo": cfg[0], "replication": cfg[1], "comm": cfg[2],
        "link": link, "epoch_plain_s": plain["epoch_time_s"],
        "epoch_overlap_s": overlapped["epoch_time_s"],
        "comm_share_plain": total_before / plain["epoch_time_s"],
        # The most that running compute beside transfers can hide: the plain epoch's
        # compute over its waits (overlap can also run transfers beside each other).
        "compute_over_comm_plain": compute / total_before if total_before else None,
        "waited_plain_s": total_before, "waited_overlap_s": total_after,
        "hidden_fraction": 1 - total_after / total_before if total_before else 0.0,
        # An epoch lasts at least as long as its compute and as its busiest link's
        # traffic, so at best it still waits max(0, wire - compute).
        "wire_s": wire,
        "hidden_at_most": 1 - max(0.0, wire - compute) / total_before if total_before
        else 0.0,
        "hidden_by_phase": hidden,
        "waited_by_phase_plain_s": before, "waited_by_phase_overlap_s": after,
        "same_losses": plain["losses"] == overlapped["losses"],
    }


def auto_row(outs: list[dict[str, Any]]) -> Row:
    """What ``--overlap auto`` chose after its trials, its epoch, and whether it chose the
    faster of the two full runs (a tie within the trials' 10% margin counts as right
    either way: the trial keeps the plain run unless overlap beats it by more)."""
    plain, overlapped, auto = outs
    faster = overlapped["epoch_time_s"] < plain["epoch_time_s"]
    close = abs(overlapped["epoch_time_s"] / plain["epoch_time_s"] - 1) <= 0.1
    return {"auto_overlap": auto["overlap"], "epoch_auto_s": auto["epoch_time_s"],
            "auto_chose_faster": auto["overlap"] == faster or close}


def run(links: list[str], configs: list[tuple[str, int, str]], epochs: int, work: Path,
        spec: str = GRAPH, hidden: int = 128, hosts_n: int = HOSTS,
        own_cpus: bool = True) -> list[Row]:
    graph = work / "graph.npz"
    sparsegnn("data", "generate", spec, "--out", str(graph))
    rows = []
    for link in links:
        with Cluster(hosts_n, link, own_cpus=own_cpus) as c:
            for k, (algo, rep, comm) in enumerate(configs):
                folder = work / f"{algo}-{rep}-{comm}-{link}"
                sparsegnn("data", "partition", str(graph), str(folder), "--algo", algo,
                          "--nprocs", str(hosts_n), *(["--replication", str(rep)]
                                                    if replicates(algo) else []))
                hosts = host_folders(folder, hosts_n, 1)
                outs = []
                for n, extra in enumerate(([], ["--overlap"], ["--overlap", "auto"])):
                    args = ["train", "--algo", algo, "--comm", comm, "--epochs", str(epochs),
                            "--patience", str(epochs), "--timeout", "120", "--dropout", "0",
                            "--hidden", str(hidden),
                            "--history", "--json", "--no-progress", *extra]
                    launch = across(c, 1, hosts, args, folder.parent / f"logs-{k}-{n}-{link}",
                                    PORT + 6 * k + 2 * n)
                    if not launch.ok:
                        raise RuntimeError(f"{algo} {comm} on {link} failed: {launch.codes}")
                    outs.append(last_json(launch.printed))
                rows.append(compare((algo, rep, comm), link, *outs[:2]) | auto_row(outs))
                r = rows[-1]
                print(f"{algo:>4} c={rep} {comm:>6} {link:>8}: plain "
                      f"{r['epoch_plain_s'] * 1e3:7.1f} ms (comm {r['comm_share_plain']:.0%}), "
                      f"overlap {r['epoch_overlap_s'] * 1e3:7.1f} ms, hidden "
                      f"{r['hidden_fraction']:.0%} (at most {r['hidden_at_most']:.0%}); "
                      f"--overlap auto chose {'on' if r['auto_overlap'] else 'off'}",
                      flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__ or "", quick_help="1D dense at 1gbit, a lighter graph, 3 epochs")
    ap.add_argument("--links", default="100mbit,1gbit")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--graph", default=GRAPH, help="generator spec of the graph")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--hosts", type=int, default=HOSTS)
    ap.add_argument("--shared-cpus", action="store_true",
                    help="every host on all CPUs (default: each its own share, as "
                         "separate machines have)")
    ap.add_argument("--configs", default=None,
                    help="ALGO:C:COMM,... (default: 1D and 1.5D c=2, dense and sparse)")
    args = ap.parse_args(argv)
    if skipped(*available(), args.json):
        return 0
    sweep_stale()
    links, configs = args.links.split(","), list(CONFIGS)
    if args.configs:
        configs = [(a, int(c), m) for a, c, m in
                   (item.split(":") for item in args.configs.split(","))]
    if args.quick:
        links, configs, args.epochs = ["1gbit"], [CONFIGS[0]], 3
        args.graph = QUICK_GRAPH if args.graph == GRAPH else args.graph
    with tempfile.TemporaryDirectory(prefix="sparsegnn-overlap-") as tmp:
        rows = run(links, configs, args.epochs, Path(tmp), args.graph, args.hidden,
                   args.hosts, not args.shared_cpus)
    print_table(rows, ["algo", "replication", "comm", "link", "epoch_plain_s",
                       "epoch_overlap_s", "comm_share_plain", "compute_over_comm_plain",
                       "hidden_fraction", "hidden_at_most", "same_losses", "auto_overlap",
                       "epoch_auto_s"])
    speedups = {f"overlap {r['algo']} c={r['replication']} {r['comm']} {r['link']}":
                r["epoch_plain_s"] / r["epoch_overlap_s"] for r in rows}
    heavy = [r for r in rows if r["comm_share_plain"] >= 0.3]
    metrics = {"graph": args.graph, "hidden": args.hidden, "hosts": args.hosts,
               "epochs": args.epochs, "own_cpus": not args.shared_cpus,
               "all_losses_equal": all(r["same_losses"] for r in rows),
               "auto_chose_faster_everywhere": all(r["auto_chose_faster"] for r in rows),
               "min_hidden_where_comm_30pct": min((r["hidden_fraction"] for r in heavy),
                                                  default=None)}
    emit(rows, speedups, metrics, args.json)
    return 0 if metrics["all_losses_equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
