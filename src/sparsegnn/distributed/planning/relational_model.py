"""Analytic bytes of R-GCN on a grid: one distributed SpMM per relation, composed.

A relational layer is ``X W_0 + sum_r A_r X W_r``; every ``A_r`` is cut into the grid's
tiles like a homogeneous adjacency (the same vertex blocks), and the layer multiplies by
each relation's distributed operator in turn. So the epoch's SpMM bytes are the sum over
relations of :func:`~sparsegnn.distributed.planning.comm_model.predict`'s SpMM phases for
that relation (its own tile nonzero tables on 2D/3D, where the A tiles travel; with
sparsity-aware 1D/1.5D communication, the rows that relation's tiles use), and the
rest (the gradient all-reduce of all parameters, the loss and two correct counts) is
counted once, as for any model. The root weight ``X W_0`` is row-local: no bytes.

Which width each SpMM has mirrors :class:`~sparsegnn.nn.rgcn.RGCNConv` on operators it
cannot stack (``_per_relation``): it multiplies ``X W_r`` (width ``out``) when the layer
narrows and its weights are not block-diagonal, else ``X`` (width ``in``); a featureless
first layer multiplies rows of ``W_r`` (width ``out``). The backward SpMM runs whenever
the multiplied tensor needs a gradient: always, except the first layer's raw features.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from sparsegnn.distributed.layout.block_partition import BlockPartition
from sparsegnn.distributed.layout.grid import GridShape
from sparsegnn.distributed.planning.comm_model import NnzTable, SpmmCall, Volume, predict
from sparsegnn.distributed.planning.plan import rowwise_volume

SPMM_PHASES = ("forward_spmm", "backward_spmm")


def rgcn_schedule(widths: Sequence[int], *, featureless: bool = False,
                  block_diagonal: bool = False) -> list[SpmmCall]:
    """One relation's distributed SpMMs in an epoch (training forward, evaluation forward,
    backward) for layers of ``widths`` (input width first)."""
    forward, backward = [], []
    for layer, (a, b) in enumerate(itertools.pairwise(widths)):
        ids_first = featureless and layer == 0
        transform_first = ids_first or (b < a and not block_diagonal)
        width = b if transform_first else a
        forward.append(SpmmCall(width, "forward_spmm"))
        if transform_first or layer > 0:
            backward.append(SpmmCall(width, "backward_spmm"))
    return forward * 2 + backward


def rgcn_predict(shape: GridShape, part: BlockPartition, rank: int, calls: list[SpmmCall],
                 *, relations: int, value_bytes: int, num_params: int,
                 nnz: Sequence[dict[str, NnzTable]] | None = None,
                 pairs: Sequence[dict[str, np.ndarray]] | None = None) -> Volume:
    """Bytes this rank sends and receives in one R-GCN epoch, per phase: ``calls``
    (:func:`rgcn_schedule`) for each of ``relations`` operators, ``nnz[r]`` being relation
    r's tile tables (2D/3D only, :func:`~sparsegnn.distributed.planning.comm_model.tile_nnz`
    of ``A_r`` and ``A_r^T``); ``pairs[r]``: relation r's
    :func:`~sparsegnn.distributed.planning.plan.phase_pairs` for sparsity-aware 1D/1.5D
    communication (each rank receives only the rows relation r's tiles use)."""
    out = predict(shape, part, rank, [], value_bytes=value_bytes, num_params=num_params)
    for r in range(relations):
        if pairs is not None:
            volume = rowwise_volume(shape, part, calls, value_bytes, pairs[r])
            spmm = {ph: {"sent": int(v.sent[rank]), "recv": int(v.recv[rank])}
                    for ph, v in volume.items()}
        else:
            spmm = predict(shape, part, rank, calls, value_bytes=value_bytes, num_params=0,
                           nnz=None if nnz is None else nnz[r])
        for phase in SPMM_PHASES:
            if phase in spmm:
                v = out.setdefault(phase, {"sent": 0, "recv": 0})
                v["sent"] += spmm[phase]["sent"]
                v["recv"] += spmm[phase]["recv"]
    return {phase: v for phase, v in out.items() if v["sent"] or v["recv"]}
