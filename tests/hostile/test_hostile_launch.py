"""The local rank launcher under faults: a stalled rank, a killed launcher, a rank's mistake.

Each case runs the real CLI with ``--nprocs`` as a subprocess in its own session, finds
the ranks among its descendants (children of the multiprocessing fork server), and acts
on them or on the launcher. These are the only tests that time anything, because the
bound is the acceptance criterion: a SIGSTOPped rank ends the job within ``--timeout`` +
10 s, and no rank outlives a killed launcher by more than 10 s. Every case kills whatever
it started in ``finally``, even when it fails.
"""

from __future__ import annotations

import io
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch

from conftest import assert_user_error, run_cli
from sparsegnn.distributed.runtime.launch import _load_result
from sparsegnn.distributed.runtime.rank_failure import RankChannel

pytestmark = pytest.mark.distributed

# Training that outlasts every case; early stopping off.
_LONG = ("--dataset", "cora", "--epochs", "1000000", "--patience", "1000000", "--no-progress")
_BUSY_CPU_S = 3.0  # rank CPU seconds that prove training has started (loading takes ~1 s)
_START_S = 240.0  # how long two to four ranks may take to start on a loaded machine


@dataclass
class _Job:
    """A launcher started in its own session, and the processes it spawned."""

    launcher: subprocess.Popen[bytes]
    stderr: Path
    spawned: list[psutil.Process]

    def stderr_text(self) -> str:
        return self.stderr.read_text()


@contextmanager
def _launch(workdir: Path, *args: str) -> Iterator[_Job]:
    """``sparsegnn ARGS`` with ``TMPDIR`` under ``workdir``; everything it started dies after."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(_tmpdir(workdir))}
    stderr = workdir / "stderr.txt"
    with stderr.open("wb") as err:
        launcher = subprocess.Popen(
            [sys.executable, "-m", "sparsegnn", *args], stdout=subprocess.DEVNULL,
            stderr=err, env=env, start_new_session=True,
        )
    job = _Job(launcher, stderr, [])
    try:
        yield job
    finally:
        for proc in job.spawned:
            with suppress(psutil.NoSuchProcess):
                proc.resume()
                proc.kill()
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()


def _tmpdir(workdir: Path) -> Path:
    path = workdir / "tmp"
    path.mkdir(exist_ok=True)
    return path


def _wait_for_training(job: _Job, nprocs: int) -> list[psutil.Process]:
    """The ranks in start order (rank 0 first), once each has computed for a while."""
    deadline = time.monotonic() + _START_S
    while time.monotonic() < deadline:
        assert job.launcher.poll() is None, f"launcher exited early:\n{job.stderr_text()}"
        ranks = _ranks(psutil.Process(job.launcher.pid))
        job.spawned = psutil.Process(job.launcher.pid).children(recursive=True)
        if len(ranks) == nprocs and all(_cpu_s(r) >= _BUSY_CPU_S for r in ranks):
            return ranks
        time.sleep(0.5)
    pytest.fail(f"{nprocs} ranks did not start training in {_START_S:.0f} s")


def _ranks(launcher: psutil.Process) -> list[psutil.Process]:
    """Children of the fork server, oldest first: they are forked in rank order."""
    ranks = []
    for child in launcher.children():
        try:
            if any("forkserver" in part for part in child.cmdline()):
                ranks += child.children()
        except psutil.NoSuchProcess:
            continue
    return sorted(ranks, key=lambda p: (p.create_time(), p.pid))


def _cpu_s(proc: psutil.Process) -> float:
    try:
        times = proc.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return float(times.user + times.system)


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those still running (a zombie waiting for a reaper has ended)."""
    out = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.NoSuchProcess:
            continue
    return out


def _all_gone_within(procs: list[psutil.Process], seconds: float) -> list[psutil.Process]:
    deadline = time.monotonic() + seconds
    while _alive(procs) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _alive(procs)


def _ours(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("sparsegnn-"))


# ---------------------------------------------------------------------- serious case 4
@pytest.mark.slow
def test_a_stopped_rank_ends_the_job_within_the_timeout_naming_it(workdir):
    timeout = 10.0
    args = ("train", "--algo", "2d", "--nprocs", "4", "--timeout", f"{timeout:g}", *_LONG)
    with _launch(workdir, *args) as job:
        ranks = _wait_for_training(job, 4)
        ranks[2].suspend()
        stopped_at = time.monotonic()
        code = job.launcher.wait(timeout=timeout + 60)
        elapsed = time.monotonic() - stopped_at
        proc = subprocess.CompletedProcess(args, code, "", job.stderr_text())
        assert_user_error(proc, "rank 2 of 4", "stopped responding")
        assert elapsed <= timeout + 10, f"ended {elapsed:.1f} s after the stop"
        assert not _all_gone_within(job.spawned, 5.0)
        assert not _ours(_tmpdir(workdir))


