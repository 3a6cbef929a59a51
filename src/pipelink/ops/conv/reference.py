"""NumPy reference kernels of the convolutions and transposed convolutions over 2 or 3 spatial axes
(conv2d, conv3d, conv_transpose2d, conv_transpose3d): one bind each, the rank read from x's shape.

Half types are computed in float32 (float64 in float64) and rounded once on the store; the padded input
and the accumulators are allocated in ``bind`` (checked against the host's memory first), not per run.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ...descriptor import KernelContext
from ...limits import check_fits
from .._common import compute_dtype
from .window import transpose_geometry, window_nd, window_view

__all__ = ["conv_name", "conv_transpose_name", "bind_conv", "bind_conv_transpose"]


def conv_name(rank: int) -> str:
    """The convolution operator over ``rank`` spatial axes (``conv2d``, ``conv3d``)."""
    return f"conv{rank}d"


def conv_transpose_name(rank: int) -> str:
    """The transposed convolution operator over ``rank`` spatial axes (``conv_transpose3d``)."""
    return f"conv_transpose{rank}d"


def _per_channel(rank: int, channels: int) -> tuple[int, ...]:
    """The shape ``[M, 1, ..., 1]`` a bias takes to broadcast over ``[N, M, *spatial]``."""
    return (channels,) + (1,) * rank


def bind_conv(ctx: KernelContext):
    """The reference kernel of one conv2d / conv3d stage: every window of the zero-padded input (a strided
    view) contracted with w over (C/group, *kernel) per group, then + b, + residual, the activation.

    Raises
    ------
    OutOfMemoryError
        The padded input would not fit in the host's memory (pads or dilations of hostile sizes).
    """
    x_shape, w_shape = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
    rank = len(x_shape) - 2
    op = conv_name(rank)
    n, c, sizes = x_shape[0], x_shape[1], x_shape[2:]
    m, cg = w_shape[0], w_shape[1]
    group = int(ctx.attrs["group"])
    mg = m // group
    relu = ctx.attrs["activation"] == "relu"
    win = window_nd(sizes, w_shape[2:], ctx.attrs, op=op)
    cdt = compute_dtype(ctx.in_dtypes[0])
    padded_sizes = tuple(s + b + e for s, b, e in zip(sizes, win.pads_begin, win.pads_end, strict=True))
    check_fits(n * c * math.prod(padded_sizes) * np.dtype(cdt).itemsize, f"{op}'s padded input")
    padded = np.zeros((n, c, *padded_sizes), cdt)  # the border stays 0 across runs
    inner = padded[(..., *(slice(b, b + s) for b, s in zip(win.pads_begin, sizes, strict=True)))]
    acc = np.empty(ctx.out_shapes[0], cdt)
    windows = window_view(padded, win)  # [N, C, *out, *kernel]
    x_axes = [1, *range(2 + rank, 2 + 2 * rank)]  # C and the kernel's axes of a window
    w_axes = list(range(1, 2 + rank))  # C/group and the kernel's axes of w
    to_nc = (0, rank + 1, *range(1, rank + 1))  # [N, *out, Mg] -> [N, Mg, *out]
    per_channel = _per_channel(rank, m)

    def kernel(inputs, outputs, stream):
        x, weight, bias, residual = inputs
        np.copyto(inner, x, casting="unsafe")
        wt = weight.astype(cdt, copy=False)
        for g in range(group):
            part = np.tensordot(
                windows[:, g * cg : (g + 1) * cg], wt[g * mg : (g + 1) * mg], axes=(x_axes, w_axes)
            )
            acc[:, g * mg : (g + 1) * mg] = part.transpose(to_nc)
        if bias is not None:
            np.add(acc, bias.astype(cdt, copy=False).reshape(per_channel), out=acc)
        if residual is not None:
            np.add(acc, residual.astype(cdt, copy=False), out=acc)
        if relu:
            np.maximum(acc, 0, out=acc)  # NaN stays NaN, as the relu operator
        np.copyto(outputs[0], acc, casting="unsafe")

    return kernel


def bind_conv_transpose(ctx: KernelContext):
    """The reference kernel of one conv_transpose2d / conv_transpose3d stage: each input position scatters
    its kernel into the uncropped output (tap ``t`` of the input at ``p`` lands at ``stride * p +
    dilation * t``), which the pads then crop; + b.

    Raises
    ------
    OutOfMemoryError
        The uncropped output would not fit in the host's memory (dilations of hostile sizes).
    """
    x_shape, w_shape = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
    rank = len(x_shape) - 2
    op = conv_transpose_name(rank)
    n, c, sizes = x_shape[0], x_shape[1], x_shape[2:]
    mg, taps = w_shape[1], w_shape[2:]
    group = int(ctx.attrs["group"])
    cg, m = c // group, mg * group
    out_sizes, full_sizes = transpose_geometry(sizes, taps, ctx.attrs, op=op)
    strides, dilations = tuple(ctx.attrs["strides"]), tuple(ctx.attrs["dilations"])
    begin = tuple(ctx.attrs["pads"])[:rank]
    cdt = compute_dtype(ctx.in_dtypes[0])
    check_fits(n * m * math.prod(full_sizes) * np.dtype(cdt).itemsize, f"{op}'s uncropped output")
    full = np.empty((n, m, *full_sizes), cdt)
    crop = full[(..., *(slice(b, b + o) for b, o in zip(begin, out_sizes, strict=True)))]
    to_nc = (0, rank + 1, *range(1, rank + 1))  # [N, *in, Mg] -> [N, Mg, *in]
    per_channel = _per_channel(rank, m)

    def landing(tap: tuple) -> tuple[slice, ...]:
        """Where tap ``tap`` of every input position lands in the uncropped output."""
        return tuple(
            slice(t * d, t * d + s * (size - 1) + 1, s)
            for t, d, s, size in zip(tap, dilations, strides, sizes, strict=True)
        )

    def kernel(inputs, outputs, stream):
        x, weight, bias = inputs
        xc, wt = x.astype(cdt, copy=False), weight.astype(cdt, copy=False)
        full.fill(0)
        for g in range(group):
            xs, ws = xc[:, g * cg : (g + 1) * cg], wt[g * cg : (g + 1) * cg]
            for tap in itertools.product(*(range(k) for k in taps)):
                part = np.tensordot(xs, ws[(slice(None), slice(None), *tap)], axes=([1], [0]))
                full[(slice(None), slice(g * mg, (g + 1) * mg), *landing(tap))] += part.transpose(to_nc)
        if bias is not None:
            np.add(crop, bias.astype(cdt, copy=False).reshape(per_channel), out=crop)
        np.copyto(outputs[0], crop, casting="unsafe")

    return kernel
