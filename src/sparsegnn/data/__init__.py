"""Datasets, formats and generators: where every graph enters sparsegnn."""

from sparsegnn.data.graph import GraphData

__all__ = ["GraphData"]
