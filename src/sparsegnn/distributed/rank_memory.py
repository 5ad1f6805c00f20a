"""Predicted peak memory of the busiest rank of a distributed configuration.

:func:`predict_memory` adds up what a rank holds (its tiles of A, its feature rows, the
model and Adam's moments), what training adds, the blocks of H an overlapped product
keeps in flight, the process's own base and growth, and, where every rank loads the
graph whole, that graph and the building of its operator (:func:`whole_graph_bytes`).
It is apart from the epoch-time model in :mod:`sparsegnn.distributed.cost` because memory
is a limit, not a price: ``--max-rank-memory`` and the automatic choice rule
configurations out with it before any time is compared, and it reads no profile rates.
"""

from __future__ import annotations

import itertools
from typing import Any

from sparsegnn.distributed.cost import feature_column_count, rank_nonzeros
from sparsegnn.distributed.grid import GridShape
from sparsegnn.distributed.partition import stage_blocks
from sparsegnn.distributed.spmm import col_lanes


def predict_memory(layout: Any, cfg: Any, value_bytes: int, overhead: int = 0,
                   whole_graph: bool = False) -> int:
    """Predicted peak bytes of the busiest rank: what it holds (its tiles of A, stored
    twice when A^T is kept apart; its feature rows, on 2D/3D only its column slice of
    them; the model and Adam's two moments), what training adds, measured as about two
    copies of its input rows (dropout's output and the gathered block of H) on a
    4M-vertex graph (benchmarks/memory_scaling), the further blocks of H an overlapped
    dense product holds in flight (``cfg.overlap``), and ``overhead``: what the process is
    before its data (the profile's base) and its growth beyond it (the calibration
    job's), so that the prediction is of the whole resident set a memory limit caps.
    ``whole_graph``: every rank also keeps the graph it loaded (a dataset or generator
    given by name; ranks that read a partitioned folder load only their share) and
    builds the whole operator from it (:func:`whole_graph_bytes`). Counting the loaded
    graph only twice (the transient copy loading passes through) left the prediction
    8-85 MiB short of the measured peak on 131k- and 262k-vertex SBM graphs at p = 2,
    and 25-195 MiB short under ``train --algo auto`` on 32k-131k-vertex SBM graphs of
    degree 32 at p = 4, where building the operator is the peak."""
    g, shape, part = layout.graph, layout.shape, layout.part
    operator = g.operator()
    nnz = rank_nonzeros(shape, part, operator)
    f = g.num_features or cfg.hidden
    widths = [f] + [cfg.hidden] * (cfg.num_layers - 1) + [g.num_classes or cfg.hidden]
    params = sum(a * b + b for a, b in itertools.pairwise(widths))
    tiles = 1 if operator.symmetric else 2
    blocks_rows = max(part.size(b) for b in range(shape.row_blocks))
    busiest = 0
    for rank in range(shape.size):
        i, j, _ = shape.coords(rank)
        rows = part.size(i)
        count = len(stage_blocks(shape, j)) if shape.algo in ("1d", "1.5d") else 1
        topology = tiles * (count * (rows + 1) * 8 + int(nnz[rank]) * (8 + value_bytes))
        features = rows * feature_column_count(shape, j, f) * value_bytes
        held = topology + features + 3 * params * value_bytes
        busiest = max(busiest, held + 2 * features
                      + _blocks_in_flight(shape, j, cfg) * blocks_rows * max(widths) * value_bytes)
    return busiest + overhead + (whole_graph_bytes(g, value_bytes) if whole_graph else 0)


# What building the whole graph's operator takes at its peak beyond the loaded graph, per
# nonzero of the operator: the CSR, its self loops and normalised values, row ids, and
# the symmetry check's transpose (sort key, permutation, gathered copies). Measured 90
# bytes on a 262k-vertex SBM of 8.6M nonzeros (session 11; /tmp script, not kept); the
# ranks of one job peak up to 15% apart (754-868 MiB on a 131k-vertex SBM at p = 4),
# which the rest of the prediction does not cover at that size, hence 112.
OPERATOR_BUILD_BYTES_PER_NONZERO = 112


def whole_graph_bytes(graph: Any, value_bytes: int) -> int:
    """What a rank that loads ``graph`` whole adds to its peak: the loaded graph, plus the
    larger of a transient copy of it (loading passes through one) and the building of
    the whole operator it cuts its share from."""
    loaded = loaded_graph_bytes(graph, value_bytes)
    return loaded + max(loaded, OPERATOR_BUILD_BYTES_PER_NONZERO * graph.operator().nnz)


def _blocks_in_flight(shape: GridShape, col: int, cfg: Any) -> int:
    """Blocks of H an overlapped dense 1D/1.5D product holds beyond the one the plain
    loop receives into: one per further lane its stages use (distributed.spmm)."""
    lanes = col_lanes(shape.algo, cfg.comm, cfg.overlap)
    return min(lanes, len(stage_blocks(shape, col))) - 1 if lanes > 1 else 0


def loaded_graph_bytes(graph: Any, value_bytes: int) -> int:
    """A loaded graph's bytes: its features, its edge list (two int64 per edge), its
    labels (int64) and three split masks."""
    n = graph.num_nodes
    return n * (graph.num_features * value_bytes + 8 + 3) + graph.num_edges * 16
