"""ONNX resampling converters: Resize, Upsample, GridSample and AffineGrid."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .convert_common import _attr, _inputs
from .graph import Graph, Node, Unsupported, float32_attr
from .graph import shape_of as _shape

__all__: list[str] = []


def _resize_modes(g: Graph, node: Node) -> dict[str, Any]:
    """The mode attributes of a Resize (or Upsample) stage. Resize-10 and Upsample have no coordinate
    or nearest modes: they map an output pixel x to ``x / scale`` and take the floor for nearest (the
    ``asymmetric`` and ``floor`` modes of Resize-11, as onnxruntime runs them)."""
    old = node.op_type == "Upsample" or g.opset < 11
    return {
        "mode": _attr(node, "mode", "nearest"),
        "coordinate_transformation_mode": "asymmetric"
        if old
        else _attr(node, "coordinate_transformation_mode", "half_pixel"),
        "nearest_mode": "floor" if old else _attr(node, "nearest_mode", "round_prefer_floor"),
    }


def _upsample(g: Graph, node: Node) -> None:
    """ONNX Upsample (opsets 7-9, Resize's predecessor): ``resize`` by the scales (an attribute before
    opset 9, a constant input from it), with Resize-10's modes (:func:`_resize_modes`)."""
    scales = (
        g.const(node, 1, "scales") if len(node.inputs) > 1 and node.inputs[1] else node.attrs.get("scales")
    )
    if scales is None or not np.asarray(scales).size:
        raise Unsupported("Upsample needs its scales")
    attrs = _resize_modes(g, node)
    attrs["mode"] = "linear" if attrs["mode"] == "bilinear" else attrs["mode"]  # opset 7's spelling
    g.stage(
        node, "resize", node.inputs[:1], node.outputs[:1], scales=[float32_attr(v) for v in scales], **attrs
    )


def _resize(g: Graph, node: Node) -> None:
    ratios = None
    if g.opset < 11:
        scales = g.const(node, 1, "scales")
        sizes = None
    elif len(node.inputs) > 3 and node.inputs[3] in g.symbolic:
        scales, sizes, ratios = None, None, _ratios_of_dims(g, node)
    else:
        scales, sizes = g.const(node, 2, "scales"), g.const(node, 3, "sizes")
    if "axes" in node.attrs and ratios is None:
        scales, sizes = _on_every_axis(g, node, scales, sizes)
    policy = _attr(node, "keep_aspect_ratio_policy", "stretch")
    sampled_at = None
    if policy != "stretch":
        sizes, sampled_at = _keeping_aspect_ratio(g, node, policy, sizes)
    attrs = _resize_modes(g, node)
    attrs.update(_resize_filter(node, attrs["mode"]))
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        attrs["roi"] = _crop_roi(g, node)
        attrs["extrapolation_value"] = float32_attr(_attr(node, "extrapolation_value", 0.0))
    if ratios is not None:
        attrs["scales"] = ratios
    elif sizes is not None and sizes.size:
        attrs["sizes"] = [int(s) for s in sizes]
        if sampled_at is not None:
            attrs["scales"] = sampled_at
    elif scales is not None and scales.size:
        attrs["scales"] = [float32_attr(s) for s in scales]
    else:
        raise Unsupported("Resize needs scales or sizes")
    g.stage(node, "resize", node.inputs[:1], node.outputs[:1], **attrs)


def _resize_filter(node: Node, mode: str) -> dict[str, Any]:
    """Resize's filter attributes: cubic's coefficient, and antialias (any nonzero value on, as onnx's
    reference and onnxruntime read it) for linear and cubic, with exclude_outside where it weighs (cubic,
    antialiased linear: plain linear has an outside neighbour only past the edge, where both neighbours
    read the edge, so it gives the same values with or without). antialias with nearest is refused, as the
    reference and onnxruntime refuse it."""
    antialias = bool(_attr(node, "antialias", 0))
    if antialias and mode == "nearest":
        raise Unsupported("attribute antialias=1 filters modes linear and cubic only, not mode 'nearest'")
    attrs: dict[str, Any] = {"antialias": True} if antialias else {}
    if mode == "cubic":
        attrs["cubic_coeff_a"] = float32_attr(_attr(node, "cubic_coeff_a", -0.75))
    if mode == "cubic" or antialias:
        attrs["exclude_outside"] = bool(_attr(node, "exclude_outside", 0))
    return attrs


