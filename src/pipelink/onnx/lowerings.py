"""Small ONNX op types lowered at import onto PipeLink's existing operators: SwiGLU, DynamicQuantizeLinear,
TensorScatter, MaxUnpool and MaxPool's Indices output. Each is a handful of stages whose result is the
spec's (and onnx's reference's) exactly.

It adds no kernel and computes nothing itself; what those operators cannot express exactly (a shape or a
constant the import does not know, an attribute value outside the spec) is refused with the converter's
``Unsupported``, which the import reports with the node. The constant tables it builds from declared dims
are bounded (:func:`table_problem`) before anything is allocated.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import PipeLinkError
from ..limits import format_bytes, shape_nbytes
from ..ops.conv.window import Window, window_nd
from ..runtime.planfile import MAX_CONSTANT_BYTES
from .graph import Node, Unsupported, float32_attr
from .graph import dtype_of as _dtype
from .graph import shape_of as _shape
from .graph import show_shape as _show

__all__ = [
    "dynamic_quantize_linear",
    "max_pool_with_indices",
    "max_unpool",
    "swiglu",
    "table_problem",
    "tensor_scatter",
]

#: DynamicQuantizeLinear's range: uint8, [qmin, qmax] (the only type the spec allows).
_QMIN, _QMAX = 0, 255
#: TensorScatter's modes.
_SCATTER_MODES = ("linear", "circular")


def _unsupported(why: str) -> Exception:
    """The converter's refusal of the node, for ``why``."""
    return Unsupported(why)


def table_problem(what: str, shape: tuple, dtype: str) -> str | None:
    """Why a constant table of ``shape`` and ``dtype`` that a lowering would build from declared dims is
    too large to build (None: it is not): over :data:`~pipelink.runtime.planfile.MAX_CONSTANT_BYTES`, the
    bound weights a plan holds by default. Counted exactly before anything is allocated, so a dim of
    2**62 is a refusal, not an overflow or a MemoryError."""
    nbytes = shape_nbytes(shape, get_dtype(dtype).itemsize)
    if nbytes <= MAX_CONSTANT_BYTES:
        return None
    return (
        f"{what} is built at import as a constant table of {list(shape)} {dtype}: {format_bytes(nbytes)} "
        f"({nbytes} bytes), more than the {format_bytes(MAX_CONSTANT_BYTES)} of bound weights a plan holds "
        "(MAX_CONSTANT_BYTES): export with smaller fixed sizes"
    )


def _check_table(what: str, shape: tuple, dtype: str) -> None:
    why = table_problem(what, shape, dtype)
    if why:
        raise _unsupported(why)


def _attr(node: Any, name: str, default: Any = None) -> Any:
    value = node.attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else value


def _known(shape: tuple | None) -> bool:
    return shape is not None and all(isinstance(d, int) for d in shape)


def _constant(g: Any, name: str, value: Any, dtype: str) -> str:
    """Bind ``value`` as the constant ``name`` (an ONNX-side name the stages read)."""
    g.constants[name] = np.asarray(value, dtype=get_dtype(dtype).numpy)
    g.dtypes[name] = dtype
    return name


# -- SwiGLU (opset 28) --------------------------------------------------------------------------------
def swiglu(g: Any, node: Any) -> None:
    """SwiGLU ``Y = Swish_alpha(A) * B``: ``silu`` with the node's alpha (``a * sigmoid(alpha * a)``, the
    Swish operator's), then ``mul``. A and B must have one shape (the spec broadcasts nothing): shapes
    known to differ are refused; a mismatch known only at run time broadcasts as ``mul`` does."""
    a, b = node.inputs[:2]
    y = node.outputs[0]
    da, db = _dtype(g, a), _dtype(g, b)
    if da is not None and db is not None and da != db:
        raise _unsupported(f"SwiGLU inputs A ({da}) and B ({db}) must have one dtype")
    sa, sb = _shape(g, a), _shape(g, b)
    differ = sa is not None and sb is not None and len(sa) != len(sb)
    differ = differ or any(
        isinstance(p, int) and isinstance(q, int) and p != q for p, q in zip(sa or (), sb or (), strict=False)
    )
    if differ:
        raise _unsupported(
            f"SwiGLU inputs A {_show(sa)} and B {_show(sb)} must have the same shape (it broadcasts nothing)"
        )
    gate = f"{y}__swish"
    g.stage(node, "silu", [a], [gate], alpha=float32_attr(_attr(node, "alpha", 1.0)))
    g.stage(node, "mul", [gate, b], [y])


