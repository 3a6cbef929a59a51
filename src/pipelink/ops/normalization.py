"""Normalisation built-in operators: layer_norm, rms_norm, softmax, batch_norm and the seed's
layer_norm_v1, with their NumPy reference kernels.

Statistics are computed in float32 for float32/float16/bfloat16 inputs and in float64 for float64;
half outputs are rounded once on the store. Scratch buffers are allocated in ``bind``, never per run.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import numpy as np

from ..descriptor import Attr, KernelContext, OperatorDescriptor, Port
from ..errors import InvalidArgumentError
from ._common import FLOATS, HALF_DTYPES, compute_dtype, cpu_operator, stats_dtype

__all__ = ["descriptors", "infer_norm_stats", "infer_softmax"]

STATS = frozenset({"float32", "float64"})
_EPS = Attr("eps", "float", 1e-5, doc="added to the variance before the square root")


def infer_norm_stats(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of layer_norm(_v1): ``output`` like x; ``mean`` and ``rstd`` over x's leading dims.

    The statistics are float64 for a float64 input and float32 otherwise.
    """
    shape, dtype = tuple(in_shapes[0]), in_dtypes[0]
    lead = shape[:-1]
    stats = stats_dtype(dtype)
    return (shape, lead, lead), (dtype, stats, stats)


def infer_softmax(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of softmax: same shape and dtype as x, after checking ``axis`` against x's rank.

    Raises
    ------
    InvalidArgumentError
        ``axis`` is outside ``[-ndim, ndim)``.
    """
    shape = tuple(in_shapes[0])
    _normalize_axis(attrs.get("axis", -1), len(shape))
    return (shape,), (in_dtypes[0],)


def _normalize_axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise InvalidArgumentError(
            f"softmax: attribute 'axis' must be in [-{ndim}, {ndim}) for a {ndim}-d input (got {axis})",
            attr="axis", got=axis)
    return axis % ndim


def _layer_norm_bind(ctx: KernelContext, *, eps_input: bool):
    """Kernel for layer_norm (eps from attrs) and layer_norm_v1 (eps from a 0-d input tensor)."""
    dtype = ctx.in_dtypes[0]
    cdt = compute_dtype(dtype)
    has_gamma, has_beta = ctx.in_shapes[1] is not None, ctx.in_shapes[2] is not None
    half = dtype in HALF_DTYPES
    scratch = np.empty(ctx.in_shapes[0], cdt) if half else None
    eps_attr = float(ctx.attrs.get("eps", 1e-5))

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


def _rms_norm_bind(ctx: KernelContext):
    dtype = ctx.in_dtypes[0]
    cdt = compute_dtype(dtype)
    shape = tuple(ctx.in_shapes[0])
    has_gamma = ctx.in_shapes[1] is not None
    half = dtype in HALF_DTYPES
    scratch = np.empty(shape, cdt) if half else None
    r = np.empty(shape[:-1], cdt)
    eps = float(ctx.attrs.get("eps", 1e-5))

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


def _softmax_bind(ctx: KernelContext):
    dtype = ctx.in_dtypes[0]
    cdt = compute_dtype(dtype)
    shape = tuple(ctx.in_shapes[0])
    axis = _normalize_axis(int(ctx.attrs.get("axis", -1)), len(shape))
    half = dtype in HALF_DTYPES
    scratch = np.empty(shape, cdt) if half else None
    red = np.empty(shape[:axis] + (1,) + shape[axis + 1:], cdt)

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


def _batch_norm_bind(ctx: KernelContext):
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
    eps = float(ctx.attrs.get("eps", 1e-5))

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


def descriptors() -> list[OperatorDescriptor]:
    """Fresh descriptors of every normalisation operator (one set per registry).

    Returns
    -------
    list of OperatorDescriptor
        ``layer_norm, rms_norm, softmax, batch_norm, layer_norm_v1``.
    """
    floats = {"T": FLOATS}
    stats_doc = "float32 (float64 for a float64 input)"
    return [
        cpu_operator(
            "layer_norm", doc="Layer normalisation over the last axis; also returns mean and 1/std.",
            inputs=[Port("x", shape=["...", "C"], dtype="T"),
                    Port("gamma", shape=["C"], dtype="T", optional=True, doc="scale (default 1)"),
                    Port("beta", shape=["C"], dtype="T", optional=True, doc="shift (default 0)")],
            outputs=[Port("output", shape="x", dtype="T"),
                     Port("mean", shape=["..."], dtype=STATS, doc=stats_doc),
                     Port("rstd", shape=["..."], dtype=STATS,
                          doc="1/sqrt(var + eps), var biased; " + stats_doc)],
            attrs=[_EPS], dtype_vars=floats, variant_dtypes=FLOATS, infer=infer_norm_stats,
            bind=partial(_layer_norm_bind, eps_input=False)),
        cpu_operator(
            "rms_norm", doc="RMS normalisation over the last axis: x / sqrt(mean(x^2) + eps) * gamma.",
            inputs=[Port("x", shape=["...", "C"], dtype="T"),
                    Port("gamma", shape=["C"], dtype="T", optional=True, doc="scale (default 1)")],
            outputs=[Port("output", shape="x", dtype="T")],
            attrs=[_EPS], dtype_vars=floats, variant_dtypes=FLOATS, bind=_rms_norm_bind),
        cpu_operator(
            "softmax", doc="Numerically stable softmax along one axis.",
            inputs=[Port("x", dtype="T", doc="at least 1-d")],
            outputs=[Port("y", shape="x", dtype="T")],
            attrs=[Attr("axis", "int", -1, doc="the axis to normalise; negative counts from the end")],
            dtype_vars=floats, variant_dtypes=FLOATS, infer=infer_softmax, bind=_softmax_bind),
        cpu_operator(
            "batch_norm", doc="Batch normalisation for inference with running statistics (channel axis 1).",
            inputs=[Port("x", shape=["N", "C", "..."], dtype="T"),
                    Port("mean", shape=["C"], dtype="T", doc="running mean"),
                    Port("var", shape=["C"], dtype="T", doc="running variance"),
                    Port("gamma", shape=["C"], dtype="T", optional=True, doc="scale (default 1)"),
                    Port("beta", shape=["C"], dtype="T", optional=True, doc="shift (default 0)")],
            outputs=[Port("y", shape="x", dtype="T")],
            attrs=[_EPS], dtype_vars=floats, variant_dtypes=FLOATS, bind=_batch_norm_bind),
        cpu_operator(
            "layer_norm_v1",
            doc="The seed's LayerNorm module: layer_norm of [N, C] with eps as a 0-d tensor.",
            inputs=[Port("input", shape=["N", "C"], dtype="T"), Port("gamma", shape=["C"], dtype="T"),
                    Port("beta", shape=["C"], dtype="T"),
                    Port("eps", shape=[], dtype="float32", doc="0-d float32 tensor")],
            outputs=[Port("output", shape="input", dtype="T"),
                     Port("mean", shape=["N"], dtype=STATS, doc=stats_doc),
                     Port("rstd", shape=["N"], dtype=STATS, doc="1/sqrt(var + eps); " + stats_doc)],
            dtype_vars=floats, variant_dtypes=FLOATS, infer=infer_norm_stats,
            bind=partial(_layer_norm_bind, eps_input=True)),
    ]
