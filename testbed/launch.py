"""Starting ``torchrun -m sparsegnn`` on the hosts of a :class:`.netns.Cluster`.

Shared by the cluster tests and ``benchmarks/cluster.py``, so that what the benchmark
times is exactly what the tests check: the same per-host folders, the same torchrun
command line and environment, the same retry of a known teardown abort.

Rank placement: the c10d rendezvous has no ``--node-rank`` (torchrun ignores it) and
numbers the nodes in the order of their addresses. Every host therefore passes
``--local-addr`` (its own address, which is also the store address the workers of other
hosts dial), and host i gets global ranks ``i * nproc .. i * nproc + nproc - 1``
(10.231.k.1 < 10.231.k.2 as strings, which holds below ten hosts). A host folder holds only
those ranks' files, so a misplaced rank would fail to read its shard.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from testbed.netns import Cluster, Counters

PORT = 29500  # a fresh namespace listens on nothing, so any port is free there
RUN_S = 240.0  # longest a launch may take on a loaded one-core machine
GRACE_S = 30.0  # how long the other hosts may go on once one host's launch failed
EXIT_ABORT = "terminate called without an active exception"


def host_folders(folder: Path, hosts: int, per_host: int) -> list[Path]:
    """One folder per host (``<folder>-host<i>``) with the manifest and only that host's
    ranks' files.

    Full-graph folders hold ``rank<r>.npz``. Row-block folders (minibatch) hold
    ``block<r>.npz`` plus ``vertices.npz``, the labels every rank reads; because
    ``train --mode minibatch`` checks the stamp of every block before training (also
    under torchrun), another host's block is a stub with only its stamp (fingerprint,
    block number), which a rank would fail to train on.
    """
    minibatch = (folder / "vertices.npz").is_file()
    out = []
    for host in range(hosts):
        mine = folder.with_name(f"{folder.name}-host{host}")
        mine.mkdir()
        shared = ["manifest.json", "vertices.npz"] if minibatch else ["manifest.json"]
        for name in shared:
            shutil.copy(folder / name, mine / name)
        for rank in range(hosts * per_host):
            name = f"block{rank}.npz" if minibatch else f"rank{rank}.npz"
            if rank // per_host == host:
                shutil.copy(folder / name, mine / name)
            elif minibatch:
                with np.load(folder / name) as arrays:
                    np.savez(mine / name, fingerprint=arrays["fingerprint"],
                             block=arrays["block"])
        out.append(mine)
    return out


@dataclass(frozen=True)
class Elastic:
    """torchrun's elastic mode: the job runs on ``min_nodes`` hosts or more and restarts
    its workers (on the hosts still there) up to ``max_restarts`` times after a failure.

    The c10d rendezvous's own timings are shortened so that a restart takes seconds, not
    a minute: it closes ``last_call_s`` after the minimum number of hosts joined, and a
    host whose agent missed 3 heartbeats ``keep_alive_s`` apart counts as gone."""

    min_nodes: int = 1
    max_restarts: int = 3
    last_call_s: int = 5
    keep_alive_s: int = 1

    def nnodes(self, nnodes: int) -> str:
        return f"{self.min_nodes}:{nnodes}"

    def rdzv_conf(self) -> str:
        return (f",last_call_timeout={self.last_call_s},keep_alive_interval="
                f"{self.keep_alive_s},keep_alive_max_attempt=3")


def torchrun_argv(nnodes: int, nproc: int, node: int, endpoint: str, rdzv_id: str,
                  local_addr: str, args: Sequence[str],
                  elastic: Elastic | None = None) -> list[str]:
    """The command line host ``node`` runs: torchrun under ``sparsegnn launch`` (which
    ends torchrun on a host cut off from the store, see
    :mod:`sparsegnn.torchrun`) with the c10d rendezvous at ``endpoint``
    (``host:port``), pinned to ``local_addr``, starting ``python -m sparsegnn ARGS``.
    ``docs/examples/sparsegnn.sbatch`` runs the same flags (tested).

    Host 0 is told that it serves the rendezvous store (``is_host``): torchrun recognises
    only the machine's hostname addresses as its own, not a namespace's. No
    ``--node-rank``: the c10d rendezvous ignores it."""
    restarts = [] if elastic is None else ["--max-restarts", str(elastic.max_restarts)]
    return [
        sys.executable, "-m", "sparsegnn", "launch", "--",
        "--nnodes", str(nnodes) if elastic is None else elastic.nnodes(nnodes), *restarts,
        "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
        "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id,
        "--rdzv-conf", f"is_host={int(node == 0)}{elastic.rdzv_conf() if elastic else ''}",
        "--local-addr", local_addr,
        "-m", "sparsegnn", *args,
    ]


def torchrun(c: Cluster, host: int, nproc: int, port: int, args: Sequence[str],
             logs: Path, elastic: Elastic | None = None) -> subprocess.Popen[bytes]:
    """``sparsegnn launch -- ... -m sparsegnn ARGS`` (torchrun under its supervisor) on
    ``host``, output in ``logs/host<i>.out|err``; gloo pinned to the host's interface,
    one thread per rank."""
    h = c.hosts[host]
    argv = torchrun_argv(len(c.hosts), nproc, host, f"{c.hosts[0].address}:{port}",
                         f"sg{c.token}-{port}", h.address, args, elastic)
    # PYTHONFAULTHANDLER: a rank killed by a signal (a C++ abort) still logs its stack.
    env = {"GLOO_SOCKET_IFNAME": h.ifname, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    with (logs / f"host{host}.out").open("wb") as out, \
            (logs / f"host{host}.err").open("wb") as err:
        return c.popen(host, argv, env, stdout=out, stderr=err)


def log_tails(logs: Path) -> str:
    """The tail of every host's stderr, for a failure message."""
    return "\n".join(f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}"
                     for f in sorted(logs.glob("host*.err")))


