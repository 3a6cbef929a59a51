"""The transpose family: permute the axes of a tensor into a contiguous result, with its NumPy reference
(``reference.py``) and CUDA kernels (``cuda.py``, ``transpose.cu``)."""

from __future__ import annotations

from ...descriptor import Attr, OperatorDescriptor, Port
from .._common import builtin_operator
from ..kernel import cuda_variant
from . import cuda
from .reference import infer_transpose, resolve_perm, transpose_bind

__all__ = ["descriptors", "resolve_perm"]


def descriptors() -> list[OperatorDescriptor]:
    """A fresh ``transpose`` descriptor (one per registry)."""
    return [
        builtin_operator(
            "transpose",
            doc="Permute the axes of x into a contiguous y (default: reverse them).",
            inputs=[Port("x", doc="any shape, any dtype")],
            outputs=[Port("y", doc="x's shape permuted by perm")],
            attrs=[Attr("perm", "ints", (), doc="y.shape[i] = x.shape[perm[i]]; empty reverses the axes")],
            infer=infer_transpose,
            bind=transpose_bind,
            cuda=cuda_variant(cuda.transpose_bind, None),
            onnx="Transpose",
        ),
    ]
