"""Several "hosts" on one Linux machine, made of network namespaces, for multi-host tests.

Distributed training across machines fails in ways one machine never shows: a rank must
pick the right interface, rendezvous over a routed address, and survive (or report) a
host that drops off the network. A :class:`Cluster` gives each host its own network
namespace with one veth link to a private bridge, so processes started on different hosts
talk over a real (virtual) wire whose byte counters can be read and whose link can be
cut, while the file system stays shared, and the CPUs too unless each host is given its
own (``own_cpus``).

Layout of ``Cluster(n_hosts=2)``, every name carrying a random token so that runs never
collide::

    root namespace:  bridge sgbr<tok>  <- sg<tok>v0, sg<tok>v1   (no address)
    namespace sg<tok>h0:  lo, sg<tok>p0  10.231.<k>.1/24
    namespace sg<tok>h1:  lo, sg<tok>p1  10.231.<k>.2/24

The addresses exist only inside the namespaces, so traffic never leaves them. Everything
is removed on exit, also when the body raises, and processes still running on a host are
killed first (a process keeps its namespace alive). A marker file per cluster names its
owner's pid, so :func:`sweep_stale` can remove what a crashed run left without touching
a live cluster of another test process. Needs root and ``ip`` (iproute2); ``tc`` only for
bandwidth shaping.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from sparsegnn.distributed.runtime.affinity import rank_cpus

_MARKERS = Path("/run/sparsegnn-netns")  # one file per live cluster: its owner's pid
_TOKEN = r"[0-9a-f]{6}"
_NAMESPACE = re.compile(rf"^sg({_TOKEN})h\d+$")
_LINK = re.compile(rf"^sg(?:br({_TOKEN})|({_TOKEN})v\d+)$")
_KILL_WAIT_S = 10.0


@dataclass(frozen=True)
class Host:
    """One host: its namespace, the veth end inside it (``ifname``, the one to hand to
    ``GLOO_SOCKET_IFNAME``), the end on the bridge (``peer``) and its IPv4 address."""

    index: int
    netns: str
    ifname: str
    peer: str
    address: str


@dataclass(frozen=True)
class Counters:
    """Bytes through a host's interface as the kernel counts them (Ethernet frames: payload
    plus TCP/IP/Ethernet headers, ACKs and ARP included)."""

    tx_bytes: int
    rx_bytes: int

    def __sub__(self, before: Counters) -> Counters:
        return Counters(self.tx_bytes - before.tx_bytes, self.rx_bytes - before.rx_bytes)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


@functools.cache
def available() -> tuple[bool, str]:
    """Whether clusters can be made here, and if not why: root, ``ip`` on the path, and a
    throwaway namespace holding a veth pair and a bridge can be created and removed."""
    if os.geteuid() != 0:
        return False, "network namespaces need root"
    if shutil.which("ip") is None:
        return False, "the ip command (iproute2) is not installed"
    token = secrets.token_hex(3)
    probe = f"sg{token}h0"
    _MARKERS.mkdir(parents=True, exist_ok=True)
    marker = _MARKERS / token
    marker.write_text(str(os.getpid()))
    try:
        inside = ("-n", probe, "link", "add", "name")
        for args in (("netns", "add", probe),
                     (*inside, "va", "type", "veth", "peer", "name", "vb"),
                     (*inside, "br", "type", "bridge")):
            done = _ip(*args, check=False)
            if done.returncode != 0:
                return False, f"`ip {' '.join(args)}` failed: {done.stderr.strip()}"
        return True, ""
    finally:
        _ip("netns", "del", probe, check=False)
        marker.unlink(missing_ok=True)


class Cluster:
    """``n_hosts`` namespaces on one bridge; a context manager that always tears down.

    ``rate`` (a tc rate such as ``"1gbit"``) shapes every link in both directions with a
    token bucket on the host's veth (its egress) and on the bridge's end (the host's
    ingress); ``burst`` and ``latency`` are tbf's bucket size and queueing bound.

    ``own_cpus`` gives each host its own CPUs, as separate machines have: what a host
    runs is started under ``taskset`` on the host's share (:func:`host_cpus`). Without
    it every host's processes share all of this machine's CPUs, so a rank blocked on its
    link also waits for other hosts' compute, which no real cluster does.
    """

    def __init__(self, n_hosts: int, rate: str | None = None, *, burst: str = "256kb",
                 latency: str = "100ms", own_cpus: bool = False) -> None:
        if not 1 <= n_hosts <= 253:
            raise ValueError(f"n_hosts must be 1..253, got {n_hosts}")
        self.token = secrets.token_hex(3)
        self.bridge = f"sgbr{self.token}"
        subnet = secrets.randbelow(256)
        self.hosts = [
            Host(i, f"sg{self.token}h{i}", f"sg{self.token}p{i}", f"sg{self.token}v{i}",
                 f"10.231.{subnet}.{i + 1}")
            for i in range(n_hosts)
        ]
        self.shaping = None if rate is None else ("rate", rate, "burst", burst,
                                                  "latency", latency)
        self.cpus = host_cpus(n_hosts) if own_cpus else None
        self._procs: list[subprocess.Popen[Any]] = []

    def __enter__(self) -> Cluster:
        _MARKERS.mkdir(parents=True, exist_ok=True)
        (_MARKERS / self.token).write_text(str(os.getpid()))
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _build(self) -> None:
        """Bridge, then per host: namespace, veth pair, address, links up, shaping. IPv6 is
        off on every link made here: its autoconfiguration chatter (router and neighbour
        solicitations, multicast reports) would otherwise show in the byte counters."""
        _ip("link", "add", self.bridge, "type", "bridge")
        _no_ipv6(self.bridge)
        _ip("link", "set", self.bridge, "up")
        for h in self.hosts:
            _ip("netns", "add", h.netns)
            _run_in(h.netns, ["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
                              "net.ipv6.conf.default.disable_ipv6=1"])
            _ip("link", "add", h.peer, "type", "veth", "peer", "name", h.ifname,
                "netns", h.netns)
            _no_ipv6(h.peer)
            _ip("link", "set", h.peer, "master", self.bridge, "up")
            _ip("-n", h.netns, "addr", "add", f"{h.address}/24", "dev", h.ifname)
            _ip("-n", h.netns, "link", "set", h.ifname, "up")
            _ip("-n", h.netns, "link", "set", "lo", "up")
            if self.shaping is not None:
                subprocess.run(self._tbf(h.peer), capture_output=True, check=True)
                _run_in(h.netns, self._tbf(h.ifname))

    def _tbf(self, dev: str) -> list[str]:
        assert self.shaping is not None
        return ["tc", "qdisc", "add", "dev", dev, "root", "tbf", *self.shaping]

    def close(self) -> None:
        """Kill what runs on the hosts, then remove namespaces, veths and the bridge."""
        try:
            _destroy(self.token, [h.netns for h in self.hosts],
                     [h.peer for h in self.hosts] + [self.bridge])
        finally:
            for proc in self._procs:
                _reap(proc)

    # ------------------------------------------------------------------ hosts
    def popen(self, i: int, argv: Sequence[str], env: Mapping[str, str] | None = None,
              **kwargs: Any) -> subprocess.Popen[Any]:
        """``argv`` started on host ``i`` (``ip netns exec``, on the host's own CPUs where it
        has them) in a session of its own, with this process's environment updated by
        ``env``; killed at the latest on exit."""
        pin = [] if self.cpus is None else [
            "taskset", "-c", ",".join(map(str, sorted(self.cpus[i])))]
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.hosts[i].netns, *pin, *argv],
            env={**os.environ, **(env or {})}, start_new_session=True, **kwargs,
        )
        self._procs.append(proc)
        return proc

    def counters(self, i: int) -> Counters:
        """Host ``i``'s interface byte counters, read inside its namespace."""
        h = self.hosts[i]
        stats = f"/sys/class/net/{h.ifname}/statistics"
        out = _run_in(h.netns, ["cat", f"{stats}/tx_bytes", f"{stats}/rx_bytes"])
        tx, rx = (int(v) for v in out.split())
        return Counters(tx, rx)

    def link_down(self, i: int) -> None:
        """Cut host ``i`` off: its link goes down at the bridge, as if its cable were
        pulled at the switch. Its packets are dropped silently; no socket is reset."""
        _ip("link", "set", self.hosts[i].peer, "down")

    def link_up(self, i: int) -> None:
        """Plug host ``i`` back in after :meth:`link_down`."""
        _ip("link", "set", self.hosts[i].peer, "up")

    def kill(self, i: int) -> None:
        """SIGKILL everything running on host ``i`` and wait until it is gone (a launch
        that cannot finish, before its host is used again)."""
        _kill_all_in(self.hosts[i].netns)

    def pids(self, i: int) -> list[int]:
        """Processes living on host ``i`` (to show that nothing outlived a job)."""
        return [int(p) for p in _ip("netns", "pids", self.hosts[i].netns).stdout.split()]

    def qdisc(self, i: int) -> str:
        """``tc qdisc show`` of host ``i``'s interface (to see the shaping in place)."""
        h = self.hosts[i]
        return _run_in(h.netns, ["tc", "qdisc", "show", "dev", h.ifname])


