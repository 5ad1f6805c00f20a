"""``sparsegnn runs compare DIR...``: training runs side by side.

Builds a :class:`~sparsegnn.train.runs_compare.CompareRequest` and prints the
:class:`~sparsegnn.train.runs_compare.Comparison` (a table; with ``--json`` its dict).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sparsegnn.cli.common import add_json_flag, emit, output_file


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("runs", help="compare training runs written with --logdir",
                       description="Work with the runs that `--logdir DIR` wrote.")
    actions = p.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
    c = actions.add_parser(
        "compare", help="final figures, settings that differ and curves of runs side by side",
        description="Put runs side by side: their final figures, the settings in which they "
                    "differ, and (with --plot) their loss and validation curves overlaid. "
                    "DIR is a run's folder or a --logdir holding several (version_N).")
    c.add_argument("folders", metavar="DIR", nargs="+", type=Path,
                   help="a run folder (holding run.json) or a --logdir of runs")
    c.add_argument("--plot", type=output_file, default=None, metavar="PNG",
                   help="draw every run's curves into one PNG (needs matplotlib)")
    add_json_flag(c)
    c.set_defaults(func=_run_compare)


def _run_compare(args: argparse.Namespace) -> int:
    from sparsegnn.train.runs_compare import CompareRequest, compare_runs

    comparison = compare_runs(CompareRequest(tuple(args.folders), args.plot))
    text = comparison.table()
    if comparison.plot is not None:
        text += f"\ncurves: {comparison.plot}"
    return emit(args, comparison.to_dict(), text)
