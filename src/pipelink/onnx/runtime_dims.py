"""Expand and ConstantOfShape to a shape with dims known only when the model runs, dims of other tensors
(``cls_token.expand(batch, -1, -1)``, a mask of ones ``[batch, seq]``), and Range up to such a dim
(``arange(batch)``, which transformers' masks index with), lowered onto existing operators.

PipeLink's ``expand`` takes its target as an attribute, so a dim known only at run time can only be kept
where the input has it. Here such a dim is read from the tensor whose ``Shape`` the model took: a slice of
that tensor down to the one dim, viewed at the dim's place in the output, compared with itself gives a
bool tensor ``[1, .., D, .., 1]``, and ``where(mask, x, x)`` broadcasts x to it. The mask's values never
matter (both branches are x). A Range to the dim takes the same mask: ``where(mask, 1, 1)`` is a line of
ones as long as the dim, its exclusive running sum counts 0, 1, 2... Never guesses a dim: the source must
be a graph input or a tensor an earlier stage computed, else the node is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import get_dtype
from .fold import Dim, multiple_name, offset_name, product_name, split_multiple, split_offset, split_product
from .graph import Unsupported, shape_of

if TYPE_CHECKING:  # convert.py imports this module: the types only
    from .graph import Graph, Node

__all__ = [
    "RuntimeDimsError",
    "arange_to_dim",
    "broadcast_to_value",
    "named_output_shape",
    "read_as_data",
    "reshape_by_alignment",
    "shape_value_tensor",
    "split_by_gather",
]


class RuntimeDimsError(Exception):
    """Why a shape value cannot be broadcast to (the converter turns it into its refusal)."""


def _available(g: Graph, tensor: str) -> bool:
    """Whether ``tensor`` exists when the stage being made runs: a graph input, or an earlier stage's
    output (a tensor folded away, or inside a fused chain, does not)."""
    if tensor in g.inputs:
        return True
    name = g.names.get(tensor)
    return name is not None and any(name in stage["outputs"] for stage in g.stages)


def broadcast_to_value(g: Graph, node: Node, x: str, value: list, y: str) -> None:
    """Stages making ``y``: ``x`` broadcast to the shape value ``value`` (ints, and :class:`Dim` entries
    of tensors the model took the ``Shape`` of), as ONNX Expand does. An entry that is x's own dim (aligned
    from the right) stays x's.

    Raises
    ------
    RuntimeDimsError
        x's rank unknown, an entry whose source tensor is not available or whose dim x has as neither 1
        nor the same dim, or a value longer than x's rank would allow.
    """
    x_shape = shape_of(g, x)
    if x_shape is None:
        raise RuntimeDimsError("needs the input's rank to place the dims known only when the model runs")
    rank = max(len(value), len(x_shape))
    offset = rank - len(x_shape)
    static, probes = [], []
    for k, entry in enumerate(value):
        axis = k - offset + (rank - len(value))  # x's axis at output place k (value aligned right too)
        mine = x_shape[axis] if 0 <= axis < len(x_shape) else 1
        if isinstance(entry, int):
            static.append(entry)
        elif entry.same_as(x, axis, mine):
            static.append(1)
        elif mine != 1:
            raise RuntimeDimsError(
                f"entry {k} is a dim known only when the model runs, where the input's dim is {mine} "
                "(it broadcasts only from 1)"
            )
        else:
            static.append(1)
            probes.append((k + rank - len(value), entry))
    if not probes:
        raise RuntimeDimsError("no dim to take from another tensor")
    for _, dim in probes:  # every source checked before any stage is made
        _check_source(g, dim)
    masks = [_mask(g, node, y, place, rank, dim) for place, dim in probes]
    mask = masks[0]
    for k, other in enumerate(masks[1:], start=1):
        both = f"{y}__dims_{k}"
        g.stage(node, "logical_and", [mask, other], [both])
        mask = both
    source = x
    if len(static) > len(x_shape) or any(s != 1 for s in static):
        source = f"{y}__static"
        g.stage(node, "expand", [x], [source], shape=static)
    g.stage(node, "where", [mask, source, source], [y])


def arange_to_dim(g: Graph, node: Node, start: Any, limit: Any, delta: Any, dtype: str, y: str) -> None:
    """Stages making ``y``: ONNX Range from the constant ``start`` to ``limit``, a dim known only when the
    model runs (a :class:`Dim` of a tensor computed before this node), by the constant ``delta``, in
    ``dtype``: ``start + k * delta`` for ``k`` below ``ceil((limit - start) / delta)``.

    Raises
    ------
    RuntimeDimsError
        ``limit`` is no dim of an available tensor, or ``start`` is not a whole number >= 0 or ``delta``
        one >= 1 (the count is then no dim any tensor has).
    """
    if not isinstance(limit, Dim):
        raise RuntimeDimsError("its limit is neither a constant nor a dim of a tensor")
    whole = [v for v in (start, delta) if isinstance(v, int | float | np.number) and float(v).is_integer()]
    if len(whole) != 2 or start < 0 or delta < 1:
        raise RuntimeDimsError(
            f"a limit known only when the model runs needs a start that is a whole number >= 0 and a delta "
            f">= 1 (got start {start}, delta {delta})"
        )
    _check_source(g, limit)
    mask = _mask(g, node, y, 0, 1, limit)
    one = _scalar(g, f"{y}__one", 1, dtype)
    line = f"{y}__ones"
    g.stage(node, "where", [mask, one, one], [line])
    start, delta = int(start), int(delta)
    if start or delta != 1:  # the entries k*delta from start: the line sliced likewise, then scaled
        kept = f"{y}__kept"
        g.stage(node, "slice", [line], [kept], starts=[start], ends=[2**62], axes=[0], steps=[delta])
        line = kept
    counted = y if not start and delta == 1 else f"{y}__count"
    g.stage(node, "cumsum", [line], [counted], axis=0, exclusive=True)
    if counted == y:
        return
    g.stage(node, "mul", [counted, _scalar(g, f"{y}__delta", delta, dtype)], [f"{y}__scaled"])
    g.stage(node, "add", [f"{y}__scaled", _scalar(g, f"{y}__start", start, dtype)], [y])


def _scalar(g: Graph, name: str, value: int, dtype: str) -> str:
    """``name``, now a constant ``value`` (a scalar, or a list: 1-d) of ``dtype``."""
    array = np.asarray(value, get_dtype(dtype).numpy)
    g.constants[name], g.shapes[name], g.dtypes[name] = array, array.shape, dtype
    return name


def _source_of(g: Graph, dim: Dim) -> tuple[Dim, int]:
    """``(the dim a tensor has, factor)``: ``dim`` itself (1), or the dim it is a multiple of (``4*batch``:
    batch's, 4); a dim the import named by arithmetic alone (``(4*batch) // 4`` is ``batch``) is the dim
    of that name of a graph input."""
    if dim.tensor is None and dim.base is not None and dim.base.tensor is not None and dim.factor >= 1:
        return dim.base, dim.factor
    if dim.tensor is None and dim.name is not None:
        factor, name = split_multiple(dim.name)
        for tensor in sorted(g.inputs):
            shape = g.shapes.get(tensor) or ()
            if name in shape:
                return Dim(name, tensor, list(shape).index(name)), factor
    return dim, 1


def _check_source(g: Graph, dim: Dim) -> None:
    own, _ = _source_of(g, dim)
    source = own.tensor
    if source is None or own.axis is None or g.shapes.get(source) is None or not _available(g, source):
        raise RuntimeDimsError(
            f"the dim {dim.name or '?'} is known only when the model runs and no tensor computed before "
            "this node has it"
        )


def _mask(g: Graph, node: Node, y: str, place: int, rank: int, dim: Dim) -> str:
    """A bool tensor of rank ``rank``, all 1s but ``dim`` at ``place``: its source tensor sliced down to
    that dim (repeated ``factor`` times for a multiple of it), viewed there, compared with itself."""
    own, factor = _source_of(g, dim)
    source, axis = own.tensor, own.axis
    others = [a for a in range(len(g.shapes[source])) if a != axis]
    line = source
    if others:
        line = f"{y}__dim{place}_line"
        starts, ends = [0] * len(others), [1] * len(others)
        g.stage(node, "slice", [source], [line], starts=starts, ends=ends, axes=others)
    if factor != 1:  # [n] viewed as [n, 1], broadcast to [n, factor]: n * factor entries
        g.stage(node, "reshape", [line], [f"{y}__dim{place}_col"], shape=[-1, 1])
        g.stage(node, "expand", [f"{y}__dim{place}_col"], [f"{y}__dim{place}_rep"], shape=[1, factor])
        line = f"{y}__dim{place}_rep"
    view = f"{y}__dim{place}_view"
    g.stage(node, "reshape", [line], [view], shape=[-1 if k == place else 1 for k in range(rank)])
    mask = f"{y}__dim{place}_mask"
    g.stage(node, "equal", [view, view], [mask])
    return mask


def named_output_shape(g: Graph, node: Node, names: set[str]) -> tuple | None:
    """:func:`_named_output_shape`, kept only where every int is a dim an ONNX shape can hold (a hostile
    repeat or view makes others)."""
    shape = _named_output_shape(g, node, names)
    if shape is None or any(isinstance(d, int) and not 0 <= d < 2**63 for d in shape):
        return None
    return shape


def _named_output_shape(g: Graph, node: Node, names: set[str]) -> tuple | None:
    """The output shape of a node reading a shape value whose dims known only at run time are named by a
    graph input's ``dim_param`` in ``names`` (``batch``), for the import's shape inference to carry past
    it (onnx gives such an output fresh dims): an Expand or ConstantOfShape (ints and those names; None
    when an entry is unnamed or the broadcast is not clear at import), a Range from 0 to such a dim by 1,
    a Reshape (its named entries; None for the dim it infers and other unknowns, and no shape at all
    when no entry is named), and a Resize to sizes the model computes (DETR's mask resized to its
    feature map at a dynamic batch: the entries that are the input's own dims keep them), and a Tile by
    such repeats (``query.repeat(batch, 1, 1)``) or by constant ones (a named dim repeated once keeps its
    name: GPT-J's rotary tables at a dynamic sequence), and a Slice from 0 to such a dim
    (``position_ids[:, :seq]``)."""
    if node.op_type == "Reshape" and len(node.inputs) == 2:
        return _reshape_shape(g, node, names)
    if node.op_type == "Resize" and len(node.inputs) == 4 and "axes" not in node.attrs:
        return _resize_shape(g, node, names)
    if node.op_type == "Tile" and len(node.inputs) == 2:
        return _tile_shape(g, node, names)
    if node.op_type == "Slice" and len(node.inputs) >= 3:
        return _slice_shape(g, node, names)
    if node.op_type == "Range" and len(node.inputs) == 3:
        limit = g.symbolic.get(node.inputs[1])
        ends = [np.asarray(g.constants.get(n, np.nan)).reshape(-1) for n in (node.inputs[0], node.inputs[2])]
        if isinstance(limit, Dim) and limit.name in names and [e.tolist() for e in ends] == [[0], [1]]:
            return (limit.name,)
        return None
    if node.op_type not in ("Expand", "ConstantOfShape") or not node.inputs:
        return None
    value = g.symbolic.get(node.inputs[-1] if node.op_type == "Expand" else node.inputs[0])
    if not isinstance(value, list) or len(node.inputs) != (2 if node.op_type == "Expand" else 1):
        return None
    x = node.inputs[0]
    if node.op_type == "ConstantOfShape":
        x_shape: tuple = ()
    else:
        x_shape = shape_of(g, x)
    if x_shape is None or len(x_shape) > len(value):
        return None
    x_dims = (1,) * (len(value) - len(x_shape)) + tuple(x_shape)
    out = []
    for entry, mine in zip(value, x_dims, strict=True):
        wanted = entry if isinstance(entry, int) else entry.name
        if not isinstance(entry, int) and not _named(wanted, names):  # a named dim, or a multiple of one
            return None
        if wanted == 1:
            out.append(mine)
        elif mine in (1, wanted):
            out.append(wanted)
        else:
            return None
    return tuple(out)


def _reshape_shape(g: Graph, node: Node, names: set[str]) -> tuple | None:
    """A Reshape's output dims: its named entries (a shape value's, or the input's copied by 0) and the
    one it infers (-1) by the element count where the named dims leave one, as a multiple of it
    (``view(-1, window, window, c)`` of ``[batch, 4 * window, 4 * window, c]`` is ``16*batch``)."""
    x_shape = g.shapes.get(node.inputs[0])
    value = g.symbolic.get(node.inputs[1])
    target = np.asarray(g.constants.get(node.inputs[1], np.zeros((0, 0))))
    if value is None and target.ndim == 1 and target.dtype.kind in "iu":
        value = [int(v) for v in target]  # a malformed target is refused by the converter
    if not isinstance(value, list) or x_shape is None:
        return None
    if node.attrs.get("allowzero", 0) and any(not isinstance(e, int) or e == 0 for e in value):
        return None  # allowzero matters only for a 0 (torch.export writes it on every view)
    out: list = []
    for k, entry in enumerate(value):
        if isinstance(entry, Dim):
            own = k < len(x_shape) and entry.same_as(node.inputs[0], k, x_shape[k])
            product = entry.product()  # a named dim, or a multiple of one (``4*batch``)
            named = product is not None and _named(product[1], names)
            out.append(x_shape[k] if own else multiple_name(*product) if named else None)
        elif entry == 0:
            out.append(x_shape[k] if k < len(x_shape) else None)
        else:
            out.append(entry if entry > 0 else None)
    if out.count(None) == 1:
        out[out.index(None)] = _left_over(x_shape, [d for d in out if d is not None], names)
    return tuple(out) if any(_named(d, names) for d in out) else None


def _resize_shape(g: Graph, node: Node, names: set[str]) -> tuple | None:
    value, x_shape = g.symbolic.get(node.inputs[3]), g.shapes.get(node.inputs[0])
    if not isinstance(value, list) or x_shape is None or len(value) != len(x_shape):
        return None
    out: list = []
    for k, entry in enumerate(value):
        if isinstance(entry, int):
            out.append(entry)
        elif entry.same_as(node.inputs[0], k, x_shape[k]):
            out.append(x_shape[k])
        else:
            out.append(entry.name if entry.name in names else None)
    return tuple(out) if any(_named(d, names) for d in out) else None


def _tile_shape(g: Graph, node: Node, names: set[str]) -> tuple | None:
    value = g.symbolic.get(node.inputs[1])
    repeats = np.asarray(g.constants.get(node.inputs[1], np.zeros((0, 0))))
    if value is None and repeats.ndim == 1 and repeats.dtype.kind in "iu":
        value = [int(r) for r in repeats]  # constant repeats: ONNX gives a named dim repeated once a new name
    x = node.inputs[0]
    x_shape = shape_of(g, x)
    if not isinstance(value, list) or x_shape is None or len(value) != len(x_shape):
        return None
    out: list = []
    for entry, mine in zip(value, x_shape, strict=True):
        if isinstance(entry, int):
            out.append(mine * entry if isinstance(mine, int) else mine if entry == 1 else None)
        else:
            product = entry.product()  # a count of a dim of 1, or of a known dim (its multiple)
            named = isinstance(mine, int) and product is not None and _named(product[1], names)
            out.append(0 if mine == 0 else multiple_name(product[0] * mine, product[1]) if named else None)
    return tuple(out) if any(_named(d, names) for d in out) else None


def _named(d: Any, names: set[str]) -> bool:
    """Whether ``d`` is a graph input's dim in ``names``, or a product of them, or one less an int, that
    the import named."""
    return isinstance(d, str) and all(split_offset(n)[0] in names for n in split_product(d)[1])


def _slice_shape(g: Graph, node: Node, names: set[str]) -> tuple | None:
    """A Slice to an end known only at run time (from 0: that dim), or by constants of a named dim: its
    size less what the start and a negative end take (``input_ids[:, :-1]`` of ``seq`` is ``seq-1``, a
    name two such slices share)."""
    x = node.inputs[0]
    x_shape = shape_of(g, x)
    consts = [g.constants.get(n) if n else None for n in (node.inputs[1:5] + [""] * 4)[:4]]
    starts, ends_const, axes, steps = (None if c is None else np.asarray(c).reshape(-1) for c in consts)
    ends = g.symbolic.get(node.inputs[2])
    if x_shape is None or starts is None or starts.dtype.kind not in "iu":
        return None
    axes = np.arange(len(starts)) if axes is None else axes
    if len(axes) != len(starts) or (steps is not None and any(int(v) != 1 for v in steps)):
        return None
    out = list(x_shape)
    for k, (start, axis) in enumerate(zip(starts.tolist(), axes.tolist(), strict=True)):
        axis %= max(len(x_shape), 1)
        if isinstance(ends, list):  # a run-time end: from 0 only, the end's dim
            end = ends[k] if len(ends) == len(starts) else None
            if start != 0 or not isinstance(end, Dim) or end.name not in names:
                return None
            out[axis] = end.name
            continue
        if (
            ends_const is None
            or not isinstance(x_shape[axis], str)
            or x_shape[axis] not in names
            or start < 0
        ):
            return None
        end = int(ends_const[k])
        taken = start + (-end if end < 0 else 0)
        if end >= 0 and end < 2**62:  # an end from the front: min(dim, end) - start, no name for it
            return None
        out[axis] = offset_name(x_shape[axis], taken)
    return tuple(out) if any(_named(d, names) for d in out) else None


def _left_over(x_shape: tuple, known: list, names: set[str]) -> int | str | None:
    """What the element count of ``x_shape`` leaves for one more dim beside ``known`` (ints and names):
    an int, a product of named dims (``16*batch``, ``batch*seq``), or None (an unknown dim, or no whole
    left-over)."""
    have, want = _monomial(x_shape, names), _monomial(known, names)
    if have is None or want is None or want[0] <= 0 or have[0] % want[0]:
        return None
    rest = list(have[1])
    for name in want[1]:
        if name not in rest:
            return None
        rest.remove(name)
    return product_name(have[0] // want[0], rest) if rest else have[0] // want[0]


_INFERRED = object()  # a Reshape entry known only as what the element count leaves (-1, or an unknown dim)


def _monomial(dims, names: set[str] | None = None) -> tuple[int, list[str]] | None:
    """The product of ``dims`` (ints, names, products of names; of ``names`` only, when given): its int
    factor and its names; None when one is unknown."""
    factor, found = 1, []
    for d in dims:
        if isinstance(d, int):
            factor *= d
        elif isinstance(d, str) and (names is None or _named(d, names)):
            f, more = split_product(d)
            factor, found = factor * f, [*found, *more]
        else:
            return None
    return factor, sorted(found)


def reshape_by_alignment(g: Graph, node: Node, y: str) -> bool:
    """Stages making ``y``: a Reshape whose computed target has two or more entries known only at run time
    that are not the input's own dims at the same place, when its tail is the input's tail moved along
    (the same dims, by name or value) and what precedes it holds at most one such entry: the input's dims
    before the tail are merged (``flatten``; or, a tail of two run-time dims, with the tail moved to the
    front and back by ``transpose`` copies) or given unit dims (``unsqueeze``) so the tail lines up with
    the target's, and one ``reshape`` copies it (0s) and infers the one entry (-1). ``view(-1, seq, 16)``
    of ``[batch, 4, seq, 16]`` (heads merged into the batch) and ``view(batch, 4, 16, seq)`` of
    ``[4*batch, 16, seq]`` are the two moves. False (nothing made) when the target does not align."""
    value, x = g.symbolic.get(node.inputs[1]), node.inputs[0]
    x_shape = g.shapes.get(x)
    if not isinstance(value, list) or x_shape is None or any(d is None for d in x_shape):
        return False
    if node.attrs.get("allowzero", 0) and any(isinstance(e, int) and e == 0 for e in value):
        return False
    if any(isinstance(e, int) and (e < -1 or (e == 0 and k >= len(x_shape))) for k, e in enumerate(value)):
        return False  # a malformed target: the reshape rule says why
    wanted = []  # each entry as a dim: an int, a name, or _INFERRED
    for k, entry in enumerate(value):
        if isinstance(entry, int):
            wanted.append(
                _INFERRED if entry == -1 else x_shape[k] if entry == 0 and k < len(x_shape) else entry
            )
        elif k < len(x_shape) and entry.same_as(x, k, x_shape[k]):
            wanted.append(x_shape[k])
        else:
            product = entry.product()
            wanted.append(multiple_name(*product) if product is not None else _INFERRED)
    for tail in range(min(len(wanted), len(x_shape)) - 1, 0, -1):  # the longest tail that lines up
        k, i = len(wanted) - tail, len(x_shape) - tail
        moved = wanted[k:]
        if any(w is not _INFERRED and w != d for w, d in zip(moved, x_shape[i:], strict=True)):
            continue
        head = wanted[:k]
        if _INFERRED in moved:  # the -1 is the input's dim there only if the heads have one product
            if (
                moved.count(_INFERRED) > 1
                or _monomial(head) is None
                or _monomial(head) != _monomial(x_shape[:i])
            ):
                continue
        elif sum(not isinstance(d, int) for d in head) > 1:
            continue
        head_target = [d if isinstance(d, int) else -1 for d in head]
        if i <= k:  # unit dims after the head, so the tail sits where the target has it
            source = x
            if k > i:
                source = f"{y}__aligned"
                g.stage(node, "unsqueeze", [x], [source], axes=list(range(i, k)))
            g.stage(node, "reshape", [source], [y], shape=head_target + [0] * tail, allowzero=False)
            return True
        symbolic_tail = [d for d in x_shape[i:] if not isinstance(d, int)]
        if k == 1 and len(symbolic_tail) <= 1:  # the head merged into one dim, the tail split back
            flat = f"{y}__merged"
            g.stage(node, "flatten", [x], [flat], axis=i)
            g.stage(
                node,
                "reshape",
                [flat],
                [y],
                shape=[0] + [d if isinstance(d, int) else -1 for d in x_shape[i:]],
                allowzero=False,
            )
            return True
        # the tail moved to the front (a copy), where the head's merge copies it with 0s, and back
        rank = len(x_shape)
        front = f"{y}__tail_first"
        g.stage(node, "transpose", [x], [front], perm=[*range(i, rank), *range(i)])
        merged = f"{y}__merged"
        g.stage(node, "reshape", [front], [merged], shape=[0] * tail + head_target, allowzero=False)
        g.stage(node, "transpose", [merged], [y], perm=[*range(tail, tail + k), *range(tail)])
        return True
    return False


def split_by_gather(g: Graph, node: Node, y: str) -> bool:
    """Stages making ``y``: a Reshape splitting its input's dim 0, a product of run-time dims the import
    named (``batch*seq``: a view to ``[-1, n]`` made it), back into those dims (``[batch, seq, n]``, GPT-2's
    ``Conv1D``): no reshape target with one -1 says it, so the rows are gathered instead, by the index grid
    ``[batch, seq]`` (the ones broadcast to the dims, their exclusive running sums along each axis times
    the counts after it); unit dims between them (``[batch, 1, 1, seq]``, a mask) are unsqueezed after.
    False (nothing made) when the target is not such a split."""
    value, x = g.symbolic.get(node.inputs[1]), node.inputs[0]
    x_shape = g.shapes.get(x)
    if not isinstance(value, list) or not x_shape or not isinstance(x_shape[0], str):
        return False
    head = len(value) - (len(x_shape) - 1)  # the entries x's dim 0 splits into; x's other dims follow
    if head < 2 or list(value[head:]) != list(x_shape[1:]):
        return False
    dims = [d for d in value[:head] if isinstance(d, Dim)]
    units = [k for k, d in enumerate(value[:head]) if not isinstance(d, Dim)]  # unit dims between: 1s
    lead = len(dims)
    if lead < 2 or any(value[k] != 1 for k in units) or any(d.name is None for d in dims):
        return False
    if split_product(x_shape[0]) != (1, sorted(d.name for d in dims)):  # the split of the product named
        return False
    for dim in dims:
        try:
            _check_source(g, dim)
        except RuntimeDimsError:
            return False
    one = _scalar(g, f"{y}__one", 1, "int64")
    ones = f"{y}__grid_ones"
    broadcast_to_value(g, node, one, list(dims), ones)
    index = None
    for axis in range(lead):
        counted = f"{y}__grid{axis}"
        g.stage(node, "cumsum", [ones], [counted], axis=axis, exclusive=True)
        if axis < lead - 1:  # times the count of the entries after it: the sum of the ones over them
            after = f"{y}__after{axis}"
            g.stage(node, "reduce_sum", [ones], [after], axes=list(range(axis + 1, lead)), keepdims=True)
            scaled = f"{y}__stride{axis}"
            g.stage(node, "mul", [counted, after], [scaled])
            counted = scaled
        if index is not None:
            total = f"{y}__index{axis}"
            g.stage(node, "add", [index, counted], [total])
            counted = total
        index = counted
    if not units:
        g.stage(node, "gather", [x, index], [y], axis=0)
        return True
    g.stage(node, "gather", [x, index], [f"{y}__rows"], axis=0)
    g.stage(node, "unsqueeze", [f"{y}__rows"], [y], axes=units)
    return True


def shape_value_tensor(g: Graph, node: Node, name: str) -> str:
    """The ONNX name of a tensor, made by stages before ``node``'s, holding the shape value ``name`` as
    data (``batch_idx * seq``: transformers' masks compute with dims): each dim counted along its source
    tensor (the ones of its probe, summed), times its factor, the ints as constants, concatenated (a 0-d
    value viewed as a scalar), in the value's dtype.

    Raises
    ------
    RuntimeDimsError
        An entry no earlier tensor has as a dim.
    """
    value = g.symbolic[name]
    entries = value if isinstance(value, list) else [value]
    dims = []
    for entry in entries:
        base, factor = (
            (entry.base, entry.factor) if isinstance(entry, Dim) and entry.base is not None else (entry, 1)
        )
        if isinstance(entry, Dim):
            _check_source(g, base)
        dims.append((base, factor))
    one = _scalar(g, f"{name}__value_one", 1, "int64")
    parts = []
    for k, (dim, factor) in enumerate(dims):
        part = f"{name}__value{k}"
        if isinstance(dim, int):
            _scalar(g, part, [dim], "int64")
        else:
            mask = _mask(g, node, part, 0, 1, dim)
            g.stage(node, "where", [mask, one, one], [f"{part}_ones"])
            g.stage(node, "reduce_sum", [f"{part}_ones"], [part], axes=[0], keepdims=True)
            if factor != 1:
                scale = _scalar(g, f"{part}_factor", factor, "int64")
                g.stage(node, "mul", [part, scale], [f"{part}_scaled"])
                part = f"{part}_scaled"
        parts.append(part)
    out = parts[0]
    if len(parts) > 1:
        out = f"{name}__value"
        g.stage(node, "concat", parts, [out], axis=0)
    if not isinstance(value, list):
        g.stage(node, "reshape", [out], [f"{name}__scalar"], shape=[], allowzero=False)
        out = f"{name}__scalar"
    dtype = g.dtypes.get(name) or "int64"
    if dtype != "int64":
        g.stage(node, "cast", [out], [f"{name}__as_{dtype}"], dtype=dtype)
        out = f"{name}__as_{dtype}"
    return out


def read_as_data(g: Graph, node: Node, name: str) -> str:
    """:func:`shape_value_tensor`, for :meth:`Graph.tensor` (the import gives it to the graph): a dim no
    earlier tensor has is the reading node's refusal."""
    try:
        return shape_value_tensor(g, node, name)
    except RuntimeDimsError as why:
        raise Unsupported(
            f"input {name!r} is a shape the model computes from dims known only when it runs, read as data: "
            f"{why} (export with fixed shapes, or constant-fold the model)"
        ) from None
