"""The gemm family: matrix product with a fused epilogue, ``c = act(alpha * a @ b + bias) + residual``,
with its NumPy reference (``reference.py``) and its CUDA variant (``cuda.py``: cuBLASLt through
nvmath-python, the elementwise family's kernels for the epilogue parts cuBLASLt cannot fuse)."""

from __future__ import annotations

import importlib.util

from ...descriptor import Attr, OperatorDescriptor, Port
from .._common import FLOATS, builtin_operator
from ..kernel import cuda_variant
from . import cuda
from .reference import GEMM_ACTIVATIONS, gemm_bind, infer_gemm

__all__ = ["descriptors", "GEMM_ACTIVATIONS"]


def descriptors() -> list[OperatorDescriptor]:
    """A fresh ``gemm`` descriptor (one per registry). Its CUDA variant supports graph capture only with
    nvmath-python (the PyTorch fallback allocates temporaries)."""
    has_nvmath = importlib.util.find_spec("nvmath") is not None
    return [
        builtin_operator(
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
            dtype_vars={"T": FLOATS}, variant_dtypes=FLOATS, infer=infer_gemm, bind=gemm_bind,
            cuda=cuda_variant(cuda.bind_gemm, FLOATS, supports_graphs=has_nvmath),
            onnx="Gemm"),
    ]
