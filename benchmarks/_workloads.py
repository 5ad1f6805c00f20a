"""The workloads more than one benchmark measures: the SpMM graphs and their
bandwidth bounds, the peers' entry points, and the GCN training configurations.

What spmm.py / hugepages.py / fullgraph.py measure on the CPU and gpu_check.py on CUDA
is defined once here, so that no benchmark imports another.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from sparsegnn.data import load_cora
from sparsegnn.data.generators import rmat, sbm, uniform_random
from sparsegnn.data.graph import GraphData
from sparsegnn.nn import GCN
from sparsegnn.sparse import CSRMatrix, gcn_norm
from sparsegnn.sparse.reorder import Reordering, reorder


# ---------------------------------------------------------------------- bandwidth
def counts_like(x: torch.Tensor) -> bool:
    """Whether PyG's link example would row-normalise ``x``: ``NormalizeFeatures`` scales
    rows of counts (Cora, CiteSeer) to sum 1, but rows of Gaussians (the generated SBM)
    can sum to about zero, which would blow them up."""
    return bool((x >= 0).all())


def stream_probe(nbytes: int) -> Callable[[], object]:
    """A copy of ``nbytes / 2`` bytes: ``nbytes`` of streaming traffic (read + write)."""
    src = torch.ones(max(1, nbytes // 8))
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def random_gather_probe(rows: int, width: int, gathers: int, bag: int) -> Callable[[], object]:
    """Read ``gathers`` uniformly random rows of a ``rows x width`` float32 table.

    Uses the fastest gather on hand, FBGEMM's software-prefetched embedding-bag sum on
    all threads, summing bags of ``bag`` rows: an SpMM of the same size in which no
    gathered row is ever reused, i.e. the random-access bound. Timed interleaved with
    the SpMMs it bounds, so that both see the same machine load.
    """
    table = torch.randn(rows, width)
    index = torch.randint(0, rows, (gathers,))
    offsets = torch.arange(0, gathers, max(1, bag))
    return lambda: torch.nn.functional.embedding_bag(index, table, offsets, mode="sum")


def check_same(ours: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """Fail the benchmark if a float32 product differs from torch's beyond rounding."""
    if not torch.allclose(ours, ref, rtol=1e-4, atol=1e-5):
        err = float((ours - ref).abs().max())
        raise AssertionError(f"{what}: result differs from torch's by {err}")


def spmm_stream_bytes(nnz: int, rows: int, width: int) -> int:
    """Compulsory traffic of a float32 CSR SpMM whose gathers all hit the cache.

    Indices and values (12 bytes per nonzero), row pointers, X read once and the output
    written once.
    """
    return nnz * 12 + (rows + 1) * 8 + 2 * rows * width * 4


# ---------------------------------------------------------------------- shared workloads
# What spmm.py / fullgraph.py measure on the CPU and gpu_check.py on CUDA: the graphs,
# the peers' entry points and the GCN configurations, defined once here so that no
# benchmark imports another.
WIDTHS = (16, 128)
# The ordering the acceptance check uses: one choice for every graph, fixed in advance.
DEFAULT_REORDERING = "community"


@dataclass(frozen=True)
class GraphSpec:
    name: str
    build: Callable[[], GraphData]


def graph_specs(quick: bool) -> list[GraphSpec]:
    scale = 14 if quick else 18
    n = 1 << scale
    return [
        GraphSpec("rmat", lambda: rmat(scale, edge_factor=8, seed=1)),
        GraphSpec("sbm", lambda: sbm(n, n >> 12, 16.0, mixing=0.1, num_features=0, seed=1)),
        GraphSpec("uniform", lambda: uniform_random(n, 16.0, seed=1)),
    ]


def try_pyg_spmm() -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None:
    try:
        from torch_geometric.utils import spmm as pyg_spmm
    except ImportError:
        return None
    return pyg_spmm


def torch_csr(a: CSRMatrix) -> torch.Tensor:
    """A torch CSR tensor of its own (not our cached view) for the peer timings."""
    return torch.sparse_csr_tensor(a.crow.clone(), a.col.clone(), a.val.clone(), a.shape,
                                   check_invariants=False)


# GCN training (fullgraph.py, gpu_check.py)
HIDDEN = 128
DROPOUT = 0.5
REORDERING = DEFAULT_REORDERING
OURS = ("ours", "ours_unordered")


def have_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def pyg_forms() -> tuple[str, ...]:
    """PyG's own forms available here; the SparseTensor one needs torch_sparse."""
    forms = ("pyg_edge_index", "pyg_csr")
    return (*forms, "pyg_sparse_tensor") if have_module("torch_sparse") else forms


