"""Pooling (ONNX MaxPool, AveragePool over 2 or 3 spatial axes, GlobalAveragePool; NCHW and NCDHW):
descriptors and NumPy references.

One implementation per kind, parametrised by the number of spatial axes: max_pool2d / avg_pool2d over
[N, C, H, W] and max_pool3d / avg_pool3d over [N, C, D, H, W] share the window (conv's ``window_nd``:
pads, auto_pad, ceil_mode), these references and the CUDA source (``cuda.py``, ``pool.cu``, its
``PL_NDIM``). Half types are pooled in float32 and rounded once on the store; padded buffers and
divisors are prepared in ``bind``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...descriptor import REQUIRED, Attr, KernelContext, OperatorDescriptor, Port
from ...errors import InvalidArgumentError
from ...limits import check_fits
from .._common import FLOATS, builtin_operator, compute_dtype, host_scratch, numpy_dtype
from ..conv.window import PADS_ORDER, SPATIAL_AXES, Window, window_attrs, window_nd, window_view
from ..kernel import cuda_variant
from . import cuda

__all__ = ["descriptors", "infer_global_average_pool", "MAX_POOL_DTYPES", "SPATIAL_AXES"]

MAX_POOL_DTYPES = FLOATS | {"int8", "uint8"}


def _window(shape: tuple, attrs: Mapping[str, Any], op: str) -> Window:
    """The pooling window over the axes after N and C; a pad as wide as the kernel is refused (a window
    of padding only)."""
    win = window_nd(
        tuple(shape[2:]), tuple(attrs["kernel_shape"]), attrs, op=op, ceil_mode=bool(attrs["ceil_mode"])
    )
    if any(p >= k for p, k in zip(win.pads_begin + win.pads_end, win.kernel * 2, strict=True)):
        raise InvalidArgumentError(
            f"{op}: every pad must be smaller than the kernel {list(win.kernel)} (got pads "
            f"{list(win.pads_begin + win.pads_end)} as {PADS_ORDER[win.rank]})",
            attr="pads",
        )
    return win


def _infer(op: str):
    def infer_pool(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
        """Output rule of a pool: ``[N, C, *out]`` (ONNX's window arithmetic per spatial axis, ceil_mode)."""
        shape = tuple(in_shapes[0])
        return ((shape[0], shape[1]) + _window(shape, attrs, op).out,), (in_dtypes[0],)

    return infer_pool


def infer_global_average_pool(in_shapes: tuple, in_dtypes: tuple, attrs) -> tuple[tuple, tuple]:
    """Output rule of global_average_pool: ``[N, C, 1, ..., 1]``."""
    shape = tuple(in_shapes[0])
    return (shape[:2] + (1,) * (len(shape) - 2),), (in_dtypes[0],)


def _padded_size(shape: tuple, win: Window) -> tuple[int, ...]:
    """The spatial size of the padded buffer: the input and its pads, or as far as the last window reaches
    (ceil_mode's windows past the end pads)."""
    return tuple(
        max(size + b + e, (o - 1) * s + x)
        for size, b, e, o, s, x in zip(
            shape[2:], win.pads_begin, win.pads_end, win.out, win.strides, win.extent, strict=True
        )
    )


def _padded_windows(shape: tuple, win: Window, cdt, fill: float, op: str):
    """A padded buffer (border = ``fill``, kept across runs), its interior view, and the strided view of
    every pooling window ``[N, C, *out, *kernel]``.

    Raises
    ------
    OutOfMemoryError
        The padded buffer would not fit in the host's memory (pads and kernels of hostile sizes).
    """
    need = _padded_size(shape, win)
    check_fits(math.prod(shape[:2]) * math.prod(need) * np.dtype(cdt).itemsize, f"{op}'s padded input")
    padded = np.full((*shape[:2], *need), fill, cdt)
    inner = padded[(..., *(slice(b, b + size) for b, size in zip(win.pads_begin, shape[2:], strict=True)))]
    return padded, inner, window_view(padded, win)


def _max_pool_bind(op: str):
    def bind(ctx: KernelContext):
        shape = tuple(ctx.in_shapes[0])
        win = _window(shape, ctx.attrs, op)
        dtype = ctx.in_dtypes[0]
        # Integers pool exactly in their own type, padded with their lowest value (it never wins).
        cdt = compute_dtype(dtype) if dtype in FLOATS else numpy_dtype(dtype)
        low = -np.inf if dtype in FLOATS else np.iinfo(cdt).min
        _, inner, views = _padded_windows(shape, win, cdt, low, op)
        taps = tuple(range(-win.rank, 0))
        acc = np.empty(ctx.out_shapes[0], cdt)

        def kernel(inputs, outputs, stream):
            np.copyto(inner, inputs[0], casting="unsafe")
            np.max(views, axis=taps, out=acc)
            np.copyto(outputs[0], acc, casting="unsafe")

        return kernel

    return bind


def _avg_pool_bind(op: str):
    def bind(ctx: KernelContext):
        shape = tuple(ctx.in_shapes[0])
        win = _window(shape, ctx.attrs, op)
        cdt = compute_dtype(ctx.in_dtypes[0])
        padded, inner, views = _padded_windows(shape, win, cdt, 0.0, op)
        # The divisor per output element: taps on the input, plus those on the explicit pads when
        # count_include_pad (never those past the pads that ceil_mode adds).
        mask = np.zeros(padded.shape[2:], cdt)
        sizes, begin, end = shape[2:], win.pads_begin, win.pads_end
        if ctx.attrs["count_include_pad"]:
            mask[tuple(slice(None, b + n + e) for n, b, e in zip(sizes, begin, end, strict=True))] = 1
        else:
            mask[tuple(slice(b, b + n) for n, b in zip(sizes, begin, strict=True))] = 1
        taps = tuple(range(-win.rank, 0))
        counts = window_view(mask, win).sum(axis=taps)
        acc = np.empty(ctx.out_shapes[0], cdt)

        def kernel(inputs, outputs, stream):
            np.copyto(inner, inputs[0], casting="unsafe")
            np.sum(views, axis=taps, out=acc)
            np.divide(acc, counts, out=acc)
            np.copyto(outputs[0], acc, casting="unsafe")

        return kernel

    return bind


def _global_average_pool_bind(ctx: KernelContext):
    shape = tuple(ctx.in_shapes[0])
    cdt = compute_dtype(ctx.in_dtypes[0])
    axes = tuple(range(2, len(shape)))
    count = math.prod(shape[2:])
    acc = host_scratch(ctx, tuple(ctx.out_shapes[0]), cdt, "the sums")

    def kernel(inputs, outputs, stream):
        np.sum(inputs[0], axis=axes, dtype=cdt, keepdims=True, out=acc)
        with np.errstate(invalid="ignore"):  # no spatial elements: 0/0 = NaN, as a mean of nothing
            np.divide(acc, count, out=acc)
        np.copyto(outputs[0], acc, casting="unsafe")

    return kernel


def _pool_attrs(rank: int, extra=()) -> list[Attr]:
    kernel = ", ".join(f"k{axis}" for axis in SPATIAL_AXES[rank])
    return (
        [Attr("kernel_shape", "ints", REQUIRED, doc=f"[{kernel}] window size")]
        + window_attrs(rank=rank)
        + [Attr("ceil_mode", "bool", False, doc="round the output size up (a last, partial window)")]
        + list(extra)
    )


def _windowed_pools(rank: int) -> list[OperatorDescriptor]:
    """max_pool{rank}d and avg_pool{rank}d over [N, C, *SPATIAL_AXES[rank]]."""
    axes = SPATIAL_AXES[rank]
    layout = "NC" + "".join(axes)  # NCHW, NCDHW
    x_in = Port("x", shape=["N", "C", *axes], dtype="T")
    y_doc = f"[N, C, {', '.join(f'{a}_out' for a in axes)}]"
    max_op, avg_op = f"max_pool{rank}d", f"avg_pool{rank}d"
    return [
        builtin_operator(
            max_op,
            doc=f"Maximum over each {rank}-d window of {layout} x (padding never wins; NaN propagates).",
            inputs=[x_in],
            outputs=[Port("y", dtype="T", doc=y_doc)],
            attrs=_pool_attrs(rank),
            dtype_vars={"T": MAX_POOL_DTYPES},
            variant_dtypes=MAX_POOL_DTYPES,
            infer=_infer(max_op),
            bind=_max_pool_bind(max_op),
            cuda=cuda_variant(cuda.pool_bind(max_op, _window), MAX_POOL_DTYPES),
            onnx="MaxPool",
        ),
        builtin_operator(
            avg_op,
            doc=f"Mean over each {rank}-d window of {layout} x.",
            inputs=[x_in],
            outputs=[Port("y", dtype="T", doc=y_doc)],
            attrs=_pool_attrs(
                rank,
                [
                    Attr(
                        "count_include_pad",
                        "bool",
                        False,
                        doc="divide by the window size including the explicit pads",
                    )
                ],
            ),
            dtype_vars={"T": FLOATS},
            variant_dtypes=FLOATS,
            infer=_infer(avg_op),
            bind=_avg_pool_bind(avg_op),
            cuda=cuda_variant(cuda.pool_bind(avg_op, _window), FLOATS),
            onnx="AveragePool",
        ),
    ]


def descriptors() -> list[OperatorDescriptor]:
    """Fresh descriptors of max_pool2d, avg_pool2d, max_pool3d, avg_pool3d and global_average_pool (one
    set per registry)."""
    return [
        *_windowed_pools(2),
        *_windowed_pools(3),
        builtin_operator(
            "global_average_pool",
            doc="Mean over all spatial axes of [N, C, ...] x, kept as size 1.",
            inputs=[Port("x", shape=["N", "C", "..."], dtype="T")],
            outputs=[Port("y", dtype="T", doc="[N, C, 1, ..., 1]")],
            dtype_vars={"T": FLOATS},
            variant_dtypes=FLOATS,
            infer=infer_global_average_pool,
            bind=_global_average_pool_bind,
            cuda=cuda_variant(cuda.global_average_pool_bind, FLOATS),
            onnx="GlobalAveragePool",
        ),
    ]
