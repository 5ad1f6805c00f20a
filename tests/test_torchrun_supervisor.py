"""``sparsegnn launch`` (:mod:`sparsegnn.torchrun`): torchrun under a
supervisor that ends it on a host cut off from the rendezvous store (issue 50).

The cluster suite cuts a real host off (``tests/cluster/test_cluster.py``); here a fake
torchrun plays each agent behaviour on one machine, without root: stuck after its worker
failed, restarting its worker (elastic), leaving a worker behind, ignoring SIGTERM. The
supervisor runs in a process of its own (it makes itself a subreaper), and every test
checks that no process of the fake job is left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparsegnn.cli.main import main
from sparsegnn.torchrun import (
    Endpoint,
    WorkerWatch,
    rendezvous_endpoint,
    torchrun_options,
)

# A fake torchrun: ``FAKE -m torch.distributed.run ARGS``; FAKE_MODE says what it does,
# FAKE_PIDS where it writes its own pid and each worker's.
_FAKE_AGENT = r'''
import os, signal, subprocess, sys, time

def worker(seconds, code):
    proc = subprocess.Popen([sys.executable, "-c",
                             f"import sys, time; time.sleep({seconds}); sys.exit({code})"],
                            start_new_session=True)  # as torchrun starts its workers
    with open(os.environ["FAKE_PIDS"], "a") as f:
        f.write(f"{proc.pid}\n")
    return proc

with open(os.environ["FAKE_PIDS"], "a") as f:
    f.write(f"{os.getpid()}\n")
mode = os.environ["FAKE_MODE"]
if mode == "stuck":  # its worker fails; it never exits, and ignores SIGTERM
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    worker(0.3, 2)
    time.sleep(600)
elif mode == "restart":  # its worker fails; a new one 0.2 s later (an elastic restart)
    worker(0.3, 2).wait()
    time.sleep(0.2)
    worker(2.0, 0).wait()
elif mode == "leaves":  # exits 0 while a worker still runs
    worker(600, 0)
    time.sleep(0.5)
elif mode == "fails":  # its worker fails and so does it, at once
    sys.exit(worker(0.3, 2).wait() and 1)
elif mode == "stops":  # one worker stopped (SIGSTOP); the other fails; SIGTERM for the
    stopped = worker(600, 0)  # stopped one, waited on for 30 s as torchrun does
    os.kill(stopped.pid, signal.SIGSTOP)
    worker(0.3, 2).wait()
    stopped.terminate()
    try:
        stopped.wait(30)
    except subprocess.TimeoutExpired:
        stopped.kill()
    sys.exit(1)
'''

# The supervisor, in a process of its own; the store's reachability is FAKE_REACH.
_SUPERVISE = r'''
import json, os, sys
from sparsegnn.torchrun import LaunchRequest, supervise
args = ("--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.9.9.9:29500",
        "-m", "sparsegnn", "train")
request = LaunchRequest(args, grace_s=1.0, probe_s=0.5, poll_s=0.05, python=sys.argv[1])
out = supervise(request, reach=lambda endpoint, timeout: os.environ["FAKE_REACH"])
print(json.dumps({"code": out.code, "killed": out.killed, "leftovers": out.leftovers,
                  "continued": out.continued}))
'''


@pytest.fixture
def fake_torchrun(tmp_path: Path) -> Path:
    agent = tmp_path / "agent.py"
    agent.write_text(_FAKE_AGENT)
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\n[ "$1 $2" = "-m torch.distributed.run" ] && shift 2\n'
                    f'exec {sys.executable} {agent} "$@"\n')
    fake.chmod(0o755)
    return fake


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _started(pids: Path, count: int) -> None:
    """Wait until the fake torchrun has written ``count`` pids (itself, its workers)."""
    deadline = time.monotonic() + 60
    while not (pids.is_file() and len(pids.read_text().split()) >= count):
        assert time.monotonic() < deadline, "the fake torchrun did not start"
        time.sleep(0.05)


def _supervise(fake: Path, mode: str, reach: str, tmp_path: Path,
               signal_after_s: float | None = None) -> tuple[dict[str, object], list[int]]:
    """Run the supervisor on the fake torchrun; its outcome and the job's pids. With
    ``signal_after_s``: SIGTERM that long after its worker started, once the supervisor
    is seen to be still running."""
    pids = tmp_path / f"{mode}-{reach}.pids"
    env = {**os.environ, "FAKE_MODE": mode, "FAKE_REACH": reach, "FAKE_PIDS": str(pids)}
    proc = subprocess.Popen([sys.executable, "-c", _SUPERVISE, str(fake)], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        if signal_after_s is not None:
            _started(pids, 2)
            time.sleep(signal_after_s)
            assert proc.poll() is None, "the supervisor ended before its SIGTERM"
            proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    job = [int(p) for p in pids.read_text().split()]
    try:
        return json.loads(out.strip().splitlines()[-1]), job
    finally:
        for pid in job:  # a failing test leaves nothing either
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------------- arguments
@pytest.mark.parametrize(("args", "env", "expected"), [
    (["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.0.0.1:29501",
      "-m", "sparsegnn", "train"], {}, Endpoint("10.0.0.1", 29501)),
    (["--rdzv_backend=c10d", "--rdzv_endpoint=node0", "script.py"], {},
     Endpoint("node0", 29400)),
    (["--rdzv-backend", "c10d", "--rdzv-endpoint", "[fd00::1]:7", "x.py"], {},
     Endpoint("fd00::1", 7)),
    (["--nnodes", "2", "--master-addr", "10.0.0.9", "--master-port", "1234", "x.py"], {},
     Endpoint("10.0.0.9", 1234)),
    (["--nnodes", "2", "x.py"], {"PET_MASTER_ADDR": "h", "PET_MASTER_PORT": "5"},
     Endpoint("h", 5)),
    (["--rdzv-backend", "c10d", "x.py"], {"PET_RDZV_ENDPOINT": "h:6"}, Endpoint("h", 6)),
    (["--standalone", "--nproc-per-node", "4", "-m", "sparsegnn"], {}, None),
])
def test_the_rendezvous_store_is_read_from_torchruns_arguments(
    args: list[str], env: dict[str, str], expected: Endpoint | None
) -> None:
    assert rendezvous_endpoint(args, env) == expected


def test_options_end_at_the_training_script() -> None:
    """What follows the script is the script's: its ``--rdzv-endpoint`` is not torchrun's."""
    args = ["--nnodes", "2", "-m", "sparsegnn", "train", "--rdzv-endpoint", "elsewhere:1"]
    assert torchrun_options(args) == {"--nnodes": "2", "-m": ""}
    assert rendezvous_endpoint(args, {}) == Endpoint("127.0.0.1", 29500)


def test_a_generation_of_workers_clears_the_end_of_the_last_one() -> None:
    watch = WorkerWatch()
    watch.update({1, 2}, 0.0)
    watch.update({2}, 1.0)  # worker 1 ended
    assert watch.ended_at == 1.0 and watch.probe_due(2.0, 1.0)
    watch.update(set(), 1.5)  # the other one too: still the first end that counts
    assert watch.ended_at == 1.0
    watch.update({3, 4}, 3.0)  # an elastic restart
    assert watch.ended_at is None and not watch.probe_due(9.0, 1.0)


# ---------------------------------------------------------------------- supervising
def test_a_stuck_torchrun_is_killed_once_its_store_is_unreachable(
    fake_torchrun: Path, tmp_path: Path
) -> None:
    """Its worker failed, it ignores SIGTERM and never exits, the store does not answer:
    killed with every process it started, one line saying why, exit 2."""
    started = time.monotonic()
    out, job = _supervise(fake_torchrun, "stuck", "unreachable", tmp_path)
    assert out["code"] == 2
    assert "10.9.9.9:29500 is unreachable" in str(out["killed"])
    assert time.monotonic() - started < 30
    assert not [p for p in job if _alive(p)]


def test_a_store_that_answers_or_refuses_leaves_torchrun_alone(
    fake_torchrun: Path, tmp_path: Path
) -> None:
    """An agent that outlives its workers while its store answers (an exit barrier, a
    re-rendezvous) is not killed (still running three graces after its worker ended);
    here it only ends on SIGTERM, which the supervisor passes on and, being ignored,
    follows with SIGKILL after the grace: exit 128 + 15."""
    for reach in ("answers", "refused"):
        out, job = _supervise(fake_torchrun, "stuck", reach, tmp_path, signal_after_s=3.3)
        assert out == {"code": 128 + signal.SIGTERM, "killed": None, "leftovers": [],
                       "continued": []}, reach
        assert not [p for p in job if _alive(p)]


def test_an_elastic_restart_is_not_an_end(fake_torchrun: Path, tmp_path: Path) -> None:
    """A worker fails and a new one starts within the grace: nothing is killed even with
    the store unreachable, and torchrun's own status is the outcome."""
    out, job = _supervise(fake_torchrun, "restart", "unreachable", tmp_path)
    assert out == {"code": 0, "killed": None, "leftovers": [], "continued": []}
    assert not [p for p in job if _alive(p)]


