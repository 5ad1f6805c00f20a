"""sparsegnn.train."""
