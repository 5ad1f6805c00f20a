"""The fused CPU attention kernels (sparsegnn.sparse.native): equal to the torch path on
random patterns with empty rows, in both float dtypes and every vector path (f a multiple
of the vector width or not, 8 heads of 8), with exact gradients; they refuse indices
outside a pattern, and a machine without a working compiler keeps the torch path."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest
import torch

from sparsegnn.errors import ShapeError
from sparsegnn.sparse import (
    CSRMatrix,
    edge_softmax,
    native,
    sddmm_add,
    sddmm_dot,
    sddmm_leaky,
    spmm_values,
)
from sparsegnn.sparse.edge_kernels import pattern_transpose
from sparsegnn.sparse.multihead import heads_sddmm, heads_spmm
from sparsegnn.sparse.native import build

ROOT = Path(__file__).resolve().parents[1]
needs_kernels = pytest.mark.skipif(native.library() is None,
                                   reason="the fused kernels did not build on this machine")


def test_a_wheel_carries_the_c_source() -> None:
    """The source is compiled where the package is installed, so package data must
    list it (an installed wheel without it would warn and run the torch path)."""
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = table["tool"]["setuptools"]["package-data"]["sparsegnn"]
    from sparsegnn.tracking import chain_kernel, graph_kernel

    for path in (build.SOURCE, graph_kernel.SOURCE, chain_kernel.SOURCE):
        source = path.relative_to(ROOT / "src" / "sparsegnn").as_posix()
        assert any(fnmatch.fnmatch(source, p) for p in patterns), source


def pattern(rows: int, cols: int, seed: int) -> CSRMatrix:
    """A random pattern with repeated draws merged, self-loops and about a fifth of the
    rows empty."""
    gen = torch.Generator().manual_seed(seed)
    nnz = rows * 4
    row = torch.randint(0, rows, (nnz,), generator=gen)
    row = row[row % 5 != 0]
    col = torch.randint(0, cols, (row.numel(),), generator=gen)
    return CSRMatrix.from_coo(row, col, shape=(rows, cols))


def both(fn, *args):
    """``fn`` with the fused kernels and on the torch path."""
    with native.disabled():
        ref = fn(*args)
    return fn(*args), ref


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("heads", "f"), [(1, 1), (3, 5), (8, 8), (16, 8), (2, 16), (4, 12)])
def test_every_kernel_equals_the_torch_path(dtype: torch.dtype, heads: int, f: int) -> None:
    gen = torch.Generator().manual_seed(heads * 100 + f)
    for seed in range(4):
        a = pattern(37, 29, seed)
        left = torch.randn(37, heads, f, generator=gen, dtype=dtype)
        right = torch.randn(29, heads, f, generator=gen, dtype=dtype)
        u = torch.randn(37, heads, generator=gen, dtype=dtype)
        v = torch.randn(29, heads, generator=gen, dtype=dtype)
        vals = torch.randn(a.nnz, heads, generator=gen, dtype=dtype)
        tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
        att = torch.randn(heads, f, generator=gen, dtype=dtype)
        for fn, args in ((heads_sddmm, (a, left, right)), (heads_spmm, (a, vals, right)),
                         (sddmm_add, (a, u, v)), (edge_softmax, (a, vals)),
                         (sddmm_leaky, (a, left, right, att))):
            ours, ref = both(fn, *args)
            assert ours.dtype == dtype
            torch.testing.assert_close(ours, ref, **tol)


@needs_kernels
def test_the_softmax_exp_holds_across_the_float_range() -> None:
    """Scores hundreds apart within a row (underflow to 0) and a large shift: the
    vectorised exp against float64 torch, per entry within a few ulp."""
    x = torch.cat([torch.linspace(-120.0, 0.0, 4001), torch.tensor([-1e4, -87.5, -86.9])])
    a = CSRMatrix.from_coo(torch.zeros(x.numel(), dtype=torch.long), torch.arange(x.numel()),
                           shape=(1, x.numel()))
    for shift in (0.0, 1e3):
        ours = edge_softmax(a, (x + shift).unsqueeze(1)).squeeze(1)
        ref = torch.softmax((x + shift).double(), 0)
        torch.testing.assert_close(ours.double(), ref, rtol=1e-6, atol=1e-30)


@needs_kernels
def test_a_permutation_reads_values_in_another_order() -> None:
    """The transposed SpMM reads A's values through the permutation, as if gathered."""
    a = pattern(40, 40, 7)
    at, perm = pattern_transpose(a)
    vals, x = torch.randn(a.nnz, 3, dtype=torch.float64), torch.randn(40, 3, 8, dtype=torch.float64)
    torch.testing.assert_close(heads_spmm(at, vals, x, perm), heads_spmm(at, vals[perm], x))
    torch.testing.assert_close(native.segment_sum(at, vals, perm),
                               native.segment_sum(at, vals[perm]))


