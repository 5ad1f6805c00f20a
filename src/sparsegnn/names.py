"""The names users choose among (models, algorithms, partitioners, seed orders, track building,
dropout masks),
defined once.

A module without imports, so the command line can offer these choices in ``--help``
without loading torch; the library modules that implement each choice import their
tuple from here.
"""

from __future__ import annotations

from typing import Literal

Algorithm = Literal["1d", "1.5d", "2d", "3d"]
ALGORITHMS: tuple[Algorithm, ...] = ("1d", "1.5d", "2d", "3d")
# The row-wise family: A and H cut into row blocks only, every rank multiplying whole
# feature rows (1.5D adds replicas of those blocks). The others (2D, 3D) also cut the
# feature columns into slices over the process columns (3D adds layers, a fiber).
ROW_WISE: tuple[Algorithm, ...] = ("1d", "1.5d")


def row_wise(algo: str) -> bool:
    """Whether ``algo`` is of the row-wise family (1D, 1.5D): whole feature rows per rank,
    the family that sparsity-aware communication and overlapped stages support."""
    return algo in ROW_WISE


def replicates(algo: str) -> bool:
    """Whether ``algo`` replicates its row blocks over c ranks (1.5D, ``--replication``)."""
    return algo == "1.5d"


def slices_features(algo: str) -> bool:
    """Whether ``algo`` cuts the feature columns over its process columns (2D, 3D)."""
    return algo in ALGORITHMS and not row_wise(algo)


ModelKind = Literal["gcn", "sage", "gat", "gatv2", "gin"]
# Every model kind nn.build_model makes and `train --model` offers.
MODEL_KINDS: tuple[ModelKind, ...] = ("gcn", "sage", "gat", "gatv2", "gin")
# The kinds whose layers attend over edges (the edge protocol, per-edge tensors of heads).
ATTENTION_MODELS: tuple[ModelKind, ...] = ("gat", "gatv2")

PARTITIONERS = ("block", "random", "metis", "kahip", "balanced")
SEED_ORDERS = ("random", "phi")
TRACK_METHODS = ("components", "walkthrough", "triplets")  # track building from edge scores
SCORING_PRECISIONS = ("fp32", "bf16")  # a tracking model's edge scoring

# How a model's dropout masks are drawn (see sparsegnn.nn.dropout).
MaskKind = Literal["bernoulli", "bytes"]
MASK_KINDS: tuple[MaskKind, ...] = ("bernoulli", "bytes")
# The models' default: the byte mask, the one that makes the GCN epoch cheap (a Bernoulli
# draw per element was ~40% of it) at unchanged accuracy (docs/results/kernels.md, issue 26).
DEFAULT_MASK: MaskKind = "bytes"