# -- DynamicQuantizeLinear (opset 11) -----------------------------------------------------------------
def dynamic_quantize_linear(g: Any, node: Any) -> None:
    """DynamicQuantizeLinear as onnx's reference computes it, in float32:

    - ``hi = max(0, max(x))``, ``lo = min(0, min(x))`` (``reduce_max``; the minimum as ``-max(-x)``);
    - ``y_scale = (hi - lo) / 255``, and ``1 / 255`` where ``hi == lo`` (an all-zero x: the reference's
      rule, where the spec's formula would divide 0 by 0);
    - ``y_zero_point = uint8(round(clip(0 - lo / y_scale, 0, 255)))``, halves to even;
    - ``y = quantize_linear(x, y_scale, y_zero_point)``: ``saturate(round(x / y_scale) + zero point)``.

    An x holding NaN or an infinity has no meaningful scale; its outputs are unspecified (the reference
    casts a NaN to uint8)."""
    x = node.inputs[0]
    outs = list(node.outputs) + [""] * (3 - len(node.outputs))
    y, scale, zero = outs[:3]
    base = y or scale or zero
    dtype = _dtype(g, x)
    if dtype != "float32":
        raise _unsupported(f"DynamicQuantizeLinear x of dtype {dtype or 'unknown'}; the spec's x is float32")
    scale = scale or f"{base}__scale"
    zero = zero or f"{base}__zero_point"

    def op(operator: str, inputs: list[str], tag: str, out: str | None = None, **attrs: Any) -> str:
        out = out or f"{base}__dql_{tag}"
        g.stage(node, operator, inputs, [out], **attrs)
        return out

    f0 = _constant(g, f"{base}__dql_0", 0.0, "float32")
    f1 = _constant(g, f"{base}__dql_1", 1.0, "float32")
    qmin = _constant(g, f"{base}__dql_qmin", float(_QMIN), "float32")
    qmax = _constant(g, f"{base}__dql_qmax", float(_QMAX), "float32")
    steps = _constant(g, f"{base}__dql_steps", float(_QMAX - _QMIN), "float32")
    hi = op("max", [op("reduce_max", [x], "max_x", keepdims=False), f0], "hi")
    neg_min = op("reduce_max", [op("neg", [x], "neg_x")], "neg_min_x", keepdims=False)
    lo = op("min", [op("neg", [neg_min], "min_x"), f0], "lo")
    span = op("where", [op("equal", [hi, lo], "flat"), f1, op("sub", [hi, lo], "range")], "span")
    op("div", [span, steps], "scale", out=scale)
    start = op("sub", [qmin, op("div", [lo, scale], "lo_steps")], "start")
    clipped = op("max", [op("min", [start, qmax], "below_qmax"), qmin], "clipped")
    op("cast", [op("round", [clipped], "rounded")], "zero_point", out=zero, dtype="uint8")
    if y:
        g.stage(node, "quantize_linear", [x, scale, zero], [y], axis=1)


