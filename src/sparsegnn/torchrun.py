"""torchrun under a supervisor, so that a host cut off from the job ends on its own.

Why this exists: torchrun's agent talks to the rendezvous store (on the first host) with
c10d's ``TCPStore`` client, and some of its calls (``compare_set``, and the reply to
cancelling a timed-out ``wait``) read their answer with no timeout. When the store's host
becomes unreachable (a cut link, a dead machine: no reset ever arrives), such a read
lasts until the kernel gives the connection up, about 15 minutes with Linux's default
``net.ipv4.tcp_retries2 = 15``. The agent makes these calls all the time (its monitor
loop asks the rendezvous whether nodes wait to join; a keep-alive thread sends heartbeats;
shutting down closes the rendezvous), so on a cut-off host the workers end within
``--timeout`` but torchrun stays, reaping nothing and exiting late or never. No
``--rdzv-conf`` option bounds those reads (``read_timeout`` bounds only the ``wait``).

:func:`supervise` runs torchrun as its child, in a process group of its own, and watches
the workers it starts (its children). Once one of them has ended and torchrun is still
there ``grace_s`` later, it asks the rendezvous store whether it can be reached (a TCP
connection within ``probe_s``). Only when it cannot, which means torchrun cannot finish
anything it is doing, it kills torchrun and every process it started and reports why. A
store that answers or refuses leaves torchrun alone: an elastic agent re-forming the job
after a lost host (its store is reachable), an agent in its exit barrier waiting for the
other hosts' workers, or one whose store host has exited (its own calls fail at once).

A worker stopped by a signal (SIGSTOP) cannot take the SIGTERM torchrun stops it with
once another worker has failed, and torchrun waits a fixed 30 s before it SIGKILLs it; so
``grace_s`` after a worker ended, stopped workers are continued (SIGCONT) and take it.

It imports neither torch nor :mod:`sparsegnn.distributed` (which does): it lives for the
whole job on every host, next to the ranks, and should cost them no memory or start-up.

Also: the supervisor is the job's subreaper, so workers torchrun leaves behind (it was
killed, or it exited past them) come back to it and are killed; torchrun dies with the
supervisor (``PR_SET_PDEATHSIG``); SIGTERM, SIGINT and SIGHUP are passed on to torchrun,
which stops its workers, and whatever is still there ``grace_s`` later is killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Literal

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_PR_SET_CHILD_SUBREAPER = 36
_C10D_PORT = 29400  # torchrun's default port of a c10d rendezvous endpoint
_STATIC_PORT = 29500  # and of --master-port (static rendezvous)
# torchrun's options that take no value; every other option takes one.
_FLAGS = frozenset({"-h", "--help", "--standalone", "-m", "--module", "--no-python",
                    "--no_python", "--run-path", "--run_path", "--virtual-local-rank",
                    "--virtual_local_rank"})
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_KILL_WAIT_S = 10.0

Reach = Literal["answers", "refused", "unreachable"]


@dataclass(frozen=True)
class Endpoint:
    """Where torchrun's rendezvous store listens."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class LaunchRequest:
    """One torchrun run: its arguments (what follows ``torchrun``) and the supervisor's
    bounds. ``grace_s``: how long torchrun may outlive its first ended worker before the
    store is probed (a healthy agent reacts within its monitor interval, 0.1 s);
    ``probe_s``: how long a connection to the store may take."""

    torchrun_args: tuple[str, ...]
    grace_s: float = 5.0
    probe_s: float = 3.0
    poll_s: float = 0.2
    python: str = sys.executable

    @property
    def argv(self) -> list[str]:
        return [self.python, "-m", "torch.distributed.run", *self.torchrun_args]

    @property
    def endpoint(self) -> Endpoint | None:
        return rendezvous_endpoint(self.torchrun_args, os.environ)


@dataclass(frozen=True)
class LaunchOutcome:
    """How the run ended: ``code`` is torchrun's exit status (128 + N for a signal), or
    2 (sparsegnn's status for an error it names) when the supervisor killed it;
    ``killed`` says why it did (None: torchrun exited by itself); ``leftovers`` are
    processes of the job found after torchrun had gone, killed; ``continued`` the
    stopped workers it continued once the job had ended."""

    code: int
    killed: str | None = None
    leftovers: tuple[int, ...] = ()
    continued: tuple[int, ...] = ()  # stopped workers continued (see _continue_stopped)


