"""A machine that runs out: a full disk, sizes larger than memory, absurd rank counts,
unwritable outputs, and the leftovers of killed writers.

Each refusal is one line naming what the user gave (the output path as typed, the option,
the file), exit status 2 and nothing written; the full-disk cases write into a 2 MiB
tmpfs this module mounts (as root; skipped, saying why, where mounting is not allowed)
and always unmounts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from conftest import all_refused, assert_user_error, run_cli, snapshot, tree
from sparsegnn.cli.main import main

_FULL_MIB = 2
# Outputs of a few MiB each, more than the tmpfs holds: 6.5 MiB, 7.5 MiB of rank files.
_BIG_GRAPH = "rmat:14"
_BIG_SBM = "sbm:nodes=20000,blocks=8,degree=16"
# A checkpoint of a 256-wide GCN on Cora: weights and Adam's moments, about 4.4 MiB.
_BIG_MODEL = ("--dataset", "cora", "--epochs", "1", "--hidden", "256", "--no-progress")


@pytest.fixture
def full_disk(workdir: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs at ``workdir/full``, unmounted afterwards whatever happened."""
    mount = workdir / "full"
    mount.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={_FULL_MIB}m", "tmpfs",
                               str(mount)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        pytest.skip(f"cannot run mount: {err}")
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=30,
                       check=False)