@pytest.mark.slow
def test_a_sigterm_stops_the_ranks_and_leaves_nothing_behind(workdir):
    with _launch(workdir, "train", "--algo", "1d", "--nprocs", "2", *_LONG) as job:
        _wait_for_training(job, 2)
        job.launcher.send_signal(signal.SIGTERM)
        code = job.launcher.wait(timeout=30)
        lines = [line for line in job.stderr_text().splitlines() if line.strip()]
        assert code == 130, job.stderr_text()
        assert lines == ["sparsegnn train: interrupted"]
        assert not _all_gone_within(job.spawned, 10.0), "processes outlived the launcher"
        # torch keeps its compile cache there on purpose; multiprocessing's and ours go.
        left = [p.name for p in _tmpdir(workdir).iterdir() if p.name != "torchinductor_root"]
        assert left == []


def _launcher_dirs(tmp: Path) -> list[str]:
    """multiprocessing's temp folders of launchers: its own ``pymp-*`` or ours."""
    return sorted(p.name for p in tmp.iterdir()
                  if p.name.startswith(("pymp-", "sg-")))


@pytest.mark.slow
def test_ranks_die_with_a_sigkilled_launcher_which_leaves_no_temp_folder(workdir):
    """The ranks (and every other process it started) die with the launcher; its fork
    server outlives it for a moment and removes the launcher's folder. One launch serves
    both checks: starting and training a job is what takes the time."""
    with _launch(workdir, "train", "--algo", "1d", "--nprocs", "2", *_LONG) as job:
        _wait_for_training(job, 2)
        assert _launcher_dirs(_tmpdir(workdir))
        job.launcher.send_signal(signal.SIGKILL)
        job.launcher.wait()
        assert not _all_gone_within(job.spawned, 10.0), "processes outlived the launcher"
        assert not _ours(_tmpdir(workdir))
        assert _launcher_dirs(_tmpdir(workdir)) == []


@pytest.mark.slow
def test_the_next_launch_removes_the_folder_of_a_launcher_killed_with_its_group(workdir):
    """SIGKILL to the whole process group leaves no survivor to clean up: the next
    launcher removes the folder of a launcher that no longer exists."""
    with _launch(workdir, "train", "--algo", "1d", "--nprocs", "2", *_LONG) as job:
        _wait_for_training(job, 2)
        os.killpg(job.launcher.pid, signal.SIGKILL)
        job.launcher.wait()
        assert not _all_gone_within(job.spawned, 10.0), "processes outlived the launcher"
    left = _launcher_dirs(_tmpdir(workdir))
    assert left, "nothing was left to clean up: the case proves nothing"
    proc = run_cli("train", "--nprocs", "2", "--dataset", "cora", "--epochs", "1",
                   "--no-progress", env={"TMPDIR": str(_tmpdir(workdir))})
    assert proc.returncode == 0, proc.stderr
    assert _launcher_dirs(_tmpdir(workdir)) == []


# ---------------------------------------------------------------------- a rank's mistake
def test_a_user_error_inside_a_rank_reads_as_on_one_process(workdir):
    """The partition's length is checked against the graph, which only the ranks load."""
    parts = workdir / "short-parts.npy"
    np.save(parts, np.zeros(5, dtype=np.int64))
    proc = run_cli("train", "--algo", "1d", "--nprocs", "2", "--dataset", "cora",
                   "--epochs", "1", "--partition", parts, env={"TMPDIR": str(_tmpdir(workdir))})
    line = assert_user_error(proc, str(parts), "rank ", "5 entries")
    assert line.startswith("sparsegnn train: error: rank ")
    assert not _ours(_tmpdir(workdir))


def test_a_rank_reply_cannot_run_code_in_the_launcher(workdir):
    """Replies load with ``weights_only=True``: a pickle that would call a function fails."""
    marker = workdir / "ran"

    class Payload:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    rank = RankChannel(0, None, None)  # type: ignore[arg-type]
    rank.eof = True
    crafted = io.BytesIO()
    torch.save(Payload(), crafted)
    rank.received += b"R" + crafted.getvalue()
    with pytest.raises(pickle.UnpicklingError):
        _load_result(rank)
    assert not marker.exists()
