"""The flags of ``sparsegnn train`` for the tasks beside node classification: link
prediction (``--task link``), graph classification (``--task graph``) and R-GCN
(``--model rgcn`` on a typed graph). Registration only; what they become is
:mod:`sparsegnn.cli.train_tasks`'s. No library import (``--help`` stays light).
"""

from __future__ import annotations

import argparse

from sparsegnn.cli.common import float_range, int_range, output_file

TASKS = ("node", "link", "graph")


def add_task_flags(p: argparse.ArgumentParser) -> None:
    """``--task`` and the options of each task, in their own ``--help`` groups."""
    p.add_argument(
        "--task", choices=TASKS, default="node",
        help="node: node classification (default; --model rgcn on a typed graph: R-GCN); "
        "link: link prediction with an edge decoder (gcn/sage encoder; defaults PyG's "
        "example: hidden 128, out 64, dropout 0, weight decay 0, 100 epochs; --model "
        "rgcn on a knowledge graph, e.g. umls: R-GCN + DistMult, filtered MRR); graph: "
        "whole-graph classification of a graph set, k-fold (gin/gcn; defaults the GIN "
        "paper's: 5 layers, hidden 32, batches of 32, lr 0.01 halved every 50 epochs, "
        "100 epochs)")
    link = p.add_argument_group("link prediction (--task link)")
    link.add_argument("--decoder", choices=("dot", "mlp", "distmult"), default=None,
                      help="edge decoder (default dot)")
    link.add_argument("--negatives", choices=("uniform", "degree", "tail"), default=None,
                      help="how training negatives are drawn (default uniform)")
    link.add_argument("--neg-ratio", type=float, default=None,
                      help="negatives per positive (default 1)")
    link.add_argument("--val-ratio", type=float_range(0.0, 1.0, hi_open=True), default=None,
                      help="share of the edges held out for validation (default 0.05)")
    link.add_argument("--test-ratio", type=float_range(0.0, 1.0, hi_open=True), default=None,
                      help="share of the edges held out for test (default 0.1)")
    link.add_argument("--out-channels", type=int_range(1), default=None,
                      help="embedding width (default 64)")
    link.add_argument("--split-out", type=output_file, default=None,
                      help="save the edge split used to this file")
    graph = p.add_argument_group("graph classification (--task graph)")
    graph.add_argument("--pool", choices=("sum", "mean", "max"), default=None,
                       help="readout (default: the model's, gin sum, gcn mean)")
    graph.add_argument("--folds", type=int_range(2), default=None,
                       help="stratified folds (default 10)")
    graph.add_argument("--fold-seed", type=int_range(0), default=None,
                       help="seed of the fold assignment (default 0)")
    graph.add_argument("--lr-step", type=int_range(0), default=None,
                       help="epochs between halvings of the learning rate (default 50; "
                       "0 keeps it)")
    rgcn = p.add_argument_group("R-GCN (--model rgcn on a typed graph)")
    how = rgcn.add_mutually_exclusive_group()
    how.add_argument("--num-bases", type=int_range(1), default=None,
                     help="basis decomposition of the relation weights")
    how.add_argument("--num-blocks", type=int_range(1), default=None,
                     help="block-diagonal relation weights (needs features)")
