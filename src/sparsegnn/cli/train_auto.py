"""``sparsegnn train --algo auto``: the choice of configuration and its report.

This module owns what the CLI does for the automatic choice: asking the library for it
(:func:`sparsegnn.train.auto_choice.choose_distribution`, which the benchmark calls too)
with the options as given, and printing its report, the ``auto`` entry of the JSON
output (with ``--overlap auto``'s trial lines). Training itself is
:mod:`sparsegnn.cli.train_ranks`'s. Like every CLI module it imports the library only
inside functions.
"""

from __future__ import annotations

import argparse
from typing import Any

from sparsegnn.cli.train_cmd import config_from_args, training_graph, world_size


def choose_auto(args: argparse.Namespace) -> Any:
    """``--algo auto``: the library's choice
    (:func:`~sparsegnn.train.auto_choice.choose_distribution`) for this graph, world size
    and the options; the arguments are left as given."""
    from sparsegnn.cli.plan_cmd import load_profile
    from sparsegnn.distributed.layout.shard import is_shard_dir
    from sparsegnn.distributed.runtime.session import in_torchrun
    from sparsegnn.errors import InvalidValueError
    from sparsegnn.train.auto_choice import AutoRequest, choose_distribution

    if is_shard_dir(args.dataset):
        raise InvalidValueError("--algo auto chooses the partition too: give the graph, "
                                "not a partitioned folder")
    world = world_size(args)
    if args.profile is None and in_torchrun():
        raise InvalidValueError("--algo auto under torchrun needs --profile (every rank must "
                                "choose the same; write one with `sparsegnn calibrate`)")
    partitioners = ("block",) if args.partition is None else (args.partition,)
    return choose_distribution(AutoRequest(
        training_graph(args), world, config_from_args(args),
        load_profile(args.profile, world, args.calibrate, "--algo auto"),
        partitioners=partitioners, max_rank_memory_gib=args.max_rank_memory,
        overlap=args.overlap, trials=_auto_trials(args)))


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


def auto_report(choice: Any, run: Any) -> dict[str, Any]:
    """What ``--algo auto`` chose and why (:meth:`AutoChoice.report
    <sparsegnn.train.auto_choice.AutoChoice.report>`), with the trials the ranks ran."""
    return choice.after_training(run.dcfg, [t["measured_epoch_s"] for t in run.trials]
                                 ).report()


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