def host_cpus(n_hosts: int) -> list[set[int]]:
    """Each host's CPUs: an equal disjoint share of this process's, as
    :func:`~sparsegnn.distributed.runtime.affinity.rank_cpus` shares them between local ranks
    (whole cores first); hosts share CPUs round robin only where there are more hosts
    than CPUs, and all of them where that function binds nothing (one host, one CPU,
    ``SPARSEGNN_BIND_RANKS=0``)."""
    allowed = os.sched_getaffinity(0)
    return rank_cpus(n_hosts, allowed) or [set(allowed)] * n_hosts


def _no_ipv6(link: str) -> None:
    """Switch IPv6 off on a link of the root namespace (before it goes up)."""
    Path(f"/proc/sys/net/ipv6/conf/{link}/disable_ipv6").write_text("1")


def _run_in(netns: str, argv: Sequence[str]) -> str:
    """Run a short command on a host; its stdout (``check``: a failure raises)."""
    done = subprocess.run(["ip", "netns", "exec", netns, *argv], capture_output=True,
                          text=True, check=True)
    return done.stdout


def _destroy(token: str, namespaces: Sequence[str], links: Sequence[str]) -> None:
    """Remove one cluster's namespaces (after killing their processes) and links, every
    step tried even when an earlier one failed; raise if anything is left. Missing pieces
    are fine: a build may have stopped halfway."""
    problems = []
    for netns in namespaces:
        try:
            _kill_all_in(netns)
        except RuntimeError as err:
            problems.append(str(err))
        _ip("netns", "del", netns, check=False)
    for link in links:
        _ip("link", "del", link, check=False)
    left = [n for n in namespaces if n in _namespaces()] + [n for n in links if n in _links()]
    if left:
        problems.append(f"could not remove {left}")
    if problems:
        raise RuntimeError("; ".join(problems))
    (_MARKERS / token).unlink(missing_ok=True)


