"""ONNX layout converters: Reshape, Flatten, (Un)Squeeze, Transpose, Concat, Split, Expand, Tile, Pad,
CenterCropPad, ConstantOfShape, Range (to a dim known only at run time), SpaceToDepth and DepthToSpace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..ops.shape import MAX_PARTS
from .convert_common import _attr, _inputs
from .fold import (
    Dim,
    Unfoldable,
    describe_value,
    expand_target,
    reshape_target,
    unfolded_needs,
    unfolded_reason,
)
from .graph import Graph, Node, Unsupported, onnx_dtype
from .graph import shape_of as _shape
from .lowerings import table_problem
from .runtime_dims import (
    RuntimeDimsError,
    arange_to_dim,
    broadcast_to_value,
    reshape_by_alignment,
    split_by_gather,
)

__all__: list[str] = []


_MAX_PORTS = MAX_PARTS  # the most tensors concat takes and split makes


def _static_shape(g: Graph, name: str, op_type: str, what: str) -> list[int]:
    """The shape of ``name``, every dim known (else Unsupported naming the op and why it needs it)."""
    shape = _shape(g, name)
    if shape is None or not all(isinstance(d, int) for d in shape):
        raise Unsupported(f"{op_type} needs its input's shape, every dim known ({what})")
    return [int(d) for d in shape]


def _tile(g: Graph, node: Node) -> None:
    """ONNX Tile: x viewed with a unit axis before each repeated one, expanded to the repeats, viewed
    back (reshape, expand, reshape: one copy). The repeats must be constant, the input's shape known;
    or a shape value whose dims known only when the model runs repeat a dim of 1 (``query.repeat(batch,
    1, 1)``): x broadcast to them."""
    x, y = node.inputs[0], node.outputs[0]
    value = g.symbolic.get(node.inputs[1]) if len(node.inputs) > 1 else None
    if isinstance(value, list):
        _tile_to_run_time_dims(g, node, value)
        return
    repeats = g.ints(node, 1, "repeats", "the repeats")
    known = _shape(g, x)
    if repeats is not None and known is not None and not all(isinstance(d, int) for d in known):
        _tile_by_concat(g, node, repeats, len(known))
        return
    shape = _static_shape(g, x, "Tile", "to place the repeats")
    if repeats is None or len(repeats) != len(shape):
        raise Unsupported(f"Tile needs one constant repeat per input dim ({len(shape)}), got {repeats}")
    if any(r < 0 for r in repeats):
        raise Unsupported(f"Tile repeats must not be negative (got {repeats})")
    if all(r == 1 for r in repeats):
        g.stage(node, "identity", [x], [y])
        return
    spread, target, final = [], [], []
    for d, r in zip(shape, repeats, strict=True):
        if r != 1:
            spread.append(1)
            target.append(r)
        spread.append(d)
        target.append(d)
        final.append(d * r)
    g.stage(node, "reshape", [x], [f"{y}__spread"], shape=spread, allowzero=True)
    g.stage(node, "expand", [f"{y}__spread"], [f"{y}__tiled"], shape=target)
    g.stage(node, "reshape", [f"{y}__tiled"], [y], shape=final, allowzero=True)


def _tile_by_concat(g: Graph, node: Node, repeats: list[int], rank: int) -> None:
    """Tile by constant repeats of an input with dims known only when the model runs (GPT-J's rotary
    ``repeat_interleave`` at a dynamic sequence): each repeated axis a concat of that many copies, any of
    its dims known or not (at most :data:`_MAX_PORTS` copies an axis)."""
    x, y = node.inputs[0], node.outputs[0]
    if len(repeats) != rank:
        raise Unsupported(f"Tile needs one constant repeat per input dim ({rank}), got {repeats}")
    if any(r < 1 or r > _MAX_PORTS for r in repeats):
        raise Unsupported(
            f"Tile repeats {repeats} of an input with dims known only when the model runs: each from 1 to "
            f"{_MAX_PORTS} (a concat of that many copies), or export with fixed shapes"
        )
    axes = [a for a, r in enumerate(repeats) if r != 1]
    if not axes:
        g.stage(node, "identity", [x], [y])
        return
    source = x
    for k, axis in enumerate(axes):
        out = y if k == len(axes) - 1 else f"{y}__tiled{axis}"
        g.stage(node, "concat", [source] * repeats[axis], [out], axis=axis)
        source = out


def _tile_to_run_time_dims(g: Graph, node: Node, value: list) -> None:
    """Tile by repeats known only when the model runs: the constant repeats tiled first, then x broadcast
    to the rest where x's dim is 1 (a repeat of 1 is that dim's broadcast, runtime_dims.py); one such
    repeat of a dim d other than 1 (DeBERTa's ``pos_key.repeat(batch, 1, 1)`` of ``[heads, span, d]``)
    becomes a unit axis before that dim, broadcast to the count, and the two viewed as one (count * d),
    with every other dim known."""
    x, y = node.inputs[0], node.outputs[0]
    known = _shape(g, x)
    if known is None:
        raise Unsupported("Tile needs its input's rank (to place repeats known only when the model runs)")
    shape = list(known)
    if len(value) != len(shape):
        raise Unsupported(f"Tile needs one repeat per input dim ({len(shape)}), got {len(value)}")
    if any(isinstance(r, int) and r < 0 for r in value):
        raise Unsupported(f"Tile repeats must not be negative (got {describe_value(value)})")
    spread = [k for k, (r, d) in enumerate(zip(value, shape, strict=True)) if isinstance(r, Dim) and d != 1]
    if len(spread) > 1 or spread and sum(isinstance(r, Dim) for r in value) > 1:
        raise Unsupported(
            f"Tile's repeats {describe_value(value)} repeat a dim of size other than 1 by a count known only "
            "when the model runs, beside another such count; PipeLink takes one such count, or counts of "
            "dims of 1 alone (export with fixed shapes)"
        )
    fixed = [r if isinstance(r, int) else 1 for r in value]
    if spread or any(r != 1 for r in fixed):  # a dim known only at run time may be repeated once only
        shape = _static_shape(g, x, "Tile", "to place repeats known only when the model runs")
    source = x
    if any(r != 1 for r in fixed):
        source = f"{y}__tiled"
        g.constants[f"{y}__repeats"], g.dtypes[f"{y}__repeats"] = np.asarray(fixed, np.int64), "int64"
        _tile(g, Node("Tile", node.name, node.domain, [x, f"{y}__repeats"], [source], {}))
        g.shapes[source] = tuple(d * r for d, r in zip(shape, fixed, strict=True))
    tiled = [d * r for d, r in zip(shape, fixed, strict=True)]
    if spread:
        k = spread[0]
        unit = [*tiled[:k], 1, *tiled[k:]]
        g.stage(node, "reshape", [source], [f"{y}__unit"], shape=unit, allowzero=True)
        g.shapes[f"{y}__unit"] = tuple(unit)
        try:
            broadcast_to_value(g, node, f"{y}__unit", [*tiled[:k], value[k], *tiled[k:]], f"{y}__spread")
        except RuntimeDimsError as why:
            raise Unsupported(f"Tile by repeats known only when the model runs: {why}") from None
        g.stage(node, "reshape", [f"{y}__spread"], [y], shape=[*tiled[:k], -1, *tiled[k + 1 :]])
        return
    target = [
        r if isinstance(r, Dim) else d * r if isinstance(d, int) else 1
        for r, d in zip(value, shape, strict=True)
    ]
    try:
        broadcast_to_value(g, node, source, target, y)
    except RuntimeDimsError as why:
        raise Unsupported(f"Tile by repeats known only when the model runs: {why}") from None


def _space_to_depth(g: Graph, node: Node) -> None:
    """ONNX SpaceToDepth: ``[N, C, H, W]`` viewed as ``[N, C, H/b, b, W/b, b]``, transposed to
    ``[N, b, b, C, H/b, W/b]`` (mode DCR, the default) or ``[N, C, b, b, H/b, W/b]`` (CRD, opset 28),
    viewed as ``[N, C*b*b, H/b, W/b]``. C, H and W must be known (N may be symbolic) and H, W divisible by
    the block size."""
    x, y = node.inputs[0], node.outputs[0]
    b = int(_attr(node, "blocksize"))
    mode = _attr(node, "mode", "DCR")
    perms = {"DCR": [0, 3, 5, 1, 2, 4], "CRD": [0, 1, 3, 5, 2, 4]}
    if mode not in perms:
        raise Unsupported(f"SpaceToDepth mode {mode!r}; the spec has 'DCR' and 'CRD'")
    shape = g.shapes.get(x)
    if shape is None or len(shape) != 4 or not all(isinstance(d, int) for d in shape[1:]):
        raise Unsupported("SpaceToDepth needs a 4-d input with C, H and W known")
    n, c, h, w = shape
    if b < 1 or h % b or w % b:
        raise Unsupported(f"SpaceToDepth blocksize {b} must be positive and divide H={h} and W={w}")
    lead = n if isinstance(n, int) else 0  # 0: copy the batch dim, whatever it is when the model runs
    g.stage(node, "reshape", [x], [f"{y}__blocks"], shape=[lead, c, h // b, b, w // b, b], allowzero=False)
    g.stage(node, "transpose", [f"{y}__blocks"], [f"{y}__moved"], perm=perms[mode])
    g.stage(node, "reshape", [f"{y}__moved"], [y], shape=[lead, c * b * b, h // b, w // b], allowzero=False)


def _transpose(g: Graph, node: Node) -> None:
    perm = [int(p) for p in _attr(node, "perm", [])]
    g.stage(node, "transpose", node.inputs[:1], node.outputs[:1], **({"perm": perm} if perm else {}))


def _target(g: Graph, node: Node, from_shape_value: Callable, what: str) -> list[int] | None:
    """Input 1 of a Reshape or Expand: from a shape value the model computes (onnx/fold.py), else a
    constant (None when absent)."""
    try:
        shape = from_shape_value(g, node)
    except Unfoldable as e:
        raise Unsupported(str(e)) from None
    return shape if shape is not None else g.ints(node, 1, "shape", what)


def _reshape(g: Graph, node: Node) -> None:
    try:
        shape = _target(g, node, reshape_target, "the new shape")
    except Unsupported:  # two entries known only at run time: lined up with the input's, if they can be
        if reshape_by_alignment(g, node, node.outputs[0]) or split_by_gather(g, node, node.outputs[0]):
            return
        raise
    if shape is None:
        raise Unsupported("Reshape needs its shape input")
    # a target resolved from a shape value copies dims with 0 (reshape_target): allowzero off for it
    computed = node.inputs[1] in g.symbolic if len(node.inputs) > 1 else False
    g.stage(
        node,
        "reshape",
        node.inputs[:1],
        node.outputs[:1],
        shape=shape,
        allowzero=bool(_attr(node, "allowzero", 0)) and not computed,
    )


def _flatten(g: Graph, node: Node) -> None:
    g.stage(node, "flatten", node.inputs[:1], node.outputs[:1], axis=int(_attr(node, "axis", 1)))


def _squeeze(g: Graph, node: Node) -> None:
    axes = g.ints(node, 1, "axes", "the axes")
    g.stage(node, "squeeze", node.inputs[:1], node.outputs[:1], **({"axes": axes} if axes else {}))


def _unsqueeze(g: Graph, node: Node) -> None:
    axes = g.ints(node, 1, "axes", "the axes")
    if not axes:
        raise Unsupported("Unsqueeze needs its axes (an input or the attribute)")
    g.stage(node, "unsqueeze", node.inputs[:1], node.outputs[:1], axes=axes)


def _concat(g: Graph, node: Node) -> None:
    if len(node.inputs) > _MAX_PORTS:
        raise Unsupported(f"{len(node.inputs)} inputs; PipeLink's concat joins at most {_MAX_PORTS}")
    g.stage(node, "concat", _inputs(node, _MAX_PORTS), node.outputs[:1], axis=int(_attr(node, "axis")))


def _pad(g: Graph, node: Node) -> None:
    """ONNX Pad, axis by axis, from PipeLink's slice, expand and concat: a negative pad crops (slice); a
    positive one joins the borders to the tensor (concat), made by mode: ``constant`` a bound constant
    block, ``edge`` the edge slice expanded, ``reflect`` a reversed slice without the edge, ``wrap`` the
    slice of the other end. Each padded axis needs its size; ``constant`` needs every dim."""
    mode = _attr(node, "mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise Unsupported(f"Pad mode {mode!r}; PipeLink imports constant, edge, reflect and wrap")
    x, y = node.inputs[0], node.outputs[0]
    shape = g.shapes.get(x)
    if shape is None:
        raise Unsupported("Pad needs its input's shape")
    rank = len(shape)
    pads = (
        g.ints(node, 1, "pads", "the pads") if g.opset >= 11 else [int(p) for p in node.attrs.get("pads", [])]
    )
    axes = g.ints(node, 3, "axes", "the axes") if g.opset >= 18 else None
    axes = [a % rank for a in axes] if axes else list(range(rank))
    if pads is None or len(pads) != 2 * len(axes):
        raise Unsupported(f"Pad needs {2 * len(axes)} pads (begin and end per axis), got {pads}")
    value = g.const(node, 2, "the constant value") if g.opset >= 11 else node.attrs.get("value", 0.0)
    value = 0.0 if value is None else np.asarray(value).reshape(-1)[0] if np.size(value) else 0.0
    dtype = g.dtypes.get(x)
    cur, dims, step = x, list(shape), 0

    def out(tag: str) -> str:
        nonlocal step
        step += 1
        return f"{y}__pad{step}_{tag}"

    todo = [(a, b, e) for a, b, e in zip(axes, pads[: len(axes)], pads[len(axes) :], strict=True) if b or e]
    for k, (axis, begin, end) in enumerate(todo):
        size = dims[axis]
        if not isinstance(size, int):
            raise Unsupported(f"Pad of axis {axis}, whose size is known only when the model runs")
        last = k == len(todo) - 1
        if begin < 0 or end < 0:  # crop first
            cropped = -min(begin, 0) - min(end, 0)
            if cropped >= size:
                raise Unsupported(
                    f"Pad crops {cropped} of axis {axis}'s {size} (pads {begin}, {end}): nothing would be "
                    "left, and PipeLink has no empty tensors"
                )
            stop = size + min(end, 0)
            name = y if last and begin <= 0 and end <= 0 else out("crop")
            g.stage(node, "slice", [cur], [name], starts=[max(-begin, 0)], ends=[stop], axes=[axis])
            cur, size = name, stop - max(-begin, 0)
            dims[axis] = size
            begin, end = max(begin, 0), max(end, 0)
            if not (begin or end):
                continue
        if mode == "reflect" and (begin >= size or end >= size):
            raise Unsupported(
                f"Pad mode reflect by {max(begin, end)} on an axis of {size}: at most {size - 1}"
            )
        if mode in ("edge", "wrap") and size == 0:
            raise Unsupported(f"Pad mode {mode} of an empty axis")
        if mode == "wrap" and max(begin, end) > size:
            raise Unsupported(f"Pad mode wrap by {max(begin, end)} on an axis of {size}: at most {size}")
        parts = []
        for side, width in (("begin", begin), ("end", end)):
            if not width:
                parts.append(None)
                continue
            name = out(side)
            if mode == "constant":
                if dtype is None or any(d is None for d in dims):
                    raise Unsupported("Pad mode constant needs the input's dtype and rank")
                # a dim known only when the model runs (a dynamic batch) is 1 in the block, which is then
                # broadcast to x's dim there (runtime_dims.py)
                block = [width if i == axis else d if isinstance(d, int) else 1 for i, d in enumerate(dims)]
                too_large = table_problem("Pad's constant block", tuple(block), dtype)
                if too_large:
                    raise Unsupported(too_large)
                fill = np.full(block, value, dtype=get_dtype(dtype).numpy)
                if all(isinstance(d, int) for d in dims):
                    g.constants[name], g.dtypes[name] = fill, dtype
                else:
                    _broadcast_block(g, node, x, fill, dtype, block, name)
            elif mode == "edge":
                edge = out(f"{side}_edge")
                at = 0 if side == "begin" else size - 1
                g.stage(node, "slice", [cur], [edge], starts=[at], ends=[at + 1], axes=[axis])
                target = [width if i == axis else 1 for i in range(rank)]
                g.stage(node, "expand", [edge], [name], shape=target)
            elif mode == "reflect":
                # begin: x[width:0:-1]; end: x[size-2 : size-2-width : -1], where a stop before index 0
                # is written -(size + 1) (a negative end counts from the back)
                stop = size - 2 - width if size - 2 - width >= 0 else -(size + 1)
                starts, ends = ([width], [0]) if side == "begin" else ([size - 2], [stop])
                g.stage(node, "slice", [cur], [name], starts=starts, ends=ends, axes=[axis], steps=[-1])
            else:  # wrap: the other end
                starts, ends = ([size - width], [size]) if side == "begin" else ([0], [width])
                g.stage(node, "slice", [cur], [name], starts=starts, ends=ends, axes=[axis])
            parts.append(name)
        joined = y if last else out("joined")
        g.stage(node, "concat", [p for p in (parts[0], cur, parts[1]) if p], [joined], axis=axis)
        cur = joined
        dims[axis] = size + begin + end
    if cur == x:  # nothing to pad
        g.stage(node, "identity", [x], [y])


def _broadcast_block(g: Graph, node: Node, x: str, fill: np.ndarray, dtype: str, block: list, y: str) -> None:
    """``y``: the constant ``fill`` broadcast to ``x``'s dims known only when the model runs (where
    ``block`` has 1 for them)."""
    g.constants[f"{y}__fill"], g.dtypes[f"{y}__fill"] = fill, dtype
    g.shapes[f"{y}__fill"] = tuple(block)
    shape = g.shapes[x]
    value = [
        Dim(d, x, k) if isinstance(d, str) else b for k, (d, b) in enumerate(zip(shape, block, strict=True))
    ]
    try:
        broadcast_to_value(g, node, f"{y}__fill", value, y)
    except RuntimeDimsError as why:
        raise Unsupported(f"Pad mode constant of dims known only when the model runs: {why}") from None


def _split(g: Graph, node: Node) -> None:
    if len(node.outputs) > _MAX_PORTS:
        raise Unsupported(f"{len(node.outputs)} outputs; PipeLink's split makes at most {_MAX_PORTS}")
    sizes = g.ints(node, 1, "split", "the part sizes")
    attrs: dict[str, Any] = {"axis": int(_attr(node, "axis", 0))}
    if sizes:
        attrs["split"] = sizes
    else:
        attrs["num_outputs"] = int(_attr(node, "num_outputs", len(node.outputs)))
    g.stage(node, "split", node.inputs[:1], node.outputs, **attrs)


def _expand(g: Graph, node: Node) -> None:
    try:
        shape = _target(g, node, expand_target, "the shape")
    except Unsupported as e:  # a dim known only at run time that x lacks: taken from its tensor
        value = g.symbolic.get(node.inputs[1])
        if not isinstance(value, list):
            raise
        try:
            broadcast_to_value(g, node, node.inputs[0], value, node.outputs[0])
        except RuntimeDimsError as why:
            raise Unsupported(f"{e}; {why}") from None
        return
    g.stage(node, "expand", node.inputs[:1], node.outputs[:1], shape=shape)


def _constant_of_shape(g: Graph, node: Node) -> None:
    """ConstantOfShape of a shape the model computes from dims known only when it runs (its constant
    inputs fold at import, fold.py): the fill (``value``, default float32 0) broadcast to it."""
    value = g.symbolic.get(node.inputs[0]) if node.inputs else None
    if not isinstance(value, list):
        raise Unsupported(unfolded_reason(g, node), needs=unfolded_needs(g, node))
    import onnx

    fill = node.attrs.get("value")
    array = np.zeros(1, np.float32) if fill is None else onnx.numpy_helper.to_array(fill)  # check.py read it
    if array.size != 1:
        raise Unsupported(f"ConstantOfShape's value must have one element (got {array.size})")
    name = f"{node.outputs[0]}__fill"
    g.constants[name] = array.reshape(())
    g.shapes[name] = ()
    g.dtypes[name] = onnx_dtype(onnx.helper.np_dtype_to_tensor_dtype(array.dtype))
    try:
        broadcast_to_value(g, node, name, value, node.outputs[0])
    except RuntimeDimsError as why:
        raise Unsupported(f"ConstantOfShape to a shape known only when the model runs: {why}") from None


def _range(g: Graph, node: Node) -> None:
    """Range whose limit is a dim known only when the model runs (``arange(x.size(0))``; a Range of
    constants folds at import, fold.py): counted along that dim of the tensor it was read from."""
    limit = g.symbolic.get(node.inputs[1]) if len(node.inputs) == 3 else None
    ends = [g.constants.get(n) for n in (node.inputs[0], node.inputs[2])] if limit is not None else [None]
    if any(e is None or np.size(e) != 1 for e in ends):
        raise Unsupported(unfolded_reason(g, node), needs=unfolded_needs(g, node))
    start, delta = (np.asarray(e).reshape(-1)[0].item() for e in ends)
    dtype = g.dtypes.get(node.inputs[0]) or get_dtype(np.asarray(ends[0]).dtype).name
    try:
        arange_to_dim(g, node, start, limit, delta, dtype, node.outputs[0])
    except RuntimeDimsError as why:
        raise Unsupported(f"Range to a limit known only when the model runs: {why}") from None


def _center_crop_pad(g: Graph, node: Node) -> None:
    """ONNX CenterCropPad with a constant shape: the Pad lowering with negative pads (crop) and positive
    ones (zeros) per axis, the odd one at the end (onnx's reference)."""
    x, y = node.inputs[0], node.outputs[0]
    target = g.ints(node, 1, "", "the shape")
    shape = g.shapes.get(x)
    if target is None or shape is None:
        raise Unsupported("CenterCropPad needs its shape input and its input's rank")
    rank = len(shape)
    axes = [int(a) for a in _attr(node, "axes", range(rank))]
    bad = any(not -rank <= a < rank for a in axes) or len({a % rank for a in axes}) != len(axes)
    if bad or len(target) != len(axes):
        raise Unsupported(f"CenterCropPad: shape {target} for axes {axes} of a rank-{rank} input")
    pads = [0] * (2 * rank)
    for axis, want in zip((a % rank for a in axes), target, strict=True):
        if not isinstance(shape[axis], int) or want < 0:
            raise Unsupported(f"CenterCropPad of axis {axis} (size {shape[axis]}) to {want}")
        change = abs(want - shape[axis])  # half before, the odd one after; negative pads crop
        sign = 1 if want >= shape[axis] else -1
        pads[axis], pads[rank + axis] = sign * (change // 2), sign * (change - change // 2)
    name = f"{y}__center_pads"
    g.constants[name], g.dtypes[name] = np.asarray(pads, np.int64), "int64"
    _pad(g, Node("Pad", node.name, node.domain, [x, name], [y], {"mode": "constant"}))


def _depth_to_space(g: Graph, node: Node) -> None:
    g.stage(
        node,
        "pixel_shuffle",
        node.inputs[:1],
        node.outputs[:1],
        blocksize=int(_attr(node, "blocksize")),
        mode=_attr(node, "mode", "DCR"),
    )
