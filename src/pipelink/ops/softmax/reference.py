"""The softmax family's NumPy reference kernel: numerically stable softmax along one axis of
``x * scale + bias``, computed in float32 (float64 for float64) and rounded once on the store."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...descriptor import KernelContext
from ...errors import InvalidArgumentError, ShapeMismatchError
from ...shapes import Mismatch, broadcast_shapes, unify
from .._common import HALF_DTYPES, compute_dtype

__all__ = ["infer_softmax", "normalize_axis", "has_bias", "softmax_bind"]


def infer_softmax(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of softmax: same shape and dtype as x, after checking ``axis`` against x's rank and that
    ``bias`` (when given) broadcasts to x's shape without changing it.

    Raises
    ------
    InvalidArgumentError
        ``axis`` is outside ``[-ndim, ndim)``; ``scale`` overflows x's compute dtype.
    ShapeMismatchError
        ``bias`` does not broadcast to x's shape (it has more dims, or a dim that is neither 1 nor x's).
    """
    shape = tuple(in_shapes[0])
    normalize_axis(attrs["axis"], len(shape))
    if in_dtypes[0] is not None:
        with np.errstate(over="ignore"):
            rounded = compute_dtype(in_dtypes[0]).type(attrs.get("scale", 1.0))
        if not np.isfinite(rounded):
            raise InvalidArgumentError(
                f"softmax: attribute 'scale' ({attrs['scale']}) is not finite in {rounded.dtype}, the "
                f"arithmetic of a {in_dtypes[0]} input; give a smaller scale",
                attr="scale",
                got=attrs["scale"],
            )
    if has_bias(in_shapes):
        bias = tuple(in_shapes[1])
        result = broadcast_shapes(shape, bias)
        # unify: a symbol of x may stand for the bias's size (checked again once the shapes are known)
        if isinstance(result, Mismatch) or len(bias) > len(shape) or unify(tuple(result), shape) is None:
            raise ShapeMismatchError(
                f"softmax: input 'bias' {list(bias)} must broadcast to x's shape {list(shape)} without "
                "changing it (NumPy rules: each of its trailing dims 1 or x's); give a bias of x's shape "
                "or one with size-1 dims",
                port="bias",
                expected=list(shape),
                got=list(bias),
            )
    return (shape,), (in_dtypes[0],)


def has_bias(in_shapes: tuple) -> bool:
    """Whether the stage gives softmax its optional ``bias`` input."""
    return len(in_shapes) > 1 and in_shapes[1] is not None


def normalize_axis(axis: int, ndim: int) -> int:
    """``axis`` in ``[0, ndim)``.

    Raises
    ------
    InvalidArgumentError
        ``axis`` is outside ``[-ndim, ndim)``.
    """
    if not -ndim <= axis < ndim:
        raise InvalidArgumentError(
            f"softmax: attribute 'axis' must be in [-{ndim}, {ndim}) for a {ndim}-d input (got {axis})",
            attr="axis",
            got=axis,
        )
    return axis % ndim


def softmax_bind(ctx: KernelContext):
    dtype = ctx.in_dtypes[0]
    cdt = compute_dtype(dtype)
    shape = tuple(ctx.in_shapes[0])
    axis = normalize_axis(int(ctx.attrs["axis"]), len(shape))
    scale = cdt.type(ctx.attrs["scale"])  # rounded to the compute dtype, as the CUDA kernel takes it
    bias = has_bias(ctx.in_shapes)
    half = dtype in HALF_DTYPES
    scratch = np.empty(shape, cdt) if half else None
    bias_scratch = np.empty(tuple(ctx.in_shapes[1]), cdt) if bias and half else None
    red = np.empty(shape[:axis] + (1,) + shape[axis + 1 :], cdt)

    def kernel(inputs, outputs, stream):
        x, y = inputs[0], outputs[0]
        buf = scratch if half else y
        if half:
            np.copyto(buf, x, casting="unsafe")
            x = buf
        if scale != 1 or bias:
            # x * scale + bias, each step rounded in the compute dtype (NumPy's sequence of the two ops).
            if scale != 1:
                np.multiply(x, scale, out=buf)
                x = buf
            if bias:
                b = inputs[1]
                if half:
                    np.copyto(bias_scratch, b, casting="unsafe")
                    b = bias_scratch
                np.add(x, b, out=buf)
                x = buf
        # Subtract the max so exp never overflows (all-(-inf) rows give NaN, like every softmax: the
        # documented result, so NumPy's warning about it is silenced).
        np.max(x, axis=axis, keepdims=True, out=red)
        with np.errstate(invalid="ignore"):
            np.subtract(x, red, out=buf)
        np.exp(buf, out=buf)
        np.sum(buf, axis=axis, keepdims=True, out=red)
        np.divide(buf, red, out=buf)
        if half:
            np.copyto(y, buf, casting="unsafe")

    return kernel
