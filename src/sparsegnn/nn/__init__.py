"""GNN layers and models whose message passing is sparse linear algebra on any operator."""

from sparsegnn.names import MODEL_KINDS
from sparsegnn.nn.conv import GCNConv, SAGEConv
from sparsegnn.nn.gat import GATConv, GATv2Conv, attention_pattern
from sparsegnn.nn.gin import GINConv
from sparsegnn.nn.models import GAT, GCN, GIN, GraphSAGE, build_model
from sparsegnn.nn.operator import (
    Operator,
    as_operator,
    block_operator,
    graph_operator,
    normalize,
    operator_for,
    unit_self_loops,
)
from sparsegnn.nn.rgcn import RGCNConv, relation_operators

__all__ = ["GAT", "GCN", "GIN", "MODEL_KINDS", "GATConv", "GATv2Conv", "GCNConv",
           "GINConv", "GraphSAGE", "Operator", "RGCNConv", "SAGEConv", "as_operator",
           "attention_pattern", "block_operator", "build_model", "graph_operator", "normalize",
           "operator_for", "relation_operators", "unit_self_loops"]
