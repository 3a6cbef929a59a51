"""The batch_norm family: inference batch normalisation with running statistics (channel axis 1), with its
NumPy reference (``reference.py``) and CUDA kernel (``cuda.py``, ``batch_norm.cu``)."""

from __future__ import annotations

from ...descriptor import Attr, OperatorDescriptor, Port
from .._common import FLOATS, builtin_operator
from ..kernel import cuda_variant
from . import cuda
from .reference import batch_norm_bind

__all__ = ["descriptors"]


def descriptors() -> list[OperatorDescriptor]:
    """A fresh ``batch_norm`` descriptor (one per registry)."""
    return [
        builtin_operator(
            "batch_norm",
            doc="Batch normalisation for inference with running statistics (channel axis 1).",
            inputs=[
                Port("x", shape=["N", "C", "..."], dtype="T"),
                Port("mean", shape=["C"], dtype="T", doc="running mean"),
                Port("var", shape=["C"], dtype="T", doc="running variance"),
                Port("gamma", shape=["C"], dtype="T", optional=True, doc="scale (default 1)"),
                Port("beta", shape=["C"], dtype="T", optional=True, doc="shift (default 0)"),
            ],
            outputs=[Port("y", shape="x", dtype="T")],
            attrs=[
                Attr(
                    "eps",
                    "float",
                    1e-5,
                    doc="added to the running variance before the square root "
                    "(ONNX BatchNormalization's default)",
                )
            ],
            dtype_vars={"T": FLOATS},
            variant_dtypes=FLOATS,
            bind=batch_norm_bind,
            cuda=cuda_variant(cuda.batch_norm_bind, FLOATS),
            onnx="BatchNormalization",
        ),
    ]
