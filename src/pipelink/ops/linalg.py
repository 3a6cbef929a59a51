"""Linear-algebra built-in operators: the epilogue-fused ``gemm`` and ``transpose``, with their NumPy
reference kernels.

``gemm`` computes ``act(alpha * a @ b + bias) + residual`` in float32 for half types (float64 for
float64) and rounds once on the store: the contract the CUDA backend's cuBLASLt epilogues implement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..descriptor import Attr, KernelContext, OperatorDescriptor, Port
from ..errors import InvalidArgumentError, ShapeMismatchError
from ..shapes import unify
from ._common import FLOATS, HALF_DTYPES, compute_dtype, cpu_operator
from .elementwise import gelu_into, gelu_tanh_into

__all__ = ["descriptors", "infer_gemm", "infer_transpose", "resolve_perm", "GEMM_ACTIVATIONS"]

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
    trans_b = bool(attrs.get("trans_b", False))
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


def resolve_perm(perm, ndim: int) -> tuple[int, ...]:
    """The axis permutation of transpose: ``perm`` itself, or the reversed axes when it is empty.

    Raises
    ------
    InvalidArgumentError
        ``perm`` is not a permutation of ``0 .. ndim-1``.
    """
    perm = tuple(perm or ())
    if not perm:
        return tuple(range(ndim - 1, -1, -1))
    if sorted(perm) != list(range(ndim)):
        raise InvalidArgumentError(
            f"transpose: attribute 'perm' must be a permutation of 0..{ndim - 1}, one entry per axis "
            f"of the {ndim}-d input (got {list(perm)})", attr="perm", got=list(perm))
    return perm


def infer_transpose(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of transpose: x's shape permuted by ``perm``, x's dtype."""
    shape = tuple(in_shapes[0])
    perm = resolve_perm(attrs.get("perm", ()), len(shape))
    return (tuple(shape[p] for p in perm),), (in_dtypes[0],)


def _gemm_bind(ctx: KernelContext):
    dtype = ctx.in_dtypes[0]
    cdt = compute_dtype(dtype)
    half = dtype in HALF_DTYPES
    out_shape = tuple(ctx.out_shapes[0])
    alpha = float(ctx.attrs.get("alpha", 1.0))
    activation = ctx.attrs.get("activation", "none")
    trans_b = bool(ctx.attrs.get("trans_b", False))
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


def _transpose_bind(ctx: KernelContext):
    perm = resolve_perm(ctx.attrs.get("perm", ()), len(ctx.in_shapes[0]))

    def kernel(inputs, outputs, stream):
        np.copyto(outputs[0], inputs[0].transpose(perm))

    return kernel


def descriptors() -> list[OperatorDescriptor]:
    """Fresh descriptors of ``gemm`` and ``transpose`` (one set per registry)."""
    return [
        cpu_operator(
            "gemm", doc="Matrix product with fused epilogue: c = act(alpha * a @ b + bias) + residual.",
            inputs=[Port("a", shape=["...", "K"], dtype="T", doc="[..., K] or [..., M, K]"),
                    Port("b", shape=None, dtype="T", doc="[K, N], or [N, K] when trans_b"),
                    Port("bias", shape=["N"], dtype="T", optional=True, doc="added to every row"),
                    Port("residual", shape=["...", "N"], dtype="T", optional=True,
                         doc="same shape as c, added after the activation")],
            outputs=[Port("c", shape=["...", "N"], dtype="T")],
            attrs=[Attr("alpha", "float", 1.0, doc="scales a @ b"),
                   Attr("activation", "str", "none", choices=GEMM_ACTIVATIONS,
                        doc="applied after alpha and bias; 'gelu' is the erf form"),
                   Attr("trans_b", "bool", False, doc="b is stored [N, K]")],
            dtype_vars={"T": FLOATS}, variant_dtypes=FLOATS, infer=infer_gemm, bind=_gemm_bind),
        cpu_operator(
            "transpose", doc="Permute the axes of x into a contiguous y (default: reverse them).",
            inputs=[Port("x", doc="any shape, any dtype")],
            outputs=[Port("y", doc="x's shape permuted by perm")],
            attrs=[Attr("perm", "ints", (), doc="y.shape[i] = x.shape[perm[i]]; empty reverses the axes")],
            infer=infer_transpose, bind=_transpose_bind),
    ]
