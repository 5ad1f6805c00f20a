"""The automatic choice of a distribution (``train --algo auto``), as one library call.

:func:`choose_distribution` takes an :class:`AutoRequest` (the graph, the world size,
the training configuration, a machine profile, the partitioners to consider, a per-rank
memory limit, the overlap mode and how many configurations to try) and returns an
:class:`AutoChoice`: every configuration ranked by predicted epoch
(:func:`~sparsegnn.distributed.planning.autoplan.auto_plan`), the shortlist worth a measured
trial (:func:`~sparsegnn.distributed.planning.autoplan.shortlist`), the model's choice, the
:class:`~sparsegnn.train.rank_train.DistributedConfig` of each trial, and, once a job
has run them (:mod:`sparsegnn.train.trials`), the trials' measured epochs and what was
trained (:meth:`AutoChoice.after_training`, :meth:`AutoChoice.report`). The CLI and
``benchmarks/autoconfig.py`` both call it, so both choose the same.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from sparsegnn.data import GraphData
from sparsegnn.distributed.planning.autoplan import Candidate, auto_plan, shortlist
from sparsegnn.distributed.planning.cost_profile import Profile
from sparsegnn.distributed.planning.planner import PlanConfig, PlanGraph
from sparsegnn.errors import InvalidValueError
from sparsegnn.names import ATTENTION_MODELS
from sparsegnn.train.distributed import with_overlap_variants, with_plan
from sparsegnn.train.fullgraph import TrainConfig
from sparsegnn.train.rank_train import DistributedConfig

log = logging.getLogger(__name__)

OverlapMode = Literal["off", "on", "auto"]

# The fields of a trial's entry in the report (its prediction's, beside what it measured).
_TRIAL_FIELDS = ("algo", "replication", "comm", "partitioner", "epoch_s",
                 "memory_bytes_per_rank")


@dataclass(frozen=True)
class AutoRequest:
    """What the automatic choice needs: the graph (loaded, or already a
    :class:`~sparsegnn.distributed.planning.planner.PlanGraph`), ``world_size`` ranks, the
    training configuration (model, width, depth, dtype, seed), the machine ``profile``,
    the ``partitioners`` to consider, ``max_rank_memory_gib`` (None: no limit), the
    ``overlap`` mode (``auto`` tries each 1D/1.5D configuration with and without it) and
    ``trials``, the most configurations to try (1: the model's choice alone)."""

    graph: GraphData | PlanGraph
    world_size: int
    cfg: TrainConfig
    profile: Profile
    partitioners: tuple[str, ...] = ("block",)
    max_rank_memory_gib: float | None = None
    overlap: OverlapMode = "off"
    trials: int = 3


@dataclass(frozen=True)
class AutoChoice:
    """The outcome: ``ranked`` (every feasible configuration, fitting ones first, each
    group by predicted epoch), ``shortlist`` (those worth a trial, the model's choice
    first), and after training, ``trained`` (the configuration the job trained) and
    ``trial_epochs_s`` (each trial's measured epoch, in :meth:`trial_configs`' order;
    empty where nothing was tried)."""

    ranked: tuple[Candidate, ...]
    shortlist: tuple[Candidate, ...]
    overlap: OverlapMode = "off"
    trained: DistributedConfig | None = None
    trial_epochs_s: tuple[float, ...] = ()

    @property
    def chosen(self) -> Candidate:
        """The model's choice: the predicted-fastest configuration that fits."""
        return self.shortlist[0]

    @property
    def config(self) -> PlanConfig:
        return self.chosen.config

    def distributed_config(self, dcfg: DistributedConfig) -> DistributedConfig:
        """``dcfg`` (backend, timeout, masks, overlap) set to the model's choice."""
        return with_plan(dcfg, self.config)

    def trials(self, dcfg: DistributedConfig) -> list[tuple[Candidate, DistributedConfig]]:
        """Every configuration to try, paired with its prediction: the shortlist, and
        under ``--overlap auto`` each 1D/1.5D one's overlapped twin where it fits
        (:func:`~sparsegnn.train.distributed.with_overlap_variants`)."""
        plain = [with_plan(dcfg, c.config) for c in self.shortlist]
        if self.overlap != "auto":
            return list(zip(self.shortlist, plain, strict=True))
        variants = with_overlap_variants(plain, [c.twin_fits for c in self.shortlist])
        bare = [replace(p, overlap=False) for p in plain]
        return [(self.shortlist[bare.index(replace(v, overlap=False))], v) for v in variants]

    def trial_configs(self, dcfg: DistributedConfig) -> list[DistributedConfig]:
        """What a job's ranks try (``DistributedJob.trials``): empty where there is only
        the model's choice to train."""
        got = [d for _, d in self.trials(dcfg)]
        return got if len(got) > 1 else []

    def after_training(self, trained: DistributedConfig,
                       trial_epochs_s: Sequence[float] = ()) -> AutoChoice:
        """This choice with what the job trained and its trials' measured epochs."""
        return replace(self, trained=trained, trial_epochs_s=tuple(trial_epochs_s))

    def report(self) -> dict[str, Any]:
        """What was chosen and why (``train --json``'s ``auto``): the configuration
        trained, its prediction (with the overlapped run's memory where it overlaps),
        and each trial's predicted epoch and memory beside its measured epoch (a
        configuration tried with and without overlap appears twice with the same
        predicted epoch: the model prices no overlap)."""
        trained = self.trained if self.trained is not None else \
            self.distributed_config(DistributedConfig())
        pairs = self.trials(trained)
        trials = [{**{k: _prediction(c, d.overlap)[k] for k in _TRIAL_FIELDS},
                   "overlap": d.overlap, "trial_epoch_s": t}
                  for (c, d), t in zip(pairs, self.trial_epochs_s, strict=False)]
        if not self.trial_epochs_s:  # the model's choice alone was trained
            trials = [{**{k: _prediction(c, False)[k] for k in _TRIAL_FIELDS},
                       "overlap": trained.overlap, "trial_epoch_s": None}
                      for c in self.shortlist]
        won = next((c for c, d in pairs if d == trained), None)
        if won is None:  # trained without a trial: the model's choice
            won = self.chosen
        return {**_prediction(won, trained.overlap), "overlap": trained.overlap,
                "candidates": len(self.ranked), "trials": trials}


def _prediction(c: Candidate, overlap: bool) -> dict[str, Any]:
    """The planner's entry for ``c``, with the overlapped run's memory where it overlaps."""
    p = {**c.to_dict(), "overlapped_memory_fits": c.twin_fits}
    twin = p.get("overlapped_memory_bytes_per_rank")
    return {**p, "memory_bytes_per_rank": twin} if overlap and twin is not None else p


def choose_distribution(request: AutoRequest) -> AutoChoice:
    """Rank every configuration for ``request`` and shortlist those worth a trial;
    refuses where none is predicted to fit the memory limit."""
    r = request
    if r.cfg.model in ATTENTION_MODELS and not r.profile.attention_rates_measured:
        log.warning("--algo auto: attention kernels %s", r.profile.attention_rates_source())
    graph = r.graph if isinstance(r.graph, PlanGraph) else PlanGraph.of(r.graph, r.cfg.model)
    base = PlanConfig(r.world_size, model=r.cfg.model, hidden=r.cfg.hidden,
                      num_layers=r.cfg.num_layers, heads=r.cfg.heads, dtype=r.cfg.dtype,
                      seed=r.cfg.seed, overlap=r.overlap == "on")
    ranked = auto_plan(graph, r.world_size, r.profile, base, partitioners=r.partitioners,
                       max_rank_memory_gib=r.max_rank_memory_gib,
                       overlap_twins=r.overlap == "auto")
    short = shortlist(ranked, r.trials)
    if not short:
        raise InvalidValueError("--algo auto: no configuration is predicted to fit "
                                f"--max-rank-memory {r.max_rank_memory_gib} GiB on "
                                f"{r.world_size} ranks")
    return AutoChoice(tuple(ranked), tuple(short), r.overlap)
