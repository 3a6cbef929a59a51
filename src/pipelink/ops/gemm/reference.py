"""The gemm family's NumPy reference kernel and its shape rule.

``gemm`` computes ``act(alpha * a @ b + bias) + residual`` in float32 for half types (float64 for
float64) and rounds once on the store: the contract the CUDA backend's cuBLASLt epilogues implement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...descriptor import KernelContext
from ...errors import ShapeMismatchError
from ...shapes import unify
from .._common import HALF_DTYPES, compute_dtype
from ..elementwise.reference import gelu_into, gelu_tanh_into

__all__ = ["GEMM_ACTIVATIONS", "gemm_bind", "infer_gemm"]

GEMM_ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh")


def infer_gemm(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of gemm: ``c`` is ``a.shape[:-1] + (N,)``, after checking b, bias and residual.

    The port patterns have already bound a's leading dims, K from a, and N from bias/residual; this
    checks b (whose layout depends on ``trans_b``) against them.

    Raises
    ------
    ShapeMismatchError
        b is not 2-d, its K differs from a's last dimension, or its N from bias's or residual's.
    """
    a, b = tuple(in_shapes[0]), tuple(in_shapes[1])
    trans_b = bool(attrs["trans_b"])
    layout = "[N, K] (trans_b)" if trans_b else "[K, N]"
    if len(b) != 2:
        raise ShapeMismatchError(
            f"gemm: input 'b' must be 2-d {layout} (got shape {list(b)})",
            port="b", symbol="rank", expected=2, got=len(b))
    k_b, n = (b[1], b[0]) if trans_b else (b[0], b[1])
    k_a = a[-1]
    if unify(k_a, k_b) is None:
        raise ShapeMismatchError(
            f"gemm: input 'b' {layout} has dimension K = {k_b}, but input 'a' has K = {k_a} "
            f"(its last dimension); check the shapes or trans_b",
            port="b", symbol="K", expected=k_a, got=k_b)
    for index, port in ((2, "bias"), (3, "residual")):
        shape = in_shapes[index]
        if shape is not None and unify(tuple(shape)[-1], n) is None:
            raise ShapeMismatchError(
                f"gemm: input {port!r} has dimension N = {tuple(shape)[-1]}, but input 'b' {layout} "
                f"has N = {n}", port=port, symbol="N", expected=n, got=tuple(shape)[-1])
    return (a[:-1] + (n,),), (in_dtypes[0],)






def gemm_bind(ctx: KernelContext):
    dtype = ctx.in_dtypes[0]
    cdt = compute_dtype(dtype)
    half = dtype in HALF_DTYPES
    out_shape = tuple(ctx.out_shapes[0])
    alpha = float(ctx.attrs["alpha"])
    activation = ctx.attrs["activation"]
    trans_b = bool(ctx.attrs["trans_b"])
    has_bias, has_residual = ctx.in_shapes[2] is not None, ctx.in_shapes[3] is not None
    gelu = {"gelu": gelu_into, "gelu_tanh": gelu_tanh_into}.get(activation)
    # The product needs its own buffer when it cannot live in c: half types, or a GELU that must not
    # read and write one array. A half GELU needs a second float32 buffer for its result.
    product = np.empty(out_shape, cdt) if half or gelu is not None else None
    gelu_out = np.empty(out_shape, cdt) if half and gelu is not None else None
    matmul_kw = {"dtype": np.float32} if half else {}

    def kernel(inputs, outputs, stream):
        a, b, bias, residual = inputs
        c = outputs[0]
        acc = c if product is None else product
        np.matmul(a, b.T if trans_b else b, out=acc, **matmul_kw)
        if alpha != 1.0:
            np.multiply(acc, alpha, out=acc)
        if has_bias:
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
