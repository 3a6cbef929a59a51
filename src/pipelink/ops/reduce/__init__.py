"""Reductions (ONNX ReduceMean/ReduceSum/ReduceMax, axes as an attribute): descriptors and NumPy references.

Half types accumulate in float32 and round once on the store; integers sum in their own type (wrapping,
as ONNX does). An empty reduction gives 0 (sum), NaN (mean) or the lowest value of the type (max).
The CUDA variants (``cuda.py``, ``reduce.cu``) give the same results for every dtype.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...descriptor import Attr, KernelContext, OperatorDescriptor, Port
from .._common import FLOATS, HALF_DTYPES, NUMERIC, builtin_operator, compute_dtype, numpy_dtype
from ..kernel import cuda_variant
from . import cuda
from .axes import reduced_axes

__all__ = ["descriptors", "reduced_axes"]


def _infer(op: str):
    def infer_reduce(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
        """Output rule of a reduction: reduced axes dropped, or kept as 1 with ``keepdims``."""
        shape = tuple(in_shapes[0])
        axes = reduced_axes(len(shape), attrs, op=op)
        keep = bool(attrs["keepdims"])
        out = tuple(1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes)
        return (out,), (in_dtypes[0],)

    return infer_reduce


def _reduce_bind(kind: str):
    def bind(ctx: KernelContext):
        dtype = ctx.in_dtypes[0]
        shape = tuple(ctx.in_shapes[0])
        axes = reduced_axes(len(shape), ctx.attrs, op=f"reduce_{kind}")
        keep = bool(ctx.attrs["keepdims"])
        half = dtype in HALF_DTYPES
        is_float = dtype in FLOATS
        scratch = np.empty(ctx.out_shapes[0], np.float32) if half else None
        count = math.prod(shape[a] for a in axes)
        # max over nothing is the lowest value of the type (-inf for floats), as ONNX says.
        low = -np.inf if is_float else np.iinfo(numpy_dtype(dtype)).min

        def kernel(inputs, outputs, stream):
            x, y = inputs[0], outputs[0]
            out = scratch if half else y
            if kind == "max":
                np.max(x, axis=axes, keepdims=keep, out=out, initial=low)
            elif is_float:
                np.sum(x, axis=axes, keepdims=keep, out=out, dtype=compute_dtype(dtype))
                if kind == "mean":
                    with np.errstate(invalid="ignore"):  # an empty mean is 0/0 = NaN, as ONNX gives
                        np.divide(out, count, out=out)
            else:
                np.sum(x, axis=axes, keepdims=keep, out=out, dtype=x.dtype)  # wraps like ONNX
            if half:
                np.copyto(y, out, casting="unsafe")

        return kernel

    return bind


def _reduction(kind: str, onnx: str, doc: str, dtypes: frozenset[str]) -> OperatorDescriptor:
    name = f"reduce_{kind}"
    return builtin_operator(
        name,
        doc=doc,
        inputs=[Port("x", dtype="T")],
        outputs=[Port("y", dtype="T")],
        attrs=[
            Attr("axes", "ints", (), doc="axes to reduce; negative counts from the end; empty: all"),
            Attr("keepdims", "bool", True, doc="keep reduced axes as size 1"),
            Attr("noop_with_empty_axes", "bool", False, doc="empty axes: return x unchanged"),
        ],
        dtype_vars={"T": dtypes},
        variant_dtypes=dtypes,
        infer=_infer(name),
        bind=_reduce_bind(kind),
        cuda=cuda_variant(cuda.reduce_bind(kind), cuda.DTYPES[kind]),
        onnx=onnx,
    )


def descriptors() -> list[OperatorDescriptor]:
    """Fresh descriptors of reduce_mean, reduce_sum and reduce_max (one set per registry)."""
    return [
        _reduction("mean", "ReduceMean", "Mean over the given axes (float types).", FLOATS),
        _reduction("sum", "ReduceSum", "Sum over the given axes (integers wrap in their type).", NUMERIC),
        _reduction("max", "ReduceMax", "Maximum over the given axes (NaN propagates).", NUMERIC),
    ]
