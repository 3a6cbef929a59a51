"""Region-of-interest pooling (ONNX RoiAlign-16; NCHW): the descriptor and the NumPy reference.

Each roi ``[x1, y1, x2, y2]`` (scaled by ``spatial_scale``, shifted by half a pixel in ``half_pixel``) is cut
into ``output_height x output_width`` bins; each bin samples a ``grid_h x grid_w`` grid of points
(``sampling_ratio``, or ``ceil(roi size / output size)`` per roi when it is 0), each point bilinear from
its four pixels as onnx's reference computes it, and the bin is their mean (``avg``) or, as onnx's
reference and onnxruntime do, the largest of the points' largest *weighted* pixel (``max``). Coordinates
are computed in the compute dtype (float32; float64 for float64) in the reference's order of operations.

A roi PipeLink cannot compute gives NaN over its whole ``[C, output_height, output_width]`` output (never
an out-of-bounds read): a batch index outside ``[0, N)``, a coordinate that is not finite once scaled, or
an adaptive grid of more than :data:`MAX_SAMPLING_GRID` points along an axis (and every roi of an x
with an empty spatial axis, refused at load where its size is known then). The CUDA variant
(``cuda.py``, ``roi.cu``) follows the same rules.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...descriptor import Attr, KernelContext, OperatorDescriptor, Port
from ...errors import InvalidArgumentError, ShapeMismatchError
from .._common import FLOATS, builtin_operator, compute_dtype
from .._dims import is_known
from ..kernel import cuda_variant
from . import cuda
from .cuda import MAX_SAMPLING_GRID

__all__ = [
    "descriptors",
    "check_roi_align_attrs",
    "infer_roi_align",
    "roi_grid",
    "MAX_SAMPLING_GRID",
    "ROI_MODES",
    "COORDINATE_MODES",
]

ROI_MODES = ("avg", "max")
COORDINATE_MODES = ("half_pixel", "output_half_pixel")
_CHUNK_ELEMENTS = 1 << 20  # elements of one temporary of the reference (a 1024 x 1024 grid stays small)
_VARIANT_DTYPES = FLOATS | {"int64"}  # every input's: x and rois float, batch_indices int64


def check_roi_align_attrs(attrs: Mapping[str, Any]) -> None:
    """roi_align's attribute values: output sizes >= 1, a sampling_ratio in ``[0, MAX_SAMPLING_GRID]``, a
    finite spatial_scale.

    Raises
    ------
    InvalidArgumentError
        Naming the attribute, the rule and the value.
    """
    for name in ("output_height", "output_width"):
        if int(attrs[name]) < 1:
            raise InvalidArgumentError(
                f"roi_align: attribute {name!r} must be >= 1 (got {attrs[name]})", attr=name, got=attrs[name]
            )
    ratio = int(attrs["sampling_ratio"])
    if not 0 <= ratio <= MAX_SAMPLING_GRID:
        raise InvalidArgumentError(
            f"roi_align: attribute 'sampling_ratio' must be in [0, {MAX_SAMPLING_GRID}] (0: adaptive per "
            f"roi; got {ratio})",
            attr="sampling_ratio",
            got=ratio,
        )
    if not math.isfinite(float(attrs["spatial_scale"])):
        raise InvalidArgumentError(
            f"roi_align: attribute 'spatial_scale' must be finite (got {attrs['spatial_scale']})",
            attr="spatial_scale",
        )


def infer_roi_align(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of roi_align: x ``[N, C, H, W]``, rois ``[R, 4]`` give ``[R, C, OH, OW]``.

    Raises
    ------
    InvalidArgumentError
        An output size below 1, a sampling_ratio outside ``[0, MAX_SAMPLING_GRID]``, a spatial_scale
        that is not finite.
    ShapeMismatchError
        An empty spatial axis of x (no pixel to sample).
    """
    check_roi_align_attrs(attrs)
    (_, c, h, w), r = tuple(in_shapes[0]), tuple(in_shapes[1])[0]
    if any(is_known(d) and d == 0 for d in (h, w)):
        raise ShapeMismatchError(
            f"roi_align: input 'x' {list(in_shapes[0])} has an empty spatial axis: no pixel to sample",
            port="x",
            symbol="H" if h == 0 else "W",
            expected=">= 1",
            got=0,
        )
    return ((r, c, int(attrs["output_height"]), int(attrs["output_width"])),), (in_dtypes[0],)


