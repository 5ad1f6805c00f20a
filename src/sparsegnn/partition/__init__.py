"""sparsegnn.partition."""
