"""Fault scenarios across namespace hosts under torchrun, each returning what it measured.

Shared by the cluster tests (``test_faults.py``, and ``test_cluster.py``'s host cut off)
and ``benchmarks/cluster.py``'s fault table. A runner takes a live
:class:`.netns.Cluster`, starts ``sparsegnn train`` under torchrun on every host
(:mod:`testbed.launch`), waits until training is under way, injects one fault and watches the
processes; it measures and returns, the caller judges. Every wait is bounded, times count
from the fault, and the caller's ``with Cluster(...)`` removes whatever is left.

* :func:`host_cut_off`: host 1's link goes down (its cable pulled at the switch);
* :func:`host_lost_elastic`: ``torchrun --nnodes 1:N --max-restarts``; host 1 is lost
  (cut off, then everything on it killed) after a complete checkpoint; host 0's agent
  restarts its workers on the smaller world, which resume and finish;
* :func:`rank_stalled`: one rank on host 1 is stopped (SIGSTOP) for longer than
  ``--timeout``, then continued and killed.

A rank that ends because of a lost peer prints one line (``sparsegnn train: error: rank
0 of 2: lost contact with host 10.231.7.2 (rank 1): ...``, see
:mod:`sparsegnn.distributed.runtime.peers`); :func:`rank_errors` collects those lines.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sparsegnn.cli.main import main
from sparsegnn.train.dist_checkpoint import MANIFEST, epoch_folder, epoch_folders, latest_complete
from testbed.launch import PORT, RUN_S, Elastic, last_json, log_tails, torchrun
from testbed.netns import Cluster

MARGIN_S = 20.0  # beyond --timeout: the probe of the peers, exit, the agent's reaction
# Beyond --timeout: by then every process of the job on either side of a cut has exited
# (issue 50), the launches included.
EXIT_MARGIN_S = 30.0
UNDER_WAY_BYTES = 2_000_000  # host 1's traffic once epochs run (start-up moves ~60 kB)
JOIN_TIMEOUT = "DistStoreError: wait timeout"  # a rank's join outlasted --timeout
ENDLESS = ("--epochs", "1000000", "--patience", "1000000")
_POLL_S = 0.1
LAUNCH_ERROR = "sparsegnn launch: error: "  # the line of a launch that killed torchrun


class ScenarioError(RuntimeError):
    """A scenario could not reach its fault (a launch ended early or never trained); the
    message carries the hosts' logs."""


@dataclass
class FaultOutcome:
    """What one fault did, seconds counted from the fault.

    ``ranks_gone_s``: when each rank that outlived the fault had ended (None: still there
    at the end of the watch); ``detect_s``: the last of them (None if any is missing).
    ``agents_exit_s`` and ``codes``: each host's launch (``sparsegnn launch``, which
    runs torchrun), when it exited and how (None: still running when the watch ended).
    ``errors``: each host's rank error lines. ``hosts_clear_s``: when each host had no
    process of the job left (empty: not watched).
    """

    case: str
    timeout_s: float
    ranks_gone_s: dict[int, float | None]
    agents_exit_s: list[float | None]
    codes: list[int | None]
    errors: list[list[str]]
    logs: Path
    relaunched: bool = False  # started twice: a rank timed out joining on a loaded machine
    hosts_clear_s: list[float | None] = field(default_factory=list)

    @property
    def detect_s(self) -> float | None:
        gone = list(self.ranks_gone_s.values())
        return None if None in gone or not gone else max(g for g in gone if g is not None)

    def summary(self) -> str:
        detect = "never" if self.detect_s is None else f"{self.detect_s:.1f} s"
        return (f"{self.case}: every surviving rank ended {detect} after the fault "
                f"(--timeout {self.timeout_s:g}); per rank {self._times(self.ranks_gone_s)}; "
                f"torchrun exits {self.codes} at {self._times(dict(enumerate(self.agents_exit_s)))}"
                f"{self._clear()}{'; launched twice' if self.relaunched else ''}; "
                f"errors {self.errors}")

    def _clear(self) -> str:
        if not self.hosts_clear_s:
            return ""
        clear = self._times(dict(enumerate(self.hosts_clear_s)))
        return f"; no process left on the hosts at {clear}"

    @staticmethod
    def _times(times: dict[int, float | None]) -> str:
        return "{" + ", ".join(f"{k}: {'-' if v is None else f'{v:.1f}'}"
                               for k, v in times.items()) + "}"


