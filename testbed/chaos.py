"""A chaos run: one 2-host training job that checkpoints every epoch, hit in turn by five
faults, each followed by ``--resume`` (issue 50), measured for ``benchmarks/cluster.py``.

The job is ``sparsegnn train --algo 1d --checkpoint CKPT --checkpoint-every 1 --resume
--timeout T`` under the cluster launch (:mod:`testbed.launch`: ``sparsegnn launch`` running
torchrun, 2 ranks per host), every rank holding the whole graph (so dropout masks come
from one shared stream and a same-layout resume is bit-identical), the checkpoint folder
shared by the hosts (namespaces share the file system). In turn:

1. **cut link**: host 1's link goes down mid-run; afterwards it is plugged back in;
2. **killed host**: everything on host 1 is SIGKILLed mid-run;
3. **stopped rank**: host 1's last rank is stopped (SIGSTOP) mid-run;
4. **deleted shard**: ``rank0.pt`` of the newest saved epoch is deleted;
5. **corrupted shard**: ``rank1.pt`` of the newest saved epoch gets bytes flipped.

Each live fault (1-3) strikes a launch that resumed and has saved a few more epochs, and
is watched for ``T`` + 30 s: when each host's surviving ranks had ended (detected), when
each host had no process of the job left, and what was still there then (afterwards
killed). The resume after every fault runs to an end, two epochs further (the last one to
``--epochs``), so its JSON says which epoch it resumed from and which shard rank 0 read,
and its warnings name a damaged shard; no progress is lost when it resumes from the
newest restorable epoch there was after the fault. The final weights are compared with
an uninterrupted run of the same job (same hosts, ranks and flags) through the
manifest's ``replicated_sha256`` of the last epoch: the sha256 of the model and optimiser
state that every rank holds.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparsegnn.train.dist_checkpoint import (
    MANIFEST,
    epoch_folder,
    newest_restorable,
    shard_name,
)
from testbed.faults import (
    EXIT_MARGIN_S,
    JOIN_TIMEOUT,
    Launcher,
    ScenarioError,
    on_hosts,
    start,
    watch,
    workers,
)
from testbed.launch import PORT, RUN_S, last_json, log_tails, wait_all
from testbed.netns import Cluster

LIVE = ("cut link", "killed host", "stopped rank")
ON_DISK = ("deleted shard", "corrupted shard")
ENDLESS_EPOCHS = 1_000_000  # an interrupted launch: the fault ends it, not --epochs
PATIENCE = ("--patience", "1000000")  # never stop early: every run trains every epoch
EPOCHS_BEFORE_FAULT = 3  # epochs a launch saves before its fault


@dataclass
class ChaosFault:
    """One fault of the run and the resume after it.

    ``detect_s``/``clear_s``: per host, seconds from the fault until its surviving ranks
    had all ended (0: none survived) / it had no process of the job left (None: not
    within ``T`` + 30 s; empty for a fault on disk). ``left``: per host, what was still
    there then (after a fault on disk: after the resume). ``saved_epoch``: the newest
    restorable epoch after the fault (for a damaged shard: the epoch it damaged);
    ``resumed_epoch``, ``source``: where the resume started and the shard rank 0 read;
    ``named``: the resume's warnings about the ``saved_epoch`` folder."""

    case: str
    timeout_s: float
    saved_epoch: int | None = None
    detect_s: list[float | None] = field(default_factory=list)
    clear_s: list[float | None] = field(default_factory=list)
    left: list[list[str]] = field(default_factory=list)
    resumed_epoch: int | None = None
    named: list[str] = field(default_factory=list)
    source: int | None = None

    @property
    def bound_s(self) -> float:
        return self.timeout_s + EXIT_MARGIN_S

    @property
    def detected(self) -> bool:
        """Live: every surviving rank on both hosts ended within ``T`` + 30 s. On disk:
        the resume's warnings name the damaged shard."""
        if self.case in ON_DISK:
            return bool(self.named)
        return bool(self.detect_s) and all(t is not None and t <= self.bound_s
                                           for t in self.detect_s)

    @property
    def nothing_left(self) -> bool:
        return not any(self.left) and all(t is not None and t <= self.bound_s
                                          for t in self.clear_s)

    @property
    def epochs_lost(self) -> int | None:
        """Completed epochs the resume did not start from (the newest restorable one)."""
        if self.saved_epoch is None or self.resumed_epoch is None:
            return None
        return self.saved_epoch - self.resumed_epoch

    def row(self) -> dict[str, Any]:
        """The fault as one row of plain data, times to 0.01 s."""
        return {"case": self.case, "detected": self.detected,
                "detect_s": _rounded(self.detect_s), "clear_s": _rounded(self.clear_s),
                "nothing_left": self.nothing_left,
                "left": self.left, "saved_epoch": self.saved_epoch,
                "resumed_epoch": self.resumed_epoch, "epochs_lost": self.epochs_lost,
                "named": self.named, "source_shard": self.source}