def configurations() -> tuple[str, ...]:
    """Every configuration this machine can run (ours only without PyG)."""
    if not have_module("torch_geometric"):
        return OURS
    return (*OURS, *pyg_forms(), "pyg_csr_reordered")


# ---------------------------------------------------------------------- graphs
def load_graph(name: str) -> GraphData:
    """``cora`` or ``sbm<scale>`` (2^scale vertices, 2^(scale-12) communities)."""
    if name == "cora":
        return load_cora()
    scale = int(name.removeprefix("sbm"))
    n = 1 << scale
    return sbm(n, max(2, n >> 12), 16.0, mixing=0.1, num_features=128, seed=0)


# ---------------------------------------------------------------------- models
class PygGCN(nn.Module):
    """The same architecture as ``sparsegnn.nn.GCN`` from PyG's ``GCNConv``."""

    def __init__(self, in_channels: int, hidden: int, out_channels: int):
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.conv1 = GCNConv(in_channels, hidden, cached=True)
        self.conv2 = GCNConv(hidden, out_channels, cached=True)

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        x = F.dropout(x, DROPOUT, self.training)
        x = F.relu(self.conv1(x, adj))
        x = F.dropout(x, DROPOUT, self.training)
        return self.conv2(x, adj)


def pyg_adj_t(edge_index: torch.Tensor, num_nodes: int, sparse_tensor: bool) -> Any:
    """PyG's own conversion to a transposed adjacency ``adj_t``: a torch sparse CSR
    tensor, or with ``sparse_tensor`` a torch_sparse ``SparseTensor``."""
    from torch_geometric.data import Data
    from torch_geometric.transforms import ToSparseTensor

    layout = None if sparse_tensor else torch.sparse_csr
    data = ToSparseTensor(layout=layout)(Data(edge_index=edge_index, num_nodes=num_nodes))
    return data.adj_t


def setup(
    config: str, g: GraphData, device: torch.device | None = None
) -> tuple[nn.Module, Any, GraphData]:
    """Model, the operator it takes and the graph data in the order training uses.

    Normalisation and reordering run on the CPU (the orderings use scipy); operator,
    data and model then move to ``device`` before PyG's first (caching) forward.
    """
    device = device or torch.device("cpu")
    torch.manual_seed(0)
    n, classes = g.num_nodes, g.num_classes
    if config.startswith("ours"):
        adj = gcn_norm(CSRMatrix.from_edge_index(g.edge_index, n), symmetric=True)
        if config == "ours":
            adj, ordering = reorder(adj, REORDERING)
            g = move_nodes(g, ordering)
        model = GCN(g.num_features, HIDDEN, classes, num_layers=2, dropout=DROPOUT)
        return model.to(device), adj.to(device), to_device(g, device)
    edge_index = g.edge_index
    if config == "pyg_csr_reordered":
        adj = gcn_norm(CSRMatrix.from_edge_index(edge_index, n), symmetric=True)
        _, ordering = reorder(adj, REORDERING)
        g = move_nodes(g, ordering)
        edge_index = ordering.edge_index_to_new(edge_index)
    model = PygGCN(g.num_features, HIDDEN, classes).to(device)
    if config == "pyg_edge_index":
        op = edge_index
    else:
        op = pyg_adj_t(edge_index, n, sparse_tensor=config == "pyg_sparse_tensor")
    op, g = op.to(device), to_device(g, device)
    with torch.no_grad():  # fills GCNConv's normalisation cache: PyG's one-time setup
        model(g.x, op)
    return model, op, g


def move_nodes(g: GraphData, ordering: Reordering) -> GraphData:
    """The node data training needs, in the new vertex order (old copies released)."""
    assert g.x is not None and g.y is not None and g.train_mask is not None
    return GraphData(edge_index=g.edge_index, num_nodes=g.num_nodes, x=ordering.to_new(g.x),
                     y=ordering.to_new(g.y), train_mask=ordering.to_new(g.train_mask), name=g.name)


def to_device(g: GraphData, device: torch.device) -> GraphData:
    """The node data training needs on ``device`` (no copy when already there)."""
    assert g.x is not None and g.y is not None and g.train_mask is not None
    return GraphData(edge_index=g.edge_index, num_nodes=g.num_nodes, x=g.x.to(device),
                     y=g.y.to(device), train_mask=g.train_mask.to(device), name=g.name)


def epoch_fn(model: nn.Module, op: Any, g: GraphData) -> Callable[[], float]:
    """One training epoch (forward, loss on the training vertices, backward, Adam step)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    assert g.train_mask is not None and g.y is not None
    train = g.train_mask.nonzero().flatten()
    y_train = g.y[train]
    model.train()

    def epoch() -> float:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(g.x, op)[train], y_train)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    return epoch
