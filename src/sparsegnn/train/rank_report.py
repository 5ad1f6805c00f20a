"""What a rank of distributed training measured, and the job's summary of the bytes.

:class:`RankReport` holds one rank's bytes per phase of its last epoch beside the comm
model's prediction, its memory, its communication waits and its checkpoint notes;
:class:`EpochMeter` takes them from the communicator's counters epoch by epoch;
:func:`comm_summary` turns every rank's report into the ``comm`` section of the JSON
result. It is apart from the training itself (:mod:`sparsegnn.train.rank_train`) because
it is the accounting: it reads counters and predictions and never changes what a rank
computes.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from sparsegnn.distributed import ByteCounts, Communicator, SpmmCall
from sparsegnn.distributed.ops.sparse_comm import SparseRowOperator
from sparsegnn.train.dist_checkpoint import Resumed
from sparsegnn.train.fullgraph import EpochStats
from sparsegnn.train.memory import RankMemory


@dataclass
class RankReport:
    """What one rank measured in one epoch (the last), per phase: ``sent``/``recv`` totals and
    per-collective ``<collective>_sent``/``_recv``, next to the model's ``sent``/``recv``."""

    rank: int
    coords: tuple[int, int, int]
    epoch_bytes: ByteCounts
    constant_across_epochs: bool
    predicted: ByteCounts
    memory: RankMemory | None = None
    resumed: Resumed | None = None  # where --resume continued from (rank 0 reports it)
    checkpoint_warnings: list[str] = field(default_factory=list)  # incomplete ones skipped
    # Seconds this rank waited on communication in its median epoch, by phase (blocking
    # collectives and what overlap left unhidden of asynchronous ones; no set-up).
    waited_s: dict[str, float] = field(default_factory=dict)

    def matches_model(self) -> bool:
        """Measured == predicted, phase by phase (the model predicts totals per phase)."""
        return self.epoch_bytes.totals() == self.predicted.totals()


def planned_spmm_bytes(
    op: SparseRowOperator, calls: list[SpmmCall], value_bytes: int
) -> dict[str, dict[str, int]]:
    """What this rank's sparse plan sends and receives per epoch, per SpMM phase."""
    out: dict[str, dict[str, int]] = {}
    reduce = (op.grid.shape.cols - 1) * op.n_local
    for call in calls:
        sent, recv = op.rows_per_spmm(call.phase == "backward_spmm")
        row_bytes = call.width * value_bytes
        v = out.setdefault(call.phase, {"sent": 0, "recv": 0})
        v["sent"] += (sent + reduce) * row_bytes
        v["recv"] += (recv + reduce) * row_bytes
    return {p: v for p, v in out.items() if v["sent"] or v["recv"]}


class EpochMeter:
    """Bytes per epoch: the counter difference between consecutive ``on_epoch`` calls;
    and the seconds waited on communication in each epoch, by phase."""

    def __init__(self, comm: Communicator) -> None:
        self.comm, self.previous = comm, comm.counts().phases
        self.last = ByteCounts({})
        self.constant = True
        self.waited_before = comm.waited_seconds()
        self.waits: list[dict[str, float]] = []

    def waited_per_epoch(self) -> dict[str, float]:
        """The median epoch's wait per phase (set-up and the final test pass left out),
        comparable to the median epoch time the run reports."""
        phases = {k for w in self.waits for k in w} - {"setup"}
        return {k: statistics.median(w.get(k, 0.0) for w in self.waits) for k in sorted(phases)}

    def on_epoch(self, stats: EpochStats) -> None:
        waited = self.comm.waited_seconds()
        self.waits.append({k: v - self.waited_before.get(k, 0.0) for k, v in waited.items()})
        self.waited_before = waited
        now = self.comm.counts().phases
        delta = {}
        for phase, counts in now.items():
            before = self.previous.get(phase, {})
            diff = {key: n - before.get(key, 0) for key, n in counts.items()}
            if phase != "setup" and any(diff.values()):
                delta[phase] = {k: v for k, v in diff.items() if v}
        if self.last.phases and delta != self.last.phases:
            self.constant = False
        self.last, self.previous = ByteCounts(delta), now


def comm_summary(reports: list[RankReport]) -> dict[str, Any]:
    """Per-rank and total bytes of one epoch, measured, and the comm model's prediction."""

    def rank_entry(r: RankReport, counts: ByteCounts) -> dict[str, Any]:
        return {"rank": r.rank, "coords": list(r.coords), "sent": counts.sent,
                "recv": counts.recv, "phases": counts.to_dict()}

    return {
        "per_rank": [
            {**rank_entry(r, r.epoch_bytes), "constant_across_epochs": r.constant_across_epochs}
            for r in reports
        ],
        "total_bytes_per_epoch": sum(r.epoch_bytes.sent for r in reports),
        "comm_model": {
            "per_rank": [rank_entry(r, r.predicted) for r in reports],
            "total_bytes_per_epoch": sum(r.predicted.sent for r in reports),
        },
        "matches_model": all(r.matches_model() for r in reports),
    }