@needs_kernels
def test_gradients_are_exact() -> None:
    a = pattern(12, 10, 3)
    opts = {"dtype": torch.float64, "requires_grad": True}
    left, right = torch.randn(12, 2, 3, **opts), torch.randn(10, 2, 3, **opts)
    u, v = torch.randn(12, 2, **opts), torch.randn(10, 2, **opts)
    vals = torch.randn(a.nnz, 2, **opts)
    assert torch.autograd.gradcheck(lambda p, q: sddmm_dot(a, p, q), (left, right))
    assert torch.autograd.gradcheck(lambda p, q: spmm_values(a, p, q), (vals, right))
    assert torch.autograd.gradcheck(lambda p, q: sddmm_add(a, p, q), (u, v))
    assert torch.autograd.gradcheck(lambda s: edge_softmax(a, s), (vals,))
    att = torch.randn(2, 3, **opts)
    assert torch.autograd.gradcheck(lambda p, q, w: sddmm_leaky(a, p, q, w), (left, right, att))
    one_u, one_v = torch.randn(12, **opts), torch.randn(10, **opts)
    assert torch.autograd.gradcheck(lambda p, q: sddmm_add(a, p, q), (one_u, one_v))


@needs_kernels
@pytest.mark.parametrize("threads", [1, 2])
def test_gatv2_gradients_equal_the_torch_path(threads: int) -> None:
    """u, v and att gradients of GATv2's score, the attention vector's summed over
    per-thread parts."""
    a = pattern(50, 40, 5)
    gen = torch.Generator().manual_seed(0)
    u, v = torch.randn(50, 3, 8, generator=gen), torch.randn(40, 3, 8, generator=gen)
    att, g = torch.randn(3, 8, generator=gen), torch.randn(a.nnz, 3, generator=gen)

    def grads() -> list[torch.Tensor]:
        leaves = [t.clone().requires_grad_() for t in (u, v, att)]
        (sddmm_leaky(a, *leaves, negative_slope=0.3) * g).sum().backward()
        return [t.grad for t in leaves]

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        ours, ref = both(grads)
    finally:
        torch.set_num_threads(before)
    for p, q in zip(ours, ref, strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5)


@needs_kernels
def test_threads_split_rows_without_changing_a_bit() -> None:
    a = pattern(300, 300, 11)
    vals, x = torch.randn(a.nnz, 8), torch.randn(300, 8, 8)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = heads_spmm(a, vals, x), heads_sddmm(a, x, x)
        torch.set_num_threads(2)
        two = heads_spmm(a, vals, x), heads_sddmm(a, x, x)
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(p, q) for p, q in zip(one, two, strict=True))


