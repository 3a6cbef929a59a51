"""Resampling (ONNX Resize with nearest, linear and cubic modes; DepthToSpace as pixel_shuffle; GridSample
and AffineGrid in ``grid_sample.py``): descriptors and NumPy references.

Resize is separable: each resized axis gathers its source indices (for ``linear``, blends two
neighbours; for ``cubic``, four, with Keys' weights of ``cubic_coeff_a``; with ``antialias``, the
filter stretched by ``1 / scale`` when downsampling, ``antialias.py``) once per axis, with index and
weight tables computed in ``bind``. Linear and cubic resizing compute in float32 (float64 for float64).
``tf_crop_and_resize`` samples the ``roi`` window of each axis and gives outputs sampled outside x the
``extrapolation_value`` (``crop.py``).
The CUDA variants (``cuda.py``, ``resize.cu``) use the same coordinate and weight formulas, evaluated on
the device, and the same channel layouts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...descriptor import REQUIRED, Attr, KernelContext, OperatorDescriptor, Port
from ...dtypes import DTYPES
from ...errors import DTypeMismatchError, InvalidArgumentError, ShapeMismatchError
from ...limits import shape_nbytes
from .._common import FLOATS, NUMERIC, builtin_operator, compute_dtype, numpy_dtype
from .._dims import derived, is_known
from ..kernel import cuda_variant
from . import cuda, grid_sample
from .antialias import antialias_tap_count, antialias_taps
from .crop import TF_CROP, crop_coordinates, crop_windows, extrapolation_fill, outside_axis
from .cubic import keys_weights
from .cuda import MAX_CUBIC_AXES, resized_axes

__all__ = [
    "descriptors",
    "resize_plan",
    "source_coordinates",
    "cubic_taps",
    "COORDINATE_MODES",
    "NEAREST_MODES",
    "MAX_CUBIC_AXES",
    "HOST_ONLY",
]

COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "asymmetric",
    "align_corners",
    TF_CROP,
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
HOST_ONLY = ("grid_sample", "affine_grid")
"""This family's operators without a CUDA kernel: on CUDA their NumPy reference runs on staged host copies."""


