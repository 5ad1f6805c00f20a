"""sparsegnn.nn."""
