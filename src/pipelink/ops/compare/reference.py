"""The compare family's NumPy reference kernels (the CPU variant, and the truth the CUDA kernels are tested
against).

Kernels write their preallocated bool outputs in place and never return arrays. Comparisons follow IEEE:
any comparison with NaN is false (``equal(NaN, NaN)`` too) and ``-0.0 == 0.0``. 16-bit floats are
compared as their float32 values (exact widening: the same order and the same equalities).
"""

from __future__ import annotations

import numpy as np

from ...descriptor import KernelContext
from .._common import HALF_DTYPES

__all__ = ["compare_bind", "logical_not_bind", "is_nan_bind", "is_inf_bind"]

# float16 / bfloat16 widen to float32 inside the ufunc loop (no scratch arrays); the result stays bool
_WIDENED = (np.float32, np.float32, np.bool_)


def compare_bind(ufunc: np.ufunc):
    """``c = ufunc(a, b)`` with NumPy broadcasting into a bool ``c``: a comparison (``np.less``, ...) or a
    logical operator (``np.logical_and``, ...)."""

    def bind(ctx: KernelContext):
        if ctx.in_dtypes[0] in HALF_DTYPES:

            def half_kernel(inputs, outputs, stream):
                ufunc(inputs[0], inputs[1], out=outputs[0], signature=_WIDENED)

            return half_kernel

        def kernel(inputs, outputs, stream):
            ufunc(inputs[0], inputs[1], out=outputs[0])

        return kernel

    return bind


def logical_not_bind(ctx: KernelContext):
    """``y = not x`` for a bool ``x``."""

    def kernel(inputs, outputs, stream):
        np.logical_not(inputs[0], out=outputs[0])

    return kernel


def is_nan_bind(ctx: KernelContext):
    """``y = isnan(x)`` for a float ``x``."""

    def kernel(inputs, outputs, stream):
        np.isnan(inputs[0], out=outputs[0])

    return kernel


def is_inf_bind(ctx: KernelContext):
    """``y``: ``x`` is +inf (with ``detect_positive``) or -inf (with ``detect_negative``)."""
    positive, negative = bool(ctx.attrs["detect_positive"]), bool(ctx.attrs["detect_negative"])

    def kernel(inputs, outputs, stream):
        x, y = inputs[0], outputs[0]
        if positive and negative:
            np.isinf(x, out=y)
        elif positive:
            np.equal(x, np.inf, out=y)
        elif negative:
            np.equal(x, -np.inf, out=y)
        else:
            y[...] = False

    return kernel