def resize_plan(shape: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output shape and the per-axis scale of resize: ``scales`` give ``out = floor(in * scale)``,
    ``sizes`` give ``scale = out / in``, and both give the output shape by ``sizes`` sampled at ``scales``
    (ONNX's keep_aspect_ratio_policy: one scale for every resized axis, each size rounded from it).

    Raises
    ------
    InvalidArgumentError
        Neither of scales/sizes, a length other than x's rank, a scale <= 0, a size < 0.
    ShapeMismatchError
        ``sizes`` asks for elements along an empty axis.
    """
    scales, sizes = tuple(attrs["scales"]), tuple(attrs["sizes"])
    if not scales and not sizes:
        raise InvalidArgumentError(
            "resize: give 'scales' or 'sizes' (or both: sizes for the output, scales for the sampling)",
            attr="scales",
        )
    for given, name in ((scales, "scales"), (sizes, "sizes")):
        if given and len(given) != len(shape):
            raise InvalidArgumentError(
                f"resize: {name!r} needs one value per axis of the {len(shape)}-d input {list(shape)} "
                f"(got {list(given)})",
                attr=name,
                got=list(given),
            )
    if scales and not all(s > 0 and math.isfinite(s) for s in scales):
        raise InvalidArgumentError(
            f"resize: 'scales' must be finite and > 0 (got {list(scales)})", attr="scales"
        )
    if sizes and any(s < 0 for s in sizes):
        raise InvalidArgumentError(f"resize: 'sizes' must be >= 0 (got {list(sizes)})", attr="sizes")
    if sizes:
        if any(d == 0 and o > 0 for o, d in zip(sizes, shape, strict=True)):
            raise ShapeMismatchError(
                f"resize: cannot resize an empty axis of {list(shape)} to 'sizes' {list(sizes)}",
                port="x",
                attr="sizes",
                got=list(sizes),
            )
        if scales:
            return tuple(sizes), tuple(float(s) for s in scales)
        ratio = tuple(o / d if is_known(d) and d else 1.0 for o, d in zip(sizes, shape, strict=True))
        return tuple(sizes), ratio
    out = tuple(
        math.floor(d * s) if is_known(d) else (d if s == 1 else derived("resize", d, s))
        for d, s in zip(shape, scales, strict=True)
    )
    return out, scales


def source_coordinates(
    out_size: int, in_size: int, scale: float, mode: str, window: tuple[float, float] = (0.0, 1.0)
) -> np.ndarray:
    """ONNX's coordinate_transformation_mode: where each output index samples the input (float64).

    As in ONNX's reference, the resized length in align_corners and pytorch_half_pixel is
    ``in_size * scale`` (not rounded down), which equals ``out_size`` when the shape came from sizes;
    half_pixel_symmetric shifts half_pixel's coordinates by ``in_size / 2 * (1 - out_size / length)``, so
    the rounding down of the length trims both ends alike; tf_crop_and_resize samples the axis's roi
    ``window`` (``crop.crop_coordinates``).
    """
    if mode == TF_CROP:
        return crop_coordinates(out_size, in_size, scale, window)
    o = np.arange(out_size, dtype=np.float64)
    length = in_size * scale
    if mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / length)
        return offset + (o + 0.5) / scale - 0.5
    if mode == "asymmetric":
        return o / scale
    if mode == "align_corners":
        return o * ((in_size - 1) / (length - 1)) if length != 1 else np.zeros(out_size)
    if mode == "pytorch_half_pixel" and length <= 1:
        return np.zeros(out_size)
    return (o + 0.5) / scale - 0.5


def cubic_taps(
    coords: np.ndarray, in_size: int, a: float, exclude_outside: bool
) -> tuple[np.ndarray, np.ndarray]:
    """ONNX cubic: the 4 neighbours ``floor(c) - 1 .. floor(c) + 2`` of each coordinate (clamped into the
    axis: the edge repeats) and their weights (Keys' kernel with coefficient ``a``; with
    ``exclude_outside``, a neighbour outside the axis weighs 0 and the rest are renormalised).
    Returns ``(indices, weights)``, each ``[len(coords), 4]`` (weights in float64)."""
    base = np.floor(coords)
    weights = keys_weights(coords - base, a)
    taps = base.astype(np.int64)[:, None] + np.arange(-1, 3)[None, :]
    if exclude_outside:
        weights = np.where((taps >= 0) & (taps < in_size), weights, 0.0)
        weights = weights / weights.sum(axis=1, keepdims=True)
    return np.clip(taps, 0, in_size - 1).astype(np.intp), weights


def _nearest(coords: np.ndarray, mode: str, in_size: int) -> np.ndarray:
    if mode == "floor":
        idx = np.floor(coords)
    elif mode == "ceil":
        idx = np.ceil(coords)
    else:
        halfway = coords - np.floor(coords) == 0.5
        tie = np.floor(coords) if mode == "round_prefer_floor" else np.ceil(coords)
        idx = np.where(halfway, tie, np.floor(coords + 0.5))
    return np.clip(idx, 0, in_size - 1).astype(np.intp)


def infer_resize(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of resize; linear and cubic modes need a float input, cubic at most
    :data:`MAX_CUBIC_AXES` resized axes; antialias applies to linear and cubic only (as ONNX's spec words
    it; its reference and onnxruntime refuse it with nearest)."""
    mode = attrs["mode"]
    if attrs["antialias"] and mode == "nearest":
        raise InvalidArgumentError(
            "resize: 'antialias' filters modes 'linear' and 'cubic', not 'nearest' (as ONNX's Resize); "
            "use mode 'linear', or antialias false",
            attr="antialias",
        )
    if mode != "nearest" and in_dtypes[0] not in FLOATS:
        raise DTypeMismatchError(
            f"resize: mode {mode!r} needs a float input (got {in_dtypes[0]}); use mode 'nearest' or cast",
            port="x",
            expected=sorted(FLOATS),
            got=in_dtypes[0],
        )
    shape = tuple(in_shapes[0])
    out, scales = resize_plan(shape, attrs)
    windows = crop_windows(len(shape), attrs)
    if windows is not None:
        extrapolation_fill(in_dtypes[0], attrs["extrapolation_value"])  # y must hold it
    count = len(resized_axes(shape, out, scales, windows))
    if mode == "cubic" and count > MAX_CUBIC_AXES:
        raise InvalidArgumentError(
            f"resize: mode 'cubic' resizes at most {MAX_CUBIC_AXES} axes (got {count} "
            f"of {list(shape)} -> {list(out)}); resize in steps, or use mode 'linear'",
            attr="mode",
        )
    return (out,), (in_dtypes[0],)


def _resize_bind(ctx: KernelContext):
    shape = tuple(ctx.in_shapes[0])
    out_shape, scales = resize_plan(shape, ctx.attrs)
    mode = ctx.attrs["mode"]
    linear, antialias = mode == "linear", bool(ctx.attrs["antialias"])
    coord_mode, nearest_mode = ctx.attrs["coordinate_transformation_mode"], ctx.attrs["nearest_mode"]
    windows = crop_windows(len(shape), ctx.attrs)
    if 0 in out_shape:  # nothing to write: build no tables (an empty x may declare any length)
        return _write_nothing
    dtype = ctx.in_dtypes[0]
    cdt = compute_dtype(dtype) if mode != "nearest" else numpy_dtype(dtype)
    # Linear blends in the compute dtype: widen a half input once into a buffer kept from here.
    widened = np.empty(shape, cdt) if cdt != numpy_dtype(dtype) else None
    # tf_crop_and_resize: outputs sampled outside x on any axis take the fill, y's value (exact in cdt)
    fill = None if windows is None else extrapolation_fill(dtype, ctx.attrs["extrapolation_value"])
    steps, current, outside = [], list(shape), []
    for axis in resized_axes(shape, out_shape, scales, windows):  # an axis left as it is samples itself
        size, out = shape[axis], out_shape[axis]
        window = windows[axis] if windows is not None else (0.0, 1.0)
        coords = source_coordinates(out, size, scales[axis], coord_mode, window) if size else np.zeros(0)
        current[axis] = out
        bshape = [1] * len(shape)
        bshape[axis] = out
        if windows is not None:  # the fill replaces those outputs: sample x's start there (never NaN)
            mask = outside_axis(coords, size)
            coords = np.where(mask, 0.0, coords)
            outside.append(mask.reshape(bshape))
        if antialias and size:
            taps, weights = _filter_taps(ctx, coords, size, scales[axis], axis)
            filtered = [(taps[:, j], weights[:, j].astype(cdt).reshape(bshape)) for j in range(taps.shape[1])]
            steps.append((axis, filtered, None, None, np.empty(current, cdt), np.empty(current, cdt)))
        elif mode == "cubic" and size:
            taps, weights = cubic_taps(
                coords, size, float(ctx.attrs["cubic_coeff_a"]), bool(ctx.attrs["exclude_outside"])
            )
            cubic = [(taps[:, j], weights[:, j].astype(cdt).reshape(bshape)) for j in range(4)]
            steps.append((axis, cubic, None, None, np.empty(current, cdt), np.empty(current, cdt)))
        elif linear and size:
            clamped = np.clip(coords, 0, size - 1)
            lo = np.floor(clamped).astype(np.intp)
            hi = np.minimum(lo + 1, size - 1)
            weight = (clamped - lo).astype(cdt).reshape(bshape)
            steps.append((axis, lo, hi, weight, np.empty(current, cdt), np.empty(current, cdt)))
        else:
            idx = _nearest(coords, nearest_mode, size) if size else np.zeros(out, np.intp)
            steps.append((axis, idx, None, None, np.empty(current, cdt), None))

    def kernel(inputs, outputs, stream):
        data = inputs[0]
        if widened is not None:
            np.copyto(widened, data, casting="unsafe")
            data = widened
        for axis, lo, hi, weight, buf, other in steps:
            if isinstance(lo, list):  # cubic, antialias: the taps, weighted, summed in order
                for j, (taps, w) in enumerate(lo):
                    np.take(data, taps, axis=axis, out=other)
                    np.multiply(other, w, out=other)
                    if j:
                        np.add(buf, other, out=buf)
                    else:
                        np.copyto(buf, other)
                data = buf
                continue
            np.take(data, lo, axis=axis, out=buf)
            if hi is not None:
                # buf + (other - buf) * w: the two neighbours blended by the fractional coordinate.
                np.take(data, hi, axis=axis, out=other)
                np.subtract(other, buf, out=other)
                np.multiply(other, weight, out=other)
                np.add(buf, other, out=buf)
            data = buf
        for mask in outside:  # every resized axis's extrapolated outputs (data is y's shape by now)
            np.copyto(data, fill, where=mask, casting="unsafe")  # exact: fill is a value of y's dtype
        np.copyto(outputs[0], data, casting="unsafe")

    return kernel


def _write_nothing(inputs, outputs, stream) -> None:
    """The kernel of a resize to an empty y."""


def _filter_taps(
    ctx: KernelContext, coords: np.ndarray, size: int, scale: float, axis: int
) -> tuple[np.ndarray, np.ndarray]:
    """The antialiased taps of one axis (``antialias_taps``), once their tables are known to fit: a
    downsampling by a tiny scale blends about ``2 / scale`` inputs per output (cubic ``4 / scale``)."""
    mode = ctx.attrs["mode"]
    count = antialias_tap_count(scale, mode)
    ctx.backend.check_fits(
        shape_nbytes((len(coords), count), 16),
        tag=f"stage {ctx.stage!r} resize antialias tables of axis {axis} ({len(coords)} x {count} taps)",
    )
    return antialias_taps(
        coords, size, scale, mode, float(ctx.attrs["cubic_coeff_a"]), bool(ctx.attrs["exclude_outside"])
    )


def infer_pixel_shuffle(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of pixel_shuffle: ``[N, C / b^2, H * b, W * b]``.

    Raises
    ------
    ShapeMismatchError
        C is not a multiple of ``blocksize ** 2``.
    """
    n, c, h, w = tuple(in_shapes[0])
    b = int(attrs["blocksize"])
    if b < 1:
        raise InvalidArgumentError(f"pixel_shuffle: 'blocksize' must be >= 1 (got {b})", attr="blocksize")
    if is_known(c) and c % (b * b):
        raise ShapeMismatchError(
            f"pixel_shuffle: input 'x' has {c} channels, not a multiple of blocksize^2 = {b * b}",
            port="x",
            symbol="C",
            expected=f"a multiple of {b * b}",
            got=c,
        )

    def scaled(d):
        return d * b if is_known(d) else derived("pixel_shuffle", d, b)

    return ((n, c // (b * b) if is_known(c) else derived("pixel_shuffle", c, b), scaled(h), scaled(w)),), (
        in_dtypes[0],
    )


def _pixel_shuffle_bind(ctx: KernelContext):
    n, c, h, w = ctx.in_shapes[0]
    b = int(ctx.attrs["blocksize"])
    split, perm = cuda.pixel_shuffle_layout((n, c, h, w), b, ctx.attrs["mode"])
    out_shape = tuple(ctx.out_shapes[0])

    def kernel(inputs, outputs, stream):
        np.copyto(outputs[0].reshape(n, out_shape[1], h, b, w, b), inputs[0].reshape(split).transpose(perm))

    return kernel


def descriptors() -> list[OperatorDescriptor]:
    """Fresh descriptors of resize, pixel_shuffle, grid_sample and affine_grid (one set per registry)."""
    return [
        builtin_operator(
            "resize",
            doc="Resample x to new sizes (nearest, linear or cubic), each axis by a scale or to a size.",
            inputs=[Port("x", dtype="T")],
            outputs=[Port("y", dtype="T")],
            attrs=[
                Attr(
                    "mode",
                    "str",
                    "nearest",
                    choices=("nearest", "linear", "cubic"),
                    doc="'linear' blends 2 neighbours per resized axis, 'cubic' 4 (at most 3 axes); floats",
                ),
                Attr("cubic_coeff_a", "float", -0.75, doc="cubic: Keys' coefficient (-0.5 TensorFlow's)"),
                Attr(
                    "exclude_outside",
                    "bool",
                    False,
                    doc="cubic (and antialias): neighbours outside x weigh 0, renormalised",
                ),
                Attr(
                    "antialias",
                    "bool",
                    False,
                    doc="linear, cubic: downsampling stretches the filter by 1 / scale (ONNX antialias)",
                ),
                Attr("scales", "floats", (), doc="per axis: out = floor(in * scale)"),
                Attr("sizes", "ints", (), doc="or the output shape (with scales too: sampled at scales)"),
                Attr(
                    "coordinate_transformation_mode",
                    "str",
                    "half_pixel",
                    choices=COORDINATE_MODES,
                    doc="how an output index maps to an input coordinate",
                ),
                Attr(
                    "nearest_mode",
                    "str",
                    "round_prefer_floor",
                    choices=NEAREST_MODES,
                    doc="rounding of the coordinate in mode 'nearest'",
                ),
                Attr(
                    "roi",
                    "floats",
                    (),
                    doc="tf_crop_and_resize (needed there only): the window of each axis, normalised: "
                    "[start0, ..., end0, ...], 2 * rank values",
                ),
                Attr(
                    "extrapolation_value",
                    "float",
                    0.0,
                    doc="tf_crop_and_resize: the value of outputs sampled outside x (a value of T)",
                ),
            ],
            dtype_vars={"T": NUMERIC},
            variant_dtypes=NUMERIC,
            infer=infer_resize,
            bind=_resize_bind,
            cuda=cuda_variant(cuda.resize_bind(resize_plan), cuda.RESIZE_DTYPES),
            onnx="Resize",
        ),
        builtin_operator(
            "pixel_shuffle",
            doc="Move blocks of channels into space: [N, C, H, W] -> [N, C/b^2, H*b, W*b].",
            inputs=[Port("x", shape=["N", "C", "H", "W"], dtype="T")],
            outputs=[Port("y", dtype="T")],
            attrs=[
                Attr("blocksize", "int", REQUIRED, doc="b: the upscale factor"),
                Attr(
                    "mode",
                    "str",
                    "CRD",
                    choices=("CRD", "DCR"),
                    doc="channel order: CRD as PyTorch's PixelShuffle, DCR as ONNX's default",
                ),
            ],
            dtype_vars={"T": frozenset(DTYPES)},
            infer=infer_pixel_shuffle,
            bind=_pixel_shuffle_bind,
            cuda=cuda_variant(cuda.pixel_shuffle_bind, cuda.PIXEL_SHUFFLE_DTYPES),
            onnx="DepthToSpace",
        ),
        *grid_sample.descriptors(),
    ]
