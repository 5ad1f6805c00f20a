"""Dropout for the models, fused with a hidden layer's bias and ReLU, and a cheaper mask.

:func:`dropout` and :func:`bias_relu_dropout` are what ``GCN``/``GraphSAGE`` run (see
the section below for why they are fused and how each mask is drawn).

Why a second mask: torch's CPU dropout draws one Bernoulli sample per element through
its Mersenne-Twister generator, which measured about 40% of a full-graph GCN epoch.
The ``bytes`` mask (the models' default) compares each byte of a 64-bit draw with a
threshold, so the generator runs an eighth as often; ``bernoulli`` stays for runs that
must reproduce ``F.dropout``'s draws.
"""

from __future__ import annotations

import torch

from sparsegnn.names import MASK_KINDS, MaskKind

# What the models use (``GCN``/``GraphSAGE``): the input's dropout and, fused into each
# hidden layer's output, bias + ReLU + dropout. Why fused: on a 2^18 x 128 activation every
# separate elementwise op costs a fresh 128 MiB tensor, and on Linux a fresh block of that
# size comes back from the kernel page by page (~45 ms per tensor measured, more than the
# arithmetic); in place on the layer's output and in cache-sized row chunks, the epilogue
# reads and writes the activation once and keeps nothing but its output for backward.
#
# How the keep-mask is drawn (``MaskKind``). ``bernoulli``: one Bernoulli draw per element
# from torch's generator, the very draws ``F.dropout`` makes (same seed, same shape: the
# same mask), which distributed ranks reproduce. ``bytes``: one random byte per element
# compared with a threshold (eight elements per 64-bit draw, about 25x cheaper on the
# CPU); the drop probability is rounded to a multiple of 1/256 (0.5 is exact) and the
# kept values are scaled by the inverse of the *rounded* keep probability, so the layer
# stays unbiased.

# Elements per chunk: the chunk of the activation, its float mask and its random bytes
# (1.1 MiB in float32) stay in a 2 MiB L2, and 2^18 x 128 takes 256 chunks of Python.
_CHUNK_ELEMS = 1 << 17
_BYTE_LEVELS = 256


