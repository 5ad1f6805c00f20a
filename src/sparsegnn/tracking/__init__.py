"""sparsegnn.tracking."""
