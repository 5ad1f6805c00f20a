"""``sparsegnn launch -- TORCHRUN_ARGS``: torchrun, ended when its host is cut off.

Runs ``python -m torch.distributed.run TORCHRUN_ARGS`` (everything after ``--``, e.g.
``--nnodes 2 --nproc-per-node 4 --rdzv-backend c10d ... -m sparsegnn train ...``) and
exits with its status. On a host cut off from the rendezvous store torchrun itself would
stay for about 15 minutes after its workers ended (its store client waits on the lost
connection); once a worker has ended, torchrun is still there ``--grace`` seconds later
and the store takes no connection within ``--probe-timeout``, torchrun and every process
it started are killed and the command fails with one line saying so (exit 2). See
docs/distributed.md, "Multi-node runbook".
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sparsegnn.cli.common import float_range
from sparsegnn.errors import SparseGNNError


class LauncherStuckError(SparseGNNError):
    """torchrun outlived its workers waiting on a rendezvous store it cannot reach."""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "launch", help="run torchrun so that a host cut off from the job ends on its own",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="sparsegnn launch [--grace S] [--probe-timeout S] -- TORCHRUN_ARGS")
    p.add_argument("--grace", type=float_range(0, lo_open=True), default=5.0, metavar="S",
                   help="seconds torchrun may outlive its first ended worker before its "
                        "store is probed (default 5)")
    p.add_argument("--probe-timeout", type=float_range(0, lo_open=True), default=3.0,
                   metavar="S",
                   help="seconds the rendezvous store may take to accept a connection "
                        "(default 3)")
    p.add_argument("torchrun_args", nargs=argparse.REMAINDER,
                   help="torchrun's arguments, after --")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sparsegnn.torchrun import LaunchRequest, supervise

    rest = list(args.torchrun_args)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if not rest:
        raise SparseGNNError("no torchrun arguments: sparsegnn launch -- --nnodes N ... "
                             "-m sparsegnn train ...")
    outcome = supervise(LaunchRequest(tuple(rest), args.grace, args.probe_timeout))
    if outcome.continued:
        print(f"sparsegnn launch: continued stopped worker(s) "
              f"{', '.join(map(str, outcome.continued))} so that they could take torchrun's "
              "SIGTERM", file=sys.stderr)
    if outcome.killed is not None:
        raise LauncherStuckError(outcome.killed)
    if outcome.leftovers:
        print(f"sparsegnn launch: killed {len(outcome.leftovers)} processes torchrun left "
              f"running (pids {', '.join(map(str, outcome.leftovers))})", file=sys.stderr)
    return outcome.code
