"""The flags of ``sparsegnn train``: what each option means, its type and its default.

This module owns the argument registration only (the model and optimiser, checkpoints,
the distributed full-graph group and the sampled-minibatch group); what the parsed
options become is :mod:`sparsegnn.cli.train_cmd`'s, and which mode runs
:func:`sparsegnn.train.train_request.run_train`'s. Like every CLI
module it imports the library only inside functions (``--help`` stays light).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sparsegnn.cli.common import (
    add_device_flag,
    add_json_flag,
    add_profile_flags,
    add_run_flags,
    float_range,
    int_list,
    int_range,
    output_dir,
    output_file,
)
from sparsegnn.cli.task_flags import add_task_flags
from sparsegnn.names import ALGORITHMS, DEFAULT_MASK, MASK_KINDS, MODEL_KINDS


def add_train_flags(p: argparse.ArgumentParser) -> None:
    """Every option of ``sparsegnn train``, in the order ``--help`` lists them."""
    p.add_argument("--dataset", default="cora", help="dataset name, generator spec or graph file")
    p.add_argument(
        "--data-dir", default=None,
        help="data root (default: $SPARSEGNN_DATA, else the nearest shared/data, else bundled)",
    )
    p.add_argument(
        "--model",
        choices=(*MODEL_KINDS, "rgcn"),
        default=None,
        help="default: gcn full-graph, sage (GraphSAGE) minibatch; gat/gatv2 (attention), "
        "gin (sum aggregation and an MLP); rgcn (R-GCN) on a typed graph. Where not given, "
        "--hidden, --dropout, --lr and --weight-decay are the model's paper's: gcn/sage "
        "16, 0.5, 0.01, 5e-4; gat/gatv2 8 per head, 0.6 (inputs and attention), 0.005, "
        "5e-4; gin 64, 0.5, 0.01, 0 (--task link/graph and rgcn: the task's own)",
    )
    p.add_argument("--hidden", type=int_range(1), default=None,
                   help="hidden width (per head for gat/gatv2); default: the model's")
    p.add_argument("--heads", type=int_range(1), default=8,
                   help="gat/gatv2: hidden layers' heads, concatenated (the last layer "
                   "averages one); default 8")
    p.add_argument("--layers", type=int_range(1), default=None,
                   help="default: 2 full-graph, 3 minibatch, the task's for --task")
    p.add_argument("--dropout", type=float_range(0.0, 1.0, hi_open=True), default=None,
                   help="default: the model's (gat/gatv2: also on the attention weights)")
    p.add_argument("--attention-dropout", type=float_range(0.0, 1.0, hi_open=True),
                   default=None, help="gat/gatv2: dropout of the attention weights "
                   "(default: --dropout's; on ranks each draws its own masks)")
    p.add_argument("--dropout-mask", choices=MASK_KINDS, default=DEFAULT_MASK,
                   help="bytes (default): one random byte per element, a mask about 25x "
                   "cheaper to draw; bernoulli: F.dropout's very draws")
    p.add_argument("--lr", type=float_range(0.0, lo_open=True), default=None,
                   help="default: the model's")
    p.add_argument("--weight-decay", type=float_range(0.0), default=None,
                   help="default: the model's")
    p.add_argument("--epochs", type=int_range(1), default=None,
                   help="default 200 (node), the task's for --task link/graph, 50 rgcn")
    p.add_argument("--patience", type=int_range(1), default=None,
                   help="early-stopping patience (epochs; default 100 for node "
                   "classification, none for the other tasks)")
    p.add_argument("--seed", type=int_range(0), default=0)
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="feature storage: bf16 keeps features and activations in bfloat16 "
                   "(weights, sums and loss float32); one-process full-graph training only")
    p.add_argument(
        "--no-normalize-features",
        action="store_true",
        help="keep raw features (default: scale each row to sum 1, as for Planetoid)",
    )
    p.add_argument(
        "--checkpoint", type=checkpoint_path, default=None,
        help="checkpoint file (written atomically); on ranks (full-graph) a folder with one "
        "sub-folder of rank shards and a manifest per saved epoch",
    )
    p.add_argument("--checkpoint-every", type=int_range(1), default=10)
    again = p.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true",
                       help="continue from --checkpoint if it exists (a checkpoint folder: "
                       "from its newest restorable epoch, on any --nprocs/--algo)")
    again.add_argument("--restart", action="store_true",
                       help="train from epoch 0 on a checkpoint folder that holds saved "
                       "epochs; they are deleted once this run's first checkpoint is saved")
    add_task_flags(p)
    add_device_flag(p)
    add_json_flag(p)
    add_run_flags(p)
    dist = p.add_argument_group("distributed full-graph training")
    dist.add_argument("--nprocs", type=int_range(1), default=1,
                      help="spawn this many local ranks")
    dist.add_argument("--algo", choices=(*ALGORITHMS, "auto"), default=None,
                      help="auto: of the configurations `plan --auto` predicts fastest "
                           "(algorithm, replication, comm and partition), the model's "
                           "first choice unless another ran >10%% faster in a few trial "
                           "epochs (--auto-trials; --model rgcn: the first choice)")
    dist.add_argument("--auto-trials", type=int_range(1), default=None, metavar="K",
                      help="--algo auto: try up to K configurations predicted within 1.5x "
                           "of the fastest for a few epochs each; train the fastest "
                           "measured if it beat the model's first choice by >10%% "
                           "(1: trust the model alone; default 3, or 1 with "
                           "--max-rank-memory: runs one after another in a process keep "
                           "memory the C allocator holds on to, which the per-run memory "
                           "prediction does not bound)")
    add_profile_flags(dist, "--algo auto")
    dist.add_argument("--dropout-masks", choices=("auto", "global", "block"), default=None,
                      help="global: every rank draws the whole graph's dropout mask and "
                           "keeps its rows (the same result as one process, at an n x f "
                           "draw per layer on every rank); block: each vertex block draws "
                           "its own (what scales); default: global for a graph loaded whole, "
                           "block for a partitioned folder and for --algo auto")
    dist.add_argument("--overlap", nargs="?", const="on", default="off",
                      choices=("on", "off", "auto"),
                      help="1d/1.5d: overlap communication with computation (dense: the "
                           "next blocks' broadcasts, from up to three roots at once, with "
                           "the SpMM of the current one, for three blocks of H in memory "
                           "instead of one; sparse: the all-to-all with the SpMM of the "
                           "rank's own tile; float32 moves X in column slices, each "
                           "multiplied while the next arrives); results unchanged to the "
                           "bit. auto: a short trial of each 1d/1.5d configuration with and "
                           "without it decides (with --algo auto, of every configuration "
                           "tried; like --auto-trials > 1, runs one after another in a "
                           "process, whose peak the per-run memory prediction does not "
                           "bound); bare --overlap means on")
    dist.add_argument(
        "--max-rank-memory", type=float_range(0.0, lo_open=True), default=None,
        metavar="GIB",
        help="refuse, before any rank starts, when the busiest rank's predicted peak "
        "(its tiles, features, model, optimiser, training, the graph it loads and the "
        "process: --profile's, else 384 MiB) exceeds this many GiB",
    )
    dist.add_argument("--replication", type=int_range(1), default=1,
                      help="replication factor c (1.5D)")
    dist.add_argument(
        "--comm",
        choices=("dense", "sparse"),
        default="dense",
        help="dense: communication-oblivious; sparse: send only needed rows",
    )
    dist.add_argument("--partition", default="block",
                      help="partitioner name (block: even contiguous ranges) or partition file")
    dist.add_argument("--backend", default=None, help="gloo or nccl (default: nccl on CUDA)")
    dist.add_argument(
        "--timeout", type=float_range(0.0, lo_open=True), default=60.0,
        help="seconds before ranks give up on a failed peer",
    )
    mb = p.add_argument_group("sampled minibatch training")
    mb.add_argument("--mode", choices=("fullgraph", "minibatch"), default="fullgraph")
    mb.add_argument("--sampler", choices=("sage", "ladies", "shadow"), default="sage")
    mb.add_argument("--fanouts", type=int_list(1), default=[15, 10, 5],
                    help="per-layer fan-outs (sage, shadow; default 15,10,5)")
    mb.add_argument("--batch-size", type=int_range(1), default=None,
                    help="seed nodes per minibatch (default 1024); graphs per batch for "
                    "--task graph (default 32)")
    mb.add_argument("--bulk", type=int_range(1), default=64, help="minibatches sampled per call")
    mb.add_argument(
        "--topology", choices=("replicated", "partitioned"), default="replicated",
        help="with several ranks: every rank holds the whole graph (replicated), or its "
        "rows of A and of the features only (partitioned, 1.5D with --replication)",
    )
    mb.add_argument(
        "--feature-cache-mb", type=float_range(0.0), default=0.0,
        help="partitioned topology: MiB per rank of cached remote feature rows, highest "
        "in-degree first (default 0: no cache)",
    )


def checkpoint_path(text: str) -> Path:
    """A checkpoint file, or a folder for a distributed run: which of the two a run may use
    is known only once all flags are parsed
    (:func:`sparsegnn.train.train_request.run_train` checks it)."""
    return output_dir(text) if Path(text).is_dir() else output_file(text)
