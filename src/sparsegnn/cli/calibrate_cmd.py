"""``sparsegnn calibrate``: measure this machine for the cost model and write a profile.

Ranks of the world size one plans for (``--nprocs``) measure local SpMM, dense and
elementwise rates at the same time, then each collective at several sizes, then train
every configuration for a few epochs of a small graph to fit what the rates miss
(a time per epoch and per collective call; GAT's per call of its edge protocol, R-GCN's
per call of a relation's SpMM); rank 0's
numbers are written to ``--out`` (a JSON profile that ``plan --auto --profile`` and
``train --algo auto`` read, and that can be written by hand for another cluster).
"""

from __future__ import annotations

import argparse
from typing import Any

from sparsegnn.cli.common import add_json_flag, emit, int_range, output_file


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("calibrate", help="measure compute and collective costs",
                              description=__doc__)
    p.add_argument("--nprocs", type=int_range(1, 64), default=4,
                   help="ranks to measure with (the world size you plan for; under "
                        "torchrun its ranks, on every host of the job)")
    p.add_argument("--backend", default=None, help="gloo or nccl (default: nccl on CUDA)")
    p.add_argument("--out", type=output_file, default=None, help="write the profile here")
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sparsegnn.distributed import run_on_ranks
    from sparsegnn.train.calibration_job import calibrate_rank

    # Under torchrun the job's own ranks, across its hosts: it measures their links.
    profile = run_on_ranks(calibrate_rank, args.nprocs, (args.quick, args.backend),
                           wall_timeout_s=1800).lead
    if profile is None:  # a torchrun rank other than 0: rank 0 writes and reports
        return 0
    if args.out:
        profile.save(args.out)
    out = profile.to_dict()
    if args.out:
        out["out"] = str(args.out)
    lines = [f"{profile.world_size} {profile.backend} ranks: SpMM "
             + ", ".join(f"{w} cols {s * 1e9:.2f} ns/nnz-col"
                         for w, s in sorted(profile.spmm_nnz_s.items()))]
    lines += [f"{name}: {c.latency_s * 1e6:.0f} us + {1e-9 / c.seconds_per_byte:.2f} GB/s"
              if c.seconds_per_byte else f"{name}: {c.latency_s * 1e6:.0f} us"
              for name, c in profile.collectives.items()]
    lines.append(f"dropout {profile.dropout_s * 1e9:.2f} ns/value, activation "
                 f"{profile.elementwise_s * 1e9:.2f} ns/value; fitted on real epochs: "
                 f"{profile.epoch_overhead_s * 1e3:.2f} ms per epoch + "
                 f"{profile.call_overhead_s * 1e6:.0f} us per collective call + "
                 f"{profile.row_overhead_s * 1e9:.2f} ns per row value")
    if profile.relation_call_overhead_s is not None:
        lines.append(f"R-GCN: {profile.relation_call_overhead_s * 1e6:.0f} us per collective "
                     "call of a relation's SpMM (fitted on R-GCN epochs)")
    lines.append(f"ranks sharing the cores: all at once take {profile.core_sharing:.2f}x "
                 "one alone")
    return emit(args, out, "\n".join(lines))
