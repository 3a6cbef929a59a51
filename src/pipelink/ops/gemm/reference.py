"""The gemm family's NumPy reference kernels and shape rules: ``gemm`` (ONNX Gemm plus a fused epilogue)
and ``matmul`` (ONNX MatMul: NumPy batch broadcasting, 1-d operands promoted then removed).

Both compute in float32 for half types (float64 for float64) and round once on the store: the contract
the CUDA backend's cuBLASLt calls implement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...descriptor import KernelContext
from ...errors import ShapeMismatchError
from ...shapes import Mismatch, broadcast_shapes, unify
from .._common import HALF_DTYPES, compute_dtype
from ..elementwise.reference import gelu_into, gelu_tanh_into

__all__ = [
    "GEMM_ACTIVATIONS",
    "gemm_bind",
    "infer_gemm",
    "infer_matmul",
    "matmul_bind",
    "infer_det",
    "det_bind",
    "matmul_dims",
    "gemm_dims",
    "broadcasts_to",
]

GEMM_ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh")


def broadcasts_to(shape: tuple, target: tuple) -> bool:
    """True when ``shape`` broadcasts to ``target`` without changing it (ONNX unidirectional
    broadcasting): no more dimensions, and each one, aligned on the right, is 1 or equal."""
    if len(shape) > len(target):
        return False
    tail = target[len(target) - len(shape) :]
    return all(d == 1 or unify(d, t) is not None for d, t in zip(shape, tail, strict=True))


def gemm_dims(a: tuple, b: tuple, trans_a: bool, trans_b: bool) -> tuple[tuple, Any, Any]:
    """``(lead, K, N)`` of ``gemm``: c is ``lead + (N,)``; lead is ``(M,)`` for a transposed 2-d a, else
    a's leading dims (any number: they fold into M).

    Raises
    ------
    ShapeMismatchError
        a is 0-d, or not 2-d with trans_a; b is not 2-d; a's K differs from b's.
    """
    layout_b = "[N, K] (trans_b)" if trans_b else "[K, N]"
    if trans_a and len(a) != 2:
        raise ShapeMismatchError(
            f"gemm: with trans_a, input 'a' must be 2-d [K, M] (got shape {list(a)}); batched inputs "
            "take trans_a = false",
            port="a",
            symbol="rank",
            expected=2,
            got=len(a),
        )
    if len(a) < 1:
        raise ShapeMismatchError(
            f"gemm: input 'a' must have at least 1 dimension [..., K] (got {list(a)})",
            port="a",
            symbol="rank",
            expected=">= 1",
            got=0,
        )
    if len(b) != 2:
        raise ShapeMismatchError(
            f"gemm: input 'b' must be 2-d {layout_b} (got shape {list(b)})",
            port="b",
            symbol="rank",
            expected=2,
            got=len(b),
        )
    k_a, lead = (a[0], (a[1],)) if trans_a else (a[-1], tuple(a[:-1]))
    k_b, n = (b[1], b[0]) if trans_b else (b[0], b[1])
    if unify(k_a, k_b) is None:
        where_a = "its first dimension (trans_a)" if trans_a else "its last dimension"
        raise ShapeMismatchError(
            f"gemm: input 'b' {layout_b} has dimension K = {k_b}, but input 'a' has K = {k_a} "
            f"({where_a}); check the shapes, trans_a and trans_b",
            port="b",
            symbol="K",
            expected=k_a,
            got=k_b,
        )
    return lead, unify(k_a, k_b), n


def infer_gemm(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of gemm: ``c`` is ``lead + (N,)`` (:func:`gemm_dims`); ``bias`` (ONNX's C: a scalar,
    [N], [M, 1], [M, N]...) and ``residual`` must broadcast to c unchanged.

    Raises
    ------
    ShapeMismatchError
        From :func:`gemm_dims`, or a bias / residual that does not broadcast to c.
    """
    lead, _, n = gemm_dims(
        tuple(in_shapes[0]), tuple(in_shapes[1]), bool(attrs["trans_a"]), bool(attrs["trans_b"])
    )
    out = lead + (n,)
    for index, port in ((2, "bias"), (3, "residual")):
        shape = in_shapes[index]
        if shape is not None and not broadcasts_to(tuple(shape), out):
            raise ShapeMismatchError(
                f"gemm: input {port!r} of shape {list(shape)} does not broadcast to the output shape "
                f"{list(out)} (each dimension, aligned on the right, must be 1 or equal)",
                port=port,
                symbol="N" if len(shape) and unify(tuple(shape)[-1], n) is None else "broadcast",
                expected=list(out),
                got=list(shape),
            )
    return (out,), (in_dtypes[0],)