def _rounded(times: list[float | None]) -> list[float | None]:
    return [None if t is None else round(t, 2) for t in times]


@dataclass
class ChaosOutcome:
    """The whole run: each fault, the final weights' hash against the uninterrupted
    run's, and both runs' test accuracy."""

    faults: list[ChaosFault]
    epochs: int
    final_sha256: str | None = None
    reference_sha256: str | None = None
    accuracy: float | None = None
    reference_accuracy: float | None = None
    logs: Path | None = None

    @property
    def bit_identical(self) -> bool:
        return self.final_sha256 is not None and self.final_sha256 == self.reference_sha256

    @property
    def ok(self) -> bool:
        """Every fault detected, nothing left, nothing lost beyond the damaged epoch, the
        final weights bit-identical."""
        return self.bit_identical and all(
            f.detected and f.nothing_left and f.epochs_lost is not None
            and 0 <= f.epochs_lost <= (1 if f.case in ON_DISK else 0) for f in self.faults)


# ---------------------------------------------------------------------- the folder
def _newest_manifest(ckpt: Path) -> int:
    """The newest epoch with a manifest (0: none yet): how far a launch has got."""
    epochs = [int(p.parent.name.split("-")[1]) for p in ckpt.glob("epoch-*/" + MANIFEST)]
    return max(epochs, default=0)


def _saved(ckpt: Path) -> int | None:
    """The newest restorable epoch (None: none)."""
    check, _ = newest_restorable(ckpt)
    return None if check is None else check.epoch


def _damage(ckpt: Path, case: str) -> int:
    """Delete ``rank0.pt`` or flip bytes in the middle of ``rank1.pt`` (same size, so
    only its sha256 tells) of the newest restorable epoch; that epoch."""
    epoch = _saved(ckpt)
    if epoch is None:
        raise ScenarioError(f"{case}: no saved epoch to damage in {ckpt}")
    folder = epoch_folder(ckpt, epoch)
    if case == "deleted shard":
        (folder / shard_name(0)).unlink()
    else:
        shard = folder / shard_name(1)
        data = bytearray(shard.read_bytes())
        middle = len(data) // 2
        data[middle:middle + 16] = bytes(b ^ 0xFF for b in data[middle:middle + 16])
        shard.write_bytes(bytes(data))
    return epoch


def _hash(ckpt: Path, epoch: int) -> str | None:
    """The manifest's sha256 of the model and optimiser state of ``epoch`` (None: none)."""
    path = epoch_folder(ckpt, epoch) / MANIFEST
    return str(json.loads(path.read_text())["replicated_sha256"]) if path.is_file() else None


# ---------------------------------------------------------------------- launches
@dataclass(frozen=True)
class Job:
    """What every launch of the run trains; ``ckpt`` is its checkpoint folder."""

    train: tuple[str, ...]
    graph: Path
    ckpt: Path
    timeout_s: float
    nproc: int = 2

    def args(self, epochs: int, ckpt: Path | None = None) -> list[str]:
        return [*self.train, "--algo", "1d", "--epochs", str(epochs), *PATIENCE,
                "--checkpoint", str(ckpt or self.ckpt), "--checkpoint-every", "1",
                "--resume", "--timeout", f"{self.timeout_s:g}", "--json", "--no-progress"]

    def launcher(self, c: Cluster, epochs: int, offset: int,
                 ckpt: Path | None = None) -> Launcher:
        """Every host's launch, on ports of its own (``offset``): a port a killed store
        held may not be free again at once."""
        inner = on_hosts(c, self.nproc, self.args(epochs, ckpt), [self.graph] * len(c.hosts))
        return lambda logs, port: inner(logs, port + offset)


def _finish(c: Cluster, launch: Launcher, logs: Path) -> dict[str, Any]:
    """Run a launch to its end; rank 0's JSON. Launched again once when a rank timed out
    joining (a loaded machine), as :func:`testbed.faults.start` does."""
    for attempt in range(2):
        tried = logs / f"try{attempt}"
        tried.mkdir(parents=True)
        codes = wait_all(launch(tried, PORT + attempt), RUN_S)
        printed = (tried / "host0.out").read_text()
        if codes == [0] * len(codes) and printed.strip():
            return {**last_json(printed), "_logs": str(tried)}
        late = any(JOIN_TIMEOUT in f.read_text(errors="replace") for f in tried.glob("*.err"))
        for i in range(len(c.hosts)):
            c.kill(i)
        if attempt or not late:
            raise ScenarioError(f"a launch that should finish ended {codes}\n"
                                f"{log_tails(tried)}")
    raise AssertionError("unreachable")


def _warnings(logs: Path) -> list[str]:
    """rank 0's checkpoint warnings (``sparsegnn train: warning: checkpoint ...``)."""
    return [line for line in (logs / "host0.err").read_text(errors="replace").splitlines()
            if line.startswith("sparsegnn train: warning: checkpoint")]


