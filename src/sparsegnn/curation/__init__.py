"""sparsegnn.curation."""
