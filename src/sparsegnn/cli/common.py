"""Options and output conventions shared by every subcommand."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object with the results as the last line of stdout",
    )


def add_profile_flags(group: argparse._ActionGroup, option: str) -> None:
    """``--profile`` and ``--calibrate`` for a command that chooses the distribution
    (``option``: how its help names the choice, e.g. ``--algo auto``)."""
    group.add_argument("--profile", default=None,
                       help=f"{option}: machine profile from `sparsegnn calibrate --out` "
                            "(needed unless --calibrate)")
    group.add_argument("--calibrate", action="store_true",
                       help=f"{option} without --profile: measure a quick profile now on "
                            "min(P, 8) local ranks (about a minute)")


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    """What every training command offers to watch a run: the progress bar, TensorBoard
    event files, an HTML report and the per-epoch history in ``--json``."""
    group = parser.add_argument_group("watching the run")
    bar = group.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_true", default=None,
                     help="show the progress bar even when stderr is not a terminal "
                     "(default: a bar on a terminal, else a summary line per tenth of the "
                     "epochs)")
    bar.add_argument("--no-progress", dest="progress", action="store_false", default=None,
                     help="never show the progress bar (summary lines instead)")
    group.add_argument("--logdir", type=_needs("tensorboard", output_dir), default=None,
                       help="write TensorBoard event files (curves and hparams) and run.json "
                       "(the result with its per-epoch history) to a new DIR/version_N "
                       "folder of this run's own")
    group.add_argument("--name", dest="run_name", type=_folder_name, default=None,
                       help="label the run: it logs to DIR/NAME/version_N")
    group.add_argument("--report", type=_needs("matplotlib", output_file), default=None,
                       metavar="HTML",
                       help="write one static HTML page of the run: configuration, "
                       "figures, plots (needs matplotlib)")
    group.add_argument("--history", action="store_true",
                       help="--json also carries the per-epoch history")


def _folder_name(text: str) -> str:
    """A run label: one folder name, not a path."""
    if not text.strip() or text in (".", "..") or "/" in text or "\\" in text:
        raise argparse.ArgumentTypeError(f"expected a folder name (no /), got {text!r}")
    return text


def _needs(module: str, convert: Callable[[str], Path]) -> Callable[[str], Path]:
    """``convert``, refused at once when ``module`` is missing: a run that trains for an
    hour and then cannot write its event files or report has wasted the hour."""

    def checked(text: str) -> Path:
        from sparsegnn.errors import MissingDependencyError
        from sparsegnn.optional import locate

        try:
            locate(module, "for this option")
        except MissingDependencyError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        return convert(text)

    checked.__name__ = convert.__name__
    return checked


def add_device_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        default=None,
        help="torch device (cpu, cuda, cuda:1); default: cuda if available, else cpu",
    )


def resolve_device(name: str | None) -> torch.device:
    """The device a user asked for, or CUDA when present, else the CPU.

    A name torch does not know, or a CUDA device on a machine without one, is a user
    error (one line), not torch's traceback.
    """
    import torch

    from sparsegnn.errors import InvalidValueError

    if not name:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise InvalidValueError(
            f"--device {name!r} is not a torch device; use cpu, cuda or cuda:N"
        ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InvalidValueError(f"--device {name}: CUDA is not available on this machine")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise InvalidValueError(
            f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)"
        )
    return device


# ---------------------------------------------------------------- argparse value types
# Each returns a converter for ``add_argument(type=...)``: a bad value becomes argparse's
# one-line "argument --x: ..." error (exit 2) before any work starts.
def int_range(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """An integer in ``[lo, hi]`` (either bound optional)."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        _check_bounds(value, lo, hi, text)
        return value

    convert.__name__ = "integer"
    return convert


def float_range(
    lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
    hi_open: bool = False,
) -> Callable[[str], float]:
    """A finite float in ``[lo, hi]``; ``lo_open``/``hi_open`` exclude the bound itself."""

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        _check_bounds(value, lo, hi, text)
        if (lo_open and value == lo) or (hi_open and value == hi):
            raise argparse.ArgumentTypeError(
                f"must lie strictly {'above ' + str(lo) if lo_open and value == lo else ''}"
                f"{'below ' + str(hi) if hi_open and value == hi else ''}, got {text}"
            )
        return value

    convert.__name__ = "number"
    return convert


def int_list(lo: int = 1) -> Callable[[str], list[int]]:
    """A comma-separated list of integers, each at least ``lo`` (e.g. ``--fanouts 15,10,5``)."""

    def convert(text: str) -> list[int]:
        parts = [s.strip() for s in text.split(",")]
        if not text.strip() or any(not s for s in parts):
            raise argparse.ArgumentTypeError(
                f"expected comma-separated integers like 15,10,5, got {text!r}"
            )
        one = int_range(lo)
        return [one(s) for s in parts]

    convert.__name__ = "list"
    return convert


