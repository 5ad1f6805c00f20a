"""Faults across namespace hosts under torchrun (issue 21), each with a measured outcome.

* a host lost under elastic torchrun (``--nnodes 1:2 --max-restarts``): host 0's
  restarted workers resume from the newest complete checkpoint on the smaller world and
  finish within 0.5 pt of the uninterrupted accuracy, no complete checkpoint lost;
* a rank stopped (SIGSTOP) for longer than ``--timeout``: every other rank ends within
  ``--timeout`` plus a margin with an error naming the stopped rank and its host;
* how a surviving rank tells a lost peer (:mod:`sparsegnn.distributed.runtime.peers`): the probe's
  four answers and the one line it makes of them.

The host cut off is in ``test_cluster.py``; the scenarios themselves in :mod:`testbed.faults`
(shared with ``benchmarks/cluster.py``). Each case tears its cluster down even when it
fails and prints what it measured. Needs root for the cluster cases (skipped otherwise).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from testbed.faults import MARGIN_S, host_lost_elastic, rank_stalled
from testbed.launch import RUN_S, last_json
from testbed.netns import Cluster, available, sweep_stale

from sparsegnn.cli.main import main
from sparsegnn.distributed.runtime.peers import PROBE_S, Peer, Responder, describe_loss, probe
from sparsegnn.train.dist_checkpoint import latest_complete

_AVAILABLE, _WHY = available()

_TIMEOUT_S = 10
_SMALL = "sbm:nodes=400,blocks=4,degree=6"
# Large enough that accuracy moves in steps of 0.25 pt (400 test vertices), small enough
# that an epoch takes milliseconds.
_ELASTIC = "sbm:nodes=2000,blocks=4,degree=6"
_ELASTIC_EPOCHS = 60
_ACCURACY_PT = 0.5


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("graphs")
    out = {}
    for name, spec in (("small", _SMALL), ("elastic", _ELASTIC)):
        out[name] = folder / f"{name}.npz"
        assert main(["data", "generate", spec, "--out", str(out[name])]) == 0
    return out


def _report(capsys: pytest.CaptureFixture[str], text: str) -> None:
    """Show measured numbers in the test output even when the test passes."""
    with capsys.disabled():
        print(f"\n{text}")


# ---------------------------------------------------------------------- the probe
@pytest.fixture
def responder_process() -> Iterator[tuple[int, int]]:
    """A forked process answering probes on loopback: its pid and port; killed after."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child answers until killed, and never returns into pytest
        try:
            os.write(write, str(Responder("127.0.0.1").port).encode())
            time.sleep(120)
        finally:
            os._exit(0)
    os.close(write)
    port = int(os.read(read, 16))
    os.close(read)
    try:
        yield pid, port
    finally:  # the test may have killed and reaped it already
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def test_the_probe_tells_a_live_a_stopped_and_an_exited_rank_apart(
    responder_process: tuple[int, int],
) -> None:
    """Alive: it answers. SIGSTOPped: the kernel accepts, nobody answers within PROBE_S.
    Gone: refused. (Unreachable, a host cut off, is the cluster case.)"""
    pid, port = responder_process
    peer = Peer(1, "h", "127.0.0.1", port)
    assert probe(peer) == "alive"
    os.kill(pid, signal.SIGSTOP)
    _wait_stopped(pid)
    start = time.monotonic()
    assert probe(peer) == "silent"
    assert PROBE_S <= time.monotonic() - start < PROBE_S + 2
    os.kill(pid, signal.SIGCONT)
    assert probe(peer) == "alive"
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert probe(peer) == "exited"


def _wait_stopped(pid: int) -> None:
    """Until ``pid`` is stopped: kill() returns before the signal takes effect, and a
    responder still running for a moment would answer the probe."""
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        assert time.monotonic() < deadline, "SIGSTOP did not stop the responder"
        time.sleep(0.01)


_TABLE = [Peer(0, "n", "10.0.0.1", 1), Peer(1, "n", "10.0.0.1", 2),
          Peer(2, "n", "10.0.0.2", 3), Peer(3, "n", "10.0.0.2", 4)]
_TIMED_OUT = RuntimeError("[/src/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
                          "Timed out waiting 10000ms for recv operation to complete")


def test_the_error_names_the_lost_host_and_its_ranks() -> None:
    states = {1: "alive", 2: "unreachable", 3: "unreachable"}
    line = describe_loss(_TIMED_OUT, 0, _TABLE, states)  # type: ignore[arg-type]
    assert line == ("rank 0 of 4: lost contact with host 10.0.0.2 (ranks 2, 3): no "
                    "connection within 3 s; the collective failed: Timed out waiting "
                    "10000ms for recv operation to complete")


def test_a_stopped_rank_is_named_before_the_ranks_that_gave_up() -> None:
    """A rank that accepts but does not answer is the cause; the ranks that already
    exited (they gave up on it first) are not named."""
    line = describe_loss(_TIMED_OUT, 2, _TABLE, {0: "exited", 1: "exited", 3: "silent"})
    assert line is not None and line.startswith(
        "rank 2 of 4: rank 3 on host 10.0.0.2 does not respond (stopped or stuck")


