"""Who the other ranks are, and which of them a failed collective lost.

A collective that fails across hosts says little about why. gloo reports ``Timed out
waiting 10000ms for recv operation to complete`` when a host is cut off or a rank is
stopped, and at best the address of a socket that closed, which may belong to a peer that
merely gave up on a third rank first. So at the start of a session every rank publishes
its rank, host name, the address gloo uses and the port of a small responder thread; when
a collective fails, the rank asks every peer's responder whether it is still there:

* no TCP connection within :data:`PROBE_S`: the host is unreachable (cut off, down);
* connected but no answer: the rank is stopped or stuck (the kernel accepts connections
  for a stopped process, but its thread cannot answer);
* refused: the rank has exited, its host is up;
* answered: alive (a rank blocked in a collective keeps answering: the thread runs while
  the collective has released the GIL).

The failure is then raised again as :class:`PeerLostError`, one line naming the hosts and
ranks lost, silent ones (the likely cause) before exited ones (often the peers that gave
up first). Probing costs nothing until a collective fails.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

from sparsegnn.distributed.runtime.rank_failure import RankFailedError

PROBE_S = 3.0  # how long a peer may take to accept a probe and to answer it
_PING, _PONG = b"?", b"!"
_SIOCGIFADDR = 0x8915  # <linux/sockios.h>: an interface's IPv4 address
# gloo names the far end of a failed socket as "[10.0.0.2]:41234".
_PEER_ADDRESS = re.compile(r"\[([0-9a-fA-F.:]+)\]:\d+")
# gloo prefixes its messages with its source location: "[/path/gloo/.../pair.cc:598] ".
_SOURCE = re.compile(r"^\[[^\]]*\.(?:cc|cpp|h):\d+\]\s*")

State = Literal["alive", "unreachable", "silent", "exited"]


class PeerLostError(RankFailedError):
    """A collective failed because a peer host or rank went away; the message names the
    host (its address) and ranks, and how they were lost."""


@dataclass(frozen=True)
class Peer:
    """One rank of the job as it announced itself when the session started."""

    rank: int
    hostname: str
    address: str  # the address its collectives use
    port: int  # its responder's


class Responder:
    """A thread answering probes on ``address``; :meth:`close` stops it."""

    def __init__(self, address: str) -> None:
        self._sock = socket.create_server((address, 0))
        self.port = int(self._sock.getsockname()[1])
        threading.Thread(target=self._serve, daemon=True,
                         name="sparsegnn-peer-responder").start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:  # closed
                return
            with conn:
                conn.settimeout(PROBE_S)
                with contextlib.suppress(OSError):
                    if conn.recv(1) == _PING:
                        conn.sendall(_PONG)

    def close(self) -> None:
        """Stop answering (shutdown wakes the blocked ``accept``; close alone may not)."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()


def own_address(master: str) -> str:
    """The address this rank's collectives use: that of ``GLOO_SOCKET_IFNAME`` when set
    (gloo binds to it), else the one the kernel routes towards the job's master."""
    ifname = os.environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        if ifname:
            packed = struct.pack("256s", ifname[:15].encode())
            return socket.inet_ntoa(fcntl.ioctl(s.fileno(), _SIOCGIFADDR, packed)[20:24])
        try:
            s.connect((master, 9))  # a UDP "connect" sends nothing; it only picks a route
        except OSError:
            return "127.0.0.1"
        return str(s.getsockname()[0])


def probe(peer: Peer) -> State:
    """Ask ``peer``'s responder whether it is there (see the module doc)."""
    try:
        conn = socket.create_connection((peer.address, peer.port), timeout=PROBE_S)
    except ConnectionRefusedError:
        return "exited"
    except OSError:  # timed out, no route to host, network unreachable
        return "unreachable"
    with conn:
        try:
            conn.sendall(_PING)
            return "alive" if conn.recv(1) == _PONG else "exited"
        except TimeoutError:
            return "silent"
        except OSError:  # reset: the rank died while we asked
            return "exited"


def probe_all(peers: Sequence[Peer]) -> dict[int, State]:
    """Every peer's state by rank, probed in parallel (at most ~2 x :data:`PROBE_S`)."""
    if not peers:
        return {}
    with ThreadPoolExecutor(max_workers=min(32, len(peers))) as pool:
        return dict(zip((p.rank for p in peers), pool.map(probe, peers), strict=True))


def is_collective_failure(err: BaseException) -> bool:
    """Whether ``err`` is a backend's report of a failed or timed-out collective."""
    text = str(err)
    return isinstance(err, RuntimeError) and ("gloo" in text or "NCCL" in text)