# ---------------------------------------------------------------------- arguments
def torchrun_options(args: Sequence[str]) -> dict[str, str]:
    """torchrun's own options in ``args`` (``--name value`` or ``--name=value``), up to
    the training script; the names spelled with dashes."""
    found: dict[str, str] = {}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        name, eq, value = args[i].partition("=")
        if eq or name in _FLAGS:
            i += 1
        else:
            value = args[i + 1] if i + 1 < len(args) else ""
            i += 2
        found[name.replace("_", "-")] = value
    return found


def _split_endpoint(text: str, default_port: int) -> Endpoint:
    """``host``, ``host:port``, ``[v6]:port``, as torchrun reads them."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    return Endpoint(host or "127.0.0.1", int(port) if port else default_port)


def rendezvous_endpoint(args: Sequence[str], env: dict[str, str] | os._Environ[str]
                        ) -> Endpoint | None:
    """The store torchrun ``args`` will use (its ``PET_*`` variables count too, as in
    torchrun); None for ``--standalone``, whose store is on this host."""
    opts = torchrun_options(args)

    def option(name: str) -> str | None:
        return opts.get(name) or env.get("PET_" + name[2:].upper().replace("-", "_"))

    if "--standalone" in opts or env.get("PET_STANDALONE"):
        return None
    backend = option("--rdzv-backend") or "static"
    endpoint = option("--rdzv-endpoint")
    if backend != "static" and endpoint:
        return _split_endpoint(endpoint, _C10D_PORT)
    if endpoint:
        return _split_endpoint(endpoint, _STATIC_PORT)
    port = option("--master-port")
    return Endpoint(option("--master-addr") or "127.0.0.1",
                    int(port) if port else _STATIC_PORT)


# ---------------------------------------------------------------------- processes
def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of ``pid``; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), fields[0]


def _table() -> dict[int, tuple[int, str]]:
    """Every process of this pid namespace: pid -> (parent pid, state)."""
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            out[int(entry.name)] = stat
    return out


def children(pid: int, table: dict[int, tuple[int, str]], live: bool = True) -> set[int]:
    """``pid``'s children (without zombies when ``live``)."""
    return {p for p, (ppid, state) in table.items()
            if ppid == pid and not (live and state in "ZX")}


def descendants(pid: int, table: dict[int, tuple[int, str]]) -> set[int]:
    """Every process below ``pid``, zombies included."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        kids = children(todo.pop(), table, live=False) - found
        found |= kids
        todo.extend(kids)
    return found


@dataclass
class WorkerWatch:
    """The workers of torchrun's current generation, since when one has ended, and when
    the store was last probed about it.

    Workers that appear start a new generation (the first start, or an elastic
    restart), which clears both; a worker of the generation gone sets the end."""

    seen: set[int] = field(default_factory=set)
    ended_at: float | None = None
    probed_at: float | None = None

    def update(self, live: set[int], now: float) -> None:
        if live - self.seen:
            self.seen = set(live)
            self.ended_at = self.probed_at = None
        elif self.seen - live and self.ended_at is None:
            self.ended_at = now

    def probe_due(self, now: float, grace_s: float) -> bool:
        """A worker ended ``grace_s`` ago or more, and no probe was made for ``grace_s``."""
        last = self.probed_at if self.probed_at is not None else self.ended_at
        return last is not None and now - last >= grace_s


def probe(endpoint: Endpoint, timeout_s: float) -> Reach:
    """Whether the store at ``endpoint`` takes a TCP connection within ``timeout_s``.

    No answer (or no route) means its host cannot be reached; a refusal means the host
    is up and the store gone, which the agent's own calls learn at once."""
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s):
            return "answers"
    except ConnectionRefusedError:
        return "refused"
    except OSError:
        return "unreachable"