@dataclass
class ElasticOutcome(FaultOutcome):
    """A lost host under elastic torchrun, and what the restarted workers made of it.

    ``checkpoint_epoch``: the newest complete checkpoint once the first workers had
    ended; ``epochs_done``: epochs they had finished (the newest epoch folder a save
    started; exact with ``--checkpoint-every 1``); ``resumed_epoch`` and the world sizes
    from the restarted workers' JSON; ``reference_accuracy``: the same training without a
    fault, in one process."""

    world_sizes: tuple[int, int] = (0, 0)  # before the fault, after the restart
    checkpoint_epoch: int | None = None
    epochs_done: int | None = None
    resumed_epoch: int | None = None
    epochs_run: int | None = None
    accuracy: float | None = None
    reference_accuracy: float | None = None

    @property
    def epochs_redone(self) -> int | None:
        if self.epochs_done is None or self.resumed_epoch is None:
            return None
        return self.epochs_done - self.resumed_epoch

    def summary(self) -> str:
        return (f"{super().summary()}; world {self.world_sizes[0]} -> {self.world_sizes[1]}, "
                f"newest complete checkpoint epoch {self.checkpoint_epoch}, epochs done "
                f"{self.epochs_done}, resumed epoch {self.resumed_epoch} (redone "
                f"{self.epochs_redone}), {self.epochs_run} epochs, accuracy {self.accuracy} vs "
                f"{self.reference_accuracy} uninterrupted")