def roi_grid(roi: np.ndarray, attrs: Mapping[str, Any], cdt) -> tuple | None:
    """One roi's sampling geometry in the compute dtype ``cdt``, as onnx's reference computes it:
    ``(y0, x0, bin_h, bin_w, grid_h, grid_w)`` (grids of 0 points: the bin is 0), or None when the roi
    gives NaN (a coordinate not finite once scaled, an adaptive grid over :data:`MAX_SAMPLING_GRID`)."""
    half_pixel = attrs["coordinate_transformation_mode"] == "half_pixel"
    scale, offset = cdt.type(attrs["spatial_scale"]), cdt.type(0.5 if half_pixel else 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        x0, y0, x1, y1 = (roi.astype(cdt) * scale) - offset
        width, height = x1 - x0, y1 - y0
    if not all(np.isfinite(v) for v in (x0, y0, x1, y1, width, height)):
        return None
    if not half_pixel:  # output_half_pixel: a malformed roi is taken as 1 x 1
        width, height = max(width, cdt.type(1)), max(height, cdt.type(1))
    oh, ow = int(attrs["output_height"]), int(attrs["output_width"])
    bin_h, bin_w = height / cdt.type(oh), width / cdt.type(ow)
    ratio = int(attrs["sampling_ratio"])
    grids = []
    for size in (bin_h, bin_w):
        points = ratio if ratio > 0 else float(np.ceil(size))
        if points > MAX_SAMPLING_GRID:
            return None
        grids.append(max(int(points), 0))
    return y0, x0, bin_h, bin_w, grids[0], grids[1]


def _axis_taps(start, size, points: int, bins: int, extent: int, cdt):
    """Per sample point of one axis (``[bins, points]``, point-major within a bin): its low and high pixel,
    their weights, and whether the point lies on the image (``[-1, extent]``), as onnx's reference."""
    b = np.arange(bins, dtype=cdt)[:, None]
    p = np.arange(points, dtype=cdt)[None, :] + cdt.type(0.5)
    with np.errstate(over="ignore", invalid="ignore"):
        at = (start + b * size) + (p * size) / cdt.type(points)
        inside = ~((at < -1) | (at > extent))
        at = np.where(inside, np.maximum(at, 0), 0).astype(cdt)
    low = np.floor(at).astype(np.int64)
    edge = low >= extent - 1
    low = np.where(edge, extent - 1, low)
    high = np.where(edge, low, low + 1)
    at = np.where(edge, low.astype(cdt), at)
    frac = at - low.astype(cdt)
    return low, high, (cdt.type(1) - frac), frac, inside


def _roi_align_one(xb: np.ndarray, geometry: tuple, out: np.ndarray, is_max: bool, cdt) -> None:
    """``out[C, OH, OW]`` of one roi over its image ``xb[C, H, W]`` (compute dtype).

    max folds as onnx's reference (Python's ``max``: ``if v > best: best = v``), over each point's four
    weighted pixels and then over the points: a fold's result is its first value when that is NaN, else the
    largest value that is not NaN (``fmax``).
    """
    y0, x0, bin_h, bin_w, gh, gw = geometry
    c, h, w = xb.shape
    oh, ow = out.shape[1:]
    if gh == 0 or gw == 0:  # no sample point: the mean of nothing is 0, and so is the max (as onnx)
        out.fill(0)
        return
    ylo, yhi, yhw, ylw, yin = _axis_taps(y0, bin_h, gh, oh, h, cdt)
    xtaps = _axis_taps(x0, bin_w, gw, ow, w, cdt)
    # one row of points (iy) and a chunk of its columns of points at a time, every bin at once:
    # [C, OH, OW, chunk], at most _CHUNK_ELEMENTS per temporary whatever the grid
    chunk = max(1, min(gw, _CHUNK_ELEMENTS // max(1, c * oh * ow)))
    flat = xb.reshape(c, -1)
    first = best = None
    total = np.zeros((c, oh, ow), cdt)
    for iy, j in itertools.product(range(gh), range(0, gw, chunk)):
        xlo, xhi, xhw, xlw, xin = (a[:, j : j + chunk].reshape(-1) for a in xtaps)
        valid = yin[:, iy, None] & xin[None, :]
        # a point off the image reads pixel 0 with weight 0 (as the reference: a NaN there still shows)
        terms = []
        for rows, wy in ((ylo[:, iy, None] * w, yhw[:, iy, None]), (yhi[:, iy, None] * w, ylw[:, iy, None])):
            for cols, wx in ((xlo, xhw), (xhi, xlw)):
                weight = np.where(valid, wy * wx, 0).astype(cdt)
                terms.append((weight * flat[:, np.where(valid, rows + cols, 0)]).reshape(c, oh, ow, -1))
        if not is_max:
            total += (((terms[0] + terms[1]) + terms[2]) + terms[3]).sum(axis=3)
            continue
        point = np.where(np.isnan(terms[0]), terms[0], np.fmax.reduce(np.stack(terms), axis=0))
        row = np.fmax.reduce(point, axis=3)
        first, best = (point[..., 0], row) if first is None else (first, np.fmax(best, row))
    if is_max:
        out[...] = np.where(np.isnan(first), first, best)
    else:
        out[...] = total / cdt.type(gh * gw)


def _roi_align_bind(ctx: KernelContext):
    attrs = dict(ctx.attrs)
    cdt = compute_dtype(ctx.in_dtypes[0])
    is_max = attrs["mode"] == "max"
    acc = np.empty(ctx.out_shapes[0], cdt)

    def kernel(inputs, outputs, stream):
        x, rois, batch = inputs
        n, h, w = x.shape[0], x.shape[2], x.shape[3]
        xc = np.asarray(x, dtype=cdt)  # the half types widened once per run
        for r in range(rois.shape[0]):
            b = int(batch[r])
            inside = 0 <= b < n and h > 0 and w > 0  # empty axes: refused at load where known
            geometry = roi_grid(np.asarray(rois[r]), attrs, cdt) if inside else None
            if geometry is None:  # a roi PipeLink cannot compute: NaN, never a read outside x
                acc[r] = np.nan
                continue
            with np.errstate(invalid="ignore", over="ignore"):
                _roi_align_one(xc[b], geometry, acc[r], is_max, cdt)
        np.copyto(outputs[0], acc, casting="unsafe")

    return kernel


def descriptors() -> list[OperatorDescriptor]:
    """A fresh descriptor of roi_align (one per registry)."""
    return [
        builtin_operator(
            "roi_align",
            doc="Bilinear pooling of NCHW x over each roi [x1, y1, x2, y2] of image batch_indices[r] "
            "(Mask R-CNN's RoiAlign): [R, C, output_height, output_width]; a roi with a batch index "
            f"outside [0, N), a non-finite coordinate or an adaptive grid over {MAX_SAMPLING_GRID} "
            "points per axis gives NaN.",
            inputs=[
                Port("x", shape=["N", "C", "H", "W"], dtype="T"),
                Port("rois", shape=["R", 4], dtype="T", doc="[R, 4]: x1, y1, x2, y2 in x's pixels / scale"),
                Port("batch_indices", shape=["R"], dtype="int64", doc="the image of each roi"),
            ],
            outputs=[Port("y", dtype="T", doc="[R, C, output_height, output_width]")],
            attrs=[
                Attr(
                    "mode",
                    "str",
                    "avg",
                    choices=ROI_MODES,
                    doc="avg: the mean of the bin's points; max: the largest weighted pixel (as onnx)",
                ),
                Attr("output_height", "int", 1, doc="bins per roi along H"),
                Attr("output_width", "int", 1, doc="bins per roi along W"),
                Attr(
                    "sampling_ratio",
                    "int",
                    0,
                    doc=f"points per bin along each axis; 0: ceil(bin size) per roi (at most "
                    f"{MAX_SAMPLING_GRID})",
                ),
                Attr("spatial_scale", "float", 1.0, doc="multiplies the roi coordinates"),
                Attr(
                    "coordinate_transformation_mode",
                    "str",
                    "half_pixel",
                    choices=COORDINATE_MODES,
                    doc="half_pixel: shift the scaled roi by -0.5; output_half_pixel: no shift, rois at "
                    "least 1 x 1 (RoiAlign-10)",
                ),
            ],
            dtype_vars={"T": FLOATS},
            variant_dtypes=_VARIANT_DTYPES,
            infer=infer_roi_align,
            bind=_roi_align_bind,
            cuda=cuda_variant(cuda.roi_align_bind, _VARIANT_DTYPES),
            onnx="RoiAlign",
        )
    ]
