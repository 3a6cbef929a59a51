"""The batch_norm family's NumPy reference kernel: inference batch normalisation over channel axis 1 with
running statistics, computed in float32 (float64 for float64) and rounded once on the store."""

from __future__ import annotations

import numpy as np

from ...descriptor import KernelContext
from .._common import HALF_DTYPES, compute_dtype

__all__ = ["batch_norm_bind"]


def batch_norm_bind(ctx: KernelContext):
    dtype = ctx.in_dtypes[0]
    cdt = compute_dtype(dtype)
    shape = tuple(ctx.in_shapes[0])
    channels = shape[1]
    bshape = (channels,) + (1,) * (len(shape) - 2)  # broadcast a [C] vector over [N, C, ...]
    has_gamma, has_beta = ctx.in_shapes[3] is not None, ctx.in_shapes[4] is not None
    half = dtype in HALF_DTYPES
    scratch = np.empty(shape, cdt) if half else None
    scale = np.empty(channels, cdt)
    scale_b = scale.reshape(bshape)
    eps = float(ctx.attrs["eps"])

    def kernel(inputs, outputs, stream):
        x, mean, var, gamma, beta = inputs
        y = outputs[0]
        buf = scratch if half else y
        # scale = gamma / sqrt(var + eps), per channel.
        np.add(var, eps, out=scale, dtype=cdt)
        np.sqrt(scale, out=scale)
        np.reciprocal(scale, out=scale)
        if has_gamma:
            np.multiply(scale, gamma, out=scale, dtype=cdt)
        np.subtract(x, mean.reshape(bshape), out=buf, dtype=cdt)
        np.multiply(buf, scale_b, out=buf)
        if has_beta:
            np.add(buf, beta.reshape(bshape), out=buf, dtype=cdt)
        if half:
            np.copyto(y, buf, casting="unsafe")

    return kernel
