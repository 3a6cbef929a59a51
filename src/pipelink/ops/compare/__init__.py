"""The compare family: elementwise comparisons (equal, less, greater, less_equal, greater_equal), logical
operators (logical_and, logical_or, logical_xor, logical_not) and the float predicates is_nan and is_inf,
every output bool.

This file declares each operator (ports, dtypes) with its two variants: the NumPy reference of
``reference.py`` and the CUDA kernels of ``cuda.py`` (``compare.cu``). Two-input operators broadcast as
NumPy does. Adding an operator here is one entry in :func:`descriptors`.
"""

from __future__ import annotations

import numpy as np

from ...descriptor import Attr, OperatorDescriptor, Port
from .._common import FLOATS, NUMERIC, builtin_operator
from ..kernel import cuda_variant
from . import cuda
from .reference import compare_bind, is_inf_bind, is_nan_bind, logical_not_bind

__all__ = ["descriptors"]

BOOL = frozenset({"bool"})


def _binary(name: str, doc: str, ufunc: np.ufunc, onnx: str, dtypes: frozenset[str]) -> OperatorDescriptor:
    """The bool ``c = a op b`` with broadcasting, a and b of one dtype among ``dtypes``."""
    return builtin_operator(
        name,
        doc=doc,
        inputs=[Port("a", dtype="T"), Port("b", dtype="T")],
        outputs=[Port("c", shape={"broadcast": ["a", "b"]}, dtype="bool")],
        dtype_vars={"T": dtypes},
        variant_dtypes=dtypes,
        bind=compare_bind(ufunc),
        cuda=cuda_variant(cuda.compare_bind(name), cuda.DTYPES[name]),
        onnx=onnx,
    )


def descriptors() -> list[OperatorDescriptor]:
    """Fresh descriptors of every compare operator (one set per registry).

    Returns
    -------
    list of OperatorDescriptor
        ``equal, less, greater, less_equal, greater_equal, logical_and, logical_or, logical_xor,
        logical_not, is_nan, is_inf``.
    """
    return [
        _binary(
            "equal",
            "Elementwise a == b with NumPy broadcasting, bool result (IEEE: NaN equals nothing, -0 == 0).",
            np.equal,
            "Equal",
            NUMERIC | BOOL,
        ),
        _binary(
            "less",
            "Elementwise a < b with NumPy broadcasting, bool result (false where either side is NaN).",
            np.less,
            "Less",
            NUMERIC,
        ),
        _binary(
            "greater",
            "Elementwise a > b with NumPy broadcasting, bool result (false where either side is NaN).",
            np.greater,
            "Greater",
            NUMERIC,
        ),
        _binary(
            "less_equal",
            "Elementwise a <= b with NumPy broadcasting, bool result (false where either side is NaN).",
            np.less_equal,
            "LessOrEqual",
            NUMERIC,
        ),
        _binary(
            "greater_equal",
            "Elementwise a >= b with NumPy broadcasting, bool result (false where either side is NaN).",
            np.greater_equal,
            "GreaterOrEqual",
            NUMERIC,
        ),
        _binary(
            "logical_and",
            "Elementwise a and b of bool tensors with NumPy broadcasting.",
            np.logical_and,
            "And",
            BOOL,
        ),
        _binary(
            "logical_or",
            "Elementwise a or b of bool tensors with NumPy broadcasting.",
            np.logical_or,
            "Or",
            BOOL,
        ),
        _binary(
            "logical_xor",
            "Elementwise a xor b of bool tensors with NumPy broadcasting.",
            np.logical_xor,
            "Xor",
            BOOL,
        ),
        builtin_operator(
            "logical_not",
            doc="Elementwise not x of a bool tensor.",
            inputs=[Port("x", dtype="bool", doc="any shape")],
            outputs=[Port("y", shape="x", dtype="bool")],
            variant_dtypes=BOOL,
            bind=logical_not_bind,
            cuda=cuda_variant(cuda.logical_not_bind, cuda.DTYPES["logical_not"]),
            onnx="Not",
        ),
        builtin_operator(
            "is_nan",
            doc="Elementwise: whether x is NaN (float types).",
            inputs=[Port("x", dtype="T", doc="any shape")],
            outputs=[Port("y", shape="x", dtype="bool")],
            dtype_vars={"T": FLOATS},
            variant_dtypes=FLOATS,
            bind=is_nan_bind,
            cuda=cuda_variant(cuda.predicate_bind("is_nan"), cuda.DTYPES["is_nan"]),
            onnx="IsNaN",
        ),
        builtin_operator(
            "is_inf",
            doc="Elementwise: whether x is +inf or -inf, as the attributes select (float types).",
            inputs=[Port("x", dtype="T", doc="any shape")],
            outputs=[Port("y", shape="x", dtype="bool")],
            attrs=[
                Attr("detect_positive", "bool", True, doc="report +inf"),
                Attr("detect_negative", "bool", True, doc="report -inf"),
            ],
            dtype_vars={"T": FLOATS},
            variant_dtypes=FLOATS,
            bind=is_inf_bind,
            cuda=cuda_variant(cuda.predicate_bind("is_inf"), cuda.DTYPES["is_inf"]),
            onnx="IsInf",
        ),
    ]