def test_a_stopped_worker_is_continued_to_take_torchruns_sigterm(
    fake_torchrun: Path, tmp_path: Path
) -> None:
    """One worker stopped, the other failed, torchrun SIGTERMs the stopped one and waits
    30 s: continued after the grace, it takes the SIGTERM and torchrun exits at once."""
    started = time.monotonic()
    out, job = _supervise(fake_torchrun, "stops", "answers", tmp_path)
    assert out == {"code": 1, "killed": None, "leftovers": [], "continued": [job[1]]}
    assert time.monotonic() - started < 20
    assert not [p for p in job if _alive(p)]


def test_torchruns_status_passes_and_what_it_leaves_is_killed(
    fake_torchrun: Path, tmp_path: Path
) -> None:
    out, _ = _supervise(fake_torchrun, "fails", "unreachable", tmp_path)
    assert out == {"code": 1, "killed": None, "leftovers": [], "continued": []}
    out, job = _supervise(fake_torchrun, "leaves", "answers", tmp_path)
    assert out["code"] == 0 and out["killed"] is None and out["leftovers"] == job[1:]
    assert not [p for p in job if _alive(p)]


def test_the_command_needs_torchruns_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    """The console script's entry point, called in-process: its status and stderr."""
    assert main(["launch", "--"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "sparsegnn launch: error: no torchrun arguments: sparsegnn launch -- --nnodes N "
        "... -m sparsegnn train ..."]