def _corpus(path: Path, docs: int, chars: int) -> Path:
    """JSONL documents of random hex text: Parquet cannot compress it below its size."""
    rng = np.random.default_rng(0)
    with path.open("w") as f:
        for i in range(docs):
            text = rng.bytes(chars // 2).hex()
            f.write(json.dumps({"id": f"d{i}", "text": text, "url": f"http://s{i % 7}.org/{i}"})
                    + "\n")
    return path


# ---------------------------------------------------------------------- a full disk
def test_a_full_disk_is_one_line_naming_the_output_and_nothing_is_left(workdir, full_disk):
    """``data convert``, ``data partition``, ``curate ingest`` and a checkpoint save into
    a 2 MiB tmpfs: each refused with the path as given and the bytes; the disk stays
    empty (no temp file, no empty folder)."""
    _corpus(workdir / "docs.jsonl", docs=3000, chars=1000)
    cases = [
        (("data", "convert", _BIG_GRAPH, "full/g.npz"), ("full/g.npz", "bytes")),
        (("data", "partition", _BIG_SBM, "full/parts", "--algo", "1d", "--nprocs", "2"),
         ("full/parts", "bytes")),
        (("curate", "ingest", "docs.jsonl", "--out", "full/a/store"),
         ("full/a/store", "bytes")),
        (("train", *_BIG_MODEL, "--checkpoint", "full/c.pt"), ("full/c.pt", "bytes")),
    ]
    lines = all_refused(cases, workdir, full_disk)
    assert all("no space left on device" in line for line in lines), lines
    assert tree(full_disk) == {}


@pytest.mark.distributed
def test_a_full_disk_on_a_rank_is_one_line_naming_the_rank_and_shard(workdir, full_disk):
    """A rank's checkpoint shard that finds no room: one line, as on one process, and no
    shard file left (a shard folder of no files is never resumed)."""
    proc = run_cli("train", *_BIG_MODEL, "--nprocs", "2", "--checkpoint", "full/ck",
                   cwd=workdir)
    line = assert_user_error(proc, "rank ", "full/ck/", "no space left on device", "bytes")
    assert ".tmp" not in line
    assert snapshot(full_disk) == {}


# ---------------------------------------------------------------------- outputs as given
def test_an_unwritable_output_is_named_as_given_not_as_its_temp_file(workdir):
    """As root, /sys and /proc pass the up-front writability check and fail at the write;
    the error names the output the user typed, not ``.out.npz.k2j3x9aa.tmp``."""
    cases = [
        (("data", "convert", "cora", "/sys/out.npz"), ("/sys/out.npz",)),
        (("data", "partition", "cora", "/proc/parts", "--algo", "1d", "--nprocs", "2"),
         ("/proc/parts",)),
        (("data", "generate", "rmat:8", "--out", "/proc/g.npz"), ("/proc/g.npz",)),
    ]
    lines = all_refused(cases, workdir, workdir)
    assert not [line for line in lines if ".tmp" in line], lines


# ---------------------------------------------------------------------- absurd sizes
def _one_line(capsys: pytest.CaptureFixture[str], code: int, *names: str) -> str:
    """The CLI's exit status and stderr, called in-process: 2 and one line naming ``names``."""
    err = [line for line in capsys.readouterr().err.splitlines()
           if line.strip() and not line.startswith("INFO ")]
    assert code == 2, err
    assert len(err) == 1, err
    for name in names:
        assert name in err[0], err[0]
    return err[0]


@pytest.mark.parametrize("mode", ["fullgraph", "minibatch"])
def test_a_hidden_width_larger_than_memory_is_refused_before_allocating(capsys, mode):
    code = main(["train", "--dataset", "cora", "--hidden", "99999999999", "--epochs", "1",
                 "--mode", mode, "--no-progress"])
    _one_line(capsys, code, "99999999999", "--hidden", "of memory", "available")


def test_more_ranks_than_the_machine_can_start_are_refused_before_any_starts(capsys):
    code = main(["train", "--dataset", "cora", "--nprocs", "100000", "--epochs", "1",
                 "--no-progress"])
    _one_line(capsys, code, "--nprocs 100000", "of memory", "available")


def test_more_ranks_than_open_files_allow_are_refused(monkeypatch):
    from sparsegnn.data import limits
    from sparsegnn.errors import ResourceError

    monkeypatch.setattr(limits.resource, "getrlimit", lambda _: (256, 256))
    limits.require_ranks(64)  # 3 descriptors per rank and a margin fit in 256
    with pytest.raises(ResourceError, match=r"--nprocs 100 needs about 364 open files.*256"):
        limits.require_ranks(100)


# ---------------------------------------------------------------------- object arrays
@pytest.fixture
def object_parts(workdir: Path) -> Path:
    """A partition vector saved as an object array: loading it would need pickle."""
    path = workdir / "parts.npy"
    np.save(path, np.array([0, 1] * 1354, dtype=object), allow_pickle=True)
    return path


def test_an_object_array_partition_is_refused_in_one_line(capsys, workdir, object_parts):
    out = workdir / "parts-out"
    code = main(["data", "partition", "cora", str(out), "--algo", "1d", "--nprocs", "2",
                 "--parts", str(object_parts)])
    _one_line(capsys, code, str(object_parts), "object array")
    assert not out.exists()


@pytest.mark.distributed
def test_an_object_array_partition_on_ranks_is_refused_in_one_line(workdir, object_parts):
    proc = run_cli("train", "--algo", "1d", "--nprocs", "2", "--dataset", "cora",
                   "--epochs", "1", "--no-progress", "--partition", object_parts)
    assert_user_error(proc, "rank ", str(object_parts), "object array")


# ---------------------------------------------------------------------- store leftovers
def _killed_ingest(corpus: Path, store: Path) -> list[str]:
    """Start ``curate ingest``, SIGKILL it once its temp files exist; their names."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "sparsegnn", "curate", "ingest",
                             str(corpus), "--out", str(store), "--batch-rows", "64"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            temps = sorted(p.name for p in store.glob(".*.tmp")) if store.is_dir() else []
            if len(temps) == 2:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return temps
            time.sleep(0.02)
        pytest.fail(f"the ingest ended (exit {proc.poll()}) before it could be killed")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_successful_ingest_removes_what_killed_ingests_left(workdir):
    """A killed ingest leaves its two temp files; the next ingest that succeeds removes
    them, and nothing else: a user's files and a live writer's temp file stay."""
    store = workdir / "store"
    killed = _killed_ingest(_corpus(workdir / "big.jsonl", docs=40000, chars=200), store)
    assert sorted(p.name for p in store.glob(".*.tmp")) == killed
    live = store / f".graph.npz.{os.getpid()}.abcd1234.tmp"  # this process is alive
    users = [store / "notes.tmp", store / ".documents.parquet.backup", live]
    for path in users:
        path.write_text("keep me")
    proc = run_cli("curate", "ingest", _corpus(workdir / "small.jsonl", docs=20, chars=40),
                   "--out", store)
    assert proc.returncode == 0, proc.stderr
    left = sorted(p.name for p in store.iterdir())
    assert left == sorted(["documents.parquet", "graph.npz", *(p.name for p in users)])