def test_exited_ranks_are_narrowed_to_the_host_gloo_names() -> None:
    closed = RuntimeError("[/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
                          "[10.0.0.2]:41234. This is typically caused by a remote worker "
                          "crashing. GLHF!")
    line = describe_loss(closed, 0, _TABLE, {1: "exited", 2: "exited", 3: "exited"})
    assert line == ("rank 0 of 4: ranks 2, 3 on host 10.0.0.2 have exited; the collective "
                    "failed: Connection closed by peer [10.0.0.2]:41234")


def test_no_lost_peer_when_every_peer_answers() -> None:
    assert describe_loss(_TIMED_OUT, 0, _TABLE, dict.fromkeys((1, 2, 3), "alive")) is None


# ---------------------------------------------------------------------- resume
@pytest.mark.distributed
def test_a_one_rank_torchrun_worker_resumes_from_no_folder_by_starting_fresh(
    graphs: dict[str, Path], tmp_path: Path
) -> None:
    """What host 0 runs after an elastic job shrank to one rank, before any checkpoint:
    ``--resume`` naming a folder that does not exist trains from epoch 0 and creates it,
    and the launcher's own rank hosts its store although torchrun's environment says to
    use the agent's (``TORCHELASTIC_USE_AGENT_STORE``; that agent serves only its job).

    A fresh interpreter, since spawned ranks see the environment of the process's first
    launch (its fork server)."""
    folder = tmp_path / "ckpt"
    worker = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
              "MASTER_PORT": "1", "TORCHELASTIC_USE_AGENT_STORE": "True",
              "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "sparsegnn", "train", "--dataset", str(graphs["small"]),
         "--algo", "1d", "--epochs", "2", "--checkpoint", str(folder), "--resume",
         "--timeout", "20", "--json", "--no-progress"],
        env={**os.environ, **worker}, capture_output=True, text=True, timeout=RUN_S)
    assert done.returncode == 0, done.stderr[-3000:]
    out = last_json(done.stdout)
    assert out["resumed_from"] is None and out["epochs_run"] == 2
    assert latest_complete(folder) == (2, [])


# ---------------------------------------------------------------------- across hosts
@pytest.fixture(scope="module", autouse=True)
def _no_leftovers() -> None:
    """Remove clusters a crashed earlier run left, so names and memory do not pile up."""
    if _AVAILABLE:
        sweep_stale()


def _ranks_named(line: str) -> set[int]:
    """The ranks a lost-peer line names as lost (after the reporting rank's prefix)."""
    body = line.split(": ", 3)[-1].split("; the collective failed")[0]
    return {int(r) for part in re.findall(r"ranks? ([\d, ]+)", body)
            for r in part.split(",") if r.strip()}


@pytest.mark.distributed
@pytest.mark.skipif(not _AVAILABLE, reason=_WHY)
def test_a_lost_host_restarts_elastically_and_resumes_without_loss(
    graphs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """2 hosts x 1 rank, ``--nnodes 1:2 --max-restarts 3``; host 1 lost after a complete
    checkpoint: host 0's first worker ends within ``--timeout`` + margin naming host 1,
    the restarted worker (world 1) resumes from the newest complete checkpoint (nothing
    lost), finishes every epoch, within 0.5 pt of the uninterrupted accuracy."""
    checkpoint = tmp_path / "ckpt"
    train = ["train", "--seed", "0"]
    with Cluster(2) as c:
        out = host_lost_elastic(c, train, graphs["elastic"], checkpoint, tmp_path / "logs",
                                _TIMEOUT_S, _ELASTIC_EPOCHS)
        host1 = c.hosts[1].address
    _report(capsys, out.summary())
    assert out.codes[0] == 0, out.summary()
    assert out.detect_s is not None and out.detect_s <= _TIMEOUT_S + MARGIN_S, out.summary()
    assert out.world_sizes == (2, 1)
    assert out.resumed_epoch is not None and out.resumed_epoch == out.checkpoint_epoch >= 1
    assert out.epochs_redone is not None and 0 <= out.epochs_redone <= 1
    assert out.epochs_run == _ELASTIC_EPOCHS
    assert out.accuracy is not None and out.reference_accuracy is not None
    assert abs(out.accuracy - out.reference_accuracy) * 100 <= _ACCURACY_PT
    named = [e for e in out.errors[0] if f"host {host1}" in e]
    assert named and _ranks_named(named[0]) == {1}, out.errors


@pytest.mark.distributed
@pytest.mark.skipif(not _AVAILABLE, reason=_WHY)
def test_a_stalled_rank_is_named_not_waited_on(
    graphs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """2 hosts x 2 ranks; rank 3 (host 1) SIGSTOPped mid-run: ranks 0-2 all end within
    ``--timeout`` + margin, host 0's torchrun fails, and each host's error line names
    rank 3 on host 1 as not responding."""
    args = ["train", "--algo", "1d", "--json", "--no-progress"]
    with Cluster(2) as c:
        out = rank_stalled(c, args, graphs["small"], tmp_path / "logs", _TIMEOUT_S)
        host1 = c.hosts[1].address
    _report(capsys, out.summary())
    assert sorted(out.ranks_gone_s) == [0, 1, 2]
    assert out.detect_s is not None and out.detect_s <= _TIMEOUT_S + MARGIN_S, out.summary()
    assert out.codes[0] not in (None, 0), out.summary()
    for host, lines in enumerate(out.errors):
        stopped = [e for e in lines if "does not respond" in e]
        assert stopped, f"host {host}: {lines}"
        assert all(f"rank 3 on host {host1}" in e and _ranks_named(e) == {3} for e in stopped)
