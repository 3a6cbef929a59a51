"""Resampling on CUDA: resize runs ``resize.cu`` (one thread per output element, the coordinates and the
weights, antialiased filters' included, computed on the device with the CPU reference's formulas: no table
crosses to the device, so a launch stays one prebuilt kernel the native core replays; tf_crop_and_resize's
roi windows and extrapolation value are kernel arguments too); pixel_shuffle is a
permutation of a reshaped x and runs the transpose family's kernel. Pure Python + NumPy.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...descriptor import KernelContext
from ...dtypes import get_dtype
from ...errors import InvalidArgumentError
from ..kernel import (
    BLOCKS,
    DEFAULT_SM_COUNT,
    FLOATS,
    MAX_NDIM,
    ArgSpec,
    KernelSource,
    LaunchPlan,
    PlanLaunch,
    flat_grid,
    make_plan,
    pointer,
    prod,
    shape_of,
    sm_count_of,
    tuned_of,
    tuned_values,
)
from ..transpose.cuda import KERNELS as TRANSPOSE_KERNELS
from ..transpose.cuda import plan_transpose
from .crop import FULL, crop_windows, extrapolation_fill

__all__ = [
    "KERNELS",
    "TUNED_AS",
    "RESIZE_DTYPES",
    "MAX_CUBIC_AXES",
    "resized_axes",
    "plan_resize",
    "resize_bind",
    "pixel_shuffle_layout",
    "pixel_shuffle_bind",
    "PIXEL_SHUFFLE_DTYPES",
]

_SOURCE = Path(__file__).resolve().parent / "resize.cu"
MAX_CUBIC_AXES = 3  # cubic blends 4**k neighbours per output over k resized axes (64 at most)
_TUNABLES = {"block": (256, BLOCKS), "max_blocks_per_sm": (8, (1, 2, 4, 8, 16, 32))}
RESIZE_DTYPES = FLOATS + ("int8", "int32", "int64", "uint8")
PIXEL_SHUFFLE_DTYPES = TRANSPOSE_KERNELS["transpose"].dtypes
_COORD = {
    "half_pixel": "PL_COORD_HALF_PIXEL",
    "half_pixel_symmetric": "PL_COORD_HALF_PIXEL_SYMMETRIC",
    "pytorch_half_pixel": "PL_COORD_PYTORCH_HALF_PIXEL",
    "asymmetric": "PL_COORD_ASYMMETRIC",
    "align_corners": "PL_COORD_ALIGN_CORNERS",
    "tf_crop_and_resize": "PL_COORD_TF_CROP_AND_RESIZE",
}
_NEAREST = {
    "round_prefer_floor": "PL_NEAREST_ROUND_PREFER_FLOOR",
    "round_prefer_ceil": "PL_NEAREST_ROUND_PREFER_CEIL",
    "floor": "PL_NEAREST_FLOOR",
    "ceil": "PL_NEAREST_CEIL",
}
KERNELS: dict[str, KernelSource] = {
    "resize": KernelSource("resize", _SOURCE, "pl_resize", {}, dict(_TUNABLES), dtypes=RESIZE_DTYPES),
}
TUNED_AS: dict[str, str] = {}


def resized_axes(shape: tuple, out_shape: tuple, scales, windows=None) -> list[int]:
    """The axes resize samples: an axis of the same size at scale 1 maps to itself in every mode (in
    tf_crop_and_resize, one whose roi ``windows`` entry crops nothing, ``(0, 1)``)."""
    return [
        k
        for k, (d, o) in enumerate(zip(shape, out_shape, strict=True))
        if not (d == o and scales[k] == 1 and (windows is None or tuple(windows[k]) == FULL))
    ]


def plan_resize(
    dtype: Any,
    shape: Any,
    out_shape: Any,
    scales: Any,
    attrs: Mapping[str, Any],
    *,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = resize(x)`` from the shapes and per-axis scales ``resize_plan`` resolved and the stage's
    ``mode``, ``coordinate_transformation_mode``, ``nearest_mode``, ``antialias`` and, for
    tf_crop_and_resize, ``roi`` and ``extrapolation_value``:
    ``pl_resize(x, y, n, din0..din7, dout0..dout7, sc0..sc7, resized, cubic_a, rs0..rs7, re0..re7,
    fill)`` (``rs``/``re`` each axis's roi start and end, ``fill`` the extrapolation value as y holds it).

    Raises
    ------
    InvalidArgumentError
        A dtype the kernel does not take (linear: floats only), more than 8 axes, antialias with mode
        nearest, a roi or extrapolation value ``crop.py`` refuses, a bad tunable.
    """
    source = KERNELS["resize"]
    dt = get_dtype(dtype)
    mode = attrs["mode"]
    linear = mode != "nearest"  # linear and cubic blend neighbours
    allowed = FLOATS if linear else RESIZE_DTYPES
    if dt.name not in allowed:
        raise InvalidArgumentError(
            f"resize: mode {attrs['mode']!r} takes {', '.join(allowed)} (got {dt.name})",
            op="resize",
            dtype=dt.name,
        )
    shp, out = shape_of(shape, "resize"), shape_of(out_shape, "resize")
    if len(shp) > MAX_NDIM:
        raise InvalidArgumentError(f"resize: at most {MAX_NDIM} axes (got {len(shp)})", op="resize")
    windows = crop_windows(len(shp), attrs)
    value = attrs.get("extrapolation_value", 0.0)
    fill = 0.0 if windows is None else float(extrapolation_fill(dt.name, value))  # a value of y's dtype
    # an axis left as it is samples itself in every coordinate mode (as the CPU reference skips it)
    resized = resized_axes(shp, out, scales, windows)
    if mode == "cubic" and len(resized) > 3:
        raise InvalidArgumentError(
            f"resize: mode 'cubic' resizes at most 3 axes (got {len(resized)})", op="resize"
        )
    antialias = bool(attrs.get("antialias", False))
    if antialias and not linear:
        raise InvalidArgumentError(
            "resize: 'antialias' filters modes 'linear' and 'cubic', not 'nearest'", op="resize"
        )
    t = tuned_values(source, tuned)
    macros = {
        "PL_T": dt.cuda_type,
        "PL_NDIM": max(1, len(shp)),
        "PL_LINEAR": int(linear),
        "PL_NL": len(resized) if linear else 0,
        "PL_CUBIC": int(mode == "cubic"),
        "PL_EXCLUDE": int(bool(attrs.get("exclude_outside", False))),
        # no resized axis: every output copies its input, as the plain linear path does
        "PL_ANTIALIAS": int(antialias and bool(resized)),
        "PL_COORD": _COORD[attrs["coordinate_transformation_mode"]],
        "PL_NEAREST": _NEAREST[attrs["nearest_mode"]],
        "PL_BLOCK": t["block"],
    }
    n = prod(out)
    scalars: dict[str, Any] = {
        "n": n,
        "resized": sum(1 << k for k in resized),
        "cubic_a": float(attrs.get("cubic_coeff_a", -0.75)),
        "fill": fill,
    }
    for k in range(MAX_NDIM):
        scalars[f"din{k}"] = shp[k] if k < len(shp) else 1
        scalars[f"dout{k}"] = max(out[k], 1) if k < len(out) else 1
        scalars[f"sc{k}"] = float(scales[k]) if k < len(shp) else 1.0
        window = windows[k] if windows is not None and k < len(shp) else FULL
        scalars[f"rs{k}"], scalars[f"re{k}"] = window
    specs = [
        pointer("x"),
        pointer("y"),
        ArgSpec("n", "i64"),
        *[ArgSpec(f"{p}{k}", "i64") for p in ("din", "dout") for k in range(MAX_NDIM)],
        *[ArgSpec(f"sc{k}", "f64") for k in range(MAX_NDIM)],
        ArgSpec("resized", "i32"),
        ArgSpec("cubic_a", "f64"),
        *[ArgSpec(f"{p}{k}", "f64") for p in ("rs", "re") for k in range(MAX_NDIM)],
        ArgSpec("fill", "f64"),
    ]
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return make_plan(source, "pl_resize", macros, grid, t["block"], specs, scalars, dict(t))


