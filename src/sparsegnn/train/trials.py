"""Choosing between distributed configurations by measured epochs (``--algo auto``).

A cost model ranks configurations well when they differ by more than its error; between
close ones a few real epochs decide. :func:`choose_by_trial` trains each candidate a few
epochs in rotated rounds (:func:`median_epoch_over_rounds`) and keeps the model's first
choice unless a trial beats it by more than :data:`TRIAL_MARGIN` (:func:`trial_winner`).
It is apart from the job (:mod:`sparsegnn.train.distributed`) because the calibration and
the benchmarks measure configurations with the same functions without running a job.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sparsegnn.distributed import Session, barrier, gather_objects
from sparsegnn.train.fullgraph import TrainConfig
from sparsegnn.train.memory import release_freed_memory
from sparsegnn.train.rank_train import DistributedConfig, train_rank


def measure_epochs_s(session: Session, source: Any, cfg: TrainConfig,
                     dcfg: DistributedConfig) -> list[float]:
    """Train ``dcfg`` on ``source`` (every rank of the job calls this) and return each
    epoch's time on its slowest rank, the first epoch left out: it also builds plans and
    warms the kernels, which is not an epoch's cost. Every rank gets the same list."""
    barrier()
    got = train_rank(source, cfg, dcfg, session)
    assert got is not None  # every rank is a member of the full-world grid
    steady = [h.seconds for h in got[1].history[1:]] or [got[1].epoch_time_s]
    return [max(per_rank) for per_rank in zip(*gather_objects(steady), strict=True)]


def median_epoch_over_rounds(session: Session, source: Any, cfg: TrainConfig,
                             candidates: Sequence[DistributedConfig], rounds: int
                             ) -> list[float]:
    """Each candidate's median epoch over ``rounds`` rounds that each train every
    candidate once (in a rotated order), all rounds' epochs pooled.

    With several ranks sharing a core, one epoch's time scatters by +-25% around its
    typical value and a whole run's median by +-15% (R-MAT, 16384 vertices, p = 4: the
    same configuration's run medians 36.9-50.5 ms over 8 rounds). Rounds spread a burst
    of someone else's work over the candidates instead of landing it on one; the pooled
    median ignores a burst that spoils fewer than half the epochs and, unlike the least
    of the rounds' medians, does not reward the one lucky run (which made two equal
    configurations measure 30% apart)."""
    n = len(candidates)
    epochs: list[list[float]] = [[] for _ in range(n)]
    for r in range(max(1, rounds)):
        for k in ((r + i) % n for i in range(n)):
            epochs[k] += measure_epochs_s(session, source, cfg, candidates[k])
            release_freed_memory()
    return [statistics.median(e) for e in epochs]


TRIAL_MARGIN = 0.1  # a trial overrules the model's first choice only this much faster


def trial_winner(times: Sequence[float], margin: float = TRIAL_MARGIN) -> int:
    """The candidate to train given each one's trial time, the model's first choice at
    index 0: the fastest, if it beat the first by more than ``margin``, else the first.
    A few trial epochs scatter by about 10% on a shared host; a closer win is noise, and
    the model (median error 6-11% against longer runs) is the better judge there. Seen:
    trials that picked a configuration 1.19x slower than the model's choice."""
    if not times:
        return 0
    best = min(range(len(times)), key=times.__getitem__)
    return best if times[best] < (1.0 - margin) * times[0] else 0


def choose_by_trial(session: Session, source: Any, cfg: TrainConfig,
                    candidates: Sequence[DistributedConfig], epochs: int = 4,
                    rounds: int = 2) -> tuple[int, list[float]]:
    """The index of the candidate to train (:func:`trial_winner`) and each one's time.

    A cost model ranks configurations well when they differ by more than its error;
    between those it predicts within ~30% of each other, measured epochs decide where
    they differ by more than the measurement's own noise (as FFTW's planner and cuDNN's
    autotuner do). The trials run ``epochs`` epochs each (the first, warm-up, not
    counted) in ``rounds`` rounds (see :func:`median_epoch_over_rounds`), without checkpoints
    or progress; all ranks measure the same times, so all choose the same."""
    trial = replace(cfg, epochs=max(2, epochs), patience=max(2, epochs), checkpoint=None,
                    resume=False, progress=False, logdir=None)
    times = median_epoch_over_rounds(session, source, trial, candidates, rounds)
    return trial_winner(times), times