# -- TensorScatter (opset 24) -------------------------------------------------------------------------
def tensor_scatter(g: Any, node: Any) -> None:
    """TensorScatter, the KV-cache update: row ``s`` of ``update`` along ``axis`` goes to row
    ``write_indices[b] + s`` of the cache (``mod`` its length in mode circular), for every batch entry b
    and every index of the dims between the batch and the axis.

    With write_indices: one ``scatter_elements`` along the axis, its indices ``write_indices[b] + s`` made
    at run time (``unsqueeze``, ``add`` of a constant ``[0, S)``, ``mod`` for circular, ``expand`` to the
    update's shape). Without: every write index is 0, so the cache is ``concat(update, past[S:])``
    along the axis (an ``identity`` of update where S is the cache's length).

    Needs the cache's rank, its length along the axis and the update's length S there (every dim of
    the update but the batch too, with write_indices). A linear write past the cache's end: an error on
    the CPU (onnx's reference raises), nothing written on CUDA, as ``scatter_elements``."""
    past, update = node.inputs[:2]
    writes = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    y = node.outputs[0]
    mode = str(_attr(node, "mode", "linear"))
    if mode not in _SCATTER_MODES:
        raise _unsupported(f"TensorScatter mode {mode!r}; the spec has {' and '.join(_SCATTER_MODES)}")
    cache, new = _shape(g, past), _shape(g, update)
    if cache is None or new is None:
        raise _unsupported(
            f"TensorScatter needs the ranks of past_cache ({_show(cache)}) and update ({_show(new)})"
        )
    rank, axis = len(cache), int(_attr(node, "axis", -2))
    if len(new) != rank or not -rank <= axis < rank:
        raise _unsupported(
            f"TensorScatter: axis {axis} of past_cache {_show(cache)} and update {_show(new)} (one rank)"
        )
    axis %= rank
    if axis == 0:
        raise _unsupported(
            "TensorScatter along axis 0: the write index is per batch entry (axis 0), so the axis must be "
            "another (onnx's reference fails there too)"
        )
    size, length = cache[axis], new[axis]
    if not isinstance(size, int) or not isinstance(length, int):
        raise _unsupported(
            f"TensorScatter needs the cache's length ({size}) and the update's ({length}) along axis {axis} "
            "known at import"
        )
    if length > size:
        raise _unsupported(
            f"TensorScatter: an update of {length} rows into a cache of {size} along axis {axis}"
        )
    for k, (c, u) in enumerate(zip(cache, new, strict=True)):
        if k != axis and isinstance(c, int) and isinstance(u, int) and c != u:
            raise _unsupported(
                f"TensorScatter: past_cache {_show(cache)} and update {_show(new)} differ in dim {k}"
            )
    if writes is None:
        if length == size:
            g.stage(node, "identity", [update], [y])
            return
        tail = f"{y}__tail"
        g.stage(node, "slice", [past], [tail], starts=[length], ends=[size], axes=[axis])
        g.stage(node, "concat", [update, tail], [y], axis=axis)
        return
    _scatter_rows(g, node, past, update, writes, (size, length, axis, mode))


def _scatter_rows(g: Any, node: Any, past: str, update: str, writes: str, where: tuple) -> None:
    """TensorScatter with write indices: ``scatter_elements`` of the update into the cache along the
    axis, at ``write_indices[b] + s`` (mod the cache's length in mode circular)."""
    size, length, axis, mode = where
    y, new = node.outputs[0], _shape(g, update)
    rank = len(new)
    if _dtype(g, writes) not in (None, "int64"):
        raise _unsupported(f"TensorScatter write_indices of {_dtype(g, writes)}; the spec's are int64")
    batch = _shape(g, writes)
    if batch is not None and (
        len(batch) != 1 or (isinstance(batch[0], int) and isinstance(new[0], int) and batch[0] != new[0])
    ):
        raise _unsupported(
            f"TensorScatter write_indices {_show(batch)} must be 1-d, one per batch entry of the update "
            f"{_show(new)}"
        )
    others = [d for k, d in enumerate(new) if k not in (0, axis)]
    if not all(isinstance(d, int) for d in others):
        raise _unsupported(
            f"TensorScatter with write_indices needs the update's dims other than the batch known at "
            f"import (got {_show(new)}): its row indices are expanded to that shape"
        )
    # each row's cache position: write_indices[b] (as [B, 1, ...]) + s (a constant along the axis)
    _check_table("TensorScatter's row offsets (one per update row)", (length,), "int64")
    start = f"{y}__start"
    g.stage(node, "unsqueeze", [writes], [start], axes=list(range(1, rank)))
    rows = _constant(
        g,
        f"{y}__rows",
        np.arange(length, dtype=np.int64).reshape([length if k == axis else 1 for k in range(rank)]),
        "int64",
    )
    position = f"{y}__position"
    g.stage(node, "add", [start, rows], [position])
    if mode == "circular":
        wrapped = f"{y}__wrapped"
        g.stage(node, "mod", [position, _constant(g, f"{y}__size", size, "int64")], [wrapped])
        position = wrapped
    target = [1 if k in (0, axis) else int(d) for k, d in enumerate(new)]
    target[axis] = length
    if any(d != 1 for k, d in enumerate(target) if k != axis):
        expanded = f"{y}__indices"
        g.stage(node, "expand", [position], [expanded], shape=target)
        position = expanded
    g.stage(node, "scatter_elements", [past, position, update], [y], axis=axis)


