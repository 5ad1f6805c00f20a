"""Checkpoints never lose progress (issue 50): a lost or damaged shard, a folder with saved
epochs and no --resume, and two runs on one checkpoint path.

The two-rank cases run the real command (spawned gloo ranks, dropout on, the graph in
memory so every rank draws the same dropout stream); the refusals and the lock run in
this process. "Bit-identical" compares the manifest's ``replicated_sha256``: the sha256
of the model and Adam's state that every rank holds after the last epoch.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import multiprocessing
import os
import signal
import socket
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sparsegnn.cli.main import main
from sparsegnn.train import dist_checkpoint
from sparsegnn.train.dist_checkpoint import MANIFEST, DistributedStore, NothingToResume
from sparsegnn.train.run_lock import STALE_S, CheckpointInUseError, RunLock, lock_path

GRAPH = "sbm:nodes=200,blocks=3,degree=6"


def _train(ckpt: Path, *extra: str, epochs: int = 6, nprocs: int = 2, ranks: bool = True
           ) -> tuple[int, dict[str, Any], str]:
    """``train`` on ranks (``--algo 1d``: a checkpoint folder) or in one process (a
    checkpoint file), saving every 2 epochs: exit status, its JSON, its stderr."""
    out, err = io.StringIO(), io.StringIO()
    on_ranks = ["--algo", "1d", "--nprocs", str(nprocs)] if ranks else []
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["train", "--dataset", GRAPH, *on_ranks,
                     "--epochs", str(epochs), "--checkpoint", str(ckpt),
                     "--checkpoint-every", "2", "--no-progress", "--history", "--json",
                     "--timeout", "30", *extra])
    lines = out.getvalue().strip().splitlines()
    return code, json.loads(lines[-1]) if code == 0 else {}, err.getvalue()


def _replicated(ckpt: Path, epoch: int) -> str:
    folder = dist_checkpoint.epoch_folder(ckpt, epoch)
    return json.loads((folder / MANIFEST).read_text())["replicated_sha256"]


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An uninterrupted 8-epoch run: its losses and final replicated state."""
    ckpt = tmp_path_factory.mktemp("reference") / "ckpt"
    code, out, err = _train(ckpt, epochs=8)
    assert code == 0, err
    return {"losses": out["losses"], "state": _replicated(ckpt, 8)}


@pytest.mark.distributed
def test_lost_shards_resume_from_the_newest_restorable_epoch(tmp_path, reference):
    """The issue's folder: the newest epoch lost rank 0's shard, the one before rank 1's.
    Rank 1's intact shard of the newest epoch rebuilds both ranks (the model, optimiser
    and dropout stream are the same on every rank), so nothing is redone and the run ends
    bit-identical to the uninterrupted one; the damaged folder is never deleted before a
    newer complete one exists."""
    ckpt = tmp_path / "ckpt"
    assert _train(ckpt)[0] == 0
    (ckpt / "epoch-000006" / "rank0.pt").unlink()
    (ckpt / "epoch-000004" / "rank1.pt").unlink()
    code, out, err = _train(ckpt, "--resume", epochs=8)
    assert code == 0, err
    assert out["resumed_from"]["epoch"] == 6 and out["resumed_from"]["source"] == 1
    assert "epoch-000006: rank0.pt is missing; that rank is rebuilt" in err
    assert out["losses"] == reference["losses"]
    assert _replicated(ckpt, 8) == reference["state"]
    assert sorted(p.name for p in ckpt.iterdir() if p.is_dir()) == [
        "epoch-000006", "epoch-000008"]


@pytest.mark.distributed
def test_an_epoch_with_no_intact_shard_falls_back_to_the_one_before(tmp_path,
                                                                    reference):
    ckpt = tmp_path / "ckpt"
    assert _train(ckpt)[0] == 0
    (ckpt / "epoch-000006" / "rank0.pt").unlink()
    shard = ckpt / "epoch-000006" / "rank1.pt"
    shard.write_bytes(shard.read_bytes()[:-10] + b"0123456789")  # flipped bytes
    (ckpt / "epoch-000004" / "rank0.pt").unlink()
    code, out, err = _train(ckpt, "--resume", epochs=8)
    assert code == 0, err
    assert out["resumed_from"]["epoch"] == 4
    assert "epoch-000006 is incomplete: no intact shard" in err
    assert out["losses"] == reference["losses"]
    assert _replicated(ckpt, 8) == reference["state"]


def test_nothing_restorable_is_refused_naming_the_files(tmp_path):
    """--resume on saved epochs none of which can be restored is one line naming every
    folder and why, exit 2, and the folder is left byte-identical."""
    ckpt = tmp_path / "ckpt"
    assert _train(ckpt, nprocs=1)[0] == 0
    (ckpt / "epoch-000006" / "rank0.pt").unlink()
    (ckpt / "epoch-000004" / MANIFEST).unlink()
    before = _tree(ckpt)
    code, _, err = _train(ckpt, "--resume", nprocs=1, epochs=8)
    assert code == 2
    line, = err.strip().splitlines()
    assert "holds no epoch that can be restored" in line
    assert "epoch-000006: no intact shard (rank0.pt is missing)" in line
    assert "epoch-000004: no manifest.json" in line and "--restart" in line
    assert _tree(ckpt) == before
    with pytest.raises(NothingToResume):
        dist_checkpoint.newest_restorable(ckpt)


