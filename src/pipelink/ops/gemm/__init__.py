"""The gemm family: ``gemm`` (ONNX Gemm with a fused epilogue,
``c = act(alpha * op(a) @ op(b) + beta * bias) + residual``) and ``matmul`` (ONNX MatMul, batched with
broadcasting), with their NumPy reference (``reference.py``) and their CUDA variant (``cuda.py``:
cuBLASLt through nvmath-python, other families' kernels for what cuBLASLt cannot fuse); ``det`` (ONNX
Det), whose reference (LAPACK's LU) runs on staged host copies on CUDA (:data:`HOST_ONLY`)."""

from __future__ import annotations

import importlib.util

from ...descriptor import Attr, OperatorDescriptor, Port
from .._common import FLOATS, builtin_operator
from ..kernel import cuda_variant
from . import cuda
from .reference import (
    GEMM_ACTIVATIONS,
    det_bind,
    gemm_bind,
    infer_det,
    infer_gemm,
    infer_matmul,
    matmul_bind,
)

__all__ = ["descriptors", "GEMM_ACTIVATIONS", "HOST_ONLY"]

HOST_ONLY = ("det",)
"""This family's operators without a CUDA kernel: on CUDA their NumPy reference runs on staged host copies."""


def descriptors() -> list[OperatorDescriptor]:
    """Fresh ``gemm`` and ``matmul`` descriptors (one set per registry). Their CUDA variants support graph
    capture only with nvmath-python (the PyTorch fallback allocates temporaries)."""
    has_nvmath = importlib.util.find_spec("nvmath") is not None
    return [
        builtin_operator(
            "gemm",
            doc="General matrix product with fused epilogue (ONNX Gemm): "
            "c = act(alpha * op(a) @ op(b) + beta * bias) + residual.",
            inputs=[
                Port("a", shape=None, dtype="T", doc="[..., K] or [..., M, K]; [K, M] when trans_a"),
                Port("b", shape=None, dtype="T", doc="[K, N], or [N, K] when trans_b"),
                Port(
                    "bias",
                    shape=None,
                    dtype="T",
                    optional=True,
                    doc="ONNX's C: broadcasts to c (a scalar, [N], [M, 1], [M, N]...), times beta",
                ),
                Port(
                    "residual",
                    shape=None,
                    dtype="T",
                    optional=True,
                    doc="broadcasts to c, added after the activation",
                ),
            ],
            outputs=[Port("c", shape=None, dtype="T", doc="[..., N]: a's leading dims (M when trans_a), N")],
            attrs=[
                Attr("alpha", "float", 1.0, doc="scales op(a) @ op(b)"),
                Attr("beta", "float", 1.0, doc="scales bias"),
                Attr(
                    "activation",
                    "str",
                    "none",
                    choices=GEMM_ACTIVATIONS,
                    doc="applied after the bias; 'gelu' is the erf form",
                ),
                Attr("trans_a", "bool", False, doc="a is stored [K, M] (2-d a only)"),
                Attr("trans_b", "bool", False, doc="b is stored [N, K]"),
            ],
            dtype_vars={"T": FLOATS},
            variant_dtypes=FLOATS,
            infer=infer_gemm,
            bind=gemm_bind,
            cuda=cuda_variant(cuda.bind_gemm, FLOATS, supports_graphs=has_nvmath, name=cuda.CUBLASLT_VARIANT),
            onnx="Gemm",
        ),
        builtin_operator(
            "matmul",
            doc="Matrix product with NumPy batch broadcasting (ONNX MatMul); a 1-d a is a row, "
            "a 1-d b a column, and that dimension is dropped from c.",
            inputs=[
                Port("a", shape=None, dtype="T", doc="[..., M, K] or [K]"),
                Port("b", shape=None, dtype="T", doc="[..., K, N] or [K]"),
            ],
            outputs=[Port("c", shape=None, dtype="T", doc="[broadcast(...), M, N]")],
            dtype_vars={"T": FLOATS},
            variant_dtypes=FLOATS,
            infer=infer_matmul,
            bind=matmul_bind,
            cuda=cuda_variant(
                cuda.bind_matmul, FLOATS, supports_graphs=has_nvmath, name=cuda.CUBLASLT_VARIANT
            ),
            onnx="MatMul",
        ),
        builtin_operator(
            "det",
            doc="Determinant of each square matrix of x [..., M, M] (ONNX Det): y [...].",
            inputs=[Port("x", shape=None, dtype="T", doc="[..., M, M]")],
            outputs=[Port("y", shape=None, dtype="T", doc="[...]")],
            dtype_vars={"T": FLOATS},
            variant_dtypes=FLOATS,
            infer=infer_det,
            bind=det_bind,
            onnx="Det",
        ),
    ]