def _kill_all_in(netns: str) -> None:
    """SIGKILL every process living in ``netns`` and wait until they are gone: a process
    keeps a deleted namespace (and its veth) alive. Killed again each round, since a
    launcher may have started a child between listing and killing."""
    deadline = time.monotonic() + _KILL_WAIT_S
    while pids := _ip("netns", "pids", netns, check=False).stdout.split():
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {pids} in {netns} survived SIGKILL")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.05)


def _reap(proc: subprocess.Popen[Any]) -> None:
    """Collect a started process (killed already or exited) so no zombie or unclosed pipe
    remains."""
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=_KILL_WAIT_S)


def _namespaces() -> set[str]:
    return {line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line}


def _links() -> set[str]:
    out = _ip("-o", "link", "show").stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


def _owner_alive(token: str) -> bool:
    """Whether the process that made cluster ``token`` still runs (no marker: it does not)."""
    try:
        pid = int((_MARKERS / token).read_text())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def sweep_stale() -> list[str]:
    """Remove the clusters whose owner died (a crashed or killed test run): only names
    this module makes (``sg<token>h<i>``, ``sgbr<token>``, ``sg<token>v<i>``), and only
    tokens with no live owner. Returns the removed tokens."""
    namespaces: dict[str, list[str]] = {}
    links: dict[str, list[str]] = {}
    for name in _namespaces():
        if m := _NAMESPACE.fullmatch(name):
            namespaces.setdefault(m.group(1), []).append(name)
    for name in _links():
        if m := _LINK.fullmatch(name):
            links.setdefault(m.group(1) or m.group(2), []).append(name)
    stale = sorted(t for t in namespaces.keys() | links.keys() if not _owner_alive(t))
    for token in stale:
        _destroy(token, namespaces.get(token, []), links.get(token, []))
    return stale
