"""``GCNConv`` and ``SAGEConv`` with PyG's layer interface equal PyG's layers, option by option.

Mirrors the cases of PyG's own ``test_gcn_conv.py`` and ``test_sage_conv.py`` (edge
weights, ``torch.sparse`` adjacencies, ``EdgeIndex``, ``SparseTensor`` where installed,
bipartite input, every constructor option, caching), each on random directed multigraphs
(repeated edges, repeated self-loops, isolated nodes) in float64: outputs, the input's
gradient and every parameter's gradient. Ours is loaded from PyG's ``state_dict``
(strict), so equal names are tested on every case; checkpoints also move back.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest
import torch

from sparsegnn.nn import GCNConv, SAGEConv
from sparsegnn.sparse import CSRMatrix

pyg = pytest.importorskip("torch_geometric")
pyg_nn = pytest.importorskip("torch_geometric.nn")
pytestmark = [pytest.mark.usefixtures("one_thread"),
              # PyG converts a COO adjacency to CSR, and builds sparse tensors, with warnings.
              pytest.mark.filterwarnings("ignore:Converting sparse tensor:UserWarning"),
              pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")]

NUM_GRAPHS = 20
FIN, FOUT = 3, 2


def multigraph(gen: torch.Generator, n_src: int, n_dst: int) -> torch.Tensor:
    """An edge_index from ``n_src`` to ``n_dst`` nodes with repeated edges, repeated
    self-loops (when square) and isolated nodes (the last ones of each side)."""
    src_used = int(torch.randint(1, n_src + 1, (1,), generator=gen))
    dst_used = int(torch.randint(1, n_dst + 1, (1,), generator=gen))
    e = int(torch.randint(0, 3 * max(src_used, dst_used), (1,), generator=gen))
    edges = torch.stack([torch.randint(0, src_used, (e,), generator=gen),
                         torch.randint(0, dst_used, (e,), generator=gen)])
    parts = [edges, edges[:, : e // 2]]
    if n_src == n_dst:
        k = int(torch.randint(0, 4, (1,), generator=gen))
        loops = torch.randint(0, min(src_used, dst_used), (k,), generator=gen).repeat(2, 1)
        parts += [loops, loops]
    ei = torch.cat(parts, dim=1)
    return ei[:, torch.randperm(ei.shape[1], generator=gen)]


def graphs(seed: int, bipartite: bool = False) -> list[tuple[torch.Tensor, int, int]]:
    """``NUM_GRAPHS`` edge indices with their ``(n_src, n_dst)``."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(NUM_GRAPHS):
        n_src = int(torch.randint(1, 9, (1,), generator=gen))
        n_dst = int(torch.randint(1, 9, (1,), generator=gen)) if bipartite else n_src
        out.append((multigraph(gen, n_src, n_dst), n_src, n_dst))
    return out


def torch_sparse_adj(ei: torch.Tensor, value: torch.Tensor, shape: tuple[int, int],
                     layout: torch.layout) -> torch.Tensor:
    """PyG's ``adj_t``: ``[n_dst, n_src]``, coalesced (a CSR matrix always is)."""
    coo = torch.sparse_coo_tensor(ei.flip(0), value, shape, check_invariants=True).coalesce()
    return coo if layout == torch.sparse_coo else coo.to_sparse_csr()


def _randomise(module: torch.nn.Module, gen: torch.Generator) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, dtype=p.dtype, generator=gen))


def _run(module: torch.nn.Module, x: Any, args: tuple, upstream: torch.Tensor
         ) -> tuple[torch.Tensor, list[torch.Tensor | None], dict[str, torch.Tensor]]:
    xs = [t.clone().requires_grad_(True) if t is not None else None
          for t in (x if isinstance(x, tuple) else (x,))]
    out = module(tuple(xs) if isinstance(x, tuple) else xs[0], *args)
    (out * upstream).sum().backward()
    grads = [None if t is None else t.grad for t in xs]
    return out.detach(), grads, {k: p.grad for k, p in module.named_parameters()}


def assert_same(ours: torch.nn.Module, theirs: torch.nn.Module, x: Any, args: tuple,
                gen: torch.Generator, context: str, ours_args: tuple | None = None) -> None:
    """Ours, loaded from PyG's random weights, gives PyG's output and gradients."""
    _randomise(theirs, gen)
    ours.load_state_dict(theirs.state_dict())
    n_out = theirs(x, *args).shape[0]
    upstream = torch.randn(n_out, FOUT, dtype=torch.float64, generator=gen)
    out, gx, grads = _run(ours, x, args if ours_args is None else ours_args, upstream)
    ref, ref_gx, ref_grads = _run(theirs, x, args, upstream)
    torch.testing.assert_close(out, ref, msg=lambda m: f"{context}: {m}")
    for got, want in zip(gx, ref_gx, strict=True):
        if want is not None:  # PyG leaves an unused input's grad at None
            torch.testing.assert_close(got, want, msg=lambda m: f"{context} input grad: {m}")
    assert grads.keys() == ref_grads.keys()
    for name, want in ref_grads.items():
        torch.testing.assert_close(grads[name], want, msg=lambda m, k=name: f"{context} {k}: {m}")


