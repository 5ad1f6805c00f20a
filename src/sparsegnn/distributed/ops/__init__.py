"""Distributed operators: the partitioned SpMMs (1D, 1.5D, 2D, 3D, sparsity-aware),
feature slicing, the per-rank training task and distributed minibatch sampling.

Each operator has the local CSR's ``matmul`` interface, so the unchanged models run on it
with exact gradients.
"""