# -- MaxUnpool (opsets 9, 11, 22) ---------------------------------------------------------------------
def max_unpool(g: Any, node: Any) -> None:
    """MaxUnpool as onnx's reference computes it: X's values written at their indices into zeros of the
    inferred shape ``[N, C, (in - 1) * stride - pad_begin - pad_end + kernel, ...]``, flattened (the
    indices MaxPool gives: over the whole tensor), then zero-padded at the end of each dim to the
    output_shape input where it is given (which must be a constant, no smaller than the inferred shape).

    Stages: ``expand`` of a zero to the flat size, ``reshape`` of X and I to 1-d, ``scatter_elements``,
    ``reshape`` to the inferred shape (then ``expand`` + ``concat`` per padded dim). X's shape must be
    known. An index out of range: an error on the CPU (and in onnx's reference), nothing written on
    CUDA; duplicate indices keep one of their values (the reference the last)."""
    x, indices = node.inputs[:2]
    y = node.outputs[0]
    shape = _shape(g, x)
    if not _known(shape) or len(shape) < 3:
        raise _unsupported(
            f"MaxUnpool needs X's shape, every dim known, [N, C, spatial...] (got {_show(shape)})"
        )
    spatial = len(shape) - 2
    kernel = [int(k) for k in node.attrs["kernel_shape"]]
    strides = [int(s) for s in node.attrs.get("strides", [1] * spatial)]
    pads = [int(p) for p in node.attrs.get("pads", [0] * 2 * spatial)]
    if len(kernel) != spatial or len(strides) != spatial or len(pads) != 2 * spatial:
        raise _unsupported(
            f"MaxUnpool of a {spatial}-d X {_show(shape)}: kernel_shape {kernel}, strides {strides} and "
            f"pads {pads} must give {spatial} dims ({2 * spatial} pads)"
        )
    inferred = list(shape[:2]) + [
        (n - 1) * s - (pads[k] + pads[spatial + k]) + kk
        for k, (n, s, kk) in enumerate(zip(shape[2:], strides, kernel, strict=True))
    ]
    if min(inferred) < 1:
        raise _unsupported(f"MaxUnpool: the inferred output shape {inferred} has an empty dim")
    wanted = g.const(node, 2, "the output shape") if len(node.inputs) > 2 and node.inputs[2] else None
    if wanted is not None:
        wanted = [int(v) for v in np.asarray(wanted).reshape(-1)]
        if len(wanted) != len(shape) or any(w < i for w, i in zip(wanted, inferred, strict=True)):
            raise _unsupported(
                f"MaxUnpool output_shape {wanted} must have X's rank and be no smaller than the shape the "
                f"attributes give, {inferred} (onnx's reference places that shape's result at its start)"
            )
    given = _shape(g, indices)
    if given is not None and len(given) != len(shape):
        raise _unsupported(f"MaxUnpool indices {_show(given)} must have X's shape {_show(shape)}")
    dtype = _dtype(g, x)
    if dtype is None:
        raise _unsupported("MaxUnpool needs X's dtype")
    zero = _constant(g, f"{y}__zero", 0, dtype)
    flat_zeros, flat_x, flat_i, flat_y = (f"{y}__{tag}" for tag in ("zeros", "flat_x", "flat_i", "flat"))
    g.stage(node, "expand", [zero], [flat_zeros], shape=[math.prod(inferred)])
    g.stage(node, "reshape", [x], [flat_x], shape=[-1])
    g.stage(node, "reshape", [indices], [flat_i], shape=[-1])
    g.stage(node, "scatter_elements", [flat_zeros, flat_i, flat_x], [flat_y], axis=0)
    grown = [k for k, (w, i) in enumerate(zip(wanted or inferred, inferred, strict=True)) if w > i]
    cur = y if not grown else f"{y}__unpooled"
    g.stage(node, "reshape", [flat_y], [cur], shape=inferred)
    dims = list(inferred)
    for n, axis in enumerate(grown):
        block = [wanted[axis] - dims[axis] if k == axis else d for k, d in enumerate(dims)]
        pad, joined = f"{y}__pad{axis}", y if n == len(grown) - 1 else f"{y}__grown{axis}"
        g.stage(node, "expand", [zero], [pad], shape=block)
        g.stage(node, "concat", [cur, pad], [joined], axis=axis)
        cur, dims[axis] = joined, wanted[axis]


