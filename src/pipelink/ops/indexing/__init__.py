"""Indexing operators (ONNX semantics): gather_nd, scatter_elements, one_hot, eye_like — descriptors with
their NumPy reference (``reference.py``) and CUDA kernels (``cuda.py``, ``indexing.cu``), every dtype.

They keep the shape family's index contract (gather, gather_elements, scatter_nd in ``ops/shape``): a
negative index counts from the end; an out-of-range one is an error on the CPU, and on CUDA gives zeros
(gathers; ``check_indices`` raises as the CPU does) or writes nothing (scatters). Output shapes are known
at load from the input shapes and the attributes (``rules.py``).
"""

from __future__ import annotations

from ...descriptor import REQUIRED, Attr, OperatorDescriptor, Port
from ...dtypes import DTYPES
from .._common import INTS, builtin_operator
from ..kernel import cuda_variant
from ..shape import descriptors as shape_descriptors
from ..shape.rules import SCATTER_REDUCTIONS
from . import cuda, tfidf
from .reference import eye_like_bind, gather_nd_bind, one_hot_bind, scatter_elements_bind
from .rules import EYE_DTYPES, infer_eye_like, infer_gather_nd, infer_one_hot, infer_scatter_elements

__all__ = ["descriptors", "HOST_ONLY"]

HOST_ONLY = tfidf.HOST_ONLY
"""This family's operators without a CUDA kernel: on CUDA their NumPy reference runs on staged host copies."""

ANY = frozenset(DTYPES)
INDEX = frozenset({"int32", "int64"})


def _gather_attr(name: str) -> Attr:
    """gather's own attribute ``name`` (check_indices): its contract stated in one place."""
    gather = next(d for d in shape_descriptors() if d.name == "gather")
    return next(a for a in gather.attrs if a.name == name)


def descriptors() -> list[OperatorDescriptor]:
    """Fresh descriptors of the indexing operators (one set per registry).

    Returns
    -------
    list of OperatorDescriptor
        ``gather_nd, scatter_elements, one_hot, eye_like, tfidf_vectorizer`` (``tfidf.py``).
    """
    return [
        builtin_operator(
            "gather_nd",
            doc="Gather slices of data addressed by index tuples (the last dim of indices) after "
            "batch_dims shared leading dims (ONNX GatherND). An index out of range is an error on the "
            "CPU; on CUDA only with check_indices (a wait for the device per run), else its output slice "
            "becomes zeros (never an out-of-bounds read).",
            inputs=[
                Port("data", dtype="T"),
                Port(
                    "indices",
                    dtype=INDEX,
                    doc="[*batch, ..., k], k <= rank(data) - batch_dims; negative: from the end",
                ),
            ],
            outputs=[Port("y", dtype="T", doc="indices.shape[:-1] + data.shape[batch_dims + k:]")],
            attrs=[
                Attr("batch_dims", "int", 0, doc="leading dims data and indices share (below both ranks)"),
                _gather_attr("check_indices"),
            ],
            dtype_vars={"T": ANY},
            infer=infer_gather_nd,
            bind=gather_nd_bind,
            cuda=cuda_variant(cuda.gather_nd_bind, None),
            staged_fallback=True,
            onnx="GatherND",
        ),
        builtin_operator(
            "scatter_elements",
            doc="data with each update written (or combined by the reduction) at its own position, its "
            "axis coordinate replaced by its index: y[indices[i][j]][j] = updates[i][j] for axis 0 (ONNX "
            "ScatterElements). An index out of range is an error on the CPU; on CUDA it writes nothing.",
            inputs=[
                Port("data", dtype="T"),
                Port(
                    "indices",
                    dtype="I",
                    doc="data's rank, no dim off the axis larger; negative: from the end",
                ),
                Port("updates", dtype="T", doc="indices' shape"),
            ],
            outputs=[Port("y", dtype="T", doc="data's shape")],
            attrs=[
                Attr("axis", "int", 0, doc="the axis indexed; negative counts from the end"),
                Attr(
                    "reduction",
                    "str",
                    "none",
                    doc="none: replace (duplicate targets: one of them wins, ONNX leaves which undefined); "
                    "add, mul, max, min: combine in order (on CUDA: the reference on staged copies)",
                    choices=SCATTER_REDUCTIONS,
                ),
            ],
            dtype_vars={"T": ANY, "I": INDEX},
            infer=infer_scatter_elements,
            bind=scatter_elements_bind,
            cuda=cuda_variant(cuda.scatter_elements_bind, None),
            staged_fallback=True,
            onnx="ScatterElements",
        ),
        builtin_operator(
            "one_hot",
            doc="One-hot lines: a new axis of size depth holding on where its coordinate is the index "
            "(negatives + depth), off elsewhere; an index outside [-depth, depth) gives an all-off line "
            "(ONNX OneHot).",
            inputs=[
                Port("indices", dtype="I"),
                Port("values", dtype="T", doc="[off_value, on_value]; the output's dtype"),
            ],
            outputs=[Port("y", dtype="T", doc="indices' shape with depth inserted at axis")],
            attrs=[
                Attr("depth", "int", REQUIRED, doc="size of the one-hot axis, >= 1"),
                Attr("axis", "int", -1, doc="where the one-hot axis goes in y; in [-rank-1, rank]"),
            ],
            dtype_vars={"T": ANY, "I": INTS},
            infer=infer_one_hot,
            bind=one_hot_bind,
            cuda=cuda_variant(cuda.one_hot_bind, None),
            onnx="OneHot",
        ),
        builtin_operator(
            "eye_like",
            doc="A matrix of x's shape: 1 on diagonal k (column - row == k), 0 elsewhere (ONNX EyeLike); "
            "x's values are not read.",
            inputs=[Port("x", doc="2-d: the shape")],
            outputs=[Port("y", doc="x's shape")],
            attrs=[
                Attr("k", "int", 0, doc="the diagonal: 0 the main one, > 0 above it, < 0 below"),
                Attr("dtype", "str", "", doc="the output's dtype; empty: x's", choices=EYE_DTYPES),
            ],
            infer=infer_eye_like,
            bind=eye_like_bind,
            cuda=cuda_variant(cuda.eye_like_bind, None),
            onnx="EyeLike",
        ),
        *tfidf.descriptors(),
    ]
