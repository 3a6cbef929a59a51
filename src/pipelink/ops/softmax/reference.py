"""The softmax family's NumPy reference kernel: numerically stable softmax along one axis, computed in
float32 (float64 for float64) and rounded once on the store."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...descriptor import KernelContext
from ...errors import InvalidArgumentError
from .._common import HALF_DTYPES, compute_dtype

__all__ = ["infer_softmax", "normalize_axis", "softmax_bind"]


def infer_softmax(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of softmax: same shape and dtype as x, after checking ``axis`` against x's rank.

    Raises
    ------
    InvalidArgumentError
        ``axis`` is outside ``[-ndim, ndim)``.
    """
    shape = tuple(in_shapes[0])
    normalize_axis(attrs["axis"], len(shape))
    return (shape,), (in_dtypes[0],)


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
    half = dtype in HALF_DTYPES
    scratch = np.empty(shape, cdt) if half else None
    red = np.empty(shape[:axis] + (1,) + shape[axis + 1 :], cdt)

    def kernel(inputs, outputs, stream):
        x, y = inputs[0], outputs[0]
        buf = scratch if half else y
        if half:
            np.copyto(buf, x, casting="unsafe")
            x = buf
        # Subtract the max so exp never overflows (all-(-inf) rows give NaN, like every softmax).
        np.max(x, axis=axis, keepdims=True, out=red)
        np.subtract(x, red, out=buf)
        np.exp(buf, out=buf)
        np.sum(buf, axis=axis, keepdims=True, out=red)
        np.divide(buf, red, out=buf)
        if half:
            np.copyto(y, buf, casting="unsafe")

    return kernel
