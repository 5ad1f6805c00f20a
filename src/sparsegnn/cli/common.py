"""Options and output conventions shared by every subcommand."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

import torch


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object with the results as the last line of stdout",
    )


def add_device_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        default=None,
        help="torch device (cpu, cuda, cuda:1); default: cuda if available, else cpu",
    )


def resolve_device(name: str | None) -> torch.device:
    """The device a user asked for, or CUDA when present, else the CPU."""
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def emit(args: argparse.Namespace, result: Mapping[str, Any], summary: str) -> int:
    """Print the human summary; with --json, the result as the last stdout line."""
    print(summary)
    if getattr(args, "json", False):
        sys.stdout.flush()
        print(json.dumps(_plain(result), sort_keys=False))
    return 0


def _plain(obj: Any) -> Any:
    """Make tensors, numpy scalars and tuples JSON-serialisable."""
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if hasattr(obj, "item") and callable(obj.item):
        return obj.item()
    return obj
