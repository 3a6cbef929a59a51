"""Import-time fusions: chains of ONNX nodes that one PipeLink stage computes, rewritten before the
per-node converters run (``import_model(..., fuse=True)``, the default).

Each pattern is one small function that matches exactly or leaves the nodes alone: constants are checked
(within :data:`CONST_RTOL`), shapes and dtypes where they matter, and every intermediate tensor of a chain
must be read by the chain alone and not be a graph output. A fusion must never change what a model
computes beyond the rounding of the fused operator. The result of a match is a node of
:data:`FUSED_DOMAIN`: its op type is a PipeLink operator and its attributes are that operator's. A fold of
constants (a BatchNormalization into the Conv before it) gives an ONNX node instead, reading new constants,
so that the patterns after it still see a Conv.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import PipeLinkError
from ..ops._common import FLOATS
from ..ops.kernel import contiguous_strides
from ..ops.shape.rules import reshape_target
from .convert import conv2d_stage, gemm_attrs
from .graph import FUSED_DOMAIN, ONNX_DOMAINS, Graph, Node, Unsupported, onnx_dtype
from .graph import float32_attr as _float32

__all__ = ["FUSED_DOMAIN", "CONST_RTOL", "PATTERNS", "fuse"]

#: Relative tolerance of a pattern's constants (float32 rounds sqrt(2/pi) and 0.044715 by ~6e-8).
CONST_RTOL = 1e-6

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_CUBIC = 0.044715


class _View:
    """The node list as the patterns read it: who produces and who reads each tensor, constants,
    known shapes and dtypes, the graph outputs. A rewrite updates it in place (a removed node's slot
    becomes None), so a model with many matches costs time in proportion to its size."""

    def __init__(self, g: Graph, nodes: list[Node], outputs: set[str]):
        self.g = g
        self.slots: list[Node | None] = list(nodes)
        self.outputs = outputs
        self.position: dict[int, int] = {}  # id(node) -> its slot
        self.producer: dict[str, Node] = {}
        self.readers: dict[str, list[Node]] = {}  # one entry per input slot
        for k, node in enumerate(nodes):
            self._add(node, k)

    def _add(self, node: Node, slot: int) -> None:
        self.position[id(node)] = slot
        for out in node.outputs:
            if out:
                self.producer[out] = node
        for name in node.inputs:
            if name:
                self.readers.setdefault(name, []).append(node)

    def _remove(self, node: Node) -> None:
        del self.position[id(node)]
        for out in node.outputs:
            if out and self.producer.get(out) is node:
                del self.producer[out]
        for name in set(node.inputs):
            if name:
                self.readers[name] = [r for r in self.readers[name] if r is not node]

    @property
    def nodes(self) -> list[Node]:
        return [node for node in self.slots if node is not None]

    # -- reading ------------------------------------------------------------------------------------
    def made_by(self, name: str, op_type: str) -> Node | None:
        """The ONNX node of ``op_type`` producing ``name``, if that is what produces it."""
        node = self.producer.get(name)
        return node if node is not None and _is_onnx(node, op_type) else None

    def only_reader(self, name: str, op_type: str) -> Node | None:
        """The one ONNX node of ``op_type`` reading ``name`` (in one slot), if it is its only reader."""
        readers = self.readers.get(name, [])
        if len(readers) != 1 or not _is_onnx(readers[0], op_type):
            return None
        return readers[0]

    def shape(self, name: str) -> tuple | None:
        """The shape of ``name`` (a constant's, or one shape inference found with every dim known)."""
        if name in self.g.constants:
            return tuple(self.g.constants[name].shape)
        shape = self.g.shapes.get(name)
        return shape if shape is not None and None not in shape else None

    def scalar(self, name: str, value: float, like: str, *, kinds: str = "f") -> bool:
        """Whether ``name`` is a one-element constant (NumPy kind in ``kinds``) equal to ``value`` (within
        CONST_RTOL) that broadcasts against ``like`` without changing its shape."""
        array = self.g.constants.get(name)
        if array is None or array.size != 1 or array.dtype.kind not in kinds:
            return False
        like_shape = self.g.shapes.get(like)
        if array.ndim > (0 if like_shape is None else len(like_shape)):
            return False
        return bool(np.isclose(float(array.reshape(-1)[0]), value, rtol=CONST_RTOL, atol=0.0))

    def internal(self, chain: list[Node], result: str | Collection[str]) -> bool:
        """Whether every tensor the chain makes, except ``result`` (one name, or several), is read by the
        chain alone and is not a graph output (else fusing would lose a tensor someone reads)."""
        results = {result} if isinstance(result, str) else set(result)
        for node in chain:
            for out in node.outputs:
                if not out or out in results:
                    continue
                if out in self.outputs:
                    return False
                if any(not _member(reader, chain) for reader in self.readers.get(out, [])):
                    return False
        return True

    # -- writing ------------------------------------------------------------------------------------
    def replace(self, chain: list[Node], fused: Node | list[Node]) -> bool:
        """Replace ``chain`` by ``fused`` at the place of its last node (every input of the chain is made
        before it, every reader of its result after); False (nothing changed) when an intermediate of
        the chain is read elsewhere or is a graph output.

        Several fused nodes (one per output of the chain's first node, as for a Split's parts) go at the
        place of the chain's first node instead: each reads only what that node reads (made before it),
        and every reader of their results comes after it."""
        many = isinstance(fused, list)
        nodes = fused if many else [fused]
        if not self.internal(chain, [n.outputs[0] for n in nodes]):
            return False
        slots = [self.position[id(node)] for node in chain]
        for node, slot in zip(chain, slots, strict=True):
            self._remove(node)
            self.slots[slot] = None
        at = min(slots) if many else max(slots)
        self.slots[at : at + 1] = nodes
        if len(nodes) > 1:  # the nodes after an insertion moved
            for k in range(at + len(nodes), len(self.slots)):
                node = self.slots[k]
                if node is not None:
                    self.position[id(node)] = k
        for k, node in enumerate(nodes):
            self._add(node, at + k)
        return True


def _member(node: Node, chain: list[Node]) -> bool:
    return any(node is other for other in chain)


def _is_onnx(node: Node, op_type: str) -> bool:
    return node.op_type == op_type and node.domain in ONNX_DOMAINS


def _other(node: Node, name: str) -> str | None:
    """The other operand of a binary node that reads ``name``; None when it does not."""
    a, b = (node.inputs + ["", ""])[:2]
    if a == name:
        return b
    return a if b == name else None


def _common_prefix(names: list[str]) -> str:
    """The longest common ``/``-path prefix of node names ("/block/mlp/act/" of its nodes)."""
    prefix = names[0].rpartition("/")[0] + "/" if "/" in names[0] else ""
    for name in names[1:]:
        while prefix and not name.startswith(prefix):
            prefix = prefix[:-1].rpartition("/")[0] + "/" if "/" in prefix[:-1] else ""
    return prefix


# -- GELU chains --------------------------------------------------------------------------------------
def _cube_of(v: _View, name: str) -> tuple[str, list[Node]] | None:
    """``name = x**3`` as ``Pow(x, 3)``, ``Mul(x, Mul(x, x))`` or ``Mul(Mul(x, x), x)``: (x, nodes)."""
    pow_node = v.made_by(name, "Pow")
    if pow_node is not None:
        x, exponent = pow_node.inputs[:2]
        return (x, [pow_node]) if v.scalar(exponent, 3.0, x, kinds="fiu") else None
    outer = v.made_by(name, "Mul")
    if outer is None:
        return None
    for x, square in (outer.inputs[:2], outer.inputs[1::-1]):
        inner = v.made_by(square, "Mul")
        if inner is not None and inner.inputs[:2] == [x, x]:
            return x, [outer, inner]
    return None


def _tanh_argument(v: _View, name: str) -> tuple[str, list[Node]] | None:
    """``name = sqrt(2/pi) * (x + 0.044715 * x**3)``, operands in either order: (x, nodes)."""
    scaled = v.made_by(name, "Mul")
    if scaled is None:
        return None
    for inner, c in (scaled.inputs[:2], scaled.inputs[1::-1]):
        total = v.made_by(inner, "Add")
        if total is None or not v.scalar(c, _SQRT_2_OVER_PI, inner):
            continue
        for x, term in (total.inputs[:2], total.inputs[1::-1]):
            cubic = v.made_by(term, "Mul")
            if cubic is None:
                continue
            for cube, k in (cubic.inputs[:2], cubic.inputs[1::-1]):
                found = _cube_of(v, cube)
                if found is not None and found[0] == x and v.scalar(k, _GELU_CUBIC, x):
                    return x, [scaled, total, cubic, *found[1]]
    return None


def _erf_argument(v: _View, name: str) -> tuple[str, list[Node]] | None:
    """``name = x / sqrt(2)`` (Div) or ``x * (1 / sqrt(2))`` (Mul, either order): (x, nodes)."""
    div = v.made_by(name, "Div")
    if div is not None:
        x, c = div.inputs[:2]
        return (x, [div]) if v.scalar(c, math.sqrt(2.0), x) else None
    mul = v.made_by(name, "Mul")
    if mul is not None:
        for x, c in (mul.inputs[:2], mul.inputs[1::-1]):
            if v.scalar(c, 1.0 / math.sqrt(2.0), x):
                return x, [mul]
    return None


def _gelu_chain(v: _View, node: Node) -> tuple[list[Node], Node] | None:
    """``x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x**3)))`` -> gelu approximate="tanh";
    ``x * 0.5 * (1 + erf(x / sqrt(2)))`` -> gelu approximate="none". The three factors x, 0.5 and the sum
    may be multiplied in any order and grouping (PyTorch's exports of nn.GELU and transformers' gelu_new
    differ)."""
    if _is_onnx(node, "Tanh"):
        found, approximate = _tanh_argument(v, node.inputs[0]), "tanh"
    elif _is_onnx(node, "Erf"):
        found, approximate = _erf_argument(v, node.inputs[0]), "none"
    else:
        return None
    if found is None:
        return None
    x, inner = found
    plus_one = v.only_reader(node.outputs[0], "Add")
    if plus_one is None or not v.scalar(_other(plus_one, node.outputs[0]) or "", 1.0, x):
        return None
    s = plus_one.outputs[0]
    first = v.only_reader(s, "Mul")
    if first is None:
        return None
    o = _other(first, s)
    outer: list[Node]
    if o == x:  # (x * s) * 0.5
        second = v.only_reader(first.outputs[0], "Mul")
        if second is None or not v.scalar(_other(second, first.outputs[0]) or "", 0.5, x):
            return None
        outer = [first, second]
    elif o is not None and v.scalar(o, 0.5, x):  # (s * 0.5) * x
        second = v.only_reader(first.outputs[0], "Mul")
        if second is None or _other(second, first.outputs[0]) != x:
            return None
        outer = [first, second]
    else:  # (x * 0.5) * s
        half = v.made_by(o or "", "Mul")
        if half is None or not any(
            a == x and v.scalar(c, 0.5, x) for a, c in (half.inputs[:2], half.inputs[1::-1])
        ):
            return None
        outer = [half, first]
    chain = [*inner, node, plus_one, *outer]
    names = [n.name for n in chain if n.name]
    prefix = _common_prefix(names) if names else ""
    name = f"{prefix}Gelu" if prefix else f"{outer[-1].name or 'gelu'}_gelu"
    fused = Node("gelu", name, FUSED_DOMAIN, [x], outer[-1].outputs[:1], {"approximate": approximate})
    return chain, fused


# -- LayerNorm written out (exports before opset 17) ---------------------------------------------------
def _mean_over_last_axis(v: _View, name: str) -> str | None:
    """The x of ``name = ReduceMean(x)`` over the last axis, keeping it; None when it is not that."""
    node = v.made_by(name, "ReduceMean")
    if node is None or not node.attrs.get("keepdims", 1) or node.attrs.get("noop_with_empty_axes", 0):
        return None
    x = node.inputs[0]
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1]:
        value = v.g.constants.get(node.inputs[1])
        axes = None if value is None else [int(a) for a in value.reshape(-1)]
    shape = v.g.shapes.get(x)
    last = {-1} if shape is None else {-1, len(shape) - 1}
    return x if axes is not None and len(axes) == 1 and int(axes[0]) in last else None