def _check_p(p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")


def _keep_probability(p: float, kind: MaskKind) -> float:
    """The probability an element is kept: ``1 - p``, or for ``bytes`` ``1 - p`` rounded to
    a multiple of 1/256 (the mask's real rate, so scaling by its inverse is unbiased)."""
    if kind == "bernoulli":
        return 1.0 - p
    if kind == "bytes":
        return (_BYTE_LEVELS - round(p * _BYTE_LEVELS)) / _BYTE_LEVELS
    raise ValueError(f"dropout mask must be one of {MASK_KINDS}, got {kind!r}")


def _row_chunks(x: torch.Tensor) -> list[slice]:
    """Row ranges of ``x`` (2-d or more, contiguous) of about ``_CHUNK_ELEMS`` elements."""
    rows = x.shape[0]
    per_row = max(1, x[0].numel()) if rows else 1
    step = max(1, _CHUNK_ELEMS // per_row)
    return [slice(s, s + step) for s in range(0, rows, step)]


def _fill_noise(buf: torch.Tensor, keep: float, kind: MaskKind,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """Fill ``buf`` with ``1 / keep`` where an element is kept and 0 where it is dropped.

    ``bernoulli`` calls ``bernoulli_(keep)`` and divides by ``keep`` exactly as
    ``F.dropout`` builds its noise, so chunk by chunk in row-major order the draws and the
    values are ``F.dropout``'s (tests/test_nn_fused.py checks the equality).
    """
    if kind == "bernoulli":
        buf.bernoulli_(keep, generator=generator)
    else:
        n = buf.numel()
        words = torch.empty((n + 7) // 8, dtype=torch.int64, device=buf.device)
        # all 64 bits random (plain random_() gives 63; ``to`` is exclusive)
        words.random_(-(1 << 63), (1 << 63) - 1, generator=generator)
        threshold = _BYTE_LEVELS - round(keep * _BYTE_LEVELS)
        torch.ge(words.view(torch.uint8)[:n].view(buf.shape), threshold, out=buf)
    return buf.div_(keep)


def dropout_noise(like: torch.Tensor, p: float, mask: MaskKind,
                  generator: torch.Generator) -> torch.Tensor:
    """A fresh tensor shaped as ``like``: ``1 / keep`` where kept, 0 where dropped, drawn
    from ``generator``.

    For callers that must draw the same mask twice (a seeded generator, forward and
    backward) instead of keeping it: the per-block dropout of 2D/3D feature slices.
    """
    _check_p(p)
    return _fill_noise(torch.empty_like(like), _keep_probability(p, mask), mask, generator)


def _scale(keep: float, dtype: torch.dtype) -> float:
    """``1 / keep`` rounded to ``dtype`` as ``F.dropout``'s noise holds it."""
    return float(torch.ones((), dtype=dtype).div_(keep))


class _Dropout(torch.autograd.Function):
    """``x * noise`` in row chunks; the mask is kept (as bool) only when x needs a gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, keep: float, kind: MaskKind,  # type: ignore[override]
                need_mask: bool) -> torch.Tensor:
        out = torch.empty_like(x)
        mask = torch.empty(x.shape, dtype=torch.bool, device=x.device) if need_mask else None
        buf = torch.empty_like(x[_row_chunks(x)[0]])
        for rows in _row_chunks(x):
            noise = _fill_noise(buf[: out[rows].shape[0]], keep, kind)
            torch.mul(x[rows], noise, out=out[rows])
            if mask is not None:
                torch.ne(noise, 0, out=mask[rows])
        ctx.save_for_backward(mask)
        ctx.scale = _scale(keep, x.dtype)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        (mask,) = ctx.saved_tensors
        return grad.mul(mask).mul_(ctx.scale), None, None, None


def dropout(
    x: torch.Tensor, p: float, training: bool = True, mask: MaskKind = "bernoulli"
) -> torch.Tensor:
    """Inverted dropout, ``F.dropout``'s values for ``mask="bernoulli"`` (same draws).

    Unlike ``F.dropout`` it allocates only its output (the noise lives in one cache-sized
    chunk) and keeps a 1-byte mask for backward, and none when x needs no gradient (the
    raw features of a model's first layer).
    """
    _check_p(p)
    keep = _keep_probability(p, mask)
    if not training or p == 0.0 or x.numel() == 0 or keep == 1.0:
        return x
    if keep == 0.0:
        return x * 0.0
    if x.dim() < 2:
        return dropout(x.unsqueeze(1), p, training, mask).squeeze(1)
    # Inside forward grad mode is off, so whether backward will need the mask is asked here.
    need_mask = x.requires_grad and torch.is_grad_enabled()
    return _Dropout.apply(x.contiguous(), keep, mask, need_mask)


class _BiasReluDropout(torch.autograd.Function):
    """``dropout(relu(z + bias))`` in place on ``z``, keeping only the output for backward.

    Why the output is enough: with a positive scale, an output element is nonzero exactly
    where the ReLU passed it and the mask kept it, so the gradient is ``grad * scale``
    there and 0 elsewhere (ReLU's own backward, ``threshold_backward``, reads its output
    the same way). The next layer's ``linear`` saves that output anyway, so the epilogue
    adds nothing to the memory autograd holds, where bias, ReLU and ``F.dropout`` keep
    three activations and a float mask.
    """

    @staticmethod
    def forward(ctx, z: torch.Tensor, bias: torch.Tensor | None, keep: float,  # type: ignore[override]
                kind: MaskKind) -> torch.Tensor:
        chunks = _row_chunks(z)
        buf = torch.empty_like(z[chunks[0]]) if keep < 1.0 else None
        for rows in chunks:
            part = z[rows]
            if bias is not None:
                part.add_(bias)
            part.relu_()
            if buf is not None:
                part.mul_(_fill_noise(buf[: part.shape[0]], keep, kind))
        ctx.mark_dirty(z)
        ctx.save_for_backward(z)
        ctx.scale = _scale(keep, z.dtype) if keep < 1.0 else None
        ctx.has_bias = bias is not None
        return z

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        (out,) = ctx.saved_tensors
        grad_z = torch.ops.aten.threshold_backward(grad, out, 0)
        if ctx.scale is not None:
            grad_z.mul_(ctx.scale)
        grad_bias = None
        if ctx.has_bias and ctx.needs_input_grad[1]:
            grad_bias = grad_z.sum(tuple(range(grad_z.dim() - 1)))
        return grad_z, grad_bias, None, None


def bias_relu_dropout(
    z: torch.Tensor, bias: torch.Tensor | None, p: float, training: bool = True,
    mask: MaskKind = "bernoulli",
) -> torch.Tensor:
    """``F.dropout(F.relu(z + bias), p, training)`` in one pass, **overwriting z**.

    For a layer's fresh pre-activation (the caller must not use ``z`` again; autograd
    refuses if something saved it). Same values and, with ``mask="bernoulli"``, the same
    random draws as the unfused ops; ``bias`` (broadcast over rows) may be None.
    """
    _check_p(p)
    keep = _keep_probability(p, mask) if training else 1.0
    if keep == 0.0:  # everything dropped: zeros, with the zero gradient F.dropout gives
        return bias_relu_dropout(z, bias, 0.0) * 0.0
    if z.dim() < 2:
        return bias_relu_dropout(z.unsqueeze(1), bias, p, training, mask).squeeze(1)
    z = z if z.is_contiguous() else z.contiguous()
    if bias is not None and bias.dtype != z.dtype:
        bias = bias.to(z.dtype)
    return _BiasReluDropout.apply(z, bias, keep, mask)
