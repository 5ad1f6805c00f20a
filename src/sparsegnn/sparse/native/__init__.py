"""Fused CPU kernels for attention: SDDMM (dot, additive, GATv2's LeakyReLU form), the
multi-head SpMM, row sums and the edge softmax, with their backwards, each one pass over
a CSR pattern; and, for inference, LayerNorm (+ ReLU) in one pass per row
(:func:`layer_norm_`).

Torch composes these products from gathers, products and reductions that each write an
``nnz``-sized temporary, 15-24x the streaming bound of their compulsory bytes at 2^18
vertices; one C loop per row that reads each operand row once and prefetches the rows it
gathers runs at 4.6-5.6x (docs/results/attention.md). The C source ships with the package
and is compiled on first use (:mod:`.build`); where that cannot happen (no compiler, a
failed build) every caller keeps its torch path, after one warning. ``SPARSEGNN_NATIVE=0``
or :func:`disabled` turns them off, e.g. to compare the two paths.

Every function takes float32 or float64 CPU tensors (callers check :func:`usable` first)
and returns a new contiguous tensor; a pattern's indices are checked against its shape
once per pattern, since the C loops trust them.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from sparsegnn.errors import ShapeError
from sparsegnn.sparse.csr import CSRMatrix
from sparsegnn.sparse.native.build import load_once
from sparsegnn.sparse.pattern_cache import Store, per_pattern

_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}
_ROW_SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16"}
_state = threading.local()
_lib: list[ctypes.CDLL | None] = []
_CHECKED: Store = {}
_I64, _PTR, _INT = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
# The C loops keep a row's per-head sums on the stack: at most this many elements
# (heads * f for the SpMM, heads for the softmax), 8 KiB of float64.
MAX_WIDTH = 1024


def library() -> ctypes.CDLL | None:
    """The loaded kernels, or ``None`` (turned off, or they did not build: warned once)."""
    if os.environ.get("SPARSEGNN_NATIVE", "1") == "0":
        return None
    return load_once(_lib)


def enabled() -> bool:
    """Whether native kernels may run on this thread: not turned off by
    ``SPARSEGNN_NATIVE=0`` nor inside :func:`disabled` (other packages' kernels ask too)."""
    return os.environ.get("SPARSEGNN_NATIVE", "1") != "0" and not getattr(_state, "off", False)


@contextmanager
def disabled() -> Iterator[None]:
    """Within the block, on this thread, every caller takes its torch path."""
    before = getattr(_state, "off", False)
    _state.off = True
    try:
        yield
    finally:
        _state.off = before


def usable(*tensors: torch.Tensor, width: int = 1) -> bool:
    """Whether the kernels run for these operands: on, built, CPU, one float dtype, and
    a row's per-head sums (``width`` elements) within :data:`MAX_WIDTH`."""
    if getattr(_state, "off", False) or not tensors or width > MAX_WIDTH:
        return False
    dtype = tensors[0].dtype
    if dtype not in _SUFFIX or any(t.device.type != "cpu" or t.dtype != dtype
                                   for t in tensors):
        return False
    return library() is not None


def _checked(a: CSRMatrix) -> None:
    """Refuse a pattern whose indices would send a C loop outside its operands (checked
    once per pattern)."""
    per_pattern(_CHECKED, a, lambda: _check_indices(a))


def _check_indices(a: CSRMatrix) -> bool:
    crow, col, (rows, cols) = a.crow, a.col, a.shape
    if (crow.dtype != torch.int64 or col.dtype != torch.int64 or crow.numel() != rows + 1
            or int(crow[0]) != 0 or int(crow[-1]) != col.numel()
            or bool((crow[1:] < crow[:-1]).any())
            or (col.numel() and (int(col.min()) < 0 or int(col.max()) >= cols))):
        raise ShapeError(f"a CSR pattern of shape {a.shape} with {col.numel()} entries "
                         "has row pointers or columns outside it")
    return True


def _need(ok: bool, what: str, *shapes: object) -> None:
    if not ok:
        raise ShapeError(f"{what}: operand shapes {', '.join(map(str, shapes))} do not fit")


def _call(name: str, dtype: torch.dtype, *args: object) -> None:
    lib = library()
    assert lib is not None, "callers check usable() first"
    fn = getattr(lib, f"{name}_{_SUFFIX[dtype]}")
    fn(*[_PTR(a.data_ptr()) if isinstance(a, torch.Tensor) else a for a in args])


def _perm_fits(perm: torch.Tensor | None, nnz: int) -> bool:
    """A permutation of the entries, as ``pattern_transpose`` makes them (int64, one per
    entry; its values are the transpose's own, trusted)."""
    return perm is None or (perm.dtype == torch.int64 and perm.shape == (nnz,))


def _ptr_or_null(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.contiguous()


def sddmm_dot(a: CSRMatrix, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``out[e, h] = <left[row_e, h], right[col_e, h]>`` from ``[rows, H, f]`` and
    ``[cols, H, f]``: ``[nnz, H]``."""
    _checked(a)
    _need(left.dim() == 3 and left.shape[0] == a.shape[0] and right.shape[0] == a.shape[1]
          and right.shape[1:] == left.shape[1:], "sddmm_dot", a.shape, left.shape,
          right.shape)
    heads, f = left.shape[1], left.shape[2]
    left, right = left.contiguous(), right.contiguous()
    out = torch.empty(a.nnz, heads, dtype=left.dtype)
    _call("sddmm_dot", left.dtype, _I64(a.shape[0]), a.crow, a.col, left, right,
          _I64(heads), _I64(f), out, _INT(torch.get_num_threads()))
    return out


def sddmm_add(a: CSRMatrix, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``out[e, h] = u[row_e, h] + v[col_e, h]`` from ``[rows, H]`` and ``[cols, H]``."""
    _checked(a)
    _need(u.dim() == 2 and u.shape[0] == a.shape[0] and v.shape == (a.shape[1], u.shape[1]),
          "sddmm_add", a.shape, u.shape, v.shape)
    u, v = u.contiguous(), v.contiguous()
    out = torch.empty(a.nnz, u.shape[1], dtype=u.dtype)
    _call("sddmm_add", u.dtype, _I64(a.shape[0]), a.crow, a.col, u, v, _I64(u.shape[1]),
          out, _INT(torch.get_num_threads()))
    return out


def spmm_heads(a: CSRMatrix, values: torch.Tensor, x: torch.Tensor,
               perm: torch.Tensor | None = None) -> torch.Tensor:
    """``out[i, h] = sum_e values[p(e), h] x[col_e, h]`` from ``values [nnz, H]`` and
    ``x [cols, H, f]``: ``[rows, H, f]``; ``p`` is ``perm`` (values in another pattern's
    order, e.g. A's for its transpose, without gathering them) or the identity."""
    _checked(a)
    _need(x.dim() == 3 and x.shape[0] == a.shape[1] and values.shape == (a.nnz, x.shape[1])
          and _perm_fits(perm, a.nnz), "spmm_heads", a.shape, values.shape, x.shape)
    heads, f = x.shape[1], x.shape[2]
    values, x = values.contiguous(), x.contiguous()
    out = torch.empty(a.shape[0], heads, f, dtype=x.dtype)
    _call("spmm_heads", x.dtype, _I64(a.shape[0]), a.crow, a.col, _ptr_or_null(perm),
          values, x, _I64(heads), _I64(f), out, _INT(torch.get_num_threads()))
    return out


def segment_sum(a: CSRMatrix, values: torch.Tensor,
                perm: torch.Tensor | None = None) -> torch.Tensor:
    """Per row of ``a`` and head, the sum of its entries' ``values[p(e)]``: ``[rows, H]``."""
    _checked(a)
    _need(values.dim() == 2 and values.shape[0] == a.nnz and _perm_fits(perm, a.nnz),
          "segment_sum", a.shape, values.shape)
    values = values.contiguous()
    out = torch.empty(a.shape[0], values.shape[1], dtype=values.dtype)
    _call("segment_sum", values.dtype, _I64(a.shape[0]), a.crow, _ptr_or_null(perm),
          values, _I64(values.shape[1]), out, _INT(torch.get_num_threads()))
    return out


def softmax_rows(a: CSRMatrix, scores: torch.Tensor) -> torch.Tensor:
    """Softmax of ``scores [nnz, H]`` within each row, per head (max subtracted)."""
    _checked(a)
    _need(scores.dim() == 2 and scores.shape[0] == a.nnz, "softmax_rows", a.shape,
          scores.shape)
    scores = scores.contiguous()
    out = torch.empty_like(scores)
    _call("softmax_rows", scores.dtype, _I64(a.shape[0]), a.crow, scores,
          _I64(scores.shape[1]), out, _INT(torch.get_num_threads()))
    return out


def softmax_backward(a: CSRMatrix, alpha: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """``alpha * (grad - sum_row alpha * grad)``, per head: the softmax's input gradient."""
    _checked(a)
    _need(alpha.dim() == 2 and alpha.shape[0] == a.nnz and grad.shape == alpha.shape,
          "softmax_backward", a.shape, alpha.shape, grad.shape)
    alpha, grad = alpha.contiguous(), grad.contiguous()
    out = torch.empty_like(alpha)
    _call("softmax_backward", alpha.dtype, _I64(a.shape[0]), a.crow, alpha, grad,
          _I64(alpha.shape[1]), out, _INT(torch.get_num_threads()))
    return out


def sddmm_leaky(a: CSRMatrix, u: torch.Tensor, v: torch.Tensor, att: torch.Tensor,
                slope: float) -> torch.Tensor:
    """GATv2's score ``sum_c att[h, c] leaky_relu(u[row_e, h, c] + v[col_e, h, c])`` from
    ``[rows, H, f]``, ``[cols, H, f]`` and ``att [H, f]``: ``[nnz, H]``."""
    _checked(a)
    _need(u.dim() == 3 and u.shape[0] == a.shape[0] and v.shape == (a.shape[1], *u.shape[1:])
          and att.shape == u.shape[1:], "sddmm_leaky", a.shape, u.shape, v.shape, att.shape)
    heads, f = u.shape[1], u.shape[2]
    u, v, att = u.contiguous(), v.contiguous(), att.contiguous()
    out = torch.empty(a.nnz, heads, dtype=u.dtype)
    _call("sddmm_leaky", u.dtype, _I64(a.shape[0]), a.crow, a.col, u, v, att, _I64(heads),
          _I64(f), _real(u.dtype, slope), out, _INT(torch.get_num_threads()))
    return out


def sddmm_leaky_grads(a: CSRMatrix, at: CSRMatrix, perm: torch.Tensor, u: torch.Tensor,
                      v: torch.Tensor, att: torch.Tensor, grad: torch.Tensor, slope: float
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of :func:`sddmm_leaky` for ``u``, ``v`` and ``att`` given the score
    gradient ``grad [nnz, H]``: one pass over A's rows (``u``, ``att``) and one over its
    transpose ``at`` (``v``; ``perm`` maps its entries to A's), no atomics."""
    _checked(a)
    _checked(at)
    _need(at.shape == (a.shape[1], a.shape[0]) and _perm_fits(perm, a.nnz)
          and grad.shape == (a.nnz, u.shape[1]), "sddmm_leaky_grads", a.shape, at.shape,
          grad.shape)
    heads, f = u.shape[1], u.shape[2]
    u, v, att, grad = u.contiguous(), v.contiguous(), att.contiguous(), grad.contiguous()
    threads = torch.get_num_threads()
    grad_u, grad_v = torch.empty_like(u), torch.empty_like(v)
    parts = torch.zeros(threads, heads, f, dtype=u.dtype)
    common = (att, grad, _I64(heads), _I64(f), _real(u.dtype, slope))
    _call("leaky_backward", u.dtype, _I64(a.shape[0]), a.crow, a.col, None, u, v, *common,
          grad_u, parts, _INT(threads))
    _call("leaky_backward", u.dtype, _I64(at.shape[0]), at.crow, at.col, perm.contiguous(),
          v, u, *common, grad_v, None, _INT(threads))
    return grad_u, grad_v, parts.sum(0)


def _real(dtype: torch.dtype, value: float) -> ctypes.c_float | ctypes.c_double:
    return ctypes.c_float(value) if dtype == torch.float32 else ctypes.c_double(value)


def norm_usable(x: torch.Tensor) -> bool:
    """Whether :func:`layer_norm_` runs on ``x``: on, built, a contiguous float32 or
    bfloat16 CPU matrix no wider than :data:`MAX_WIDTH` that autograd does not track."""
    if (getattr(_state, "off", False) or x.dim() != 2 or x.dtype not in _ROW_SUFFIX
            or x.device.type != "cpu" or not x.is_contiguous() or x.shape[1] > MAX_WIDTH
            or (x.requires_grad and torch.is_grad_enabled())):
        return False
    return library() is not None


def layer_norm_(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float,
                relu: bool = False) -> torch.Tensor:
    """``x`` normalised over each row in place, as ``layer_norm(x, (width,), weight, bias,
    eps)`` (then ``relu_`` with ``relu``), in one pass; returns ``x``.

    Why: on a pileup-200 event the Interaction Network's LayerNorms and ReLUs stream
    ~20M-element tensors a dozen times, and torch's row loop for 64-wide rows is the
    largest single cost of scoring (docs/results/tracking.md). Callers check
    :func:`norm_usable` first; the statistics are float32 for bfloat16 rows too.
    """
    width = x.shape[1]
    _need(weight.shape == (width,) and bias.shape == (width,), "layer_norm_", x.shape,
          weight.shape, bias.shape)
    lib = library()
    assert lib is not None, "callers check norm_usable() first"
    gamma = weight.detach().to(torch.float32).contiguous()
    beta = bias.detach().to(torch.float32).contiguous()
    getattr(lib, f"layer_norm_{_ROW_SUFFIX[x.dtype]}")(
        _I64(x.shape[0]), _I64(width), _PTR(x.data_ptr()), _PTR(gamma.data_ptr()),
        _PTR(beta.data_ptr()), ctypes.c_float(eps), _INT(int(relu)),
        _INT(torch.get_num_threads()))
    return x