def non_empty(text: str) -> str:
    """A string option that must not be empty or blank (``--recipe ""``)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def output_file(text: str) -> Path:
    """A file path to write: refused up front if it names a directory or an unwritable place."""
    path = Path(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; name a file inside it")
    _check_writable_parent(path, text)
    return path


def output_dir(text: str) -> Path:
    """A folder to write into: refused if it is a file or its parent cannot be written."""
    path = Path(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a directory")
    _check_writable_parent(path, text)
    return path


def _check_writable_parent(path: Path, text: str) -> None:
    """The nearest existing ancestor must be a writable folder (parents are created)."""
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text}: cannot write in {parent}")


def _check_bounds(value: float, lo: float | None, hi: float | None, text: str) -> None:
    if lo is not None and value < lo:
        raise argparse.ArgumentTypeError(f"must be >= {lo}, got {text}")
    if hi is not None and value > hi:
        raise argparse.ArgumentTypeError(f"must be <= {hi}, got {text}")


# Options about watching or printing a run, not about the run itself.
_NOT_SETTINGS = {"help", "json", "history", "logdir", "run_name", "report", "progress",
                 "verbose"}


def chosen_settings(parser: argparse.ArgumentParser, args: argparse.Namespace,
                    argv: list[str]) -> dict[str, Any]:
    """The options the user typed for the command (by dest, with their parsed values),
    not the ones argparse filled with defaults: what a run report lists as its settings."""
    typed = {a.split("=", 1)[0] for a in argv if a.startswith("-")}
    return {a.dest: getattr(args, a.dest, None) for a in _command_parser(parser, args)._actions
            if a.dest not in _NOT_SETTINGS and typed & set(a.option_strings)}


def _command_parser(parser: argparse.ArgumentParser,
                    args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub-)sub-parser that parsed the command ``args`` holds (``track train``)."""
    while True:
        sub = next((a for a in parser._actions
                    if isinstance(a, argparse._SubParsersAction)), None)
        chosen = None if sub is None else getattr(args, sub.dest, None)
        if sub is None or chosen not in sub.choices:
            return parser
        parser = sub.choices[chosen]


def emit(args: argparse.Namespace, result: Mapping[str, Any], summary: str) -> int:
    """Print the human summary; with --json, the result as the last stdout line."""
    print(summary)
    if getattr(args, "json", False):
        sys.stdout.flush()
        print(json.dumps(_plain(result), sort_keys=False))
    return 0


# Result keys holding curves (the per-epoch history, each fold's for graph classification,
# the test ROC of link prediction): in --json only with --history; reports draw them.
HISTORY_KEYS = ("history", "losses", "fold_history", "test_roc")
# What the report and run.json carry beside the figures; --json leaves it out.
_REPORT_ONLY = ("settings",)


def finish_run(args: argparse.Namespace, title: str, result: Mapping[str, Any],
               summary: str) -> int:
    """A training command's end: the final figures into ``--logdir`` (next to the
    per-epoch curves the loop wrote there, with ``run.json``, the whole result), the
    ``--report`` page, then :func:`emit`, without the per-epoch history unless
    ``--history`` asks for it: a log reader wants the final figures, not every epoch."""
    plain = _plain(result)
    if getattr(args, "settings", None) is not None:
        plain["settings"] = _plain(args.settings)
    if args.logdir is not None:
        plain["logdir"] = str(args.logdir)
        _log_final(args.logdir, plain)
    if args.report is not None:
        from sparsegnn.train.run_report import write_report

        write_report(args.report, title, plain)
        summary += f"\nreport: {args.report}"
    hidden = _REPORT_ONLY if args.history else (*HISTORY_KEYS, *_REPORT_ONLY)
    shown = {k: v for k, v in plain.items() if k not in hidden}
    return emit(args, shown, summary)


def _log_final(logdir: Path, result: dict[str, Any]) -> None:
    """Final scalars at the last epoch's step, the run's settings for HParams, and the
    result with its history as JSON."""
    from sparsegnn.train.eventlog import EventLog, hparam_metrics

    events = EventLog(logdir)
    try:
        events.final(result, max(len(result.get("history") or []) - 1, 0))
        events.hparams(result.get("config") or {}, hparam_metrics(result))
    finally:
        events.close()
    (logdir / "run.json").write_text(json.dumps(result, indent=1, default=str) + "\n")


def _plain(obj: Any) -> Any:
    """Make tensors, numpy scalars and tuples JSON-serialisable."""
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if hasattr(obj, "tolist") and getattr(obj, "ndim", 0):  # tensors and numpy arrays
        return obj.tolist()
    if hasattr(obj, "item") and callable(obj.item):
        return obj.item()
    return obj