def _resume(c: Cluster, job: Job, fault: ChaosFault, epochs: int, offset: int,
            logs: Path) -> dict[str, Any]:
    """The resume after ``fault``, run to ``epochs``: where it resumed, from which
    shard, what it warned about the damaged epoch; rank 0's JSON."""
    if fault.saved_epoch is None or fault.saved_epoch >= epochs:
        raise ScenarioError(f"{fault.case}: saved epoch {fault.saved_epoch}, nothing left "
                            f"to resume before epoch {epochs} (raise --epochs)")
    out = _finish(c, job.launcher(c, epochs, offset), logs)
    resumed = out.get("resumed_from") or {}
    fault.resumed_epoch = resumed.get("epoch")
    fault.source = resumed.get("source")
    damaged = epoch_folder(job.ckpt, fault.saved_epoch).name
    fault.named = [w for w in _warnings(Path(out["_logs"])) if f"{damaged}:" in w]
    if fault.case in ON_DISK:  # what a finished run left
        fault.left = [_names(c, i) for i in range(len(c.hosts))]
    return out


def chaos_run(c: Cluster, train: Sequence[str], graph: Path, work: Path, timeout_s: float,
              epochs: int, nproc: int = 2) -> ChaosOutcome:
    """The whole run on the 2 hosts of ``c`` (see the module's docstring); ``train`` is
    ``["train", ...]`` without the flags the run sets itself."""
    job = Job(tuple(train), graph, work / "ckpt", timeout_s, nproc)
    logs = work / "logs"
    reference = work / "reference-ckpt"
    ref = _finish(c, job.launcher(c, epochs, 0, reference), logs / "reference")
    faults = [_live(c, job, case, 10 * (k + 1), logs / case.replace(" ", "-"))
              for k, case in enumerate(LIVE)]
    out: dict[str, Any] = {}
    for k, case in enumerate(ON_DISK):
        fault = ChaosFault(case, timeout_s, saved_epoch=_damage(job.ckpt, case))
        last = k == len(ON_DISK) - 1
        out = _resume(c, job, fault, epochs if last else fault.saved_epoch + 2,
                      10 * (len(LIVE) + k + 1), logs / case.replace(" ", "-"))
        faults.append(fault)
    return ChaosOutcome(faults, epochs, _hash(job.ckpt, epochs), _hash(reference, epochs),
                        out.get("test_accuracy"), ref.get("test_accuracy"), logs)


# ---------------------------------------------------------------------- live faults
def _strike(c: Cluster, case: str, ranks: dict[int, int]) -> tuple[dict[int, int], bool]:
    """Inflict a live fault on host 1; the ranks that should notice it, and whether the
    link must be plugged back in afterwards."""
    if case == "cut link":
        c.link_down(1)
        return ranks, True
    if case == "killed host":
        c.kill(1)
        return {r: p for r, p in ranks.items() if r < len(ranks) // 2}, False
    stopped = max(ranks)
    os.kill(ranks[stopped], signal.SIGSTOP)
    return {r: p for r, p in ranks.items() if r != stopped}, False


def _live(c: Cluster, job: Job, case: str, offset: int, logs: Path) -> ChaosFault:
    """A launch (resuming) hit by a live fault once it has saved a few epochs; watched
    for ``T`` + 30 s; what is left is listed and killed; then the resume after it runs
    two epochs (:func:`_resume`)."""
    target = (_saved(job.ckpt) or 0) + EPOCHS_BEFORE_FAULT
    agents, _, _ = start(c, job.launcher(c, ENDLESS_EPOCHS, offset),
                         lambda: _newest_manifest(job.ckpt) >= target, logs / "faulted")
    ranks = {r: p for i, a in enumerate(agents) for r, p in workers(c, i, a).items()}
    struck = time.monotonic()
    survivors, unplug = _strike(c, case, ranks)
    hosts = range(len(c.hosts))
    seen = watch(agents, survivors, struck, struck + job.timeout_s + EXIT_MARGIN_S, hosts,
                 c, hosts)
    fault = ChaosFault(case, job.timeout_s, detect_s=_per_host(seen.ranks_gone, job.nproc),
                       clear_s=seen.clear, left=[_names(c, i) for i in hosts])
    for i in hosts:
        c.kill(i)
    if unplug:
        c.link_up(1)
    fault.saved_epoch = _saved(job.ckpt)
    _resume(c, job, fault, (fault.saved_epoch or 0) + 2, offset + 5, logs / "resumed")
    return fault


def _per_host(gone: dict[int, float | None], nproc: int) -> list[float | None]:
    """When each host's watched ranks had all ended (a host with none: 0)."""
    out: list[float | None] = []
    for host in range(2):
        mine = [t for r, t in gone.items() if r // nproc == host]
        out.append(None if None in mine else max((t for t in mine if t is not None),
                                                 default=0.0))
    return out


def _names(c: Cluster, host: int) -> list[str]:
    """What still runs on ``host``: ``pid command``."""
    out = []
    for pid in c.pids(host):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        out.append(f"{pid} {cmd.decode(errors='replace')[:120]}")
    return out
