"""sparsegnn.distributed."""
