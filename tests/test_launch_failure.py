"""Which rank a failed spawned run names: the one that failed first, also when its exit
code has not reached the launcher yet (the fork server relays exit codes, so a rank can
be gone, its report in its closed pipe, while only the peer that saw it go counts as
failed)."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest

from sparsegnn.distributed.runtime.launch import spawn
from sparsegnn.distributed.runtime.peers import PeerLostError
from sparsegnn.distributed.runtime.rank_failure import RankChannel, rank_failure
from sparsegnn.errors import DataFormatError


def _rank(rank: int, report: dict[str, object] | None, *, closed: bool) -> RankChannel:
    received = bytearray(b"E" + json.dumps(report).encode()) if report else bytearray()
    return RankChannel(rank, proc=None, reader=None, received=received, eof=closed)


def _report(at: float, kind: type, message: str) -> dict[str, object]:
    return {"at": at, "class": f"{kind.__module__}.{kind.__qualname__}", "kind": "user",
            "message": message, "traceback": ""}


LOST = _report(2.0, PeerLostError, "rank 0 of 2: rank 1 on host 127.0.0.1 has exited; "
               "the collective failed: Connection reset by peer")
REFUSED = _report(1.0, DataFormatError, "part/rank1.npz: fingerprint of another graph")


def test_the_rank_that_failed_first_is_named_before_its_exit_code_arrives() -> None:
    ranks = [_rank(0, LOST, closed=True), _rank(1, REFUSED, closed=True)]
    err = rank_failure(ranks, failed=[0], codes=[1, None], stalled=[], silence_s=0.0)
    assert isinstance(err, DataFormatError)
    assert str(err) == "rank 1 of 2: part/rank1.npz: fingerprint of another graph"


@pytest.mark.parametrize("closed", [False, True])
def test_a_rank_still_writing_or_without_a_report_is_not_read(closed: bool) -> None:
    """An open pipe may hold half a report; a closed one without an error has none."""
    reader, writer = multiprocessing.Pipe(duplex=False)
    other = _rank(1, REFUSED if not closed else None, closed=closed)
    other.reader = reader
    if not closed:
        other.received = other.received[:20]  # half-written, the writer still open
    try:
        err = rank_failure([_rank(0, LOST, closed=True), other], failed=[0], codes=[1, None],
                       stalled=[], silence_s=0.0)
    finally:
        reader.close()
        writer.close()
    assert isinstance(err, PeerLostError) and "has exited" in str(err)


def _cpp_log_level() -> str | None:
    return os.environ.get("TORCH_CPP_LOG_LEVEL")


@pytest.mark.distributed
@pytest.mark.skipif("TORCH_CPP_LOG_LEVEL" in os.environ, reason="the user chose a level")
def test_ranks_keep_torchs_cpp_warnings_off_stderr() -> None:
    """A rank that outlives the failed one hosting the store must not add torch's C++
    warning (TCPStore "Connection reset by peer") under the one-line error (seen under
    load in tests/hostile/test_hostile_launch.py)."""
    assert spawn(_cpp_log_level, 2, wall_timeout_s=60) == ["ERROR", "ERROR"]