def matmul_dims(a: tuple, b: tuple) -> tuple[tuple, Any, Any, Any]:
    """``(batch, M, K, N)`` of ONNX MatMul: a 1-d a is [1, K] (M = 1, dropped from the output), a 1-d b is
    [K, 1] (N = 1, dropped); the batch dims (all but the last two) broadcast as in NumPy.

    Raises
    ------
    ShapeMismatchError
        An operand is 0-d, the K dimensions differ, or the batch dimensions do not broadcast.
    """
    for port, shape in (("a", a), ("b", b)):
        if len(shape) < 1:
            raise ShapeMismatchError(
                f"matmul: input {port!r} must have at least 1 dimension (got a 0-d tensor); multiply by a "
                "scalar with 'mul'",
                port=port,
                symbol="rank",
                expected=">= 1",
                got=0,
            )
    k_a = a[-1]
    k_b = b[0] if len(b) == 1 else b[-2]
    if unify(k_a, k_b) is None:
        where_b = "its only dimension" if len(b) == 1 else "its second-to-last dimension"
        raise ShapeMismatchError(
            f"matmul: input 'a' has K = {k_a} (its last dimension), but input 'b' has K = {k_b} ({where_b})",
            port="b",
            symbol="K",
            expected=k_a,
            got=k_b,
        )
    batch = broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
    if isinstance(batch, Mismatch):
        raise ShapeMismatchError(
            f"matmul: the batch dimensions {list(a[:-2])} of 'a' and {list(b[:-2])} of 'b' do not broadcast "
            f"({batch.symbol}: {batch.expected} vs {batch.got}); each must be 1 or equal",
            port="b",
            symbol="batch",
            expected=batch.expected,
            got=batch.got,
        )
    m = a[-2] if len(a) > 1 else 1
    n = b[-1] if len(b) > 1 else 1
    return batch, m, unify(k_a, k_b), n


def infer_matmul(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of matmul: ``batch + [M] + [N]``, without M for a 1-d a and without N for a 1-d b."""
    a, b = tuple(in_shapes[0]), tuple(in_shapes[1])
    batch, m, _, n = matmul_dims(a, b)
    return (batch + ((m,) if len(a) > 1 else ()) + ((n,) if len(b) > 1 else ()),), (in_dtypes[0],)


def matmul_bind(ctx: KernelContext):
    dtype = ctx.in_dtypes[0]
    half = dtype in HALF_DTYPES
    product = np.empty(tuple(ctx.out_shapes[0]), np.float32) if half else None

    def kernel(inputs, outputs, stream):
        a, b = inputs
        c = outputs[0]
        if product is None:
            np.matmul(a, b, out=c)
        else:
            np.matmul(a, b, out=product, dtype=np.float32)
            np.copyto(c, product, casting="unsafe")  # one rounding on the store

    return kernel


def gemm_bind(ctx: KernelContext):
    dtype = ctx.in_dtypes[0]
    cdt = compute_dtype(dtype)
    half = dtype in HALF_DTYPES
    out_shape = tuple(ctx.out_shapes[0])
    alpha, beta = float(ctx.attrs["alpha"]), float(ctx.attrs["beta"])
    activation = ctx.attrs["activation"]
    trans_a, trans_b = bool(ctx.attrs["trans_a"]), bool(ctx.attrs["trans_b"])
    has_bias, has_residual = ctx.in_shapes[2] is not None, ctx.in_shapes[3] is not None
    gelu = {"gelu": gelu_into, "gelu_tanh": gelu_tanh_into}.get(activation)
    # The product needs its own buffer when it cannot live in c: half types, or a GELU that must not
    # read and write one array. A half GELU needs a second float32 buffer for its result.
    product = np.empty(out_shape, cdt) if half or gelu is not None else None
    gelu_out = np.empty(out_shape, cdt) if half and gelu is not None else None
    scaled_bias = np.empty(tuple(ctx.in_shapes[2]), cdt) if has_bias and beta != 1.0 else None
    matmul_kw = {"dtype": np.float32} if half else {}

    def kernel(inputs, outputs, stream):
        a, b, bias, residual = inputs
        c = outputs[0]
        acc = c if product is None else product
        np.matmul(a.T if trans_a else a, b.T if trans_b else b, out=acc, **matmul_kw)
        if alpha != 1.0:
            np.multiply(acc, alpha, out=acc)
        if scaled_bias is not None:
            np.multiply(bias, beta, out=scaled_bias, dtype=cdt)
            np.add(acc, scaled_bias, out=acc)
        elif has_bias:
            np.add(acc, bias, out=acc, dtype=cdt)
        if activation == "relu":
            np.maximum(acc, 0, out=acc)
        elif gelu is not None:
            dst = gelu_out if half else c
            gelu(acc, dst)
            acc = dst
        if acc is c:
            if has_residual:
                np.add(c, residual, out=c)
        elif has_residual:
            np.add(acc, residual, out=c, dtype=cdt, casting="unsafe")  # one rounding on the store
        else:
            np.copyto(c, acc, casting="unsafe")

    return kernel


def infer_det(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of det (ONNX Det): x ``[..., M, M]`` gives ``[...]``.

    Raises
    ------
    ShapeMismatchError
        x has fewer than 2 dims, or its last two differ (when both are known).
    """
    x = tuple(in_shapes[0])
    if len(x) < 2:
        raise ShapeMismatchError(
            f"det: x must be [..., M, M], at least 2-d (got {list(x)})",
            port="x",
            expected="[..., M, M]",
            got=list(x),
        )
    rows, cols = x[-2], x[-1]
    if isinstance(rows, int) and isinstance(cols, int) and rows != cols:
        raise ShapeMismatchError(
            f"det: x's last two dims must be equal, square matrices (got {list(x)})",
            port="x",
            expected="[..., M, M]",
            got=list(x),
        )
    return (x[:-2],), (in_dtypes[0],)


def det_bind(ctx: KernelContext):
    """LAPACK's LU (``numpy.linalg.det``) in the compute dtype (float32 for the 16-bit floats), one
    rounding to the output's."""
    cdt = compute_dtype(ctx.in_dtypes[0])

    def kernel(inputs, outputs, stream):
        value = np.linalg.det(inputs[0].astype(cdt, copy=False))  # a 0 x 0 matrix's is 1
        np.copyto(outputs[0], value, casting="unsafe")

    return kernel
