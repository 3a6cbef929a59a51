"""ONNX matrix-product converters: Gemm, Einsum (einsum.py), and the sequence models built on them:
RotaryEmbedding, Attention (attention.py), LSTM/GRU/RNN (recurrent.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import PipeLinkError
from ..ops.rotary.reference import rotary_geometry
from .attention import AttentionError, lower_attention
from .convert_common import _attr, _inputs
from .einsum import EinsumError
from .einsum import plan as einsum_plan
from .graph import Graph, Node, Unsupported, float32_attr
from .recurrent import RecurrentError, lower_recurrent

__all__ = ["gemm_attrs"]


def _rotary_embedding(g: Graph, node: Node) -> None:
    """RotaryEmbedding (opset 23) as rotary_embedding: the same inputs and attributes (checked against x's
    shape here when it is known, so a bad head split is listed with the node)."""
    attrs = {
        "interleaved": bool(_attr(node, "interleaved", 0)),
        "rotary_embedding_dim": int(_attr(node, "rotary_embedding_dim", 0)),
        "num_heads": int(_attr(node, "num_heads", 0)),
    }
    shape = g.shapes.get(node.inputs[0])
    if shape is not None:
        try:
            rotary_geometry(shape, attrs)
        except PipeLinkError as e:
            raise Unsupported(e.message) from None
    g.stage(node, "rotary_embedding", _inputs(node, 4), node.outputs[:1], **attrs)


def _attention(g: Graph, node: Node) -> None:
    """Attention (opsets 23-25), lowered in ``attention.py``: one attention stage, with the key/value
    cache and ONNX's masks around it, or stage by stage for softcap, qk_matmul_output and
    softmax_precision; what it cannot express exactly is refused with the reason."""
    try:
        lower_attention(g, node)
    except AttentionError as e:
        raise Unsupported(str(e)) from None


def gemm_attrs(node: Node) -> dict[str, Any]:
    """The gemm attributes of an ONNX Gemm node (only those that differ from gemm's defaults)."""
    attrs: dict[str, Any] = {}
    for onnx_name, ours, default in (("alpha", "alpha", 1.0), ("beta", "beta", 1.0)):
        if float32_attr(_attr(node, onnx_name, default)) != default:
            attrs[ours] = float32_attr(_attr(node, onnx_name))
    for onnx_name, ours in (("transA", "trans_a"), ("transB", "trans_b")):
        if _attr(node, onnx_name, 0):
            attrs[ours] = True
    return attrs


def _gemm(g: Graph, node: Node) -> None:
    g.stage(node, "gemm", _inputs(node, 3), node.outputs[:1], **gemm_attrs(node))


def _einsum(g: Graph, node: Node) -> None:
    """ONNX Einsum, lowered onto existing operators (``einsum.py``: the equation's parser and the plan of
    as_strided, reduce_sum, squeeze, transpose, unsqueeze, reshape, mul and matmul stages). It needs
    each input's rank; what the plan cannot express exactly is refused with the reason."""
    equation = _attr(node, "equation")
    if not isinstance(equation, str) or not node.inputs or "" in node.inputs:
        raise Unsupported("Einsum needs its equation attribute and at least one input, none absent")
    shapes = []
    for name in node.inputs:
        shape = g.shapes.get(name)
        if shape is None and name in g.constants:
            shape = np.shape(g.constants[name])
        if shape is None:
            raise Unsupported(f"Einsum needs the rank of each input (shape inference gave none for {name!r})")
        shapes.append(shape)
    first = node.inputs[0]
    dtype = g.dtypes.get(first, str(g.constants[first].dtype) if first in g.constants else None)
    try:
        steps = einsum_plan(equation, shapes, dtype)
    except EinsumError as e:
        raise Unsupported(str(e)) from None
    y, values = node.outputs[0], list(node.inputs)
    for k, step in enumerate(steps):
        out = y if k == len(steps) - 1 else f"{y}__einsum{k}"
        g.stage(node, step.operator, [values[i] for i in step.inputs], [out], **step.attrs)
        values.append(out)


def _recurrent(g: Graph, node: Node) -> None:
    """ONNX LSTM, GRU and RNN, unrolled over the time steps onto gemm, slice, split, the activations and
    the elementwise ops (``recurrent.py``); what it cannot express exactly is refused with the reason."""
    try:
        lower_recurrent(g, node)
    except RecurrentError as e:
        raise Unsupported(str(e)) from None