def _prctl(option: int, value: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def _die_with_parent() -> None:
    """In torchrun, before exec: SIGKILL when the supervisor dies."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def kill_tree(pids: set[int], spare: int | None = None) -> set[int]:
    """SIGKILL ``pids`` and everything below them, again until nothing is left (a
    process may start another between listing and killing); the killed pids. Stopped
    processes die too (SIGKILL needs no SIGCONT). Orphans that came back to this process
    are collected, all but ``spare`` (torchrun, whose Popen waits for it)."""
    killed: set[int] = set()
    deadline = time.monotonic() + _KILL_WAIT_S
    while time.monotonic() < deadline:
        table = _table()
        below = set().union(*(descendants(p, table) for p in pids)) if pids else set()
        targets = {p for p in pids | below if p in table and table[p][1] not in "ZX"}
        if not targets:
            break
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed |= targets
        pids = pids | below
        time.sleep(0.05)
    _reap_orphans(spare)
    return killed


def _reap_orphans(spare: int | None) -> None:
    """Collect this process's dead children other than ``spare``: the job's processes
    that came back to their subreaper."""
    for pid in children(os.getpid(), _table(), live=False) - {spare}:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


# ---------------------------------------------------------------------- supervising
class _Signals:
    """SIGTERM, SIGINT and SIGHUP passed on to torchrun; the first one received is kept
    (the supervisor's exit status then says it)."""

    def __init__(self, agent: subprocess.Popen[bytes]) -> None:
        self.agent = agent
        self.received: int | None = None
        self.at: float | None = None
        self._old = {s: signal.signal(s, self._handle) for s in _FORWARDED}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received, self.at = signum, time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            self.agent.send_signal(signum)

    def restore(self) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)


def _status(code: int) -> int:
    """Popen's return code as a shell reports it (128 + N for signal N)."""
    return 128 - code if code < 0 else code


def _stuck(request: LaunchRequest, watch: WorkerWatch, now: float,
           reach: Callable[[Endpoint, float], Reach]) -> str | None:
    """Why torchrun must be killed now, or None: a worker ended ``grace_s`` ago or more
    and the rendezvous store cannot be reached."""
    endpoint = request.endpoint
    if endpoint is None or not watch.probe_due(now, request.grace_s):
        return None
    watch.probed_at = now
    if reach(endpoint, request.probe_s) != "unreachable":
        return None
    assert watch.ended_at is not None
    return (f"torchrun outlived this host's workers by {now - watch.ended_at:.0f} s and its "
            f"rendezvous store {endpoint} is unreachable (no connection within "
            f"{request.probe_s:g} s), so it would wait for it as long as the kernel keeps "
            "the connection (about 15 minutes); killed torchrun and its workers")


def _continue_stopped(watch: WorkerWatch, workers: set[int],
                      table: dict[int, tuple[int, str]], now: float, grace_s: float
                      ) -> set[int]:
    """SIGCONT the workers stopped by a signal (state ``T``) once another worker has
    ended ``grace_s`` ago: torchrun then stops them with SIGTERM, which a stopped process
    only takes once continued, so it would wait its fixed 30 s and SIGKILL them. (A
    process stopped under a debugger, state ``t``, is left alone.)"""
    if watch.ended_at is None or now - watch.ended_at < grace_s:
        return set()
    stopped = {p for p in workers if table.get(p, (0, ""))[1] == "T"}
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    return stopped


def supervise(request: LaunchRequest,
              reach: Callable[[Endpoint, float], Reach] = probe) -> LaunchOutcome:
    """Run torchrun with ``request.torchrun_args`` until it ends, killing it (and every
    process it started) when it outlives its workers waiting on an unreachable store."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    agent = subprocess.Popen(request.argv, process_group=0, preexec_fn=_die_with_parent)
    signals = _Signals(agent)
    watch = WorkerWatch()
    job: set[int] = set()  # every process torchrun started, for what it leaves behind
    continued: set[int] = set()
    try:
        while agent.poll() is None:
            now = time.monotonic()
            table = _table()
            job |= descendants(agent.pid, table)
            if signals.at is not None and now - signals.at > request.grace_s:
                kill_tree({agent.pid}, spare=agent.pid)
                break
            live = children(agent.pid, table)
            watch.update(live, now)
            continued |= _continue_stopped(watch, live, table, now, request.grace_s)
            why = _stuck(request, watch, now, reach)
            if why is not None:
                kill_tree({agent.pid}, spare=agent.pid)
                agent.wait()
                return LaunchOutcome(2, why, continued=tuple(sorted(continued)))
            time.sleep(request.poll_s)
        code = _status(agent.wait())
        # Only processes that came back to this subreaper: a pid of the job that is not
        # our child any more may belong to someone else by now.
        left = kill_tree(job & children(os.getpid(), _table()))
        if signals.received is not None:
            code = 128 + signals.received
        return LaunchOutcome(code, None, tuple(sorted(left)), tuple(sorted(continued)))
    finally:
        signals.restore()
        if agent.poll() is None:  # an exception of our own: take the job along
            kill_tree({agent.pid}, spare=agent.pid)
            agent.wait()
