"""The normalization family's NumPy reference kernels and shape rules: layer_norm, rms_norm and the seed's
layer_norm_v1.

layer_norm and rms_norm normalise over the trailing axes from ``axis`` (ONNX LayerNormalization and
RMSNormalization): the kernels see x as ``[rows, C]`` with ``C = prod(x.shape[axis:])``. Statistics are
computed in float32 for float32/float16/bfloat16 inputs and in float64 for float64; half outputs are
rounded once on the store. Scratch buffers are allocated in ``bind``, never per run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...descriptor import KernelContext
from ...errors import ShapeMismatchError
from ...shapes import unify
from .._common import HALF_DTYPES, compute_dtype, stats_dtype
from .._dims import normalize_axis

__all__ = [
    "infer_norm_stats",
    "infer_layer_norm",
    "infer_rms_norm",
    "norm_rows",
    "layer_norm_bind",
    "rms_norm_bind",
]


def _norm_axis(op: str, shape: tuple, attrs: Mapping[str, Any], params: tuple[str, ...]) -> int:
    """The first normalised axis of x, after checking that x has one and that each given scale or shift
    input (``params``: their shapes or None, in port order) has the normalised shape ``x.shape[axis:]``.

    Raises
    ------
    ShapeMismatchError
        x is 0-d, or a scale/shift shape differs from ``x.shape[axis:]``.
    InvalidArgumentError
        ``axis`` is outside ``[-rank, rank)``.
    """
    if len(shape) < 1:
        raise ShapeMismatchError(
            f"{op}: input 'x' must have at least 1 dimension (got a 0-d tensor)",
            port="x",
            symbol="rank",
            expected=">= 1",
            got=0,
        )
    axis = normalize_axis(int(attrs["axis"]), len(shape), op=op)
    normalized = shape[axis:]
    for port, given in params:
        if given is not None and unify(tuple(given), normalized) is None:
            raise ShapeMismatchError(
                f"{op}: input {port!r} has shape {list(given)}, but it must have the normalised shape "
                f"x.shape[axis:] = {list(normalized)} (x {list(shape)}, axis {attrs['axis']})",
                port=port,
                symbol="C",
                expected=list(normalized),
                got=list(given),
            )
    return axis


def norm_rows(ctx: KernelContext) -> tuple[int, int]:
    """``(rows, C)``: the stage's x seen as rows of the ``C`` elements from its first normalised axis on
    (layer_norm_v1, which has no ``axis``, normalises the last)."""
    shape = tuple(ctx.in_shapes[0])
    axis = int(ctx.attrs.get("axis", -1)) % len(shape)
    return math.prod(shape[:axis]), math.prod(shape[axis:])


def infer_layer_norm(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of layer_norm: ``output`` like x; ``mean`` and ``rstd`` of ONNX's shape, x's shape with
    the normalised axes set to 1 (``x.shape[:axis] + [1] * (rank - axis)``); float64 statistics for a
    float64 input, else float32."""
    shape, dtype = tuple(in_shapes[0]), in_dtypes[0]
    axis = _norm_axis("layer_norm", shape, attrs, (("gamma", in_shapes[1]), ("beta", in_shapes[2])))
    stats_shape = shape[:axis] + (1,) * (len(shape) - axis)
    stats = stats_dtype(dtype)
    return (shape, stats_shape, stats_shape), (dtype, stats, stats)


def infer_rms_norm(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of rms_norm: ``output`` like x, after checking axis and gamma."""
    shape = tuple(in_shapes[0])
    _norm_axis("rms_norm", shape, attrs, (("gamma", in_shapes[1]),))
    return (shape,), (in_dtypes[0],)


def infer_norm_stats(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of layer_norm_v1: ``output`` like ``input`` [N, C]; ``mean`` and ``rstd`` [N], float64
    for a float64 input and float32 otherwise."""
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
    rows, c = norm_rows(ctx)
    scratch = np.empty((rows, c), cdt) if half else None
    eps_attr = None if eps_input else float(ctx.attrs["eps"])

    def kernel(inputs, outputs, stream):
        # Contiguous tensors: every reshape below is a view, so the outputs are written in place.
        x = inputs[0].reshape(rows, c)
        gamma, beta = (None if t is None else t.reshape(c) for t in inputs[1:3])
        y, mean, rstd = outputs[0].reshape(rows, c), outputs[1].reshape(rows), outputs[2].reshape(rows)
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
    rows, c = norm_rows(ctx)
    has_gamma = ctx.in_shapes[1] is not None
    half = dtype in HALF_DTYPES
    scratch = np.empty((rows, c), cdt) if half else None
    r = np.empty(rows, cdt)
    eps = float(ctx.attrs["eps"])

    def kernel(inputs, outputs, stream):
        x = inputs[0].reshape(rows, c)  # views of contiguous tensors, as in layer_norm
        gamma = None if inputs[1] is None else inputs[1].reshape(c)
        y = outputs[0].reshape(rows, c)
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
