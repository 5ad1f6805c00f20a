"""``sparsegnn train --algo auto``: the choice of configuration and its report.

This module owns what the CLI does for the automatic choice: ranking the configurations
for the graph and world size (:mod:`sparsegnn.distributed.autoplan`), setting the options
of the chosen one, and joining the predictions with the trials the ranks measured into
the ``auto`` entry of the JSON output and its printed lines (with ``--overlap auto``'s
trial lines). Training itself is :mod:`sparsegnn.cli.train_ranks`'s. Like every CLI
module it imports the library only inside functions.
"""

from __future__ import annotations

import argparse
from typing import Any

from sparsegnn.cli.train_cmd import config_from_args, training_graph, world_size


def choose_auto(args: argparse.Namespace) -> tuple[dict[str, Any], list[Any]]:
    """``--algo auto``: rank the configurations for this graph and world size, set the
    options of the predicted-fastest one that fits ``--max-rank-memory``, and return the
    predictions and the shortlist (that one first) for the ranks to try."""
    from sparsegnn.cli.plan_cmd import load_profile
    from sparsegnn.distributed.autoplan import auto_plan, shortlist
    from sparsegnn.distributed.planner import PlanConfig, PlanGraph
    from sparsegnn.distributed.session import in_torchrun
    from sparsegnn.distributed.shard import is_shard_dir
    from sparsegnn.errors import InvalidValueError

    if is_shard_dir(args.dataset):
        raise InvalidValueError("--algo auto chooses the partition too: give the graph, "
                                "not a partitioned folder")
    world = world_size(args)
    cfg = config_from_args(args)
    base = PlanConfig(world, model=cfg.model, hidden=cfg.hidden, num_layers=cfg.num_layers,
                      dtype=cfg.dtype, seed=cfg.seed, overlap=args.overlap == "on")
    partitioners = ("block",) if args.partition is None else (args.partition,)
    if args.profile is None and in_torchrun():
        raise InvalidValueError("--algo auto under torchrun needs --profile (every rank must "
                                "choose the same; write one with `sparsegnn calibrate`)")
    ranked = auto_plan(PlanGraph.of(training_graph(args), cfg.model), world,
                       load_profile(args.profile, world, args.calibrate, "--algo auto"), base,
                       partitioners=partitioners, max_rank_memory_gib=args.max_rank_memory,
                       overlap_twins=args.overlap == "auto")
    trials = shortlist(ranked, _auto_trials(args))
    if not trials:
        raise InvalidValueError("--algo auto: no configuration is predicted to fit "
                                f"--max-rank-memory {args.max_rank_memory} GiB on {world} ranks")
    choice = trials[0]
    args.algo, args.replication = choice.config.algo, choice.config.replication
    args.comm = choice.config.comm
    args.partition = None if choice.config.partitioner == "block" else choice.config.partitioner
    predicted = [{**c.to_dict(), "overlapped_memory_fits": c.twin_fits} for c in trials]
    return {"candidates": len(ranked), "predicted": predicted}, [c.config for c in trials]


def _auto_trials(args: argparse.Namespace) -> int:
    """``--auto-trials``, where not given: 3, or 1 (the model's choice alone) under
    ``--max-rank-memory``. Why: six trial runs and the final one in the same processes
    peaked at 611-963 MiB per rank on a 65k-vertex SBM at p = 4, where each one alone
    peaked at 479-519 MiB and was predicted at 605-611 (freed memory the C allocator
    keeps, even with it handed back between runs), so only one run per process stays
    within its prediction."""
    if args.auto_trials is not None:
        return int(args.auto_trials)
    return 1 if args.max_rank_memory is not None else 3


def auto_report(auto: dict[str, Any], run: Any) -> dict[str, Any]:
    """What ``--algo auto`` chose and why: the configuration trained (the trials' winner,
    as the ranks chose it), its prediction, and each trial's predicted epoch and memory
    and measured epoch (a configuration tried with and without overlap, ``--overlap
    auto``, appears twice with the same prediction: the model prices no overlap)."""
    fields = ("algo", "replication", "comm", "partitioner", "epoch_s", "memory_bytes_per_rank")
    predicted = {_plan_key(p["algo"], p["replication"], p["comm"], p["partitioner"]): p
                 for p in auto["predicted"]}

    def prediction(algo: str, replication: int, comm: str, partition: Any,
                   overlap: bool) -> dict[str, Any]:
        """The planner's entry, with the overlapped run's memory where it overlaps."""
        p = predicted[_plan_key(algo, replication, comm, partition)]
        twin = p.get("overlapped_memory_bytes_per_rank")
        return {**p, "memory_bytes_per_rank": twin} if overlap and twin is not None else p

    d = run.dcfg
    trials = [{**{k: prediction(t["algo"], t["replication"], t["comm"], t["partition"],
                                t["overlap"])[k] for k in fields},
               "overlap": t["overlap"], "trial_epoch_s": t["measured_epoch_s"]}
              for t in run.trials]
    if not trials:  # the model's choice alone was trained
        trials = [{**{k: p[k] for k in fields}, "overlap": d.overlap, "trial_epoch_s": None}
                  for p in auto["predicted"]]
    return {**prediction(d.algo, d.replication, d.comm, d.partition, d.overlap),
            "overlap": d.overlap, "candidates": auto["candidates"], "trials": trials}


def _plan_key(algo: str, replication: int, comm: str, partition: Any) -> tuple[str, int, str, str]:
    """A configuration as the planner names it (training calls the contiguous split no
    partition, the planner ``block``)."""
    return algo, replication, comm, "block" if partition in (None, "block") else str(partition)


def overlap_summary(trials: list[dict[str, Any]], chosen: bool) -> str:
    """``--overlap auto``'s trial epochs and what they chose."""
    times = ", ".join(f"{'with' if t['overlap'] else 'without'} "
                      f"{t['measured_epoch_s'] * 1e3:.1f} ms" for t in trials)
    return f"\noverlap auto: trial epochs {times}: overlap {'on' if chosen else 'off'}"


def auto_summary(auto: dict[str, Any]) -> str:
    overlap = " with overlap" if auto["overlap"] else ""
    text = (f"\nauto: {auto['algo']} c={auto['replication']} {auto['comm']} comm{overlap}, "
            f"{auto['partitioner']} partition; epoch predicted "
            f"{auto['epoch_s'] * 1e3:.1f} ms, measured {auto['measured_epoch_s'] * 1e3:.1f} ms")
    for t in auto["trials"]:
        if t["trial_epoch_s"] is not None:
            overlap = ", overlap" if t["overlap"] else ""
            text += (f"\n  trial {t['algo']} c={t['replication']} {t['comm']}{overlap}: "
                     f"predicted {t['epoch_s'] * 1e3:.1f} ms, measured "
                     f"{t['trial_epoch_s'] * 1e3:.1f} ms")
    return text
