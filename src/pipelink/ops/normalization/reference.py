"""The normalization family's NumPy reference kernels: layer_norm, rms_norm and the seed's layer_norm_v1.

Statistics are computed in float32 for float32/float16/bfloat16 inputs and in float64 for float64;
half outputs are rounded once on the store. Scratch buffers are allocated in ``bind``, never per run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...descriptor import KernelContext
from .._common import HALF_DTYPES, compute_dtype, stats_dtype

__all__ = ["infer_norm_stats", "layer_norm_bind", "rms_norm_bind"]


def infer_norm_stats(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of layer_norm(_v1): ``output`` like x; ``mean`` and ``rstd`` over x's leading dims.

    The statistics are float64 for a float64 input and float32 otherwise.
    """
    shape, dtype = tuple(in_shapes[0]), in_dtypes[0]
    lead = shape[:-1]
    stats = stats_dtype(dtype)
    return (shape, lead, lead), (dtype, stats, stats)


def layer_norm_bind(ctx: KernelContext, *, eps_input: bool):
    """Kernel for layer_norm (eps from attrs) and layer_norm_v1 (eps from a 0-d input tensor)."""
    dtype = ctx.in_dtypes[0]
    cdt = compute_dtype(dtype)
    has_gamma, has_beta = ctx.in_shapes[1] is not None, ctx.in_shapes[2] is not None
    half = dtype in HALF_DTYPES
    scratch = np.empty(ctx.in_shapes[0], cdt) if half else None
    eps_attr = None if eps_input else float(ctx.attrs["eps"])

    def kernel(inputs, outputs, stream):
        x, gamma, beta = inputs[0], inputs[1], inputs[2]
        y, mean, rstd = outputs
        eps = float(inputs[3]) if eps_input else eps_attr
        buf = scratch if half else y
        np.mean(x, axis=-1, dtype=cdt, out=mean)
        # var = mean((x - mean)^2): square in buf, then recompute x - mean (no second buffer).
        np.subtract(x, mean[..., None], out=buf, dtype=cdt)
        np.square(buf, out=buf)
        np.mean(buf, axis=-1, out=rstd)
        np.add(rstd, eps, out=rstd)
        np.sqrt(rstd, out=rstd)
        np.reciprocal(rstd, out=rstd)
        np.subtract(x, mean[..., None], out=buf, dtype=cdt)
        np.multiply(buf, rstd[..., None], out=buf)
        if has_gamma:
            np.multiply(buf, gamma, out=buf, dtype=cdt)
        if has_beta:
            np.add(buf, beta, out=buf, dtype=cdt)
        if half:
            np.copyto(y, buf, casting="unsafe")

    return kernel


def rms_norm_bind(ctx: KernelContext):
    dtype = ctx.in_dtypes[0]
    cdt = compute_dtype(dtype)
    shape = tuple(ctx.in_shapes[0])
    has_gamma = ctx.in_shapes[1] is not None
    half = dtype in HALF_DTYPES
    scratch = np.empty(shape, cdt) if half else None
    r = np.empty(shape[:-1], cdt)
    eps = float(ctx.attrs["eps"])

    def kernel(inputs, outputs, stream):
        x, gamma = inputs[0], inputs[1]
        y = outputs[0]
        buf = scratch if half else y
        np.square(x, out=buf, dtype=cdt)
        np.mean(buf, axis=-1, out=r)
        np.add(r, eps, out=r)
        np.sqrt(r, out=r)
        np.reciprocal(r, out=r)
        np.multiply(x, r[..., None], out=buf, dtype=cdt)
        if has_gamma:
            np.multiply(buf, gamma, out=buf, dtype=cdt)
        if half:
            np.copyto(y, buf, casting="unsafe")

    return kernel
