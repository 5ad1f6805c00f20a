"""Distributed training across "hosts" made of network namespaces (:mod:`testbed.netns`).

Each host is a namespace with one veth link to a private bridge. torchrun runs on every
host and rendezvouses over that link with c10d; gloo is pinned to the host's interface
(``GLOO_SOCKET_IFNAME``), so traffic between hosts crosses a real (virtual) wire while the
ranks of one host talk over loopback. The cases show that

* a job spread over two hosts learns exactly what the same world size learns on one host
  (1D, 1.5D, 2D, 3D, partitioned minibatch), each host holding only its own ranks' files;
* the bytes on the wire cover the payload we account, with little overhead;
* a host cut off mid-run ends every rank on both hosts with an error naming the host and
  rank it lost, within ``--timeout`` plus a margin, and leaves no process on either host
  (torchrun included) ``--timeout`` + 30 s after the cut, both launches non-zero (the
  scenario is :func:`testbed.faults.host_cut_off`; the other faults are in ``test_faults.py``).

How a host is launched and which ranks it gets: :mod:`testbed.launch` (shared with
``benchmarks/cluster.py``).

Every case tears its cluster down even when it fails; a launch that hangs fails after
``launch.RUN_S`` instead of blocking the suite. Needs root (skipped otherwise, with the reason);
run ``.venv/bin/python -m pytest -q tests/cluster`` (about two minutes on one core). The
measured numbers (loss gaps, wire bytes, fault detection times) are printed even when the
tests pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from testbed.faults import EXIT_MARGIN_S, LAUNCH_ERROR, MARGIN_S, host_cut_off
from testbed.launch import (
    PORT,
    accounted_bytes,
    across,
    host_folders,
    last_json,
    log_tails,
)
from testbed.netns import Cluster, Counters, available, sweep_stale

from sparsegnn.cli.main import main

_AVAILABLE, _WHY = available()
pytestmark = [pytest.mark.distributed, pytest.mark.skipif(not _AVAILABLE, reason=_WHY)]

_SMALL = "sbm:nodes=400,blocks=4,degree=6"
_EXACT = ("--dtype", "float64", "--dropout", "0", "--json", "--history", "--no-progress")


@pytest.fixture(scope="module", autouse=True)
def _no_leftovers() -> None:
    """Remove clusters a crashed earlier run left, so names and memory do not pile up."""
    sweep_stale()


@pytest.fixture(scope="module")
def small_graph(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("graph") / "g.npz"
    assert main(["data", "generate", _SMALL, "--out", str(out)]) == 0
    return out


# ---------------------------------------------------------------------- helpers
def _across(c: Cluster, nproc: int, datasets: Sequence[Path], args: Sequence[str],
            logs: Path, capsys: pytest.CaptureFixture[str],
            port: int = PORT) -> tuple[dict[str, Any], list[Counters]]:
    """``sparsegnn ARGS`` on every host (host i reading ``datasets[i]``): rank 0's JSON
    and the bytes each host's interface carried meanwhile. A second launch after a
    teardown abort (:func:`testbed.launch.across`) is reported; any failure fails."""
    launch = across(c, nproc, datasets, args, logs, port)
    if launch.retried:
        _report(capsys, f"launch again: a rank aborted at exit, logs in {logs / 'try0'}")
    if not launch.ok:
        pytest.fail(f"exit codes {launch.codes} (None: still running)\n"
                    f"{log_tails(launch.logs)}")
    return last_json(launch.printed), launch.wire


def _one_host(args: Sequence[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """``sparsegnn ARGS`` in the root namespace (local ranks over loopback); its JSON.

    Run in this process: the launcher's fork server, once started, serves every later
    case with torch already imported, which is most of a launch on a small machine."""
    capsys.readouterr()
    assert main(list(args)) == 0
    return last_json(capsys.readouterr().out)


def _report(capsys: pytest.CaptureFixture[str], text: str) -> None:
    """Show measured numbers in the test output even when the test passes."""
    with capsys.disabled():
        print(f"\n{text}")


# ---------------------------------------------------------------------- the harness
def _listed() -> str:
    """Every link and namespace name of this machine (the root namespace's view)."""
    return "".join(subprocess.run(["ip", *args], capture_output=True, text=True,
                                  check=True).stdout
                   for args in (["-o", "link", "show"], ["netns", "list"]))


def test_cluster_links_hosts_counts_bytes_and_always_tears_down() -> None:
    """Two shaped hosts reach each other over the bridge, the counters see the bytes, and
    everything (a running process included) is gone after a body that raises."""
    nbytes = 100_000
    with pytest.raises(RuntimeError, match="body failed"), Cluster(2, rate="100mbit") as c:
        bridge_side = subprocess.run(["tc", "qdisc", "show", "dev", c.hosts[0].peer],
                                     capture_output=True, text=True, check=True).stdout
        assert all("tbf" in q and "100Mbit" in q for q in (c.qdisc(0), c.qdisc(1), bridge_side))
        server = c.popen(1, [sys.executable, "-c", (
            "import socket\n"
            f"s = socket.create_server(('{c.hosts[1].address}', {PORT}))\n"
            "conn, _ = s.accept(); n = 0\n"
            "while data := conn.recv(1 << 16): n += len(data)\n"
            "print(n)\n")], stdout=subprocess.PIPE)
        c.popen(0, ["sleep", "1000"])  # still running when the body raises
        before = c.counters(0)
        client = c.popen(0, [sys.executable, "-c", (
            "import socket, time\n"
            "for _ in range(100):\n"
            "    try:\n"
            f"        s = socket.create_connection(('{c.hosts[1].address}', {PORT}))\n"
            "        break\n"
            "    except ConnectionRefusedError:\n"
            "        time.sleep(0.1)\n"
            f"s.sendall(b'x' * {nbytes}); s.close()\n")])
        assert client.wait(timeout=60) == 0
        out, _ = server.communicate(timeout=60)
        assert int(out) == nbytes
        sent = c.counters(0) - before
        assert sent.tx_bytes >= nbytes > sent.rx_bytes
        raise RuntimeError("body failed")
    assert c.token not in _listed()


def test_hosts_with_own_cpus_run_on_their_own_share() -> None:
    """``own_cpus``: what a host starts runs on that host's CPUs only, and two hosts on a
    machine with two CPUs or more get disjoint ones (as separate machines have)."""
    ours = os.sched_getaffinity(0)
    with Cluster(2, own_cpus=True) as c:
        assert c.cpus is not None
        seen = []
        for i in range(2):
            proc = c.popen(i, [sys.executable, "-c",
                               "import os; print(sorted(os.sched_getaffinity(0)))"],
                           stdout=subprocess.PIPE, text=True)
            out, _ = proc.communicate(timeout=60)
            seen.append(set(json.loads(out)))
        assert seen == c.cpus and all(s <= ours for s in seen)
        if len(ours) >= 2:
            assert not seen[0] & seen[1]
    with Cluster(2) as shared:
        assert shared.cpus is None


def test_sweep_removes_what_a_killed_run_left_and_spares_live_clusters() -> None:
    """A test process SIGKILLed inside a cluster leaves its namespaces, links and marker;
    the sweep removes them, and leaves alone a cluster whose owner still runs."""
    child = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "from testbed.netns import Cluster\n"
        "with Cluster(2) as c:\n"
        "    print(c.token, flush=True)\n"
        "    time.sleep(600)\n")], cwd=Path(__file__).parents[2], stdout=subprocess.PIPE,
        text=True)
    assert child.stdout is not None
    token = child.stdout.readline().strip()
    child.kill()
    child.communicate()
    assert token in _listed()
    with Cluster(1) as live:
        assert sweep_stale() == [token]
        assert live.token in _listed() and token not in _listed()


