"""2-d pooling (ONNX MaxPool, AveragePool, GlobalAveragePool; NCHW): descriptors and NumPy references.

Window geometry (pads, auto_pad, ceil_mode) is conv's (``conv/window.py``). Half types are pooled in
float32 and rounded once on the store; padded buffers and divisors are prepared in ``bind``.
The CUDA variants (``cuda.py``, ``pool.cu``) resolve the window with the same ``_window``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...descriptor import REQUIRED, Attr, KernelContext, OperatorDescriptor, Port
from ...errors import InvalidArgumentError
from .._common import FLOATS, builtin_operator, compute_dtype, numpy_dtype
from ..conv.window import Window, window_2d, window_attrs
from ..kernel import cuda_variant
from . import cuda

__all__ = ["descriptors", "infer_global_average_pool", "MAX_POOL_DTYPES"]

MAX_POOL_DTYPES = FLOATS | {"int8", "uint8"}


def _window(shape: tuple, attrs: Mapping[str, Any], op: str) -> Window:
    """The pooling window; a pad as wide as the kernel is refused (a window of padding only)."""
    win = window_2d(
        tuple(shape[2:]), tuple(attrs["kernel_shape"]), attrs, op=op, ceil_mode=bool(attrs["ceil_mode"])
    )
    if any(p >= k for p, k in zip(win.pads_begin + win.pads_end, win.kernel * 2, strict=True)):
        raise InvalidArgumentError(
            f"{op}: every pad must be smaller than the kernel {list(win.kernel)} (got pads "
            f"{list(win.pads_begin + win.pads_end)} as [top, left, bottom, right])",
            attr="pads",
        )
    return win


def _infer(op: str):
    def infer_pool2d(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
        """Output rule of a 2-d pool: ``[N, C, H_out, W_out]`` (ONNX's window arithmetic, ceil_mode)."""
        shape = tuple(in_shapes[0])
        return ((shape[0], shape[1]) + _window(shape, attrs, op).out,), (in_dtypes[0],)

    return infer_pool2d


def infer_global_average_pool(in_shapes: tuple, in_dtypes: tuple, attrs) -> tuple[tuple, tuple]:
    """Output rule of global_average_pool: ``[N, C, 1, ..., 1]``."""
    shape = tuple(in_shapes[0])
    return (shape[:2] + (1,) * (len(shape) - 2),), (in_dtypes[0],)


def _padded_windows(shape: tuple, win: Window, cdt, fill: float):
    """A padded buffer (border = ``fill``, kept across runs), its interior view, and the strided view of
    every pooling window ``[N, C, H_out, W_out, kH, kW]``."""
    n, c, h, w = shape
    need = [
        max(size + b + e, (o - 1) * s + x)
        for size, b, e, o, s, x in zip(
            (h, w), win.pads_begin, win.pads_end, win.out, win.strides, win.extent, strict=True
        )
    ]
    padded = np.full((n, c, *need), fill, cdt)
    (pt, pl), ((sh, sw), (dh, dw)) = win.pads_begin, (win.strides, win.dilations)
    inner = padded[:, :, pt : pt + h, pl : pl + w]
    views = sliding_window_view(padded, win.extent, axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]
    return padded, inner, views[:, :, : win.out[0], : win.out[1]]


def _max_pool_bind(ctx: KernelContext):
    shape = tuple(ctx.in_shapes[0])
    win = _window(shape, ctx.attrs, "max_pool2d")
    dtype = ctx.in_dtypes[0]
    # Integers pool exactly in their own type, padded with their lowest value (it never wins).
    cdt = compute_dtype(dtype) if dtype in FLOATS else numpy_dtype(dtype)
    low = -np.inf if dtype in FLOATS else np.iinfo(cdt).min
    _, inner, views = _padded_windows(shape, win, cdt, low)
    acc = np.empty(ctx.out_shapes[0], cdt)

    def kernel(inputs, outputs, stream):
        np.copyto(inner, inputs[0], casting="unsafe")
        np.max(views, axis=(4, 5), out=acc)
        np.copyto(outputs[0], acc, casting="unsafe")

    return kernel


def _avg_pool_bind(ctx: KernelContext):
    shape = tuple(ctx.in_shapes[0])
    win = _window(shape, ctx.attrs, "avg_pool2d")
    cdt = compute_dtype(ctx.in_dtypes[0])
    padded, inner, views = _padded_windows(shape, win, cdt, 0.0)
    # The divisor per output pixel: taps on the input, plus those on the explicit pads when
    # count_include_pad (never those past the pads that ceil_mode adds).
    mask = np.zeros(padded.shape[2:], cdt)
    (pt, pl), (pb, pr) = win.pads_begin, win.pads_end
    h, w = shape[2:]
    if ctx.attrs["count_include_pad"]:
        mask[: pt + h + pb, : pl + w + pr] = 1
    else:
        mask[pt : pt + h, pl : pl + w] = 1
    (sh, sw), (dh, dw) = win.strides, win.dilations
    counts = sliding_window_view(mask, win.extent)[::sh, ::sw, ::dh, ::dw][: win.out[0], : win.out[1]].sum(
        axis=(2, 3)
    )
    acc = np.empty(ctx.out_shapes[0], cdt)

    def kernel(inputs, outputs, stream):
        np.copyto(inner, inputs[0], casting="unsafe")
        np.sum(views, axis=(4, 5), out=acc)
        np.divide(acc, counts, out=acc)
        np.copyto(outputs[0], acc, casting="unsafe")

    return kernel


def _global_average_pool_bind(ctx: KernelContext):
    shape = tuple(ctx.in_shapes[0])
    cdt = compute_dtype(ctx.in_dtypes[0])
    axes = tuple(range(2, len(shape)))
    count = math.prod(shape[2:])
    acc = np.empty(ctx.out_shapes[0], cdt)

    def kernel(inputs, outputs, stream):
        np.sum(inputs[0], axis=axes, dtype=cdt, keepdims=True, out=acc)
        with np.errstate(invalid="ignore"):  # no spatial elements: 0/0 = NaN, as a mean of nothing
            np.divide(acc, count, out=acc)
        np.copyto(outputs[0], acc, casting="unsafe")

    return kernel


def _pool_attrs(extra=()) -> list[Attr]:
    return (
        [Attr("kernel_shape", "ints", REQUIRED, doc="[kH, kW] window size")]
        + window_attrs()
        + [Attr("ceil_mode", "bool", False, doc="round the output size up (a last, partial window)")]
        + list(extra)
    )


def descriptors() -> list[OperatorDescriptor]:
    """Fresh descriptors of max_pool2d, avg_pool2d and global_average_pool (one set per registry)."""
    floats = {"T": FLOATS}
    x_in = Port("x", shape=["N", "C", "H", "W"], dtype="T")
    return [
        builtin_operator(
            "max_pool2d",
            doc="Maximum over each 2-d window of NCHW x (padding never wins; NaN propagates).",
            inputs=[x_in],
            outputs=[Port("y", dtype="T", doc="[N, C, H_out, W_out]")],
            attrs=_pool_attrs(),
            dtype_vars={"T": MAX_POOL_DTYPES},
            variant_dtypes=MAX_POOL_DTYPES,
            infer=_infer("max_pool2d"),
            bind=_max_pool_bind,
            cuda=cuda_variant(cuda.pool2d_bind("max_pool2d", _window), MAX_POOL_DTYPES),
            onnx="MaxPool",
        ),
        builtin_operator(
            "avg_pool2d",
            doc="Mean over each 2-d window of NCHW x.",
            inputs=[x_in],
            outputs=[Port("y", dtype="T", doc="[N, C, H_out, W_out]")],
            attrs=_pool_attrs(
                [
                    Attr(
                        "count_include_pad",
                        "bool",
                        False,
                        doc="divide by the window size including the explicit pads",
                    )
                ]
            ),
            dtype_vars=floats,
            variant_dtypes=FLOATS,
            infer=_infer("avg_pool2d"),
            bind=_avg_pool_bind,
            cuda=cuda_variant(cuda.pool2d_bind("avg_pool2d", _window), FLOATS),
            onnx="AveragePool",
        ),
        builtin_operator(
            "global_average_pool",
            doc="Mean over all spatial axes of [N, C, ...] x, kept as size 1.",
            inputs=[Port("x", shape=["N", "C", "..."], dtype="T")],
            outputs=[Port("y", dtype="T", doc="[N, C, 1, ..., 1]")],
            dtype_vars=floats,
            variant_dtypes=FLOATS,
            infer=infer_global_average_pool,
            bind=_global_average_pool_bind,
            cuda=cuda_variant(cuda.global_average_pool_bind, FLOATS),
            onnx="GlobalAveragePool",
        ),
    ]