# ---------------------------------------------------------------------- processes
def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _environ_rank(pid: int) -> bytes | None:
    """The ``RANK`` in ``pid``'s environment (None: none, or the process is gone)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    return next((e[5:] for e in env if e.startswith(b"RANK=")), None)


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None  # exited meanwhile


def workers(c: Cluster, host: int, agent: subprocess.Popen[bytes]) -> dict[int, int]:
    """``{global rank: pid}`` of the workers torchrun runs on ``host`` now (started by
    ``agent``, the host's launch): processes with a ``RANK`` in their environment whose
    parent (torchrun) has none, not the local ranks a worker may spawn."""
    found = {}
    for pid in c.pids(host):
        rank, parent = _environ_rank(pid), _parent(pid)
        if rank and parent is not None and _environ_rank(parent) is None:
            found[int(rank)] = pid
    return found


@dataclass
class Watched:
    """Seconds after the fault: when each surviving rank ended, each host's launch
    exited, and each host had no process left (None: not within the watch)."""

    ranks_gone: dict[int, float | None]
    exited: list[float | None]
    clear: list[float | None]


def watch(agents: Sequence[subprocess.Popen[bytes]], survivors: dict[int, int],
           fault: float, deadline: float, agents_awaited: Sequence[int],
           c: Cluster | None = None, hosts_awaited: Sequence[int] = ()) -> Watched:
    """Until ``deadline``: when each surviving rank (``{rank: pid}``) ended, each agent
    exited and (with ``c``) each host of ``hosts_awaited`` had no process left, seconds
    after ``fault``; done early once every survivor has ended, the ``agents_awaited``
    have exited and the ``hosts_awaited`` are clear."""
    seen = Watched(dict.fromkeys(survivors), [None] * len(agents), [None] * len(agents))
    while time.monotonic() < deadline:
        now = time.monotonic() - fault
        for rank, pid in survivors.items():
            if seen.ranks_gone[rank] is None and not _alive(pid):
                seen.ranks_gone[rank] = now
        for i, agent in enumerate(agents):
            if seen.exited[i] is None and agent.poll() is not None:
                seen.exited[i] = now
        for i in hosts_awaited:
            if seen.clear[i] is None and c is not None and not c.pids(i):
                seen.clear[i] = now
        if None not in seen.ranks_gone.values() \
                and all(seen.exited[i] is not None for i in agents_awaited) \
                and all(seen.clear[i] is not None for i in hosts_awaited):
            break
        time.sleep(_POLL_S)
    return seen


def rank_errors(stderr: Path) -> list[str]:
    """The error lines of a host's failed ranks: sparsegnn's one line (``sparsegnn train:
    error: ...``) or, for an error that is not ours, the last line of the rank's traceback
    (``[rank<r>]: SomeError: ...``, torchrun's prefix)."""
    ours, theirs = [], {}
    for line in stderr.read_text(errors="replace").splitlines():
        if line.startswith(LAUNCH_ERROR):
            continue  # the launch's own line, not a rank's
        if line.startswith("sparsegnn ") and ": error: " in line:
            ours.append(line)
        prefix, _, rest = line.partition("]: ")
        if prefix.startswith("[rank") and "Error" in rest.split(":", 1)[0]:
            theirs[prefix] = line
    return ours + [theirs[k] for k in sorted(theirs)]


# ---------------------------------------------------------------------- starting
Launcher = Callable[[Path, int], list[subprocess.Popen[bytes]]]


def _until(agents: Sequence[subprocess.Popen[bytes]], ready: Callable[[], bool],
           logs: Path) -> list[int | None]:
    """Wait until ``ready()`` (empty list) or a host's torchrun ended (the exit codes)."""
    deadline = time.monotonic() + RUN_S
    while not ready():
        codes = [a.poll() for a in agents]
        if codes != [None] * len(agents):
            return codes
        if time.monotonic() > deadline:
            raise ScenarioError(f"not under way after {RUN_S:.0f} s\n{log_tails(logs)}")
        time.sleep(_POLL_S)
    return []


def start(c: Cluster, launch: Launcher, ready: Callable[[], bool], logs: Path
          ) -> tuple[list[subprocess.Popen[bytes]], Path, bool]:
    """Launch on every host until ``ready()``; the agents, their log folder and whether
    it took a second launch.

    Launched again once (next port) when a rank gave up joining the process group:
    ``--timeout`` also bounds that join, and on a loaded machine one host's rank may start
    more than ``--timeout`` after another's. Any other early end raises."""
    for attempt in range(2):
        tried = logs / f"try{attempt}"
        tried.mkdir(parents=True)
        agents = launch(tried, PORT + attempt)
        ended = _until(agents, ready, tried)
        if not ended:
            return agents, tried, attempt > 0
        late = any(JOIN_TIMEOUT in f.read_text(errors="replace") for f in tried.glob("*.err"))
        if attempt or not late:
            raise ScenarioError(f"ended before the fault: {ended}\n{log_tails(tried)}")
        for i in range(len(c.hosts)):
            c.kill(i)
    raise AssertionError("unreachable")


def _traffic(c: Cluster, host: int) -> Callable[[], bool]:
    """Ready once ``host`` has moved :data:`UNDER_WAY_BYTES` (its ranks train)."""
    def ready() -> bool:
        moved = c.counters(host)
        return moved.tx_bytes + moved.rx_bytes >= UNDER_WAY_BYTES
    return ready


def on_hosts(c: Cluster, nproc: int, args: Sequence[str], datasets: Sequence[Path],
              elastic: Elastic | None = None) -> Launcher:
    """Start ``sparsegnn ARGS --dataset D_i`` on every host i, the last host first (with
    the elastic c10d rendezvous the first host to join waits only ``last_call_s`` for
    the others, and host 0 can only be joined once its store is up)."""
    def launch(logs: Path, port: int) -> list[subprocess.Popen[bytes]]:
        order = reversed(range(len(c.hosts)))
        started = {i: torchrun(c, i, nproc, port, [*args, "--dataset", str(datasets[i])],
                               logs, elastic) for i in order}
        return [started[i] for i in range(len(c.hosts))]
    return launch


def host_errors(c: Cluster, logs: Path) -> list[list[str]]:
    return [rank_errors(logs / f"host{i}.err") for i in range(len(c.hosts))]


# ---------------------------------------------------------------------- scenarios
def host_cut_off(c: Cluster, args: Sequence[str], datasets: Sequence[Path], logs: Path,
                 timeout_s: float, nproc: int = 1) -> FaultOutcome:
    """Host 1's link goes down mid-run (``sparsegnn ARGS``, endless, host i reading
    ``datasets[i]``). Watched until every rank on every host has ended, both hosts'
    launches have exited and no process is left on either host, or ``timeout_s +
    EXIT_MARGIN_S``. (Without ``sparsegnn launch`` host 1's torchrun would stay about 15
    minutes, reading the unreachable store: :mod:`sparsegnn.torchrun`.)"""
    job = [*args, *ENDLESS, "--timeout", f"{timeout_s:g}"]
    agents, tried, again = start(c, on_hosts(c, nproc, job, datasets), _traffic(c, 1), logs)
    ranks = {r: p for i, a in enumerate(agents) for r, p in workers(c, i, a).items()}
    c.link_down(1)
    cut = time.monotonic()
    hosts = range(len(c.hosts))
    seen = watch(agents, ranks, cut, cut + timeout_s + EXIT_MARGIN_S, hosts, c, hosts)
    return FaultOutcome("host cut off", timeout_s, seen.ranks_gone, seen.exited,
                        [a.poll() for a in agents], host_errors(c, tried), tried, again,
                        seen.clear)


def rank_stalled(c: Cluster, args: Sequence[str], dataset: Path, logs: Path,
                 timeout_s: float, nproc: int = 2) -> FaultOutcome:
    """The last rank (on the last host) is stopped (SIGSTOP) mid-run for longer than
    ``--timeout``; watched until every other rank has ended and host 0's torchrun exited,
    or ``timeout_s + MARGIN_S``; then the stalled rank is continued and killed. (The
    stalled rank's own torchrun stops it with SIGTERM, which waits while it is stopped,
    and kills it after its own grace period: reported, not awaited.)"""
    job = [*args, *ENDLESS, "--timeout", f"{timeout_s:g}"]
    last = len(c.hosts) - 1
    launch = on_hosts(c, nproc, job, [dataset] * len(c.hosts))
    agents, tried, again = start(c, launch, _traffic(c, last), logs)
    ranks = {r: p for i, a in enumerate(agents) for r, p in workers(c, i, a).items()}
    stalled = max(ranks)
    os.kill(ranks[stalled], signal.SIGSTOP)
    stop = time.monotonic()
    try:
        survivors = {r: p for r, p in ranks.items() if r != stalled}
        seen = watch(agents, survivors, stop, stop + timeout_s + MARGIN_S, [0])
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(ranks[stalled], signal.SIGCONT)
            os.kill(ranks[stalled], signal.SIGKILL)
    return FaultOutcome(f"rank {stalled} stalled (SIGSTOP)", timeout_s, seen.ranks_gone,
                        seen.exited, [a.poll() for a in agents], host_errors(c, tried), tried,
                        again)


def _checkpointed(root: Path, world: int, epoch: int) -> Callable[[], bool]:
    """Ready once the newest complete checkpoint under ``root`` is one of ``world`` ranks
    at ``epoch`` or later (an elastic job may first form without a late host)."""
    def ready() -> bool:
        newest, _ = latest_complete(root)
        if newest is None or newest < epoch:
            return False
        manifest = json.loads((epoch_folder(root, newest) / MANIFEST).read_text())
        return int(manifest["layout"]["world_size"]) == world
    return ready


def reference_accuracy(args: Sequence[str]) -> float:
    """Test accuracy of ``sparsegnn ARGS --json`` in this process (one process, no fault)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*args, "--json"])
    if code != 0:
        raise ScenarioError(f"the uninterrupted run failed ({code}): {out.getvalue()[-2000:]}")
    return float(last_json(out.getvalue())["test_accuracy"])


def host_lost_elastic(c: Cluster, train: Sequence[str], dataset: Path, checkpoint: Path,
                      logs: Path, timeout_s: float, epochs: int, nproc: int = 1,
                      after_epoch: int = 10, elastic: Elastic | None = None
                      ) -> ElasticOutcome:
    """Elastic torchrun (``--nnodes 1:N``) trains ``sparsegnn TRAIN --algo 1d`` for
    ``epochs`` with ``--checkpoint CHECKPOINT --checkpoint-every 1 --resume``, every rank
    holding the whole graph ``dataset`` (a partitioned folder is cut for one grid and
    could not resume on another); the checkpoint folder is shared (namespaces share the
    file system). Once a complete checkpoint of the whole world at ``after_epoch`` or
    later exists, host 1 is lost: its link goes down, then everything on it is killed (a
    host that died, no goodbye on the wire). Host 0's first workers must notice within
    ``--timeout``; its agent restarts them on the smaller world, they resume from the
    newest complete checkpoint and finish. Watched until host 0's torchrun exits (at most
    :data:`.launch.RUN_S`); compared with the same training uninterrupted in one process.
    """
    elastic = elastic or Elastic()
    job = [*train, "--algo", "1d", "--epochs", str(epochs), "--patience", str(epochs),
           "--checkpoint",
           str(checkpoint), "--checkpoint-every", "1", "--resume", "--timeout",
           f"{timeout_s:g}", "--json", "--no-progress"]
    world = nproc * len(c.hosts)
    launch = on_hosts(c, nproc, job, [dataset] * len(c.hosts), elastic)
    agents, tried, again = start(c, launch, _checkpointed(checkpoint, world, after_epoch), logs)
    first = workers(c, 0, agents[0])
    c.link_down(1)
    c.kill(1)
    lost = time.monotonic()
    gone = watch(agents[:1], first, lost, lost + timeout_s + MARGIN_S, []).ranks_gone
    # The restarted workers start only after the rendezvous's last call, so the folder
    # now shows what the first workers left.
    complete, _ = latest_complete(checkpoint)
    done = max((e for e, _ in epoch_folders(checkpoint)), default=None)
    exited = watch(agents[:1], {}, lost, lost + RUN_S, [0]).exited
    code = agents[0].poll()
    outcome = ElasticOutcome(
        "host lost, elastic restart", timeout_s, gone, [exited[0], None], [code, None],
        host_errors(c, tried), tried, again, checkpoint_epoch=complete, epochs_done=done)
    if code == 0:
        result = last_json((tried / "host0.out").read_text())
        resumed = result.get("resumed_from") or {}
        outcome.world_sizes = (world, int(result["world_size"]))
        outcome.resumed_epoch = resumed.get("epoch")
        outcome.epochs_run = int(result["epochs_run"])
        outcome.accuracy = float(result["test_accuracy"])
    outcome.reference_accuracy = reference_accuracy(
        [*train, "--dataset", str(dataset), "--epochs", str(epochs), "--patience",
         str(epochs), "--no-progress"])
    return outcome
