"""Fusion patterns of gemm and conv2d (for ``fuse.py``): a bias, the reshapes around a Linear, an
activation and a residual taken into one gemm or conv2d, and a BatchNormalization folded into its Conv.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from .convert import conv_stage, gemm_attrs
from .fuse_view import _is_float, _is_onnx, _other, _View
from .graph import FUSED_DOMAIN, Node, Unsupported
from .graph import float32_attr as _float32

__all__: list[str] = []


# -- gemm ---------------------------------------------------------------------------------------------
def _gemm_parts(node: Node) -> tuple[list[str], dict[str, Any]] | None:
    """(inputs, PipeLink attributes) of a gemm-like node: a fused gemm or an ONNX Gemm."""
    if node.domain == FUSED_DOMAIN and node.op_type == "gemm":
        return list(node.inputs), dict(node.attrs)
    if _is_onnx(node, "Gemm"):
        try:
            attrs = gemm_attrs(node)
        except Unsupported:
            return None
        inputs = list(node.inputs[:3])
        while inputs and not inputs[-1]:
            inputs.pop()
        return (inputs, attrs) if "" not in inputs else None
    return None


def _gemm(node: Node, inputs: list[str], attrs: dict[str, Any], output: str) -> Node:
    return Node("gemm", node.name, FUSED_DOMAIN, inputs, [output], attrs)


def _matmul_bias(v: _View, node: Node) -> tuple[list[Node], Node] | None:
    """``MatMul(a, B) + bias`` with B a 2-d float constant [K, N] and bias a constant [N] -> one gemm
    (cuBLASLt's BIAS epilogue on CUDA)."""
    if not _is_onnx(node, "MatMul"):
        return None
    a, b = node.inputs[:2]
    weight = v.g.constants.get(b)
    if weight is None or weight.ndim != 2 or not _is_float(weight):
        return None
    add = v.only_reader(node.outputs[0], "Add")
    if add is None:
        return None
    bias_name = _other(add, node.outputs[0]) or ""
    bias = v.g.constants.get(bias_name)
    if bias is None or bias.shape != (weight.shape[1],) or bias.dtype != weight.dtype:
        return None
    return [node, add], _gemm(node, [a, b, bias_name], {}, add.outputs[0])


def _gemm_reshapes(v: _View, node: Node) -> tuple[list[Node], Node] | None:
    """``Reshape(x, [M, K]) -> gemm -> Reshape(x.shape[:-1] + [N])`` (how PyTorch exports a Linear or a
    GPT-2 Conv1D on a 3-d input) -> one gemm on x: gemm takes a [..., K] and folds the leading dims into M.
    Needs x's shape known, and a bias that broadcasts along the rows ([N], [1, N] or a scalar)."""
    parts = _gemm_parts(node)
    if parts is None:
        return None
    inputs, attrs = parts
    if attrs.get("trans_a") or len(inputs) > 3:
        return None
    flat = v.made_by(inputs[0], "Reshape")
    back = v.only_reader(node.outputs[0], "Reshape")
    if flat is None or back is None:
        return None
    x = flat.inputs[0]
    x_shape, flat_shape = v.shape(x), v.shape(inputs[0])
    out_shape, back_shape = v.shape(node.outputs[0]), v.shape(back.outputs[0])
    if None in (x_shape, flat_shape, out_shape, back_shape) or not x_shape:
        return None
    if not all(isinstance(d, int) for d in (*x_shape, *flat_shape, *out_shape, *back_shape)):
        return None
    if flat_shape != (math.prod(x_shape[:-1]), x_shape[-1]) or back_shape != (*x_shape[:-1], out_shape[-1]):
        return None
    if len(inputs) == 3:
        bias_shape = v.shape(inputs[2])
        if bias_shape is None or len(bias_shape) > 2 or (len(bias_shape) == 2 and bias_shape[0] != 1):
            return None
    return [flat, node, back], _gemm(node, [x, *inputs[1:]], attrs, back.outputs[0])


def _activation_of(node: Node) -> str | None:
    """The gemm activation computing ``node`` (a fused gelu, an ONNX Gelu or Relu), if any."""
    if node.domain == FUSED_DOMAIN and node.op_type == "gelu":
        return "gelu_tanh" if node.attrs["approximate"] == "tanh" else "gelu"
    if _is_onnx(node, "Gelu"):
        approximate = node.attrs.get("approximate", "none")
        approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
        return {"tanh": "gelu_tanh", "none": "gelu"}.get(approximate)
    if _is_onnx(node, "Relu"):
        return "relu"
    return None


def _gemm_activation(v: _View, node: Node) -> tuple[list[Node], Node] | None:
    """gemm -> gelu (either form) or relu -> one gemm with that activation (cuBLASLt's GELU_BIAS /
    RELU_BIAS epilogue on CUDA for gelu_tanh and relu; its GELU is the tanh form)."""
    parts = _gemm_parts(node)
    if parts is None:
        return None
    inputs, attrs = parts
    if len(inputs) > 3 or attrs.get("activation", "none") != "none":
        return None
    readers = v.readers.get(node.outputs[0], [])
    if len(readers) != 1:
        return None
    activation = _activation_of(readers[0])
    if activation is None:
        return None
    return [node, readers[0]], _gemm(node, inputs, {**attrs, "activation": activation}, readers[0].outputs[0])


def _conv_activation(v: _View, node: Node) -> tuple[list[Node], Node] | None:
    """Conv -> Relu -> one conv2d (conv3d) with activation relu (on CUDA: cuDNN's conv + bias + relu graph,
    or the pointwise GEMM form's RELU epilogue; ResNet's convolutions but the last of each block)."""
    if not _is_onnx(node, "Conv"):
        return None
    readers = v.readers.get(node.outputs[0], [])
    if len(readers) != 1 or not _is_onnx(readers[0], "Relu"):
        return None
    try:
        op, inputs, attrs = conv_stage(v.g, node)
    except Unsupported:
        return None  # left to the Conv converter, which names what is wrong
    fused = Node(
        op, node.name, FUSED_DOMAIN, inputs, [readers[0].outputs[0]], {**attrs, "activation": "relu"}
    )
    return [node, readers[0]], fused


def _residual_of(v: _View, out: str) -> tuple[Node, str] | None:
    """The Add that alone reads ``out`` and the other tensor it adds, r, when r has ``out``'s exact shape
    and dtype (a residual; a broadcast add is not one)."""
    add = v.only_reader(out, "Add")
    if add is None:
        return None
    r = _other(add, out)
    if not r or r == out or v.shape(r) is None or v.shape(r) != v.shape(out):
        return None
    if v.g.dtypes.get(r) is None or v.g.dtypes.get(r) != v.g.dtypes.get(out):
        return None
    return add, r


def _batch_norm_constants(v: _View, bn: Node, channels: int, dtype: str) -> tuple | None:
    """scale, B, mean and var of an inference BatchNormalization: constants [channels] of ``dtype``."""
    if bn.attrs.get("training_mode", 0) or bn.attrs.get("spatial", 1) != 1 or len(bn.inputs) < 5:
        return None
    if any(out for out in bn.outputs[1:]):
        return None  # the running mean and var outputs are training's
    arrays = [v.g.constants.get(name) for name in bn.inputs[1:5]]
    if any(a is None or a.shape != (channels,) or not _is_float(a) for a in arrays):
        return None
    if any(get_dtype(a.dtype).name != dtype for a in arrays):
        return None
    return tuple(a.astype(np.float64) for a in arrays)


def _new_constant(v: _View, base: str, array: np.ndarray) -> str:
    """Add ``array`` to the graph's constants under a new ONNX name made from ``base``."""
    name, k = f"{base}_bn_folded", 0
    while name in v.g.constants or name in v.producer or name in v.readers:
        k += 1
        name = f"{base}_bn_folded_{k}"
    v.g.constants[name] = array
    v.g.dtypes[name] = get_dtype(array.dtype).name
    return name


def _conv_batch_norm(v: _View, node: Node) -> tuple[list[Node], Node] | None:
    """Conv (2-d or 3-d) -> BatchNormalization (inference, constant parameters) -> one Conv with the
    normalisation folded into its weights and bias: ``w' = w * s``, ``b' = (b - mean) * s + B`` per output
    channel, with ``s = scale / sqrt(var + epsilon)``, computed in float64 and rounded once to the weights'
    dtype (a model exported without constant folding, or in training mode then set to eval, keeps the BN
    nodes)."""
    if not _is_onnx(node, "Conv") or len(node.inputs) < 2:
        return None
    w = v.g.constants.get(node.inputs[1])
    if w is None or w.ndim not in (4, 5) or not _is_float(w):
        return None
    dtype = get_dtype(w.dtype).name
    b = v.g.constants.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    if len(node.inputs) > 2 and node.inputs[2] and (b is None or b.shape != (w.shape[0],)):
        return None  # a computed or malformed bias: left to the converters
    bn = v.only_reader(node.outputs[0], "BatchNormalization")
    if bn is None or bn.inputs[0] != node.outputs[0] or not v.internal([node, bn], bn.outputs[0]):
        return None
    params = _batch_norm_constants(v, bn, w.shape[0], dtype)
    if params is None:
        return None
    scale, shift, mean, var = params
    denom = var + float(_float32(bn.attrs.get("epsilon", 1e-5)))
    if not np.all(denom > 0):
        return None  # a non-positive variance: the batch_norm stage computes what the model says (NaN, inf)
    s = scale / np.sqrt(denom)
    with np.errstate(over="ignore", invalid="ignore"):
        w_folded = (w.astype(np.float64) * s.reshape(-1, *([1] * (w.ndim - 1)))).astype(w.dtype)
        b_folded = (((0.0 if b is None else b.astype(np.float64)) - mean) * s + shift).astype(w.dtype)
    if not (np.isfinite(w_folded).all() and np.isfinite(b_folded).all()):
        return None  # the folded weights would overflow their dtype where the two stages do not
    inputs = [
        node.inputs[0],
        _new_constant(v, node.inputs[1], w_folded),
        _new_constant(v, node.inputs[2] if b is not None else node.inputs[1] + "_bias", b_folded),
    ]
    return [node, bn], Node("Conv", node.name, node.domain, inputs, [bn.outputs[0]], dict(node.attrs))


def _conv_residual(v: _View, node: Node) -> tuple[list[Node], Node] | None:
    """Conv (with a bias) -> Add of a tensor of its output's exact shape (-> Relu) -> one conv2d with that
    tensor as its residual (and activation relu): ResNet's ``relu(bn(conv(h)) + shortcut)`` once BN is
    folded into the Conv (conv3d for a 3-d one). On CUDA, cuDNN's conv + bias + add + relu graph where it
    has a plan. A Conv without a bias is left alone: the ports are positional, the residual after the bias."""
    if not _is_onnx(node, "Conv") or len(node.inputs) < 3 or not node.inputs[2]:
        return None
    found = _residual_of(v, node.outputs[0])
    if found is None:
        return None
    add, r = found
    try:
        op, inputs, attrs = conv_stage(v.g, node)
    except Unsupported:
        return None  # left to the Conv converter, which names what is wrong
    chain, result = [node, add], add.outputs[0]
    relu = v.only_reader(result, "Relu")
    if relu is not None:
        chain, result, attrs = [*chain, relu], relu.outputs[0], {**attrs, "activation": "relu"}
    return chain, Node(op, node.name, FUSED_DOMAIN, [*inputs, r], [result], attrs)


def _gemm_residual(v: _View, node: Node) -> tuple[list[Node], Node] | None:
    """gemm + r (an Add of a tensor of the gemm's exact shape) -> one gemm with r as its residual (with no
    bias and no activation, r becomes the bias: the same sum). cuBLASLt reads r as its C matrix."""
    parts = _gemm_parts(node)
    if parts is None:
        return None
    inputs, attrs = parts
    if len(inputs) > 3:
        return None
    found = _residual_of(v, node.outputs[0])
    if found is None:
        return None
    add, r = found
    if len(inputs) == 3:
        return [node, add], _gemm(node, [*inputs, r], attrs, add.outputs[0])
    if attrs.get("activation", "none") != "none":
        return None  # the residual port follows the bias, which this gemm lacks
    attrs = {k: value for k, value in attrs.items() if k != "beta"}  # the bias slot is r, unscaled
    return [node, add], _gemm(node, [*inputs, r], attrs, add.outputs[0])
