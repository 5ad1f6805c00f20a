"""The first layer's ``X W^T`` as an SpMM when the input features are mostly zeros.

Bag-of-words features (Cora: 1.3% nonzero, the hashed TF-IDF CiteSeer: 5%) make the dense
product of the first layer, ``[n, F] x [F, H]`` with F in the thousands, the bulk of a
full-graph epoch on small graphs: forward, the weight gradient ``X^T G`` and every
evaluation pass each multiply the whole zero-filled matrix. Stored as CSR, the same
products cost ``nnz(X) x H``, a density's share of the work.

:func:`sparsify_input` swaps the linear maps of a model's first layer that read the raw
features for :class:`SparseInputLinear`, which owns the very ``weight`` and ``bias``
parameters (state-dict names unchanged, so checkpoints and optimisers are unaffected)
and takes the sparse path only for the feature tensor it was built from (same storage,
shape and strides), falling back to ``F.linear`` for anything else. The CSR copy is
taken once, so the features must not be changed in place afterwards.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from sparsegnn.sparse import CSRMatrix, spmm

# Above this share of nonzeros the dense GEMM wins (measured on Cora and CiteSeer-sized
# inputs: the SpMM does ~1/10 of the GEMM's flops per second).
MAX_DENSITY = 0.1


class SparseInputLinear(nn.Module):
    """``x W^T + b`` computed as ``X_csr @ W^T`` for one fixed feature matrix ``x``."""

    def __init__(self, lin: nn.Linear, features: torch.Tensor):
        super().__init__()
        self.in_features, self.out_features = lin.in_features, lin.out_features
        self.weight = lin.weight
        self.bias = lin.bias
        self._source = features
        rows, cols = features.nonzero(as_tuple=True)
        self._csr = CSRMatrix.from_coo(rows, cols, features[rows, cols],
                                       tuple(features.shape))

    def forward(self, x: torch.Tensor, bias: bool = True) -> torch.Tensor:
        b = self.bias if bias else None
        if not self._is_source(x):
            return F.linear(x, self.weight, b)
        out = spmm(self._csr, self.weight.t().contiguous())
        return out if b is None else out + b

    def _is_source(self, x: torch.Tensor) -> bool:
        src = self._source
        return (x.data_ptr() == src.data_ptr() and x.shape == src.shape
                and x.stride() == src.stride() and x.dtype == src.dtype)


def density(x: torch.Tensor) -> float:
    """The share of nonzero entries of ``x``."""
    return float(torch.count_nonzero(x)) / max(1, x.numel())


def sparsify_input(model: nn.Module, features: torch.Tensor,
                   max_density: float = MAX_DENSITY) -> int:
    """Swap the first layer's linear maps over the raw features for
    :class:`SparseInputLinear` when ``features`` is at most ``max_density`` nonzero;
    returns how many were swapped (0: dense features, or no such layer)."""
    layers = getattr(model, "layers", None)
    if not layers or features.dim() != 2 or density(features) > max_density:
        return 0
    first = layers[0]
    swapped = 0
    for name, child in list(first.named_children()):
        if isinstance(child, nn.Linear) and child.in_features == features.shape[1]:
            setattr(first, name, SparseInputLinear(child, features))
            swapped += 1
    return swapped
