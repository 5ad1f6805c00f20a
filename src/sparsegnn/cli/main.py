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

from sparsegnn.errors import SparseGNNError

# Subcommand modules, imported lazily so `sparsegnn --help` stays fast.
_COMMAND_MODULES = (
    "sparsegnn.cli.train_cmd",
    "sparsegnn.cli.demo_cmd",
    "sparsegnn.cli.data_cmd",
    "sparsegnn.cli.curate_cmd",
    "sparsegnn.cli.track_cmd",
    "sparsegnn.cli.plan_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args) or 0)
    except SparseGNNError as err:
        print(f"sparsegnn {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"sparsegnn {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