@needs_kernels
def test_indices_outside_the_pattern_are_refused_not_read() -> None:
    crow, col = torch.tensor([0, 1, 2]), torch.tensor([0, 5])
    bad = CSRMatrix.from_csr(crow, col, None, (2, 3), check=False)
    x = torch.randn(3, 1, 4)
    with pytest.raises(ShapeError, match="outside"):
        native.spmm_heads(bad, torch.ones(2, 1), x)
    short = CSRMatrix.from_csr(torch.tensor([0, 1, 3]), torch.tensor([0, 1]), None, (2, 3),
                               check=False)
    with pytest.raises(ShapeError, match="outside"):
        native.sddmm_add(short, torch.randn(2, 1), torch.randn(3, 1))
    good = pattern(5, 3, 0)
    with pytest.raises(ShapeError, match="do not fit"):
        native.sddmm_dot(good, torch.randn(5, 1, 4), torch.randn(2, 1, 4))
    with pytest.raises(ShapeError, match="do not fit"):
        native.spmm_heads(good, torch.ones(good.nnz, 1), x, torch.zeros(1, dtype=torch.long))


@needs_kernels
def test_wide_rows_and_other_dtypes_take_the_torch_path() -> None:
    x = torch.randn(3, 1, 4)
    assert native.usable(x) and not native.usable(x.half())
    assert not native.usable(x, x.double())
    assert not native.usable(x, width=native.MAX_WIDTH + 1)
    with native.disabled():
        assert not native.usable(x)


def test_without_a_compiler_the_torch_path_runs_after_one_warning(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SPARSEGNN_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.delenv("SPARSEGNN_NATIVE", raising=False)
    monkeypatch.setattr(native, "_lib", [])
    a = pattern(20, 20, 1)
    u, v = torch.randn(20, 2), torch.randn(20, 2)
    with pytest.warns(RuntimeWarning, match="no C compiler"):
        out = sddmm_add(a, u, v)
    assert native.library() is None and not native.usable(u)
    torch.testing.assert_close(out, u[a.row_indices()] + v[a.col])


def test_a_failing_compiler_is_named(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SPARSEGNN_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", "false")
    with pytest.raises(build.BuildError, match="false failed"):
        build.load()
    assert not list(tmp_path.rglob("*.so"))  # no half-written library left


@needs_kernels
def test_a_compiler_without_openmp_builds_one_thread_kernels(tmp_path, monkeypatch) -> None:
    """Apple's clang refuses -fopenmp: the second try without it gives kernels that run
    the rows on one thread, with the same results."""
    cc = tmp_path / "cc-no-openmp"
    cc.write_text('#!/bin/sh\ncase "$*" in *-fopenmp*) exit 1;; esac\nexec cc "$@"\n')
    cc.chmod(0o755)
    monkeypatch.setenv("SPARSEGNN_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setattr(native, "_lib", [])
    a = pattern(30, 30, 2)
    u, v = torch.randn(30, 3, 8), torch.randn(30, 3, 8)
    att, g = torch.randn(3, 8), torch.randn(a.nnz, 3)
    at, perm = pattern_transpose(a)
    ours = native.sddmm_leaky_grads(a, at, perm, u, v, att, g, 0.2)
    assert native.library() is not None and list(tmp_path.rglob("*.so"))
    with native.disabled():
        leaves = [t.clone().requires_grad_() for t in (u, v, att)]
        (sddmm_leaky(a, *leaves) * g).sum().backward()
    for p, q in zip(ours, (t.grad for t in leaves), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5)


@needs_kernels
def test_a_damaged_library_in_the_cache_is_built_again(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SPARSEGNN_CACHE", str(tmp_path))
    target = build.library_path(build.compiler())
    assert target.is_relative_to(tmp_path)
    target.parent.mkdir(parents=True)
    target.write_bytes(b"not a library")
    lib = build.load()
    assert hasattr(lib, "spmm_heads_f32") and target.stat().st_size > 1000


def test_turned_off_by_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("SPARSEGNN_NATIVE", "0")
    assert native.library() is None and not native.usable(torch.ones(2, 1))