def resize_bind(resize_plan):
    """The CUDA bind of resize; ``resize_plan(shape, attrs) -> (out_shape, scales)`` is the reference's."""

    def bind(ctx: KernelContext):
        dtype, shape = ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
        out, scales = resize_plan(shape, ctx.attrs)
        attrs = dict(ctx.attrs)
        tuned, sms = tuned_of(ctx, KERNELS["resize"]), sm_count_of(ctx)
        return PlanLaunch(
            ctx.backend,
            lambda a: plan_resize(dtype, shape, out, scales, attrs, tuned=tuned, sm_count=sms),
            {"x": ("in", 0), "y": ("out", 0)},
            ctx.stage,
        )

    return bind


def pixel_shuffle_layout(shape: tuple[int, ...], blocksize: int, mode: str) -> tuple[tuple, tuple]:
    """pixel_shuffle as ``y = x.reshape(split).transpose(perm)``: ``(split, perm)`` for DCR (depth =
    row offset, column offset, channel) or CRD (channel, row offset, column offset: PyTorch's)."""
    n, c, h, w = shape
    b = blocksize
    if mode == "DCR":
        return (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    return (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)


def pixel_shuffle_bind(ctx: KernelContext):
    """pixel_shuffle: the transpose family's permute of the reshaped input."""
    dtype = ctx.in_dtypes[0]
    shape, blocksize = tuple(ctx.in_shapes[0]), int(ctx.attrs["blocksize"])
    split, perm = pixel_shuffle_layout(shape, blocksize, ctx.attrs["mode"])
    tuned, sms = tuned_of(ctx, TRANSPOSE_KERNELS["transpose"]), sm_count_of(ctx)
    return PlanLaunch(
        ctx.backend,
        lambda a: plan_transpose(dtype, split, perm, tuned=tuned, sm_count=sms),
        {"x": ("in", 0), "y": ("out", 0)},
        ctx.stage,
    )
