"""GNN layers and models whose message passing is SpMM on any operator."""

from sparsegnn.nn.conv import GCNConv, SAGEConv
from sparsegnn.nn.models import GCN, GraphSAGE
from sparsegnn.nn.operator import (
    Operator,
    as_operator,
    graph_operator,
    normalize,
    operator_for,
)

__all__ = ["GCN", "GCNConv", "GraphSAGE", "Operator", "SAGEConv", "as_operator",
           "graph_operator", "normalize", "operator_for"]