def test_saved_epochs_need_resume_or_restart(tmp_path):
    """Without --resume a folder of saved epochs is refused (a second run would bury the
    first); --restart trains from epoch 0 and removes the old epochs, newer ones
    included, once its own first checkpoint has landed."""
    ckpt = tmp_path / "ckpt"
    assert _train(ckpt, nprocs=1, epochs=8)[0] == 0
    before = _tree(ckpt)
    code, _, err = _train(ckpt, nprocs=1, epochs=4)
    assert code == 2 and "holds saved epochs (the newest epoch-000008)" in err
    assert "--resume" in err and "--restart" in err and _tree(ckpt) == before
    code, out, err = _train(ckpt, "--restart", nprocs=1, epochs=4)
    assert code == 0, err
    assert out["resumed_from"] is None and out["epochs_run"] == 4
    assert sorted(p.name for p in ckpt.iterdir()) == ["epoch-000002", "epoch-000004"]
    with pytest.raises(SystemExit):
        main(["train", "--dataset", GRAPH, "--checkpoint", str(ckpt), "--resume",
              "--restart"])


def test_pruning_never_deletes_without_a_newer_complete_epoch(tmp_path):
    """Resumed from a damaged epoch, the older folders stay until two epochs newer have
    landed; a newer folder of an earlier run is never pruned (only --restart drops it)."""
    root = tmp_path / "ckpt"
    for epoch in (2, 4, 6, 12):
        dist_checkpoint.epoch_folder(root, epoch).mkdir(parents=True)
    store = DistributedStore(root, SimpleNamespace(rank=0), {}, {}, 0, None)  # type: ignore[arg-type]
    store.kept = [6]
    store.kept = [6, 8]
    store._prune()
    assert [e for e, _ in dist_checkpoint.epoch_folders(root)] == [6, 12]
    store.restart = True
    store._prune()
    assert [e for e, _ in dist_checkpoint.epoch_folders(root)] == [6]


def test_rng_twins_of_a_rank(tmp_path):
    """Which ranks' shards carry a rank's own RNG streams: all ranks with shared masks;
    the replicas of its vertex block with per-block masks (1.5D, 2 blocks x 2 replicas)."""
    layout = {"grid": [2, 2, 1]}

    def store(rank: int, block: int | None) -> DistributedStore:
        return DistributedStore(tmp_path, SimpleNamespace(rank=rank), {}, layout, 0, block)  # type: ignore[arg-type]

    assert store(2, None)._same_streams(layout, 4) == [2, 0, 1, 3]
    assert store(2, 1)._same_streams(layout, 4) == [2, 3]
    assert store(1, 0)._candidates(layout, 4) == [1, 0, 2, 3]
    assert store(1, 0)._candidates({"grid": [4, 1, 1]}, 4) == [0, 1, 2, 3]


# ---------------------------------------------------------------------- one run per path
@pytest.mark.parametrize("folder", [False, True], ids=["file", "folder"])
def test_a_checkpoint_held_by_another_run_is_refused(tmp_path, folder):
    """The second run stops before touching anything, naming the holder and its lock."""
    ckpt = tmp_path / ("ckpt" if folder else "run.pt")
    held = RunLock(ckpt, folder=folder)
    held.acquire()
    try:
        code, _, err = _train(ckpt, nprocs=2, epochs=2, ranks=folder)
    finally:
        held.release()
    assert code == 2
    line, = [t for t in err.strip().splitlines() if "error" in t]
    assert f"pid {os.getpid()} on host {socket.gethostname()}" in line
    assert str(lock_path(ckpt, folder)) in line
    assert _train(ckpt, nprocs=2, epochs=2, ranks=folder)[0] == 0
    assert not lock_path(ckpt, folder).exists()


def _hold_and_die(path: str, ready: Any) -> None:
    RunLock(Path(path), folder=False).acquire()
    ready.set()
    time.sleep(60)


def test_a_lock_left_by_a_killed_run_is_taken_over(tmp_path):
    ckpt = tmp_path / "run.pt"
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold_and_die, args=(str(ckpt), ready))
    holder.start()
    try:
        assert ready.wait(60)
        with pytest.raises(CheckpointInUseError, match=f"pid {holder.pid} "):
            RunLock(ckpt, folder=False).acquire()
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.join()
    assert lock_path(ckpt, False).exists()  # what SIGKILL leaves behind
    lock = RunLock(ckpt, folder=False)
    lock.acquire()
    lock.release()


def test_a_lock_from_another_host_counts_while_it_is_refreshed(tmp_path):
    """flock may not cross machines on a network file system: there the holder's
    heartbeat (the file's mtime) decides."""
    ckpt = tmp_path / "run.pt"
    path = lock_path(ckpt, False)
    path.write_text(json.dumps({"pid": 1, "host": "elsewhere", "started": time.time()}))
    with pytest.raises(CheckpointInUseError, match="pid 1 on host elsewhere"):
        RunLock(ckpt, folder=False).acquire()
    old = time.time() - STALE_S - 5
    os.utime(path, (old, old))
    lock = RunLock(ckpt, folder=False)
    lock.acquire()
    assert json.loads(path.read_text())["pid"] == os.getpid()
    lock.release()


@pytest.mark.parametrize("folder", [False, True], ids=["file", "folder"])
def test_an_unwritable_checkpoint_is_named_as_given(tmp_path, folder):
    """Where the lock cannot be made, the error names the --checkpoint path, not the
    lock file's internal name alone."""
    ckpt = Path("/proc/sparsegnn-nowhere") / ("ckpt" if folder else "run.pt")
    code, _, err = _train(ckpt, nprocs=1, epochs=2, ranks=folder)
    assert code == 2
    line, = [t for t in err.strip().splitlines() if "error" in t]
    assert f"checkpoint {ckpt}" in line
