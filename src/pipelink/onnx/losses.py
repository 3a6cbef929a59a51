"""ONNX NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss lowered at import onto PipeLink's existing
operators: the target's class picked out of the input by ``gather_elements`` along the class axis (an
ignored target replaced by class 0 first, so the gather stays in range), negated, weighted by a
``gather`` of the class weights, the ignored positions set to 0 by ``where``, then reduced.
SoftmaxCrossEntropyLoss takes the log-softmax of its scores over the class axis first (its optional
second output).

It adds no kernel and computes nothing itself; what those operators cannot express exactly (a rank or
a dtype the graph does not give, a target whose shape is not known to be the input's without its class
dim) is refused with the converter's ``Unsupported``, which the import reports with the node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from .graph import dtype_of as _dtype
from .graph import shape_of as _shape
from .graph import show_shape as _show

__all__ = ["LOSS_DTYPES", "REDUCTIONS", "negative_log_likelihood_loss", "softmax_cross_entropy_loss"]

#: The float dtypes of the input (and of the weights and the loss): the spec's T, every one of which
#: the operators used here take on the CPU and on CUDA.
LOSS_DTYPES = ("float16", "bfloat16", "float32", "float64")
#: The spec's values of the ``reduction`` attribute.
REDUCTIONS = ("none", "sum", "mean")
_TARGET_DTYPES = ("int32", "int64")


class LossError(Exception):
    """Why a loss node cannot be imported (convert.py reports it as the node's Unsupported)."""


def _unsupported(why: str) -> Exception:
    return LossError(why)


def _same(a: Any, b: Any) -> bool:
    """Whether two dims are known equal at import: one size, or one ``dim_param`` name."""
    return a is not None and a == b


@dataclass
class _Lowering:
    """One loss node's stages: every internal tensor named after its first output."""

    g: Any  # the converter's Graph
    node: Any  # the converter's Node
    dtype: str  # the input's float dtype
    base: str

    def constant(self, tag: str, value: float | int, dtype: str) -> str:
        name = f"{self.base}__{tag}"
        self.g.constants[name] = np.array(value, dtype=get_dtype(dtype).numpy)
        self.g.dtypes[name] = dtype
        return name

    def op(self, operator: str, inputs: list[str], tag: str, out: str | None = None, **attrs: Any) -> str:
        out = out or f"{self.base}__{tag}"
        self.g.stage(self.node, operator, inputs, [out], **attrs)
        return out


def _reduction(node: Any) -> str:
    value = node.attrs.get("reduction", b"mean")
    value = value.decode() if isinstance(value, bytes) else str(value)
    if value not in REDUCTIONS:
        raise _unsupported(f"attribute reduction={value!r}; the spec has 'none', 'sum' and 'mean'")
    return value


def _checked(g: Any, node: Any, x: str, target: str, weight: str | None) -> tuple[str, str]:
    """(input dtype, target dtype), after checking the dtypes and that the shapes agree at import:
    input ``[N, C, d1..dk]``, target ``[N, d1..dk]``, weight ``[C]``.

    Raises
    ------
    Unsupported
        A dtype unknown or outside the spec's, a rank unknown, or a dim not known to agree (a target
        smaller than the input would be gathered from without an error, a wrong answer).
    """
    op, dtype, target_dtype = node.op_type, _dtype(g, x), _dtype(g, target)
    if dtype not in LOSS_DTYPES:
        raise _unsupported(
            f"{op} input {x!r} has dtype {dtype or 'unknown'}; it must be one of {', '.join(LOSS_DTYPES)}"
        )
    if target_dtype not in _TARGET_DTYPES:
        raise _unsupported(
            f"{op} target {target!r} has dtype {target_dtype or 'unknown'}; it must be int32 or int64"
        )
    if weight is not None and _dtype(g, weight) not in (None, dtype):
        raise _unsupported(f"{op} weight {weight!r} is {_dtype(g, weight)} but the input is {dtype}")
    shape = _shape(g, x)
    if shape is None or len(shape) < 2:
        raise _unsupported(
            f"{op} needs the rank of its input {x!r}, at least 2 ([N, C] or [N, C, d1, ..., dk]; got "
            f"{_show(shape)})"
        )
    want, got = (shape[0], *shape[2:]), _shape(g, target)
    if got is None or len(got) != len(want) or not all(_same(a, b) for a, b in zip(got, want, strict=True)):
        raise _unsupported(
            f"{op} target {target!r} must have the input's shape without its class dim, {_show(want)}, "
            f"every dim known equal at import (got {_show(got)}); gather_elements would read a smaller "
            "target without an error"
        )
    if weight is not None:
        given = _shape(g, weight)
        if given is None or len(given) != 1 or not _same(given[0], shape[1]):
            raise _unsupported(
                f"{op} weight {weight!r} must be [C] = {_show(shape[1:2])}, known at import (got "
                f"{_show(given)})"
            )
    return dtype, target_dtype


def _ignored(node: Any, target_dtype: str) -> int | None:
    """ignore_index, or None when absent or beyond the target's dtype (no target can equal it then)."""
    value = node.attrs.get("ignore_index")
    if value is None:
        return None
    info = np.iinfo(get_dtype(target_dtype).numpy)
    return int(value) if info.min <= int(value) <= info.max else None


def _negative_log_likelihood(
    low: _Lowering, x: str, target: str, weight: str | None, ignore: int | None, target_dtype: str
) -> None:
    """The stages of NegativeLogLikelihoodLoss on log-probabilities ``x``, writing the node's output."""
    reduction, y = _reduction(low.node), low.node.outputs[0]
    elementwise = y if reduction == "none" else f"{low.base}__loss"
    last = "where" if ignore is not None else "mul" if weight is not None else "neg"
    index = target
    if ignore is not None:
        # an ignored target may be any value: class 0 stands in for it, so the gathers stay in range
        mask = low.op("equal", [target, low.constant("ignore_index", ignore, target_dtype)], "ignored")
        index = low.op("where", [mask, low.constant("class_zero", 0, target_dtype), target], "index")
    along = low.op("unsqueeze", [index], "index_unsqueezed", axes=[1])
    picked = low.op("gather_elements", [x, along], "picked", axis=1)
    picked = low.op("squeeze", [picked], "picked_squeezed", axes=[1])
    loss = low.op("neg", [picked], "neg", out=elementwise if last == "neg" else None)
    weights = None
    if weight is not None:
        weights = low.op("gather", [weight, index], "class_weight", axis=0)
        loss = low.op("mul", [loss, weights], "weighted", out=elementwise if last == "mul" else None)
    if ignore is not None:
        # the spec's 0 whatever the input holds there (an inf or a NaN included)
        zero = low.constant("zero", 0.0, low.dtype)
        loss = low.op("where", [mask, zero, loss], "unignored", out=elementwise)
        if reduction == "mean":
            kept = weights if weights is not None else low.constant("one", 1.0, low.dtype)
            weights = low.op("where", [mask, zero, kept], "kept_weight")
    if reduction == "sum":
        low.op("reduce_sum", [loss], "sum", out=y, keepdims=False)
    elif reduction == "mean" and weights is None:
        low.op("reduce_mean", [loss], "mean", out=y, keepdims=False)
    elif reduction == "mean":
        total = low.op("reduce_sum", [loss], "sum", keepdims=False)
        low.op("div", [total, low.op("reduce_sum", [weights], "weight_sum", keepdims=False)], "mean", out=y)


def _inputs(node: Any) -> tuple[str, str, str | None]:
    if len(node.inputs) < 2 or not node.inputs[0] or not node.inputs[1]:
        raise _unsupported(f"{node.op_type} needs its input and its target (inputs 0 and 1)")
    weight = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    return node.inputs[0], node.inputs[1], weight


def negative_log_likelihood_loss(g: Any, node: Any) -> None:
    """Convert an ONNX NegativeLogLikelihoodLoss node (opsets 12, 13, 22).

    ``loss[n, d..] = -input[n, target[n, d..], d..] * weight[target[n, d..]]``, 0 where the target is
    ignore_index; reduction none, sum, or mean (divided by the sum of the weights of the targets not
    ignored, or by their count without weights). An ignored target may hold any value; any other must be
    a class in ``[-C, C)`` (negative: from the end, as the spec's GatherElements and Gather): outside it
    the CPU raises ``PIPELINK_ERR_INVALID_ARGUMENT`` naming the stage and the index, and CUDA reads
    nothing out of bounds (its gathers give 0 there, the loss and the weight, unless ``check_indices``).

    Parameters
    ----------
    g : Graph
        The converter's graph (constants, dtypes, shapes; the stages made so far).
    node : Node
        The node: inputs (input, target, optional weight), attributes reduction and ignore_index.

    Raises
    ------
    Unsupported
        What the stages cannot compute exactly (see :func:`_checked`), or an unknown reduction.
    """
    x, target, weight = _inputs(node)
    _reduction(node)
    dtype, target_dtype = _checked(g, node, x, target, weight)
    low = _Lowering(g, node, dtype, node.outputs[0])
    _negative_log_likelihood(low, x, target, weight, _ignored(node, target_dtype), target_dtype)


def softmax_cross_entropy_loss(g: Any, node: Any) -> None:
    """Convert an ONNX SoftmaxCrossEntropyLoss node (opsets 12, 13): NegativeLogLikelihoodLoss of the
    scores' log-softmax over the class axis (dim 1), ``d - log(sum(exp(d)))`` with ``d = x - max(x)``
    (no exp overflows), which is the optional second output log_prob.

    Parameters
    ----------
    g : Graph
        The converter's graph.
    node : Node
        The node: inputs (scores, labels, optional weights), outputs (output, optional log_prob).

    Raises
    ------
    Unsupported
        As :func:`negative_log_likelihood_loss`.
    """
    x, target, weight = _inputs(node)
    _reduction(node)
    dtype, target_dtype = _checked(g, node, x, target, weight)
    low = _Lowering(g, node, dtype, node.outputs[0])
    wanted = len(node.outputs) > 1 and node.outputs[1]
    log_prob = node.outputs[1] if wanted else f"{low.base}__log_prob"
    top = low.op("reduce_max", [x], "max", axes=[1], keepdims=True)
    shifted = low.op("sub", [x, top], "shifted")
    total = low.op("reduce_sum", [low.op("exp", [shifted], "exp")], "exp_sum", axes=[1], keepdims=True)
    low.op("sub", [shifted, low.op("log", [total], "log_sum")], "log_prob", out=log_prob)
    _negative_log_likelihood(low, log_prob, target, weight, _ignored(node, target_dtype), target_dtype)
