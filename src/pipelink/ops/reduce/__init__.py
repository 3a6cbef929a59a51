"""Reductions (ONNX ReduceMean/ReduceSum/ReduceMax/ReduceMin/ReduceProd, axes as an attribute;
ArgMax/ArgMin and Hardmax over one axis; TopK, its k an attribute) and the cumulative sum and product
(ONNX CumSum, CumProd, the axis an attribute): descriptors and NumPy references.

Half types accumulate in float32 and round once on the store; integers sum and multiply in their own type
(wrapping, as ONNX does). An empty reduction gives 0 (sum), 1 (prod), NaN (mean), the lowest value of
the type (max) or the highest (min); argmax / argmin refuse an empty axis (``reference.py``). The CUDA
variants (``cuda.py``, ``reduce.cu``, ``scan.cu``, ``topk.cu``) give the same results for every dtype.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...descriptor import Attr, KernelContext, OperatorDescriptor, Port
from .._common import FLOATS, HALF_DTYPES, NUMERIC, builtin_operator, compute_dtype, host_scratch, numpy_dtype
from .._dims import normalize_axis
from ..kernel import cuda_variant
from . import cuda, reference, topk_cuda
from .axes import reduced_axes

__all__ = ["descriptors", "reduced_axes"]

BOOL = frozenset({"bool"})


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
        scratch = host_scratch(ctx, tuple(ctx.out_shapes[0]), np.float32, "float32 sums") if half else None
        count = math.prod(shape[a] for a in axes)
        # max over nothing is the lowest value of the type (-inf for floats, False for bool), min the
        # highest, as ONNX says.
        if is_float:
            low, high = -np.inf, np.inf
        elif dtype == "bool":
            low, high = False, True
        else:
            info = np.iinfo(numpy_dtype(dtype))
            low, high = info.min, info.max
        acc = compute_dtype(dtype) if is_float else numpy_dtype(dtype)  # integers wrap like ONNX

        def kernel(inputs, outputs, stream):
            x, y = inputs[0], outputs[0]
            out = scratch if half else y
            if kind == "max":
                np.max(x, axis=axes, keepdims=keep, out=out, initial=low)
            elif kind == "min":
                np.min(x, axis=axes, keepdims=keep, out=out, initial=high)
            elif kind == "prod":
                with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 is NaN, overflow inf: IEEE
                    np.prod(x, axis=axes, keepdims=keep, out=out, dtype=acc)
            else:
                np.sum(x, axis=axes, keepdims=keep, out=out, dtype=acc)
                if kind == "mean":
                    with np.errstate(invalid="ignore"):  # an empty mean is 0/0 = NaN, as ONNX gives
                        np.divide(out, count, out=out)
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


def _infer_arg(op: str):
    def infer_arg(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
        """Output rule of argmax / argmin: int64, the axis kept as 1 with ``keepdims`` or dropped."""
        shape = tuple(in_shapes[0])
        axis = reference.arg_axis(shape, attrs, op=op)
        return (reference.arg_shape(shape, axis, bool(attrs["keepdims"])),), ("int64",)

    return infer_arg


def _arg_bind(kind: str):
    def bind(ctx: KernelContext):
        axis = reference.arg_axis(tuple(ctx.in_shapes[0]), ctx.attrs, op=f"arg{kind}")
        last = bool(ctx.attrs["select_last_index"])

        def kernel(inputs, outputs, stream):
            reference.arg_reduce_into(kind, inputs[0], outputs[0], axis=axis, select_last_index=last)

        return kernel

    return bind


def _arg_reduction(kind: str, onnx: str, doc: str) -> OperatorDescriptor:
    name = f"arg{kind}"
    return builtin_operator(
        name,
        doc=doc,
        inputs=[Port("x", dtype="T")],
        outputs=[Port("y", dtype="int64")],
        attrs=[
            Attr("axis", "int", 0, doc="the axis to reduce (size >= 1); negative counts from the end"),
            Attr("keepdims", "bool", True, doc="keep the reduced axis as size 1"),
            Attr(
                "select_last_index", "bool", False, doc="ties: the last index of the extreme, not the first"
            ),
        ],
        dtype_vars={"T": NUMERIC},
        variant_dtypes=NUMERIC,
        infer=_infer_arg(name),
        bind=_arg_bind(kind),
        cuda=cuda_variant(cuda.arg_reduce_bind(kind), cuda.ARG_DTYPES),
        onnx=onnx,
    )


def _infer_hardmax(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of hardmax: x's shape and dtype; the axis must be one of x's."""
    shape = tuple(in_shapes[0])
    normalize_axis(int(attrs["axis"]), len(shape), op="hardmax")
    return (shape,), (in_dtypes[0],)


def _hardmax_bind(ctx: KernelContext):
    axis = normalize_axis(int(ctx.attrs["axis"]), len(ctx.in_shapes[0]), op="hardmax")

    def kernel(inputs, outputs, stream):
        reference.hardmax_into(inputs[0], outputs[0], axis=axis)

    return kernel


def _hardmax() -> OperatorDescriptor:
    return builtin_operator(
        "hardmax",
        doc="1 at the first maximum along one axis (NaN the largest), 0 elsewhere: argmax one-hot.",
        inputs=[Port("x", dtype="T")],
        outputs=[Port("y", dtype="T")],
        attrs=[Attr("axis", "int", -1, doc="the axis of each line; negative counts from the end")],
        dtype_vars={"T": FLOATS},
        variant_dtypes=FLOATS,
        infer=_infer_hardmax,
        bind=_hardmax_bind,
        cuda=cuda_variant(cuda.hardmax_bind, cuda.KERNELS["hardmax"].dtypes),
        onnx="Hardmax",
    )