# -- MaxPool's Indices output -------------------------------------------------------------------------
def max_pool_with_indices(g: Any, node: Any, convert_max_pool: Any) -> None:
    """MaxPool with its Indices output (1-d, 2-d and 3-d windows): Y by the MaxPool converter
    (``convert_max_pool``, ``max_pool2d`` / ``max_pool3d``), and each output's index: the first tap of its
    window, in row-major window order, whose value is Y's (or, where Y is NaN, the first NaN), as a flat
    index over the whole input ``((n * C + c) * H + h) * W + w`` (3-d: ``(((n * C + c) * D + d) * H + h)
    * W + w``; storage_order 1: column major within the plane, ``(n * C + c) * H * W + w * H + h``, 3-d
    ``+ w * D * H + h * D + d``).

    Stages: the taps of every window gathered from X viewed ``[N, C, H*W]`` (``[N, C, D*H*W]``) by a
    constant table (``reshape``, ``gather``: ``[N, C, out..., taps]``); ``equal`` to Y (``unsqueeze``d),
    ``or`` ``is_nan`` for floats, ``and`` a constant mask of the taps inside the input (padding never
    wins); ``cast`` to uint8 and ``argmax`` (the first hit); the tap's input index by a ``gather`` of a
    constant table; plus the ``(n * C + c) * H * W`` offsets. X's shape must be known (the tables and
    the offsets are constants)."""
    x = node.inputs[0]
    y, out = node.outputs[:2]
    shape = _shape(g, x)
    if not _known(shape) or len(shape) not in (3, 4, 5):
        raise _unsupported(
            "the Indices output needs X's shape, every dim known, [N, C, L] or [N, C, H, W] or "
            f"[N, C, D, H, W] (got {_show(shape)})"
        )
    order = int(_attr(node, "storage_order", 0))
    if order not in (0, 1):
        raise _unsupported(
            f"attribute storage_order={order}; the spec has 0 (row major) and 1 (column major)"
        )
    n, c, *spatial = shape
    if math.prod(shape) > np.iinfo(np.int64).max:
        raise _unsupported(
            f"the Indices output of X {_show(shape)}: its flat indices are int64, and X has "
            f"{math.prod(shape)} elements, more than int64 counts"
        )
    _check_table("the Indices output's plane offsets (one per N, C)", (n, c), "int64")
    win = _pool_window(g, node, spatial)
    out_dims = win.out[1:] if len(spatial) == 1 else win.out
    taps, index, inside = _window_tables(win, spatial, order, out_dims)
    attrs = {k: v for k, v in node.attrs.items() if k != "storage_order"}  # it shapes the Indices alone
    convert_max_pool(g, Node(node.op_type, node.name, node.domain, node.inputs[:1], [y], attrs))
    base = f"{out}__argmax"
    flat_x, view, pooled = f"{base}_x", f"{base}_taps", f"{base}_y"
    g.stage(node, "reshape", [x], [flat_x], shape=[n, c, math.prod(spatial)])
    g.stage(node, "gather", [flat_x, _constant(g, f"{base}_tap_table", taps, "int64")], [view], axis=2)
    g.stage(node, "unsqueeze", [y], [pooled], axes=[len(shape)])
    hit = f"{base}_equal"
    g.stage(node, "equal", [view, pooled], [hit])
    if get_dtype(_dtype(g, x) or "float32").is_floating:
        nan, either = f"{base}_nan", f"{base}_hit"
        g.stage(node, "is_nan", [view], [nan])
        g.stage(node, "logical_or", [hit, nan], [either])
        hit = either
    if not inside.all():
        kept = f"{base}_inside"
        g.stage(node, "logical_and", [hit, _constant(g, f"{base}_mask", inside, "bool")], [kept])
        hit = kept
    first, tap = f"{base}_hits", f"{base}_first"
    g.stage(node, "cast", [hit], [first], dtype="uint8")
    g.stage(node, "argmax", [first], [tap], axis=-1, keepdims=False)
    # the tap's position in the flat table: its window's offset (a constant per output) plus the tap
    count = taps.shape[-1]
    offsets = np.arange(math.prod(out_dims), dtype=np.int64).reshape(out_dims) * count
    slot, local = f"{base}_slot", f"{base}_local"
    g.stage(node, "add", [tap, _constant(g, f"{base}_offsets", offsets, "int64")], [slot])
    g.stage(
        node,
        "gather",
        [_constant(g, f"{base}_index_table", index.reshape(-1), "int64"), slot],
        [local],
        axis=0,
    )
    planes = (np.arange(n * c, dtype=np.int64) * math.prod(spatial)).reshape([n, c] + [1] * len(spatial))
    g.stage(node, "add", [local, _constant(g, f"{base}_planes", planes, "int64")], [out])