# ------------------------------------------------------------------------------- GCNConv
GCN_OPTIONS = [{}, {"improved": True}, {"add_self_loops": False},
               {"normalize": False, "add_self_loops": False}, {"bias": False}]


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("options", GCN_OPTIONS, ids=lambda o: ",".join(o) or "default")
def test_gcn_edge_index_and_weights_equal_pyg(options: dict, weighted: bool) -> None:
    gen = torch.Generator().manual_seed(1)
    for ei, n, _ in graphs(2):
        x = torch.randn(n, FIN, dtype=torch.float64, generator=gen)
        w = torch.rand(ei.shape[1], dtype=torch.float64, generator=gen) + 0.1
        args = (ei, w) if weighted else (ei,)
        assert_same(GCNConv(FIN, FOUT, **options).double(),
                    pyg_nn.GCNConv(FIN, FOUT, **options).double(), x, args, gen,
                    f"{options} n={n} edge_index={ei.tolist()}")


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr], ids=["coo", "csr"])
@pytest.mark.parametrize("options", [{}, {"improved": True},
                                     {"normalize": False, "add_self_loops": False}],
                         ids=["default", "improved", "raw"])
def test_gcn_torch_sparse_equals_pyg(options: dict, layout: torch.layout) -> None:
    """A weighted ``adj_t``. PyG's CSR path adds its self-loops wrongly where the diagonal
    is already set, so CSR graphs here have no self-loops (ours gives CSR what COO gets,
    tested below)."""
    gen = torch.Generator().manual_seed(3)
    for ei, n, _ in graphs(4):
        if layout == torch.sparse_csr:
            ei = ei[:, ei[0] != ei[1]]
        x = torch.randn(n, FIN, dtype=torch.float64, generator=gen)
        w = torch.rand(ei.shape[1], dtype=torch.float64, generator=gen) + 0.1
        adj = torch_sparse_adj(ei, w, (n, n), layout)
        assert_same(GCNConv(FIN, FOUT, **options).double(),
                    pyg_nn.GCNConv(FIN, FOUT, **options).double(), x, (adj,), gen,
                    f"{options} n={n} edge_index={ei.tolist()}")


def test_gcn_csr_with_self_loops_equals_coo() -> None:
    gen = torch.Generator().manual_seed(5)
    conv = GCNConv(FIN, FOUT).double()
    for ei, n, _ in graphs(6):
        x = torch.randn(n, FIN, dtype=torch.float64, generator=gen)
        w = torch.rand(ei.shape[1], dtype=torch.float64, generator=gen)
        coo = torch_sparse_adj(ei, w, (n, n), torch.sparse_coo)
        torch.testing.assert_close(conv(x, coo.to_sparse_csr()), conv(x, coo))


def test_gcn_edge_index_type_equals_pyg() -> None:
    gen = torch.Generator().manual_seed(7)
    for ei, n, _ in graphs(8):
        x = torch.randn(n, FIN, dtype=torch.float64, generator=gen)
        typed = pyg.EdgeIndex(ei, sparse_size=(n, n))
        assert_same(GCNConv(FIN, FOUT).double(), pyg_nn.GCNConv(FIN, FOUT).double(), x,
                    (typed,), gen, f"n={n}", ours_args=(typed,))


def test_gcn_sparse_tensor_equals_pyg() -> None:
    torch_sparse = pytest.importorskip("torch_sparse")
    gen = torch.Generator().manual_seed(9)
    for ei, n, _ in graphs(10):
        x = torch.randn(n, FIN, dtype=torch.float64, generator=gen)
        w = torch.rand(ei.shape[1], dtype=torch.float64, generator=gen) + 0.1
        adj = torch_sparse.SparseTensor.from_edge_index(ei, w, (n, n)).t()
        assert_same(GCNConv(FIN, FOUT).double(), pyg_nn.GCNConv(FIN, FOUT).double(), x,
                    (adj,), gen, f"n={n}")