def _square_of(v: _View, name: str) -> str | None:
    """The d of ``name = d**2`` (``Pow(d, 2)`` or ``Mul(d, d)``); None when it is not that."""
    pow_node = v.made_by(name, "Pow")
    if pow_node is not None:
        d, exponent = pow_node.inputs[:2]
        return d if v.scalar(exponent, 2.0, d, kinds="fiu") else None
    mul = v.made_by(name, "Mul")
    return mul.inputs[0] if mul is not None and mul.inputs[0] == mul.inputs[1] else None


def _layer_norm_chain(v: _View, node: Node) -> tuple[list[Node], Node] | None:
    """``(x - mean(x)) / sqrt(mean((x - mean(x))**2) + eps) [* gamma [+ beta]]`` over the last axis ->
    layer_norm (how PyTorch exports nn.LayerNorm before opset 17). gamma and beta must be constants of
    shape [C], C being x's last dimension."""
    if not _is_onnx(node, "Sqrt"):
        return None
    plus_eps = v.made_by(node.inputs[0], "Add")
    if plus_eps is None:
        return None
    var, eps_name = plus_eps.inputs[:2]
    if var in v.g.constants:
        var, eps_name = eps_name, var
    eps = v.g.constants.get(eps_name)
    if eps is None or eps.size != 1 or eps.ndim != 0 or eps.dtype.kind != "f":
        return None
    reduce_var = v.made_by(var, "ReduceMean")
    if reduce_var is None or _mean_over_last_axis(v, var) is None:
        return None
    d = _square_of(v, reduce_var.inputs[0])
    if d is None:
        return None
    sub = v.made_by(d, "Sub")
    if sub is None or _mean_over_last_axis(v, sub.inputs[1]) != sub.inputs[0]:
        return None
    x = sub.inputs[0]
    div = v.only_reader(node.outputs[0], "Div")
    if div is None or div.inputs[:2] != [d, node.outputs[0]]:
        return None
    square = v.producer[reduce_var.inputs[0]]
    chain = [v.producer[sub.inputs[1]], sub, square, reduce_var, plus_eps, node, div]
    inputs, last = [x], div
    shape = v.g.shapes.get(x)
    channels = shape[-1] if shape else None
    dtype = v.g.dtypes.get(x)
    for op in ("Mul", "Add"):  # * gamma, then + beta, each a constant [C] of x's dtype
        nxt = v.only_reader(last.outputs[0], op)
        param = _other(nxt, last.outputs[0]) if nxt is not None else None
        value = v.g.constants.get(param or "")
        if value is None or not isinstance(channels, int) or value.shape != (channels,):
            break
        if dtype is None or not _is_float(value) or get_dtype(value.dtype).name != dtype:
            break
        inputs.append(param)
        chain.append(nxt)
        last = nxt
    attrs = {"axis": -1, "eps": _float32(float(eps.reshape(-1)[0]))}
    prefix = _common_prefix([n.name for n in chain if n.name] or [""])
    name = f"{prefix}LayerNormalization" if prefix else f"{last.name or 'layer_norm'}_layer_norm"
    return chain, Node("layer_norm", name, FUSED_DOMAIN, inputs, last.outputs[:1], attrs)


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
    """Conv -> Relu -> one conv2d with activation relu (on CUDA: cuDNN's conv + bias + relu graph, or the
    pointwise GEMM form's RELU epilogue; ResNet's convolutions but the last of each block)."""
    if not _is_onnx(node, "Conv"):
        return None
    readers = v.readers.get(node.outputs[0], [])
    if len(readers) != 1 or not _is_onnx(readers[0], "Relu"):
        return None
    try:
        inputs, attrs = conv2d_stage(v.g, node)
    except Unsupported:
        return None  # left to the Conv converter, which names what is wrong
    fused = Node(
        "conv2d", node.name, FUSED_DOMAIN, inputs, [readers[0].outputs[0]], {**attrs, "activation": "relu"}
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
    """Conv -> BatchNormalization (inference, constant parameters) -> one Conv with the normalisation
    folded into its weights and bias: ``w' = w * s``, ``b' = (b - mean) * s + B`` per output channel, with
    ``s = scale / sqrt(var + epsilon)``, computed in float64 and rounded once to the weights' dtype (a
    model exported without constant folding, or in training mode then set to eval, keeps the BN nodes)."""
    if not _is_onnx(node, "Conv") or len(node.inputs) < 2:
        return None
    w = v.g.constants.get(node.inputs[1])
    if w is None or w.ndim != 4 or not _is_float(w):
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
        w_folded = (w.astype(np.float64) * s[:, None, None, None]).astype(w.dtype)
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
    folded into the Conv. On CUDA, cuDNN's conv + bias + add + relu graph where it has a plan. A Conv
    without a bias is left alone: conv2d's ports are positional, and the residual follows the bias."""
    if not _is_onnx(node, "Conv") or len(node.inputs) < 3 or not node.inputs[2]:
        return None
    found = _residual_of(v, node.outputs[0])
    if found is None:
        return None
    add, r = found
    try:
        inputs, attrs = conv2d_stage(v.g, node)
    except Unsupported:
        return None  # left to the Conv converter, which names what is wrong
    chain, result = [node, add], add.outputs[0]
    relu = v.only_reader(result, "Relu")
    if relu is not None:
        chain, result, attrs = [*chain, relu], relu.outputs[0], {**attrs, "activation": "relu"}
    return chain, Node("conv2d", node.name, FUSED_DOMAIN, [*inputs, r], [result], attrs)


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


# -- no-ops -------------------------------------------------------------------------------------------
def _cast_to_same(v: _View, node: Node) -> tuple[list[Node], Node] | None:
    """A Cast to the dtype its input already has -> identity (a view, no kernel)."""
    if not _is_onnx(node, "Cast"):
        return None
    have = v.g.dtypes.get(node.inputs[0])
    try:
        want = onnx_dtype(int(node.attrs.get("to", 0)))
    except Unsupported:
        return None
    if have is None or have != want:
        return None
    return [node], Node("identity", node.name, FUSED_DOMAIN, node.inputs[:1], node.outputs[:1], {})


# -- attention: the scaled, masked softmax --------------------------------------------------------------
def _scalar_constant(v: _View, name: str, like: str) -> float | None:
    """The value of ``name`` when it is a finite one-element float constant of ``like``'s dtype that
    broadcasts against ``like`` without changing its shape; else None."""
    array = v.g.constants.get(name)
    if array is None or array.size != 1 or not _is_float(array):
        return None
    like_shape = v.g.shapes.get(like)
    if array.ndim > (0 if like_shape is None else len(like_shape)):
        return None
    if v.g.dtypes.get(like) not in (None, get_dtype(array.dtype).name):
        return None
    value = float(array.reshape(-1)[0])
    return value if math.isfinite(value) else None


def _scaled_scores(v: _View, name: str) -> tuple[str, float, Node] | None:
    """``name = s * c``, ``c * s`` or ``s / c`` with c a finite scalar constant (nonzero to divide by), the
    only reader of ``name`` being its consumer: (s, the scale, the node)."""
    if name in v.outputs or len(v.readers.get(name, [])) != 1:
        return None
    mul = v.made_by(name, "Mul")
    if mul is not None:
        for s, c in (mul.inputs[:2], mul.inputs[1::-1]):
            value = _scalar_constant(v, c, s)
            if value is not None and s not in v.g.constants:
                return s, value, mul
    div = v.made_by(name, "Div")
    if div is not None:
        s, c = div.inputs[:2]
        value = _scalar_constant(v, c, s)
        # 1 / c must be a float32 too (a subnormal c's would overflow: 0 / c is 0, but 0 * inf is NaN)
        if value and s not in v.g.constants and abs(1.0 / value) < float(np.finfo(np.float32).max):
            return s, 1.0 / value, div
    return None


def _dtype_of(v: _View, name: str) -> str | None:
    array = v.g.constants.get(name)
    if array is not None:
        return get_dtype(array.dtype).name if _is_float(array) else None
    return v.g.dtypes.get(name)


def _bias_of(v: _View, add: Node) -> tuple[str, str] | None:
    """(scores, bias) of ``add``: the bias broadcasts to the scores' shape without changing it and has their
    dtype; the operand that is a scaled product is the scores when both fit; None when neither fits."""
    fits = []
    for s, m in (add.inputs[:2], add.inputs[1::-1]):
        s_shape, m_shape = v.shape(s), v.shape(m)
        if not s or not m or s == m or s_shape is None or m_shape is None or len(m_shape) > len(s_shape):
            continue
        if (
            s_shape != v.shape(add.outputs[0])
            or _dtype_of(v, s) is None
            or _dtype_of(v, s) != _dtype_of(v, m)
        ):
            continue
        if all(dm == 1 or dm == ds for dm, ds in zip(reversed(m_shape), reversed(s_shape), strict=False)):
            fits.append((s, m))
    scaled = [f for f in fits if _scaled_scores(v, f[0]) is not None]
    return (scaled or fits or [None])[0]


def _softmax_scale_bias(v: _View, node: Node) -> tuple[list[Node], Node] | None:
    """``Softmax(Add(Mul(s, c), m))`` (or ``Div(s, c)``, scale ``1 / c``), and the partial forms
    ``Softmax(Add(s, m))`` and ``Softmax(Mul(s, c))`` -> one softmax of s with ``scale`` and ``bias`` m
    (attention's scaled scores plus an additive mask, in one kernel). c is a finite scalar constant; m
    (a constant or a computed tensor) broadcasts to s's shape without changing it."""
    if not _is_onnx(node, "Softmax"):
        return None
    axis = int(node.attrs.get("axis", -1 if v.g.opset >= 13 else 1))
    if v.g.opset < 13 and axis != -1:  # older Softmax flattens from axis: the converter handles it
        return None
    scores, bias, chain = node.inputs[0], None, [node]
    add = v.made_by(scores, "Add")
    if add is not None:
        found = _bias_of(v, add) if len(v.readers.get(scores, [])) == 1 and scores not in v.outputs else None
        if found is None:
            return None
        (scores, bias), chain = found, [add, node]
    scale = 1.0
    scaled = _scaled_scores(v, scores)
    if scaled is not None:
        scores, scale, op = scaled
        chain.insert(0, op)
    if len(chain) == 1:
        return None
    attrs: dict[str, Any] = {"axis": axis}
    if scale != 1.0:
        attrs["scale"] = scale if _dtype_of(v, scores) == "float64" else _float32(scale)
    inputs = [scores] + ([bias] if bias is not None else [])
    return chain, Node("softmax", node.name, FUSED_DOMAIN, inputs, node.outputs[:1], attrs)


# -- attention: heads out of a split, as strided views ----------------------------------------------------
#: A strided view of a Split's input: (offset, shape, strides), in elements of its contiguous storage.
View = tuple[int, tuple[int, ...], tuple[int, ...]]


def _view_strides(shape: tuple[int, ...], strides: tuple[int, ...], new: tuple[int, ...]) -> tuple | None:
    """The strides that read the elements of the view (``shape``, ``strides``) in the same order under the
    shape ``new``, when no copy is needed (NumPy's rule: each group of dims merged or split up must be
    walked contiguously); None when it would take a copy. Shapes have no zero dims."""
    old = [(d, st) for d, st in zip(shape, strides, strict=True) if d != 1]
    out = [0] * len(new)  # size-1 dims of ``new`` keep stride 0
    oi = ni = 0
    while oi < len(old):
        while ni < len(new) and new[ni] == 1:
            ni += 1
        if ni == len(new):
            return None
        oj, nj, o_size, n_size = oi + 1, ni + 1, old[oi][0], new[ni]
        while o_size != n_size:  # grow the smaller side's group until both hold the same elements
            if o_size < n_size:
                if oj == len(old):
                    return None
                o_size, oj = o_size * old[oj][0], oj + 1
            else:
                if nj == len(new):
                    return None
                n_size, nj = n_size * new[nj], nj + 1
        if any(old[k][1] != old[k + 1][1] * old[k + 1][0] for k in range(oi, oj - 1)):
            return None  # the old group is not one contiguous run
        out[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            out[k - 1] = out[k] * new[k]
        oi, ni = oj, nj
    return tuple(out) if all(d == 1 for d in new[ni:]) else None


def _reshaped(v: _View, node: Node, view: View) -> View | None:
    """``view`` under the shape of a Reshape with a constant shape, when that needs no copy."""
    offset, shape, strides = view
    target = v.g.constants.get(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
    values = node.attrs.get("shape") if target is None else [int(t) for t in target.reshape(-1)]
    if values is None:
        return None
    try:
        new = reshape_target(shape, tuple(int(t) for t in values), bool(node.attrs.get("allowzero", 0)))
    except PipeLinkError:
        return None
    inferred = v.shape(node.outputs[0])
    if not all(isinstance(d, int) and d > 0 for d in new) or inferred not in (None, tuple(new)):
        return None
    new_strides = _view_strides(shape, strides, tuple(new))
    return None if new_strides is None else (offset, tuple(new), new_strides)


def _transposed(node: Node, view: View) -> View | None:
    offset, shape, strides = view
    perm = [int(p) for p in node.attrs.get("perm", [])] or list(range(len(shape) - 1, -1, -1))
    if sorted(perm) != list(range(len(shape))):
        return None
    return offset, tuple(shape[p] for p in perm), tuple(strides[p] for p in perm)


def _follow_views(v: _View, name: str, view: View) -> tuple[str, View, list[Node]]:
    """The chain of Reshapes (that need no copy) and Transposes that alone read ``name``, one after the
    other: (the last tensor, its view, the nodes)."""
    nodes: list[Node] = []
    while name not in v.outputs:
        readers = v.readers.get(name, [])
        if len(readers) != 1:
            break
        reader = readers[0]
        if _is_onnx(reader, "Reshape") and reader.inputs[0] == name:
            new = _reshaped(v, reader, view)
        elif _is_onnx(reader, "Transpose"):
            new = _transposed(reader, view)
        else:
            break
        if new is None:
            break
        nodes.append(reader)
        name, view = reader.outputs[0], new
    return name, view, nodes


def _split_sizes(v: _View, node: Node, dim: int) -> list[int] | None:
    """The part sizes of a Split along a dim of size ``dim`` (a constant input, the attribute, or an even
    split: ceil parts with a smaller last one from opset 18); None when they are not known."""
    if len(node.inputs) > 1 and node.inputs[1]:
        value = v.g.constants.get(node.inputs[1])
        sizes = None if value is None else [int(t) for t in value.reshape(-1)]
    elif "split" in node.attrs:
        sizes = [int(t) for t in node.attrs["split"]]
    else:
        n = int(node.attrs.get("num_outputs", len(node.outputs)))
        if n != len(node.outputs) or n < 1 or (v.g.opset < 18 and dim % n):
            return None
        part = -(-dim // n)
        sizes = [part] * (n - 1) + [dim - part * (n - 1)]
    if sizes is None or len(sizes) != len(node.outputs) or sum(sizes) != dim or min(sizes) < 1:
        return None
    return sizes


def _split_views(v: _View, node: Node) -> tuple[list[Node], list[Node]] | None:
    """A Split whose parts are reshaped (without a copy) and transposed -> one ``as_strided`` stage per part
    reading the Split's input (GPT-2's q, k and v heads out of c_attn's output: one copy each instead of a
    slice copy, a reshape and a transpose). A part whose output has other readers (or none of these) is
    copied out as it is, by an ``as_strided`` too; needs the input's shape known, without zero dims, and at
    least one part with a Reshape or Transpose to take."""
    if not _is_onnx(node, "Split") or "" in node.outputs:
        return None
    x = node.inputs[0]
    shape = v.shape(x)
    if not shape or not all(isinstance(d, int) and d > 0 for d in shape):
        return None
    axis = int(node.attrs.get("axis", 0))
    if not -len(shape) <= axis < len(shape):
        return None
    axis %= len(shape)
    sizes = _split_sizes(v, node, shape[axis])
    if sizes is None:
        return None
    strides = contiguous_strides(shape)
    chain, fused, start = [node], [], 0
    for k, (part, size) in enumerate(zip(node.outputs, sizes, strict=True)):
        view = (start * strides[axis], shape[:axis] + (size,) + shape[axis + 1 :], strides)
        start += size
        end, (offset, view_shape, view_strides), nodes = _follow_views(v, part, view)
        chain += nodes
        name = nodes[-1].name if nodes and nodes[-1].name else f"{node.name or 'split'}_part{k}"
        attrs = {"shape": list(view_shape), "strides": list(view_strides), "offset": offset}
        fused.append(Node("as_strided", name, FUSED_DOMAIN, [x], [end], attrs))
    return (chain, fused) if len(chain) > 1 else None


def _is_float(array: np.ndarray) -> bool:
    try:
        return get_dtype(array.dtype).name in FLOATS
    except PipeLinkError:
        return False


Pattern = Callable[[_View, Node], "tuple[list[Node], Node | list[Node]] | None"]

#: The patterns, in the order they run (each until it matches no more): the GELU chains first, so that
#: the gemm patterns see one gelu node; the gemm's reshapes before its residual, whose shape is the 3-d one;
#: the split views after the gemm's reshapes, which give c_attn's output its 3-d shape; the BatchNormalization
#: fold before the conv patterns, which then see one Conv.
PATTERNS: tuple[tuple[str, Pattern], ...] = (
    ("gelu", _gelu_chain),
    ("layer_norm", _layer_norm_chain),
    ("matmul_bias", _matmul_bias),
    ("gemm_reshapes", _gemm_reshapes),
    ("gemm_activation", _gemm_activation),
    ("gemm_residual", _gemm_residual),
    ("conv_batch_norm", _conv_batch_norm),
    ("conv_residual", _conv_residual),
    ("conv_activation", _conv_activation),
    ("cast_to_same", _cast_to_same),
    ("softmax_scale_bias", _softmax_scale_bias),
    ("split_views", _split_views),
)


def fuse(g: Graph, nodes: list[Node], outputs: set[str]) -> tuple[list[Node], dict[str, int]]:
    """Rewrite ``nodes`` (in graph order) with every pattern of :data:`PATTERNS`.

    Parameters
    ----------
    g : Graph
        The converters' graph: its constants, dtypes and shapes are read.
    nodes : list of Node
        The model's nodes, Constant nodes already folded.
    outputs : set of str
        The graph outputs (never fused away).

    Returns
    -------
    nodes : list of Node
        The rewritten nodes, in an order where every tensor is made before it is read; fused ones have
        the domain :data:`FUSED_DOMAIN`.
    counts : dict
        How many times each pattern matched.
    """
    counts: dict[str, int] = {}
    view = _View(g, nodes, outputs)
    for label, pattern in PATTERNS:
        # Passes over the nodes until one matches nothing (a rewrite can make a new match further on).
        changed = True
        while changed:
            changed = False
            for slot in range(len(view.slots)):
                node = view.slots[slot]
                match = pattern(view, node) if node is not None else None
                if match is not None and view.replace(*match):
                    counts[label] = counts.get(label, 0) + 1
                    changed = True
    return view.nodes, counts
