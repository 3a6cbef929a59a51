"""The softmax family: numerically stable softmax along one axis of ``x * scale + bias`` (the scaled,
masked scores of attention in one pass), with its NumPy reference (``reference.py``) and CUDA kernel
(``cuda.py``, ``softmax.cu``)."""

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
            doc="Numerically stable softmax along one axis of x * scale + bias (bias optional, broadcast).",
            inputs=[
                Port("x", dtype="T", doc="at least 1-d"),
                Port(
                    "bias",
                    dtype="T",
                    optional=True,
                    doc="added after the scaling; broadcasts to x (NumPy rules) without changing its shape, "
                    "e.g. a causal mask [1, 1, T, T] of 0 and -inf for scores [B, H, T, T]",
                ),
            ],
            outputs=[Port("y", shape="x", dtype="T")],
            attrs=[
                Attr("axis", "int", -1, doc="the axis to normalise; negative counts from the end"),
                Attr(
                    "scale",
                    "float",
                    1.0,
                    doc="x is multiplied by it (in the compute dtype) before the bias is added",
                ),
            ],
            dtype_vars={"T": FLOATS},
            variant_dtypes=FLOATS,
            infer=infer_softmax,
            bind=softmax_bind,
            cuda=cuda_variant(cuda.softmax_bind, FLOATS),
            onnx="Softmax",
        ),
    ]
