"""ONNX sliding-window converters: Conv, ConvTranspose, DeformConv, MaxPool, AveragePool, LpPool and the
global pools; a 1-d window runs as the 2-d one over a unit height; Conv, ConvTranspose and the pools also
slide 3-d windows (``conv3d``, ``conv_transpose3d``, ``max_pool3d``, ``avg_pool3d``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..ops.conv.reference import conv_name, conv_transpose_name
from .convert_common import Converter, _attr, _inputs, _only, _scalar
from .graph import Graph, Node, Unsupported
from .lowerings import max_pool_with_indices

__all__ = ["conv2d_stage", "conv_stage"]


def _global_max_pool(g: Graph, node: Node) -> None:
    """ONNX GlobalMaxPool: ``reduce_max`` over every spatial dim, kept."""
    shape = g.shapes.get(node.inputs[0])
    if shape is None or len(shape) < 3:
        raise Unsupported("GlobalMaxPool needs its input's rank (N, C and at least one spatial dim)")
    g.stage(
        node, "reduce_max", node.inputs[:1], node.outputs[:1], axes=list(range(2, len(shape))), keepdims=True
    )


def _spatial_attrs(node: Node, names: tuple[str, ...]) -> dict[str, Any]:
    """The window attributes ``names`` the node gives (ints, or auto_pad's string)."""
    attrs: dict[str, Any] = {}
    for name in names:
        if name in node.attrs:
            value = _attr(node, name)
            attrs[name] = value if isinstance(value, str) else [int(v) for v in value]
    return attrs


_POOL_RANKS = (2, 3)  # max_pool2d / avg_pool2d and max_pool3d / avg_pool3d; 1-d runs as 2-d


def _pool_window(node: Node) -> tuple[int, dict[str, Any]]:
    """The number of spatial axes of a MaxPool, AveragePool or LpPool window (its kernel_shape's length)
    and the attributes its pool operator takes.

    Raises
    ------
    Unsupported
        No kernel_shape, or one of a rank PipeLink has no pool of (more than 3 spatial axes).
    """
    kernel = node.attrs.get("kernel_shape")
    if kernel is None:
        raise Unsupported(f"{node.op_type} needs its kernel_shape")
    rank = len(kernel)
    if rank not in _POOL_RANKS:
        raise Unsupported(
            f"a {rank}-d window (kernel_shape {list(kernel)}); PipeLink's pools are 1-d, 2-d and 3-d"
        )
    return rank, _spatial_attrs(node, ("kernel_shape", "strides", "pads", "dilations", "auto_pad"))


_CONV_RANKS = (1, 2, 3)  # conv2d / conv3d (and the transposed ones); 1-d runs as 2-d


def _conv_rank(g: Graph, node: Node) -> int:
    """The number of spatial axes of a Conv or ConvTranspose node, from what the import knows of its
    kernel_shape, its weight's rank and its input's rank (2 when it knows none: the 2-d operator's ports
    then check the rank at load).

    Raises
    ------
    Unsupported
        These disagree, or give a rank PipeLink has no convolution of (more than 3 spatial axes).
    """
    known = {}
    kernel = node.attrs.get("kernel_shape")
    if kernel is not None:
        known["kernel_shape"] = len(kernel)
    for port, name in ((1, "w"), (0, "x")):
        shape = _shape_of(g, node.inputs[port]) if len(node.inputs) > port and node.inputs[port] else None
        if shape is not None:
            known[f"{name} (rank {len(shape)})"] = len(shape) - 2
    ranks = set(known.values())
    if len(ranks) > 1:
        said = ", ".join(f"{what}: {rank}" for what, rank in known.items())
        raise Unsupported(f"its kernel_shape, w and x disagree on the number of spatial axes ({said})")
    rank = ranks.pop() if ranks else 2
    if rank not in _CONV_RANKS:
        kind = "convolution" if node.op_type == "Conv" else "transposed convolution"
        raise Unsupported(f"a {rank}-d {kind}; PipeLink's are 1-d, 2-d and 3-d")
    return rank


def _shape_of(g: Graph, name: str) -> tuple | None:
    """A tensor's shape as the import knows it: a constant's, else the inferred one (None: unknown)."""
    value = g.constants.get(name)
    if value is not None:
        return tuple(value.shape)
    shape = g.shapes.get(name)
    return None if shape is None else tuple(shape)


def _conv_attrs(g: Graph, node: Node, rank: int, names: tuple[str, ...]) -> dict[str, Any]:
    """The window attributes ``names`` of a Conv or ConvTranspose node over ``rank`` spatial axes (and
    its group), each checked to give every spatial axis (pads: each begin, then each end), its
    kernel_shape to be w's spatial dims where the import knows them.

    Raises
    ------
    Unsupported
        An attribute of another length, a kernel_shape other than w's.
    """
    attrs = _spatial_attrs(node, names)
    for name in (*names, "kernel_shape"):
        given = attrs.get(name, node.attrs.get(name))
        if isinstance(given, str) or given is None:
            continue
        count = 2 * rank if name == "pads" else rank
        if len(given) != count:
            spread = "a begin and an end for each of the" if name == "pads" else "the"
            raise Unsupported(f"attribute {name}={list(given)} must give {spread} {rank} spatial dims")
    kernel, w_shape = node.attrs.get("kernel_shape"), _shape_of(g, node.inputs[1])
    w_kernel = [] if w_shape is None else list(w_shape[2:])
    known = kernel is not None and w_shape is not None and all(isinstance(d, int) for d in w_kernel)
    if known and [int(k) for k in kernel] != w_kernel:
        raise Unsupported(
            f"attribute kernel_shape={list(kernel)} must be the weight's spatial dims {w_kernel}"
        )
    if int(_attr(node, "group", 1)) != 1:
        attrs["group"] = int(_attr(node, "group"))
    return attrs


def conv_stage(g: Graph, node: Node) -> tuple[str, list[str], dict[str, Any]]:
    """The operator (``conv2d`` or ``conv3d``), inputs and attributes of the stage of an ONNX Conv node of
    2 or 3 spatial axes.

    Raises
    ------
    Unsupported
        A 1-d window (its converter runs it as the 2-d one) or one of more than 3 axes, bad attribute
        lengths, an absent input before a present one.
    """
    rank = _conv_rank(g, node)
    if rank == 1:
        raise Unsupported("a 1-d convolution has no stage of its own (the Conv converter runs it as 2-d)")
    attrs = _conv_attrs(g, node, rank, ("strides", "pads", "dilations", "auto_pad"))
    return conv_name(rank), _inputs(node, 3), attrs


def conv2d_stage(g: Graph, node: Node) -> tuple[list[str], dict[str, Any]]:
    """The inputs and attributes of the conv2d stage of an ONNX Conv node (also for the import's Conv +
    Relu fusion, onnx/fuse.py, and the integer convolutions).

    Raises
    ------
    Unsupported
        A window other than 2-d, an absent input before a present one.
    """
    rank = _conv_rank(g, node)
    if rank != 2:
        raise Unsupported(
            f"a {rank}-d convolution where a conv2d stage is needed (the fused and integer convolutions "
            "are 2-d)"
        )
    _, inputs, attrs = conv_stage(g, node)
    return inputs, attrs


def _conv(g: Graph, node: Node) -> None:
    if _conv_rank(g, node) == 1:
        _as_2d(g, node, _conv)
        return
    op, inputs, attrs = conv_stage(g, node)
    g.stage(node, op, inputs, node.outputs[:1], **attrs)


def _deform_conv(g: Graph, node: Node) -> None:
    """DeformConv-19/22 (2-d). kernel_shape, when given, must be w's. With w's shape and the output's
    spatial dims known at import: ``deform_im2col`` (the sampled columns ``[N, C * kH * kW, H_out *
    W_out]``), ``matmul`` by w seen as ``[group, M / group, C / group * kH * kW]`` (cuBLASLt on CUDA),
    ``reshape`` views and the bias ``add``; else one ``deform_conv2d`` stage (its direct kernel), where a
    mask without a bias gets a zero bias constant (the operator's optional ports are positional).

    Raises
    ------
    Unsupported
        A window other than 2-d, a kernel_shape other than w's, a mask without a bias and w's shape
        unknown at import.
    """
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    weight = g.constants.get(w)
    w_shape = tuple(weight.shape) if weight is not None else g.shapes.get(w)
    for what, shape in (("x", g.shapes.get(x)), ("w", w_shape)):
        if shape is not None and len(shape) != 4:
            raise Unsupported(
                f"DeformConv's {what} has rank {len(shape)}; PipeLink's deform_conv2d is 2-d (rank 4)"
            )
    known = w_shape is not None and all(isinstance(d, int) for d in w_shape)
    kernel = node.attrs.get("kernel_shape")
    if kernel is not None and (len(kernel) != 2 or (known and tuple(w_shape[2:]) != tuple(kernel))):
        raise Unsupported(
            f"attribute kernel_shape={list(kernel)} must be the weight's spatial dims "
            f"({list(w_shape[2:]) if known else 'unknown'})"
        )
    attrs = _spatial_attrs(node, ("strides", "pads", "dilations"))
    for name in ("group", "offset_group"):
        if int(_attr(node, name, 1)) != 1:
            attrs[name] = int(_attr(node, name))
    bias, mask = (node.inputs[k] if len(node.inputs) > k else "" for k in (3, 4))
    out_hw = tuple((g.shapes.get(node.inputs[2]) or ())[2:])
    if known and len(out_hw) == 2 and all(isinstance(d, int) for d in out_hw):
        _deform_as_product(g, node, w_shape, out_hw, attrs, bias, mask)
        return
    if mask and not bias:
        dtype = g.dtypes.get(x)
        if not known or dtype is None:
            raise Unsupported("a DeformConv mask without a bias needs w's shape and x's dtype at import")
        bias = f"{y}__zero_bias"
        g.constants[bias] = np.zeros(w_shape[0], get_dtype(dtype).numpy)
        g.dtypes[bias] = dtype
    inputs = _inputs(node, 3) + [name for name in (bias, mask) if name]
    g.stage(node, "deform_conv2d", inputs, node.outputs[:1], **attrs)


def _deform_as_product(
    g: Graph, node: Node, w_shape: tuple, out_hw: tuple, attrs: dict, bias: str, mask: str
):
    """DeformConv as its columns times w (see :func:`_deform_conv`)."""
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    m, per_group, kh, kw = w_shape
    group = attrs.get("group", 1)
    sampling = {k: v for k, v in attrs.items() if k != "group"}
    cols = f"{y}__columns"
    g.stage(
        node,
        "deform_im2col",
        [x, node.inputs[2], *([mask] if mask else [])],
        [cols],
        kernel_shape=[kh, kw],
        **sampling,
    )
    # w as [M, C * kH * kW] (one group) or [group, M / group, C / group * kH * kW], the columns to match
    matrix = [m, per_group * kh * kw] if group == 1 else [group, m // group, per_group * kh * kw]
    weights = _reshaped(g, node, w, f"{y}__w_matrix", matrix)
    if group != 1:
        g.stage(node, "reshape", [cols], [f"{cols}_grouped"], shape=[0, group, -1, out_hw[0] * out_hw[1]])
        cols = f"{cols}_grouped"
    g.stage(node, "matmul", [weights, cols], [f"{y}__product"])
    unbiased = f"{y}__unbiased" if bias else y
    g.stage(node, "reshape", [f"{y}__product"], [unbiased], shape=[0, m, *out_hw])
    if bias:
        g.stage(node, "add", [unbiased, _reshaped(g, node, bias, f"{y}__bias_column", [m, 1, 1])], [y])


def _reshaped(g: Graph, node: Node, name: str, new: str, shape: list) -> str:
    """``name`` under ``shape``: a constant reshaped at import, else a ``reshape`` stage (a view)."""
    value = g.constants.get(name)
    if value is None:
        g.stage(node, "reshape", [name], [new], shape=shape)
    else:
        g.constants[new] = value.reshape(shape)
        g.dtypes[new] = g.dtypes.get(name) or get_dtype(value.dtype).name
    return new


def _is_1d(g: Graph, node: Node) -> bool:
    """Whether a MaxPool, AveragePool or LpPool node slides a 1-d window (``[N, C, L]``; Conv and
    ConvTranspose: :func:`_conv_rank`)."""
    kernel = node.attrs.get("kernel_shape")
    if kernel is not None:
        return len(kernel) == 1
    shape = g.shapes.get(node.inputs[0])
    return shape is not None and len(shape) == 3


def _as_2d(g: Graph, node: Node, convert_2d: Converter) -> None:
    """A 1-d window node run as the 2-d one over a unit height: x ``[N, C, L]`` unsqueezed to
    ``[N, C, 1, L]`` (a view), the window attributes given a leading unit axis (kernel ``[1, k]``, pads
    ``[0, p0, 0, p1]``, a ConvTranspose's output_padding ``[0, p]``), a Conv's or ConvTranspose's
    constant weight ``[A, B, k]`` reshaped to ``[A, B, 1, k]`` (else unsqueezed by a stage), and the
    result squeezed back."""
    y = node.outputs[0]
    attrs = dict(node.attrs)
    for name in ("kernel_shape", "strides", "dilations", "output_padding", "pads"):
        if name in attrs and len(attrs[name]) != (2 if name == "pads" else 1):
            raise Unsupported(f"attribute {name}={list(attrs[name])} does not fit a 1-d window")
    units = (
        ("kernel_shape", 1),
        ("strides", 1),
        ("dilations", 1),
        ("output_padding", 0),
        ("output_shape", 1),
    )
    for name, unit in units:
        if name in attrs:
            attrs[name] = [unit, *(int(v) for v in attrs[name])]
    if "pads" in attrs:
        begin, end = (int(v) for v in attrs["pads"])
        attrs["pads"] = [0, begin, 0, end]
    inputs = list(node.inputs)
    g.stage(node, "unsqueeze", [inputs[0]], [f"{y}__2d_in"], axes=[2])
    shape = g.shapes.get(inputs[0])
    if shape is not None and len(shape) == 3:  # what a 2-d converter reads of its input (pads it implies)
        g.shapes[f"{y}__2d_in"] = (shape[0], shape[1], 1, shape[2])
    if inputs[0] in g.dtypes:  # and its dtype (LpPool's constants take it)
        g.dtypes[f"{y}__2d_in"] = g.dtypes[inputs[0]]
    inputs[0] = f"{y}__2d_in"
    if node.op_type in _WEIGHTED_WINDOWS and len(inputs) > 1 and inputs[1]:
        weight = g.constants.get(inputs[1])
        if weight is not None:
            name = f"{inputs[1]}__2d"
            g.constants[name] = weight.reshape(weight.shape[0], weight.shape[1], 1, weight.shape[2])
            g.dtypes[name] = g.dtypes.get(inputs[1]) or get_dtype(weight.dtype).name
        else:
            name = f"{y}__2d_w"
            g.stage(node, "unsqueeze", [inputs[1]], [name], axes=[2])
        inputs[1] = name
    flat = Node(node.op_type, node.name, node.domain, inputs, [f"{y}__2d_out", *node.outputs[1:]], attrs)
    convert_2d(g, flat)
    g.stage(node, "squeeze", [f"{y}__2d_out"], [y], axes=[2])


_WEIGHTED_WINDOWS = frozenset({"Conv", "ConvTranspose"})


def _conv_transpose(g: Graph, node: Node) -> None:
    """ConvTranspose over 1 (as 2), 2 or 3 spatial axes: ``conv_transpose2d`` / ``conv_transpose3d``, with
    output_shape and auto_pad resolved to pads at import (:func:`_transposed_pads`)."""
    rank = _conv_rank(g, node)
    if rank == 1:
        _as_2d(g, node, _conv_transpose)
        return
    attrs = _conv_attrs(g, node, rank, ("strides", "pads", "output_padding", "dilations"))
    given = node.attrs.get("output_shape")
    if given is not None and len(given) not in (rank, rank + 2):
        raise Unsupported(
            f"attribute output_shape={list(given)} must give the {rank} spatial dims (or all {rank + 2})"
        )
    weight_shape = _shape_of(g, node.inputs[1])
    _transposed_pads(g, node, attrs, rank, None if weight_shape is None else tuple(weight_shape[2:]))
    g.stage(node, conv_transpose_name(rank), _inputs(node, 3), node.outputs[:1], **attrs)


def _transposed_pads(g: Graph, node: Node, attrs: dict[str, Any], rank: int, kernel: tuple | None) -> None:
    """ConvTranspose's output_shape, or auto_pad SAME_UPPER / SAME_LOWER (output = input * stride), as
    the pads they imply, computed at import from the input's spatial dims: the total padding
    ``stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - out`` split as the spec says (the
    larger half at the end for SAME_UPPER, at the start otherwise, as onnxruntime); a negative end (an
    output larger than the full one) is more output_padding. VALID is no padding."""
    auto_pad = _attr(node, "auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise Unsupported(
            f"attribute auto_pad={auto_pad!r} is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER"
        )
    wanted = node.attrs.get("output_shape")
    if auto_pad == "VALID" and wanted is None:
        attrs.pop("pads", None)
        return
    if wanted is None and auto_pad == "NOTSET":
        return
    shape = g.shapes.get(node.inputs[0])
    sizes = list(shape[2:]) if shape is not None else []
    kernel = node.attrs.get("kernel_shape", kernel)
    known = [*sizes, *(kernel or [None])]
    if len(sizes) != rank or not all(isinstance(d, int) for d in known):
        raise Unsupported(
            f"output_shape or auto_pad={auto_pad!r} needs the input's spatial dims and the kernel known "
            f"at import (input {shape}, kernel {None if kernel is None else list(kernel)})"
        )
    strides = attrs.get("strides", [1] * rank)
    dilations = attrs.get("dilations", [1] * rank)
    extra = list(attrs.get("output_padding", [0] * rank))
    out = (
        [int(v) for v in wanted][-rank:]
        if wanted is not None
        else [n * s for n, s in zip(sizes, strides, strict=True)]
    )
    begins, ends = [], []
    for axis in range(rank):
        full = strides[axis] * (sizes[axis] - 1) + extra[axis] + (int(kernel[axis]) - 1) * dilations[axis] + 1
        total = full - out[axis]
        begin, end = (
            (total // 2, total - total // 2) if auto_pad == "SAME_UPPER" else (total - total // 2, total // 2)
        )
        if begin < 0:
            raise Unsupported(
                f"output_shape {out} is {-total} larger than the full output along spatial axis {axis}, "
                "which would pad the start; PipeLink pads only the end (output_padding)"
            )
        if end < 0:
            extra[axis], end = extra[axis] - end, 0
        begins.append(begin)
        ends.append(end)
    attrs["pads"] = begins + ends
    if any(extra):
        attrs["output_padding"] = extra


def _max_pool(g: Graph, node: Node) -> None:
    if len(node.outputs) > 1 and node.outputs[1]:  # Indices: lowerings.py (Y by this converter)
        max_pool_with_indices(g, node, _max_pool)
        return
    if _is_1d(g, node):
        _as_2d(g, node, _max_pool)
        return
    _only(node, storage_order=0)
    rank, attrs = _pool_window(node)
    if _attr(node, "ceil_mode", 0):
        attrs["ceil_mode"] = True
    g.stage(node, f"max_pool{rank}d", node.inputs[:1], node.outputs[:1], **attrs)


def _average_pool(g: Graph, node: Node) -> None:
    if _is_1d(g, node):
        _as_2d(g, node, _average_pool)
        return
    rank, attrs = _pool_window(node)
    if _attr(node, "ceil_mode", 0):
        attrs["ceil_mode"] = True
    if _attr(node, "count_include_pad", 0):
        attrs["count_include_pad"] = True
    g.stage(node, f"avg_pool{rank}d", node.inputs[:1], node.outputs[:1], **attrs)


def _lp(g: Graph, node: Node, summed: Callable[[str, str], None]) -> None:
    """``(sum |x|^p)^(1/p)`` with ``summed(src, dst)`` the summing stages: ``abs`` (p 1), ``mul`` x x
    (p 2) or ``abs``, ``pow``; then none, ``sqrt`` or ``pow`` by 1/p."""
    x, y = node.inputs[0], node.outputs[0]
    p = int(_attr(node, "p", 2))
    if p < 1:
        raise Unsupported(f"{node.op_type} p={p}; p must be a positive integer")
    powered = f"{y}__abs" if p == 1 else f"{y}__square" if p == 2 else f"{y}__pow"
    if p == 2:
        g.stage(node, "mul", [x, x], [powered])
    else:
        g.stage(node, "abs", [x], [f"{y}__abs"])
    if p > 2:
        g.stage(node, "pow", [f"{y}__abs", _scalar(g, node, x, "p", float(p))], [powered])
    total = y if p == 1 else f"{y}__sum"
    summed(powered, total)
    if p == 2:
        g.stage(node, "sqrt", [total], [y])
    elif p > 2:
        g.stage(node, "pow", [total, _scalar(g, node, x, "inverse_p", 1.0 / p)], [y])


def _global_lp_pool(g: Graph, node: Node) -> None:
    """ONNX GlobalLpPool: the Lp norm over every spatial dim, kept (``reduce_sum``)."""
    shape = g.shapes.get(node.inputs[0])
    if shape is None or len(shape) < 3:
        raise Unsupported("GlobalLpPool needs its input's rank (N, C and at least one spatial dim)")
    axes = list(range(2, len(shape)))
    _lp(g, node, lambda src, dst: g.stage(node, "reduce_sum", [src], [dst], axes=axes, keepdims=True))


def _lp_pool(g: Graph, node: Node) -> None:
    """ONNX LpPool (2-d and 3-d, and 1-d as Conv's): each window's sum as the zero-padded average
    (``avg_pool2d`` / ``avg_pool3d``, count_include_pad) times the window size (``scale``). ceil_mode is
    refused: its windows past the padding would be averaged over fewer taps."""
    if _is_1d(g, node):
        _as_2d(g, node, _lp_pool)
        return
    if _attr(node, "ceil_mode", 0):
        raise Unsupported("LpPool with ceil_mode=1 (the windows past the padding) is not supported")
    rank, attrs = _pool_window(node)
    count = float(np.prod(attrs["kernel_shape"]))

    def summed(src: str, dst: str) -> None:
        mean = f"{node.outputs[0]}__mean"
        g.stage(node, f"avg_pool{rank}d", [src], [mean], count_include_pad=True, **attrs)
        g.stage(node, "scale", [mean], [dst], factor=count)

    _lp(g, node, summed)