def test_gcn_cached_keeps_the_first_operator_as_pyg() -> None:
    gen = torch.Generator().manual_seed(11)
    n = 6
    first, second = multigraph(gen, n, n), multigraph(gen, n, n)
    x = torch.randn(n, FIN, dtype=torch.float64, generator=gen)
    ours, theirs = GCNConv(FIN, FOUT, cached=True).double(), pyg_nn.GCNConv(
        FIN, FOUT, cached=True).double()
    ours.load_state_dict(theirs.state_dict())
    torch.testing.assert_close(ours(x, first), theirs(x, first))
    torch.testing.assert_close(ours(x, second), theirs(x, second))  # both: first's graph
    torch.testing.assert_close(ours(x, second), ours(x, first))
    assert not torch.allclose(fresh_output(theirs, x, second), ours(x, first))
    ours.reset_parameters()
    ours.load_state_dict(theirs.state_dict())
    torch.testing.assert_close(ours(x, second), fresh_output(theirs, x, second))


def fresh_output(conv: torch.nn.Module, x: torch.Tensor, ei: torch.Tensor) -> torch.Tensor:
    """What an uncached PyG ``GCNConv`` with ``conv``'s weights gives."""
    fresh = pyg_nn.GCNConv(FIN, FOUT).double()
    fresh.load_state_dict(conv.state_dict())
    return fresh(x, ei)


def test_gcn_refuses_what_pyg_refuses() -> None:
    with pytest.raises(ValueError, match="normalize"):
        GCNConv(FIN, FOUT, add_self_loops=True, normalize=False)
    x = torch.randn(3, FIN)
    with pytest.raises(ValueError, match="not bipartite"):
        GCNConv(FIN, FOUT)((x, x), torch.zeros(2, 0, dtype=torch.long))
    op = CSRMatrix.identity(3)
    with pytest.raises(ValueError, match="already holds its weights"):
        GCNConv(FIN, FOUT)(x, op, torch.ones(3))


# ------------------------------------------------------------------------------ SAGEConv
SAGE_OPTIONS = [{}, {"normalize": True}, {"root_weight": False}, {"project": True},
                {"bias": False}]
AGGRS = ["mean", "sum", "max"]


@pytest.mark.parametrize("aggr", AGGRS)
@pytest.mark.parametrize("options", SAGE_OPTIONS, ids=lambda o: ",".join(o) or "default")
def test_sage_options_equal_pyg(options: dict, aggr: str) -> None:
    gen = torch.Generator().manual_seed(13)
    for ei, n, _ in graphs(14):
        x = torch.randn(n, FIN, dtype=torch.float64, generator=gen)
        assert_same(SAGEConv(FIN, FOUT, aggr=aggr, **options).double(),  # type: ignore[arg-type]
                    pyg_nn.SAGEConv(FIN, FOUT, aggr=aggr, **options).double(), x, (ei,), gen,
                    f"{aggr} {options} n={n} edge_index={ei.tolist()}")


@pytest.mark.parametrize("aggr", AGGRS)
@pytest.mark.parametrize("root", ["x_dst", "none"])
def test_sage_bipartite_equals_pyg(aggr: str, root: str) -> None:
    """``SAGEConv((f_src, f_dst), out)`` on ``(x_src, x_dst)``, or ``(x_src, None)`` with
    ``size`` (no root term), as PyG's test does."""
    gen = torch.Generator().manual_seed(15)
    for ei, n_src, n_dst in graphs(16, bipartite=True):
        x_src = torch.randn(n_src, FIN, dtype=torch.float64, generator=gen)
        x_dst = torch.randn(n_dst, FIN + 2, dtype=torch.float64, generator=gen)
        x = (x_src, x_dst if root == "x_dst" else None)
        assert_same(SAGEConv((FIN, FIN + 2), FOUT, aggr=aggr).double(),  # type: ignore[arg-type]
                    pyg_nn.SAGEConv((FIN, FIN + 2), FOUT, aggr=aggr).double(), x,
                    (ei, (n_src, n_dst)), gen, f"{aggr} {n_src}->{n_dst} {ei.tolist()}")


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr], ids=["coo", "csr"])
@pytest.mark.parametrize("aggr", AGGRS)
def test_sage_torch_sparse_equals_pyg(aggr: str, layout: torch.layout) -> None:
    """A weighted bipartite ``adj_t``: PyG aggregates ``a_ij x_j`` (the mean over the
    row's stored entries)."""
    gen = torch.Generator().manual_seed(17)
    for ei, n_src, n_dst in graphs(18, bipartite=True):
        x = (torch.randn(n_src, FIN, dtype=torch.float64, generator=gen),
             torch.randn(n_dst, FIN, dtype=torch.float64, generator=gen))
        w = torch.randn(ei.shape[1], dtype=torch.float64, generator=gen)
        adj = torch_sparse_adj(ei, w, (n_dst, n_src), layout)
        assert_same(SAGEConv(FIN, FOUT, aggr=aggr).double(),  # type: ignore[arg-type]
                    pyg_nn.SAGEConv(FIN, FOUT, aggr=aggr).double(), x, (adj,), gen,
                    f"{aggr} {n_src}->{n_dst} {ei.tolist()}")