def _infer_top_k(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of top_k: x's shape with the axis of size k, values of x's dtype and int64 indices."""
    shape = tuple(in_shapes[0])
    axis = reference.top_k_axis(shape, attrs)
    out = tuple(int(attrs["k"]) if i == axis else d for i, d in enumerate(shape))
    return (out, out), (in_dtypes[0], "int64")


def _top_k_bind(ctx: KernelContext):
    axis = reference.top_k_axis(tuple(ctx.in_shapes[0]), ctx.attrs)  # k past a bound axis is refused here
    k, largest = int(ctx.attrs["k"]), bool(ctx.attrs["largest"])

    def kernel(inputs, outputs, stream):
        reference.top_k_into(inputs[0], outputs[0], outputs[1], axis=axis, k=k, largest=largest)

    return kernel


def _top_k() -> OperatorDescriptor:
    return builtin_operator(
        "top_k",
        doc=(
            "The k largest (or smallest) elements along one axis and their int64 indices, always sorted "
            "(sorted=0 too); ties to the lower index, NaN above every number (onnx's reference)."
        ),
        inputs=[Port("x", dtype="T")],
        outputs=[Port("values", dtype="T"), Port("indices", dtype="int64")],
        attrs=[
            Attr("k", "int", doc="how many elements to keep (0 <= k <= the axis length)"),
            Attr("axis", "int", -1, doc="the axis to select along; negative counts from the end"),
            Attr("largest", "bool", True, doc="the largest elements (else the smallest)"),
            Attr("sorted", "bool", True, doc="sorted output; the output is sorted either way"),
        ],
        dtype_vars={"T": NUMERIC},
        variant_dtypes=NUMERIC,
        infer=_infer_top_k,
        bind=_top_k_bind,
        cuda=cuda_variant(topk_cuda.top_k_bind, topk_cuda.KERNEL.dtypes),
        staged_fallback=True,
        onnx="TopK",
    )


def _infer_scan(op: str):
    def infer_scan(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
        """Output rule of cumsum / cumprod: x's shape and dtype; the axis must be one of x's."""
        shape = tuple(in_shapes[0])
        normalize_axis(int(attrs["axis"]), len(shape), op=op)
        return (shape,), (in_dtypes[0],)

    return infer_scan


def _scan_bind(kind: str):
    def bind(ctx: KernelContext):
        axis = normalize_axis(int(ctx.attrs["axis"]), len(ctx.in_shapes[0]), op=f"cum{kind}")
        exclusive, reverse = bool(ctx.attrs["exclusive"]), bool(ctx.attrs["reverse"])

        def kernel(inputs, outputs, stream):
            reference.scan_into(kind, inputs[0], outputs[0], axis=axis, exclusive=exclusive, reverse=reverse)

        return kernel

    return bind


def _scan(kind: str, onnx: str, what: str) -> OperatorDescriptor:
    name, identity = f"cum{kind}", int(kind == "prod")
    return builtin_operator(
        name,
        doc=f"Running {what} along one axis (floats in float32 for the half types; integers wrap).",
        inputs=[Port("x", dtype="T")],
        outputs=[Port("y", dtype="T")],
        attrs=[
            Attr("axis", "int", 0, doc=f"the axis to run the {what} along; negative counts from the end"),
            Attr(
                "exclusive",
                "bool",
                False,
                doc=f"each output is the {what} of the elements before it (the first is {identity})",
            ),
            Attr("reverse", "bool", False, doc="run from the end of the axis"),
        ],
        dtype_vars={"T": NUMERIC},
        variant_dtypes=NUMERIC,
        infer=_infer_scan(name),
        bind=_scan_bind(kind),
        cuda=cuda_variant(cuda.scan_bind(kind), cuda.KERNELS[name].dtypes),
        onnx=onnx,
    )


def descriptors() -> list[OperatorDescriptor]:
    """Fresh descriptors of reduce_mean, reduce_sum, reduce_max, reduce_min, reduce_prod, argmax, argmin,
    hardmax, top_k, cumsum and cumprod (one set per registry)."""
    # NaN as np.argmax / np.argmin; onnx's ReferenceEvaluator agrees, with select_last_index too (its
    # flip gives the last NaN), so the two do not differ.
    rule = "ties (NaNs too) to the first index, to the last with select_last_index"
    return [
        _reduction("mean", "ReduceMean", "Mean over the given axes (float types).", FLOATS),
        _reduction("sum", "ReduceSum", "Sum over the given axes (integers wrap in their type).", NUMERIC),
        _reduction(
            "max", "ReduceMax", "Maximum over the given axes (NaN propagates; bool: any).", NUMERIC | BOOL
        ),
        _reduction(
            "min", "ReduceMin", "Minimum over the given axes (NaN propagates; bool: all).", NUMERIC | BOOL
        ),
        _reduction(
            "prod",
            "ReduceProd",
            "Product over the given axes (floats in float32 for the half types; integers wrap).",
            NUMERIC,
        ),
        _arg_reduction(
            "max", "ArgMax", f"Index (int64) of the maximum along one axis, NaN the largest; {rule}."
        ),
        _arg_reduction(
            "min", "ArgMin", f"Index (int64) of the minimum along one axis, NaN the smallest; {rule}."
        ),
        _hardmax(),
        _top_k(),
        _scan("sum", "CumSum", "sum"),
        _scan("prod", "CumProd", "product"),
    ]
