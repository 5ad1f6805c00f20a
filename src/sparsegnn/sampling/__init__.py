"""sparsegnn.sampling."""
