"""Fusion patterns of attention (for ``fuse.py``): the scaled, masked softmax in one softmax stage, and a
Split's heads read as strided views of its input.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import PipeLinkError
from ..ops.kernel import contiguous_strides
from ..ops.shape.rules import reshape_target
from .fuse_view import _is_float, _is_onnx, _View
from .graph import FUSED_DOMAIN, Node
from .graph import float32_attr as _float32

__all__: list[str] = []


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