def _pool_window(g: Any, node: Any, spatial: list[int]) -> Window:
    """MaxPool's resolved window: max_pool2d's or max_pool3d's own geometry (``window_nd``), a 1-d window
    as the 2-d one over a unit height (as the converter runs it)."""
    one_d = len(spatial) == 1
    kernel = list(node.attrs["kernel_shape"])
    if len(kernel) != len(spatial):
        raise _unsupported(f"MaxPool kernel_shape {kernel} for an input of {len(spatial)} spatial dims")
    attrs: dict[str, Any] = {}
    for name in ("kernel_shape", "strides", "dilations", "pads", "auto_pad", "ceil_mode"):
        if name not in node.attrs:
            continue
        value = _attr(node, name)
        if name in ("auto_pad", "ceil_mode"):
            attrs[name] = value if name == "auto_pad" else bool(value)
            continue
        value = [int(v) for v in value]
        if one_d:
            value = [0, value[0], 0, value[1]] if name == "pads" else [1, *value]
        attrs[name] = value
    op = f"max_pool{max(len(spatial), 2)}d"
    try:
        resolved = g.operators(op).resolve_attrs(attrs, where=f"MaxPool as {op}")
        sizes = (1, spatial[0]) if one_d else tuple(spatial)
        win = window_nd(
            sizes, tuple(resolved["kernel_shape"]), resolved, op="MaxPool", ceil_mode=resolved["ceil_mode"]
        )
    except PipeLinkError as e:
        raise _unsupported(e.message) from None
    return win


def _window_tables(
    win: Window, spatial: list[int], order: int, out: tuple
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per output position (``out``) and window tap (row-major): the tap's element of one plane (0 for a
    tap on the padding), its index as MaxPool's Indices give it (storage ``order``: 0 row major, 1
    column major), and whether it is inside the input."""
    sizes = (1, spatial[0]) if len(spatial) == 1 else tuple(spatial)
    rank, count = win.rank, math.prod(win.kernel)
    _check_table("the Indices output's tap index (per output and window tap)", (*out, count), "int64")
    # each axis's input position, shaped [*win.out, *win.kernel] by broadcasting
    positions = []
    for axis in range(rank):
        starts = np.arange(win.out[axis]) * win.strides[axis] - win.pads_begin[axis]
        offsets = np.arange(win.kernel[axis]) * win.dilations[axis]
        starts = starts.reshape([-1 if k == axis else 1 for k in range(2 * rank)])
        offsets = offsets.reshape([-1 if k == rank + axis else 1 for k in range(2 * rank)])
        positions.append(starts + offsets)
    positions = np.broadcast_arrays(*positions)
    inside = np.logical_and.reduce([(p >= 0) & (p < size) for p, size in zip(positions, sizes, strict=True)])
    if not inside.any(axis=tuple(range(rank, 2 * rank))).all():
        raise _unsupported("a MaxPool window lies wholly on the padding (it has no element to index)")
    row_major = sum(p * math.prod(sizes[axis + 1 :]) for axis, p in enumerate(positions))
    column_major = sum(p * math.prod(sizes[:axis]) for axis, p in enumerate(positions))
    taps = np.where(inside, row_major, 0).astype(np.int64)
    index = np.where(inside, row_major if order == 0 else column_major, 0).astype(np.int64)
    shape = (*out, count)
    return taps.reshape(shape), index.reshape(shape), inside.reshape(shape)
