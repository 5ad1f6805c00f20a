"""Entry point of the ``sparsegnn`` console script.

Each subcommand lives in its own module exposing ``register(subparsers)``; the module's
handler returns a result dict, which :func:`sparsegnn.cli.common.emit` prints as a human
summary and, with ``--json``, as one JSON object on the last stdout line.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import NoReturn

from sparsegnn.cli.common import chosen_settings
from sparsegnn.errors import InvalidValueError, SparseGNNError

# Subcommand modules, imported lazily so `sparsegnn --help` stays fast.
_COMMAND_MODULES = (
    "sparsegnn.cli.train_cmd",
    "sparsegnn.cli.demo_cmd",
    "sparsegnn.cli.data_cmd",
    "sparsegnn.cli.curate_cmd",
    "sparsegnn.cli.track_cmd",
    "sparsegnn.cli.plan_cmd",
    "sparsegnn.cli.calibrate_cmd",
    "sparsegnn.cli.launch_cmd",
    "sparsegnn.cli.runs_cmd",
)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the usage block is for ``--help``, not for mistakes."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sparsegnn",
        description="Graph neural networks at any scale, written as sparse linear algebra.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:
                raise
            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    args.settings = chosen_settings(parser, args, argv)
    _configure_logging(args.verbose)
    try:
        _separate_runs(args)
        return int(args.func(args) or 0)
    except SparseGNNError as err:
        _one_line_error(args.command, str(err))
        return 2
    except OSError as err:
        if err.filename is None:  # not about a file the user named: a real bug, show it
            raise
        _one_line_error(args.command, f"{err.filename}: {err.strerror or err}")
        return 2
    except KeyboardInterrupt:
        print(f"sparsegnn {args.command}: interrupted", file=sys.stderr)
        return 130


def _separate_runs(args: argparse.Namespace) -> None:
    """Each run logs to a ``version_N`` folder of its own under ``--logdir`` (under
    ``--logdir/--name`` when labelled), named on stderr; a resumed run continues its own
    (:func:`~sparsegnn.train.eventlog.run_logdir`)."""
    if getattr(args, "logdir", None) is None:
        if getattr(args, "run_name", None) is not None:
            raise InvalidValueError("--name labels a run's folder under --logdir; give "
                                    "--logdir too")
        return
    from sparsegnn.distributed.runtime.session import job_rank
    from sparsegnn.train.eventlog import run_logdir

    args.logdir = run_logdir(args.logdir, bool(getattr(args, "resume", False)),
                             getattr(args, "run_name", None))
    if job_rank() == 0:  # one line per job, not one per torchrun rank
        print(f"sparsegnn {args.command}: this run logs to {args.logdir}", file=sys.stderr)


def _configure_logging(verbose: bool) -> None:
    """Our loggers at INFO (DEBUG with ``--verbose``), every other library's at WARNING
    (INFO with ``--verbose``): matplotlib's font cache and transformers' weight loading
    are not part of a run's log."""
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger().setLevel(logging.INFO if verbose else logging.WARNING)
    logging.getLogger("sparsegnn").setLevel(logging.DEBUG if verbose else logging.INFO)


def _one_line_error(command: str, message: str) -> None:
    """Print ``message`` as the single stderr line scripts and people both read."""
    text = " ".join(message.split())
    print(f"sparsegnn {command}: error: {text}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