def _resize_axes(g: Graph, node: Node) -> tuple[tuple, list[int]]:
    """x's shape and Resize-18's ``axes`` (each in ``[0, rank)``). Needs x's rank."""
    shape = _shape(g, node.inputs[0])
    if shape is None:
        raise Unsupported("attribute axes needs x's rank known at import")
    rank = len(shape)
    axes = [int(a) for a in node.attrs["axes"]]
    if any(not -rank <= a < rank for a in axes) or len({a % rank for a in axes}) != len(axes):
        raise Unsupported(f"attribute axes={axes} must be distinct axes of x's rank {rank}")
    return tuple(shape), [a % rank for a in axes]


def _crop_roi(g: Graph, node: Node) -> list[float]:
    """tf_crop_and_resize's roi (input 1, a constant: a graph input's value can be given at import) as
    resize's ``roi``: a start and an end per axis of x, normalised; with ``axes``, the roi's for those
    axes and the whole axis (0 to 1) on the others. float32 values as their shortest decimals (as the
    scales); resize itself refuses a roi of the wrong length or with NaN or infinities."""
    roi = g.const(node, 1, "roi")
    if roi is None or not np.asarray(roi).size:
        raise Unsupported("coordinate_transformation_mode 'tf_crop_and_resize' needs its roi input (input 1)")
    roi = np.asarray(roi).reshape(-1)
    if roi.dtype.kind != "f":
        raise Unsupported(f"input 1 (roi, {node.inputs[1]!r}) must be floats (got {roi.dtype})")
    values = [float(v) if roi.dtype == np.float64 else float32_attr(v) for v in roi]
    if "axes" not in node.attrs:
        return values
    shape, axes = _resize_axes(g, node)
    if len(values) != 2 * len(axes):
        raise Unsupported(f"with axes={axes}, Resize's roi needs a start and an end per axis (got {values})")
    full = [0.0] * len(shape) + [1.0] * len(shape)
    for i, a in enumerate(axes):
        full[a], full[len(shape) + a] = values[i], values[len(axes) + i]
    return full


def _on_every_axis(g: Graph, node: Node, scales: Any, sizes: Any) -> tuple[Any, Any]:
    """Resize-18's ``axes``: the scales or sizes given for those axes (in that order), spread over every
    axis of x (scale 1, or x's own size, on the others). Needs x's rank, and for sizes its other dims."""
    shape, axes = _resize_axes(g, node)
    rank = len(shape)
    given = sizes if sizes is not None and np.asarray(sizes).size else scales
    if given is None or np.asarray(given).size != len(axes):
        raise Unsupported(f"with axes={axes}, Resize needs one scale or size per axis")
    if given is sizes:
        if any(not isinstance(shape[k], int) for k in range(rank) if k not in axes):
            raise Unsupported(
                f"sizes for axes={axes} need x's other dims known at import (x is {list(shape)})"
            )
        full = [int(d) if isinstance(d, int) else 0 for d in shape]
        for a, v in zip(axes, np.asarray(sizes).reshape(-1), strict=True):
            full[a] = int(v)
        return None, np.asarray(full, np.int64)
    full = np.ones(rank, np.float32)
    full[axes] = np.asarray(scales, np.float32).reshape(-1)
    return full, None


