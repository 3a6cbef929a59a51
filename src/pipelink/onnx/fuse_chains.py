"""Fusion patterns of elementwise chains (for ``fuse.py``): GELU in either form, LayerNorm written out
(exports before opset 17), and a Cast to the dtype its input already has.
"""

from __future__ import annotations

import math

from ..dtypes import get_dtype
from .fuse_view import _common_prefix, _is_float, _is_onnx, _other, _View
from .graph import FUSED_DOMAIN, Node, Unsupported, onnx_dtype
from .graph import float32_attr as _float32

__all__: list[str] = []

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_CUBIC = 0.044715


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