def describe_loss(err: BaseException, me: int, peers: Sequence[Peer],
                  states: dict[int, State]) -> str | None:
    """The one line naming whom ``err`` lost, from the probed ``states``; ``None`` when
    every peer answered (the failure is not a lost peer)."""
    by_rank = {p.rank: p for p in peers}
    label = _host_labels(peers)
    silent = [r for r, s in sorted(states.items()) if s in ("unreachable", "silent")]
    exited = [r for r, s in sorted(states.items()) if s == "exited"]
    if silent:
        parts = _silent_parts(silent, states, by_rank, label, me)
    elif exited:
        named = _named_address(err)
        blamed = [r for r in exited if by_rank[r].address == named] or exited
        parts = [f"{_ranks(rs)} on {host} {'have' if len(rs) > 1 else 'has'} exited"
                 for host, rs in _by_host(blamed, by_rank, label).items()]
    else:
        return None
    # Its first sentence: gloo goes on with advice ("This is typically caused by ...").
    cause = _SOURCE.sub("", " ".join(str(err).split())).split(". ", 1)[0]
    return f"rank {me} of {len(peers)}: {'; '.join(parts)}; the collective failed: {cause}"


def _silent_parts(silent: list[int], states: dict[int, State], by_rank: dict[int, Peer],
                  label: dict[str, str], me: int) -> list[str]:
    """A whole host unreachable reads as the host lost; a rank that accepts a connection
    but does not answer reads as that rank stopped."""
    parts = []
    for host, ranks in _by_host(silent, by_rank, label).items():
        unreachable = [r for r in ranks if states[r] == "unreachable"]
        on_host = [p.rank for p in by_rank.values() if label[p.address] == host and p.rank != me]
        if unreachable and unreachable == on_host:
            parts.append(f"lost contact with {host} ({_ranks(unreachable)}): no connection "
                         f"within {PROBE_S:.0f} s")
            continue
        if unreachable:
            parts.append(f"{_ranks(unreachable)} on {host} cannot be reached")
        stopped = [r for r in ranks if states[r] == "silent"]
        if stopped:
            parts.append(f"{_ranks(stopped)} on {host} "
                         f"{'do' if len(stopped) > 1 else 'does'} not respond (stopped or "
                         f"stuck: no answer within {PROBE_S:.0f} s)")
    return parts


def _host_labels(peers: Sequence[Peer]) -> dict[str, str]:
    """``host 10.0.0.2`` per address, with the host name in front when the job's hosts
    have different names (namespaces on one machine share theirs)."""
    named = len({p.hostname for p in peers}) > 1
    return {p.address: f"host {p.hostname} ({p.address})" if named else f"host {p.address}"
            for p in peers}


def _by_host(ranks: list[int], by_rank: dict[int, Peer],
             label: dict[str, str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for r in ranks:
        out.setdefault(label[by_rank[r].address], []).append(r)
    return out


def _ranks(ranks: Sequence[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _named_address(err: BaseException) -> str | None:
    """The peer address gloo put in its message, if any."""
    found = _PEER_ADDRESS.search(str(err))
    return None if found is None else found.group(1)


# ---------------------------------------------------------------------- this process
_TABLE: list[Peer] = []
_ME: list[int] = []
_RESPONDER: list[Responder] = []


def publish(rank: int, master: str, gather: Callable[[Peer], list[Peer]]) -> None:
    """Start this rank's responder and learn every rank's :class:`Peer` through
    ``gather`` (every rank's object, in rank order, on every rank: a collective)."""
    address = own_address(master)
    responder = Responder(address)
    me = Peer(rank, socket.gethostname(), address, responder.port)
    table = gather(me)
    _RESPONDER[:] = [responder]
    _TABLE[:] = table
    _ME[:] = [rank]


def forget() -> None:
    """Stop answering probes and drop the peer table (the session ended)."""
    for responder in _RESPONDER:
        responder.close()
    _RESPONDER.clear()
    _TABLE.clear()
    _ME.clear()


def lost_peer_error(err: BaseException) -> PeerLostError | None:
    """``err`` as a :class:`PeerLostError` naming whom it lost, or ``None`` when it is no
    collective failure, no session announced its peers, or every peer still answers."""
    if not _TABLE or not is_collective_failure(err):
        return None
    others = [p for p in _TABLE if p.rank != _ME[0]]
    line = describe_loss(err, _ME[0], _TABLE, probe_all(others))
    return None if line is None else PeerLostError(line)


@contextlib.contextmanager
def lost_peers_named() -> Iterator[None]:
    """Raise a collective that failed because a peer went away as :class:`PeerLostError`
    (the original chained); any other error passes unchanged."""
    try:
        yield
    except RuntimeError as err:
        lost = lost_peer_error(err)
        if lost is None:
            raise
        raise lost from err