def test_sage_edge_index_type_equals_pyg() -> None:
    """Against PyG given the plain ``edge_index``: PyG 2.8's own ``SAGEConv`` fails on an
    unsorted ``EdgeIndex`` of a multigraph (an assertion in its ``Index`` arithmetic)."""
    gen = torch.Generator().manual_seed(19)
    for ei, n, _ in graphs(20):
        x = torch.randn(n, FIN, dtype=torch.float64, generator=gen)
        typed = pyg.EdgeIndex(ei, sparse_size=(n, n))
        assert_same(SAGEConv(FIN, FOUT).double(), pyg_nn.SAGEConv(FIN, FOUT).double(), x,
                    (ei,), gen, f"n={n}", ours_args=(typed,))


def test_sage_sparse_tensor_equals_pyg() -> None:
    torch_sparse = pytest.importorskip("torch_sparse")
    gen = torch.Generator().manual_seed(21)
    for ei, n_src, n_dst in graphs(22, bipartite=True):
        x = (torch.randn(n_src, FIN, dtype=torch.float64, generator=gen),
             torch.randn(n_dst, FIN, dtype=torch.float64, generator=gen))
        adj = torch_sparse.SparseTensor(row=ei[0], col=ei[1], sparse_sizes=(n_src, n_dst)).t()
        assert_same(SAGEConv(FIN, FOUT).double(), pyg_nn.SAGEConv(FIN, FOUT).double(), x,
                    (adj,), gen, f"{n_src}->{n_dst}")


class _StoredEntries:
    """What a ``torch_sparse.SparseTensor`` shows the layers (``coo``, ``sparse_sizes``),
    its entries stored as given, a repeated one twice: runs where torch_sparse is absent."""

    def __init__(self, rows: torch.Tensor, cols: torch.Tensor, sizes: tuple[int, int]):
        self.rows, self.cols, self.sizes = rows, cols, sizes

    def coo(self) -> tuple[torch.Tensor, torch.Tensor, None]:
        return self.rows, self.cols, None

    def sparse_sizes(self) -> tuple[int, int]:
        return self.sizes


def test_sage_mean_over_a_sparse_tensor_counts_repeats_as_an_edge_index_does() -> None:
    gen = torch.Generator().manual_seed(23)
    for ei, n_src, n_dst in graphs(24, bipartite=True):
        x = (torch.randn(n_src, FIN, dtype=torch.float64, generator=gen),
             torch.randn(n_dst, FIN, dtype=torch.float64, generator=gen))
        layer = SAGEConv(FIN, FOUT).double()
        stored = _StoredEntries(ei[1], ei[0], (n_dst, n_src))
        torch.testing.assert_close(layer(x, stored), layer(x, ei), rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- checkpoints
LAYERS: list[tuple[str, Callable[[Any], torch.nn.Module]]] = [
    ("gcn", lambda m: m.GCNConv(FIN, FOUT)),
    ("gcn-no-bias", lambda m: m.GCNConv(FIN, FOUT, bias=False)),
    ("sage", lambda m: m.SAGEConv(FIN, FOUT)),
    ("sage-project", lambda m: m.SAGEConv(FIN, FOUT, project=True)),
    ("sage-no-root-no-bias", lambda m: m.SAGEConv(FIN, FOUT, root_weight=False, bias=False)),
]


def _through_file(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("make", [m for _, m in LAYERS], ids=[n for n, _ in LAYERS])
def test_checkpoints_move_pyg_to_ours_to_pyg(make: Callable[[Any], torch.nn.Module]) -> None:
    import sparsegnn.nn as ours_nn

    gen = torch.Generator().manual_seed(23)
    theirs = make(pyg_nn).double()
    _randomise(theirs, gen)
    ours = make(ours_nn).double()
    ours.load_state_dict(_through_file(theirs))
    back = make(pyg_nn).double()
    back.load_state_dict(_through_file(ours))
    for ei, n, _ in graphs(24):
        x = torch.randn(n, FIN, dtype=torch.float64, generator=gen)
        torch.testing.assert_close(ours(x, ei), theirs(x, ei))
        assert torch.equal(back(x, ei), theirs(x, ei))