def wait_all(procs: Sequence[subprocess.Popen[bytes]], run_s: float = RUN_S
             ) -> list[int | None]:
    """Exit codes of every host's launch (None: still running), waiting at most ``run_s``;
    once one host has failed the others get ``GRACE_S`` only (a peer of a failed host
    may wait on it for minutes), so that a failure is reported promptly."""
    deadline = time.monotonic() + run_s
    while time.monotonic() < deadline:
        codes = [p.poll() for p in procs]
        if None not in codes:
            break
        if any(code not in (None, 0) for code in codes):
            deadline = min(deadline, time.monotonic() + GRACE_S)
        time.sleep(0.2)
    return [p.poll() for p in procs]


def last_json(text: str) -> dict[str, Any]:
    """The JSON object ``--json`` prints as the last line of stdout."""
    lines = text.strip().splitlines()
    if not lines:
        raise ValueError("no output")
    return json.loads(lines[-1])


@dataclass(frozen=True)
class Launch:
    """One job run on every host: exit codes (None: still running when given up), host
    0's stdout, the bytes each host's interface carried from before the start until the
    end, the folder of the logs, and whether it was launched a second time."""

    codes: list[int | None]
    printed: str
    wire: list[Counters]
    logs: Path
    retried: bool

    @property
    def ok(self) -> bool:
        return all(code == 0 for code in self.codes)


def across(c: Cluster, nproc: int, datasets: Sequence[Path], args: Sequence[str],
           logs: Path, port: int = PORT, run_s: float = RUN_S) -> Launch:
    """``sparsegnn ARGS --dataset D_i`` on every host i of ``c`` (``nproc`` ranks each).

    Launched again once, on the next port, when a rank aborted at exit with
    ``EXIT_ABORT`` after rank 0 had printed its result: an abort in the teardown of a
    finished torchrun rank (a few percent of launches here), which says nothing about
    training. Any other failure is returned as it is."""
    for attempt in range(2):
        tried = logs / f"try{attempt}"
        tried.mkdir(parents=True)
        before = [c.counters(i) for i in range(len(datasets))]
        procs = [torchrun(c, i, nproc, port + attempt, [*args, "--dataset", str(d)], tried)
                 for i, d in enumerate(datasets)]
        codes = wait_all(procs, run_s)
        moved = [c.counters(i) - b for i, b in enumerate(before)]
        launch = Launch(codes, (tried / "host0.out").read_text(), moved, tried, attempt > 0)
        aborted = any(EXIT_ABORT in f.read_text(errors="replace")
                      for f in tried.glob("host*.err"))
        if launch.ok or attempt or not launch.printed.strip() or not aborted:
            break
        for i in range(len(datasets)):
            c.kill(i)
    return launch


def accounted_bytes(rank: Mapping[str, Any], epochs: int) -> int:
    """Bytes a rank's own accounting says it moved (sent + received) in a whole run of
    ``epochs``, from its entry of ``--json``'s ``comm.per_rank``.

    The JSON reports one epoch (``constant_across_epochs`` says all were equal). After
    the last epoch ``fit`` evaluates the best weights on the test split: one more
    forward whose SpMMs are those of an epoch's evaluation forward, i.e. half of the
    epoch's ``forward_spmm`` (training and evaluation forward move the same bytes); its
    one scalar reduction (16 bytes) is left out. The set-up phase is not in the JSON.
    """
    forward = rank["phases"].get("forward_spmm", {})
    test_forward = (forward.get("sent", 0) + forward.get("recv", 0)) // 2
    return epochs * (rank["sent"] + rank["recv"]) + test_forward