# ---------------------------------------------------------------------- same result
_PARTITION = {
    "1d": ("--algo", "1d", "--nprocs", "4"),
    "1.5d": ("--algo", "1.5d", "--nprocs", "4", "--replication", "2"),
    "2d": ("--algo", "2d", "--nprocs", "4"),
    "3d": ("--algo", "3d", "--nprocs", "8"),
    "minibatch": ("--mode", "minibatch", "--nprocs", "4"),
}
_TRAIN = {
    "1d": ("train", "--algo", "1d", "--epochs", "3", *_EXACT),
    "1.5d": ("train", "--algo", "1.5d", "--replication", "2", "--epochs", "3", *_EXACT),
    "2d": ("train", "--algo", "2d", "--epochs", "3", *_EXACT),
    "3d": ("train", "--algo", "3d", "--epochs", "2", *_EXACT),
    "minibatch": ("train", "--mode", "minibatch", "--fanouts", "3,3", "--layers", "2",
                  "--batch-size", "64", "--epochs", "2", *_EXACT),
}


@pytest.mark.parametrize("case", sorted(_PARTITION))
def test_two_hosts_learn_what_one_host_learns(
    case: str, small_graph: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """2 hosts x 2 ranks under torchrun (c10d) == 4 local ranks on one host (3D: 2 x 4 ==
    8), in float64; each host reads only its own ranks' files."""
    folder = tmp_path / "parts"
    assert main(["data", "partition", str(small_graph), str(folder), *_PARTITION[case]]) == 0
    world = int(_PARTITION[case][_PARTITION[case].index("--nprocs") + 1])
    hosts = host_folders(folder, hosts=2, per_host=world // 2)
    with Cluster(2, rate="1gbit") as c:
        spread, wire = _across(c, world // 2, hosts, _TRAIN[case], tmp_path / "logs", capsys)
    local = _one_host([*_TRAIN[case], "--dataset", str(folder), "--nprocs", str(world)], capsys)
    assert spread["world_size"] == local["world_size"] == world
    gap = max(abs(a - b) for a, b in zip(spread["losses"], local["losses"], strict=True))
    assert len(spread["losses"]) == len(local["losses"]) > 1 and gap <= 1e-6
    assert spread["test_accuracy"] == pytest.approx(local["test_accuracy"], abs=1e-9)
    assert all(w.tx_bytes > 0 and w.rx_bytes > 0 for w in wire)  # gloo used the veths
    _report(capsys, f"{case}: 2 hosts x {world // 2} ranks vs {world} local ranks, largest "
                    f"loss gap {gap:.3g}; wire bytes host0 {wire[0]}, host1 {wire[1]}")


# ---------------------------------------------------------------------- wire bytes
_PAYLOAD_GRAPH = "sbm:nodes=4000,blocks=4,degree=6,features=64"
_WIRE_EPOCHS = (1, 8)
_OVERHEAD = 1.25  # wire bytes per accounted byte allowed beyond the start-up allowance


@dataclass(frozen=True)
class _WireRun:
    """Per host, for one run: the bytes its interface carried (tx + rx, from before the
    launch until it ended) and the bytes its rank accounted; and rank 0's accounted bytes
    of one epoch by phase.

    Accounted: :func:`testbed.launch.accounted_bytes` (the epochs plus the final test forward).
    """

    wire: list[int]
    accounted: list[int]
    phases: dict[str, int]


def _wire_run(c: Cluster, hosts: Sequence[Path], epochs: int, logs: Path, port: int,
              capsys: pytest.CaptureFixture[str]) -> _WireRun:
    """One full-graph 1D run with one rank per host, so that every accounted byte crosses
    the wire (ranks sharing a host would talk over loopback, which no veth counts)."""
    args = ["train", "--algo", "1d", "--hidden", "64", "--epochs", str(epochs), *_EXACT]
    out, moved = _across(c, 1, hosts, args, logs, capsys, port)
    ranks = sorted(out["comm"]["per_rank"], key=lambda r: r["rank"])
    assert all(r["constant_across_epochs"] for r in ranks) and out["epochs_run"] == epochs
    return _WireRun(
        [m.tx_bytes + m.rx_bytes for m in moved],
        [accounted_bytes(r, epochs) for r in ranks],
        {p: v["sent"] + v["recv"] for p, v in ranks[0]["phases"].items()},
    )


def test_wire_bytes_cover_the_accounted_payload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Per host, wire >= accounted (the wire carries at least our payload) and, on a graph
    whose SpMM payload dominates, wire <= 1.25 x accounted + the start-up allowance.

    The allowance is what a one-epoch run carries beyond its accounted bytes: the
    rendezvous and the store, process-group and group creation, the set-up phase (not in
    the JSON), the gather of the reports, TCP connection set-up. The marginal ratio
    (extra wire bytes per extra accounted byte between the two runs) is the overhead of
    the epochs themselves: headers and ACKs.
    """
    graph, folder = tmp_path / "big.npz", tmp_path / "big"
    assert main(["data", "generate", _PAYLOAD_GRAPH, "--out", str(graph)]) == 0
    assert main(["data", "partition", str(graph), str(folder), "--algo", "1d",
                 "--nprocs", "2"]) == 0
    hosts = host_folders(folder, hosts=2, per_host=1)
    with Cluster(2) as c:
        short, long = (_wire_run(c, hosts, e, tmp_path / f"logs{e}", PORT + 2 * e, capsys)
                       for e in _WIRE_EPOCHS)
    spmm = sum(v for p, v in long.phases.items() if p.endswith("_spmm"))
    lines = [f"accounted bytes of one epoch, rank 0, by phase: {long.phases} "
             f"(SpMM {spmm / sum(long.phases.values()):.1%})"]
    for h in range(2):
        allowance = short.wire[h] - short.accounted[h]
        extra = long.accounted[h] - short.accounted[h]
        lines.append(
            f"host {h}: {_WIRE_EPOCHS[0]} epoch wire {short.wire[h]} accounted "
            f"{short.accounted[h]} (ratio {short.wire[h] / short.accounted[h]:.3f}, "
            f"allowance {allowance}); {_WIRE_EPOCHS[1]} epochs wire {long.wire[h]} "
            f"accounted {long.accounted[h]} (ratio {long.wire[h] / long.accounted[h]:.3f}); "
            f"per extra epoch byte {(long.wire[h] - short.wire[h]) / extra:.4f}")
        assert short.wire[h] >= short.accounted[h] and long.wire[h] >= long.accounted[h]
        assert long.wire[h] <= _OVERHEAD * long.accounted[h] + allowance, lines[-1]
    _report(capsys, "\n".join(lines))


# ---------------------------------------------------------------------- a host cut off
_FAULT_TIMEOUT_S = 10


def test_a_host_cut_off_ends_every_rank(
    small_graph: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Host 1's link goes down mid-run (1 rank per host, ``--timeout 10``): every rank on
    both hosts ends within ``--timeout`` + ``MARGIN_S`` of the cut, each rank's one error
    line names the other host, which it lost, and that host's rank; within ``--timeout``
    + 30 s no process of the job is left on either host (issue 50: host 1's torchrun used
    to stay about 15 minutes, reading the store it could not reach) and both launches
    have exited non-zero, host 1's saying why it killed torchrun
    (:func:`testbed.faults.host_cut_off`)."""
    folder = tmp_path / "parts"
    assert main(["data", "partition", str(small_graph), str(folder), "--algo", "1d",
                 "--nprocs", "2"]) == 0
    with Cluster(2) as c:
        folders = host_folders(folder, hosts=2, per_host=1)
        out = host_cut_off(c, ["train", "--algo", "1d", *_EXACT], folders, tmp_path / "logs",
                           _FAULT_TIMEOUT_S)
        addresses = [h.address for h in c.hosts]
    _report(capsys, out.summary())
    assert sorted(out.ranks_gone_s) == [0, 1], log_tails(out.logs)
    assert out.detect_s is not None and out.detect_s <= _FAULT_TIMEOUT_S + MARGIN_S, \
        out.summary()
    bound = _FAULT_TIMEOUT_S + EXIT_MARGIN_S
    assert len(out.hosts_clear_s) == 2, out.summary()
    assert all(t is not None and t <= bound for t in out.hosts_clear_s), out.summary()
    assert all(code not in (None, 0) for code in out.codes), out.summary()
    killed = [line for line in (out.logs / "host1.err").read_text().splitlines()
              if line.startswith(LAUNCH_ERROR)]
    assert len(killed) == 1 and "is unreachable" in killed[0], log_tails(out.logs)
    for host, lines in enumerate(out.errors):  # each host's one rank names the other
        other = 1 - host
        assert len(lines) == 1, out.errors
        assert f"rank {host} of 2: lost contact with host {addresses[other]} (rank {other}):" \
            in lines[0], out.errors
