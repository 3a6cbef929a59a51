"""The softmax family: numerically stable softmax along one axis, with its NumPy reference
(``reference.py``) and CUDA kernel (``cuda.py``, ``softmax.cu``)."""

from __future__ import annotations

from ...descriptor import Attr, OperatorDescriptor, Port
from .._common import FLOATS, builtin_operator
from ..kernel import cuda_variant
from . import cuda
from .reference import infer_softmax, softmax_bind

__all__ = ["descriptors"]


def descriptors() -> list[OperatorDescriptor]:
    """A fresh ``softmax`` descriptor (one per registry)."""
    return [
        builtin_operator(
            "softmax",
            doc="Numerically stable softmax along one axis.",
            inputs=[Port("x", dtype="T", doc="at least 1-d")],
            outputs=[Port("y", shape="x", dtype="T")],
            attrs=[Attr("axis", "int", -1, doc="the axis to normalise; negative counts from the end")],
            dtype_vars={"T": FLOATS},
            variant_dtypes=FLOATS,
            infer=infer_softmax,
            bind=softmax_bind,
            cuda=cuda_variant(cuda.softmax_bind, FLOATS),
            onnx="Softmax",
        ),
    ]
