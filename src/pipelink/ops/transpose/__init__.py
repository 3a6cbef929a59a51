"""The transpose family: layout copies into a contiguous result. ``transpose`` permutes the axes of a
tensor; ``as_strided`` copies any forward strided view of a tensor's storage (a split part reshaped and
transposed into heads, in one copy). NumPy references in ``reference.py``, CUDA kernels in ``cuda.py``
(``transpose.cu``, ``as_strided.cu``)."""

from __future__ import annotations

from ...descriptor import REQUIRED, Attr, OperatorDescriptor, Port
from .._common import builtin_operator
from ..kernel import cuda_variant
from . import cuda
from .reference import as_strided_bind, infer_as_strided, infer_transpose, resolve_perm, transpose_bind

__all__ = ["descriptors", "resolve_perm"]


def descriptors() -> list[OperatorDescriptor]:
    """Fresh ``transpose`` and ``as_strided`` descriptors (one set per registry)."""
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
        builtin_operator(
            "as_strided",
            doc="Copy a strided view of x's storage into a contiguous y (torch.as_strided, then contiguous).",
            inputs=[Port("x", doc="any shape, any dtype: read as its row-major storage, x.reshape(-1)")],
            outputs=[Port("y", doc="the attribute shape, x's dtype")],
            attrs=[
                Attr("shape", "ints", REQUIRED, doc="y's shape"),
                Attr(
                    "strides",
                    "ints",
                    REQUIRED,
                    doc="one per dim of shape, in elements, >= 0: y[i0, i1, ...] = "
                    "x.reshape(-1)[offset + i0 * strides[0] + i1 * strides[1] + ...]",
                ),
                Attr("offset", "int", 0, doc="the element of x's storage y starts at, >= 0"),
            ],
            infer=infer_as_strided,
            bind=as_strided_bind,
            cuda=cuda_variant(cuda.as_strided_bind, None),
        ),
    ]