def _keeping_aspect_ratio(g: Graph, node: Node, policy: str, sizes: Any) -> tuple[np.ndarray, list | None]:
    """keep_aspect_ratio_policy not_larger / not_smaller: one scale for the resized axes (the smallest or
    largest of ``size / in`` over them), each output ``floor(scale * in + 0.5)``, as onnx's reference, and
    the resampling at that one scale. ``(sizes, scales)``: the output sizes, and the per-axis scales the
    resize samples at where some axis's ``out / in`` is not the scale (else None: the sizes say it)."""
    if policy not in ("not_larger", "not_smaller"):
        raise Unsupported(
            f"keep_aspect_ratio_policy={policy!r}; the spec's are stretch, not_larger, not_smaller"
        )
    shape = _shape(g, node.inputs[0])
    if sizes is None or not np.asarray(sizes).size or shape is None:
        raise Unsupported(f"keep_aspect_ratio_policy={policy!r} needs sizes and x's shape known at import")
    rank = len(shape)
    axes = [int(a) % rank for a in node.attrs.get("axes", range(rank))]
    if any(not isinstance(shape[a], int) or shape[a] <= 0 for a in axes):
        raise Unsupported(
            f"keep_aspect_ratio_policy={policy!r} needs x's resized dims known (x: {list(shape)})"
        )
    ratios = [int(sizes[a]) / shape[a] for a in axes]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    out = [int(d) for d in np.asarray(sizes).reshape(-1)]
    for a in axes:
        out[a] = int(scale * shape[a] + 0.5)
    if all(out[a] / shape[a] == scale for a in axes):
        return np.asarray(out, np.int64), None
    scales = [scale if a in axes else 1.0 for a in range(rank)]
    return np.asarray(out, np.int64), scales


def _grid_sample(g: Graph, node: Node) -> None:
    """GridSample: opset 16's mode names (bilinear, nearest, bicubic) are opset 20's linear, nearest and
    cubic; the padding mode and align_corners as they are."""
    names = ("bilinear", "nearest", "bicubic") if g.opset < 20 else ("linear", "nearest", "cubic")
    mode = _attr(node, "mode", names[0])
    if mode not in names:
        raise Unsupported(f"mode {mode!r} is not one of opset {g.opset}'s {list(names)}")
    g.stage(
        node,
        "grid_sample",
        _inputs(node, 2),
        node.outputs[:1],
        mode=dict(zip(names, ("linear", "nearest", "cubic"), strict=True))[mode],
        padding_mode=str(_attr(node, "padding_mode", "zeros")),
        align_corners=bool(_attr(node, "align_corners", 0)),
    )


def _affine_grid(g: Graph, node: Node) -> None:
    """AffineGrid: its size a constant input, which becomes affine_grid's attribute."""
    size = g.ints(node, 1, "", "size")
    if size is None:
        raise Unsupported("AffineGrid needs its size input")
    g.stage(
        node,
        "affine_grid",
        node.inputs[:1],
        node.outputs[:1],
        size=size,
        align_corners=bool(_attr(node, "align_corners", 0)),
    )


def _ratios_of_dims(g: Graph, node: Node) -> list[float]:
    """Resize's sizes as a list of dims the model computes (``F.interpolate(x, size=(h, w))`` at a dynamic
    batch: x's own N and C, then sizes known at import) as the scales they imply: 1 where the entry is x's
    own dim, ``out / in`` (float64, resize's own ratio for sizes) for a size of a dim known at import,
    checked to give the size back (``floor(in * out / in) == out``), so the output and the sampling are
    those of the sizes."""
    value, x = g.symbolic[node.inputs[3]], node.inputs[0]
    shape = g.shapes.get(x)
    if not isinstance(value, list) or shape is None or len(value) != len(shape):
        raise Unsupported(
            "Resize's sizes are computed from dims known only when the model runs, and x's rank is unknown "
            "or differs from theirs"
        )
    ratios = []
    for axis, (entry, dim) in enumerate(zip(value, shape, strict=True)):
        if not isinstance(entry, int) and entry.same_as(x, axis, dim):
            ratios.append(1.0)
        elif isinstance(entry, int) and isinstance(dim, int) and entry > 0 and dim > 0:
            ratio = entry / dim
            if math.floor(dim * ratio) != entry:
                raise Unsupported(f"Resize's size {entry} of axis {axis} ({dim}) is no scale resize can give")
            ratios.append(ratio)
        else:
            raise Unsupported(
                f"Resize's size of axis {axis} is known only when the model runs and is not x's own dim "
                f"there ({dim}), or x's dim is unknown (export with fixed shapes)"
            )
    return ratios
