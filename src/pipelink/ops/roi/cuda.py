"""roi_align on CUDA: ``roi.cu``, one thread per output element; each thread reads its roi and batch index
(run-time data) and computes the roi's geometry and adaptive sampling grid on the device with the CPU
reference's formulas. Pure Python + NumPy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...descriptor import KernelContext
from ...errors import InvalidArgumentError
from ..kernel import (
    BLOCKS,
    DEFAULT_SM_COUNT,
    ArgSpec,
    KernelSource,
    LaunchPlan,
    PlanLaunch,
    flat_grid,
    kernel_dtype,
    make_plan,
    pointer,
    shape_of,
    sm_count_of,
    tuned_of,
    tuned_values,
)

__all__ = ["KERNELS", "TUNED_AS", "MAX_SAMPLING_GRID", "plan_roi_align", "roi_align_bind"]

MAX_SAMPLING_GRID = 1024
"""The most sample points per bin along one axis (a bin reads at most 1024 x 1024 points): a roi whose
adaptive grid needs more gives NaN, and sampling_ratio may not exceed it."""

_SOURCE = Path(__file__).resolve().parent / "roi.cu"
_TUNABLES = {"block": (256, BLOCKS), "max_blocks_per_sm": (8, (1, 2, 4, 8, 16, 32))}
KERNELS: dict[str, KernelSource] = {
    "roi_align": KernelSource("roi_align", _SOURCE, "pl_roi_align", {}, dict(_TUNABLES)),
}
TUNED_AS: dict[str, str] = {}
_SIZES = ("n", "N", "C", "H", "W", "OH", "OW")


def plan_roi_align(
    dtype: Any,
    x_shape: Any,
    num_rois: int,
    attrs: dict[str, Any],
    *,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = roi_align(x, rois, batch_indices)`` of a contiguous NCHW x, ``num_rois`` rois and the
    stage's resolved attributes:
    ``pl_roi_align(x, rois, batch, y, n, N, C, H, W, OH, OW, scale, ratio)``.

    Raises
    ------
    InvalidArgumentError
        A dtype the kernel does not take, an x that is not 4-d, a bad tunable.
    """
    source = KERNELS["roi_align"]
    dt = kernel_dtype(dtype, "roi_align", source.dtypes)
    shp = shape_of(x_shape, "roi_align")
    if len(shp) != 4:
        raise InvalidArgumentError(f"roi_align: x must be [N, C, H, W] (got {list(shp)})", op="roi_align")
    oh, ow = int(attrs["output_height"]), int(attrs["output_width"])
    n = int(num_rois) * shp[1] * oh * ow
    t = tuned_values(source, tuned)
    macros = {
        "PL_T": dt.cuda_type,
        "PL_MAX": int(attrs["mode"] == "max"),
        "PL_HALF_PIXEL": int(attrs["coordinate_transformation_mode"] == "half_pixel"),
        "PL_MAX_GRID": MAX_SAMPLING_GRID,
        "PL_BLOCK": t["block"],
    }
    specs = [
        pointer("x"),
        pointer("rois"),
        pointer("batch"),
        pointer("y"),
        *[ArgSpec(k, "i64") for k in _SIZES],
        ArgSpec("scale", "f64"),
        ArgSpec("ratio", "i32"),
    ]
    scalars = dict(zip(_SIZES, (n, *shp, oh, ow), strict=True))
    scalars.update(scale=float(attrs["spatial_scale"]), ratio=int(attrs["sampling_ratio"]))
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return make_plan(source, "pl_roi_align", macros, grid, t["block"], specs, scalars, dict(t))


def roi_align_bind(ctx: KernelContext):
    """The CUDA bind of roi_align (attributes checked by the descriptor's shape rule at load)."""
    dtype, shape = ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
    num_rois = int(tuple(ctx.in_shapes[1])[0])
    attrs = dict(ctx.attrs)
    tuned, sms = tuned_of(ctx, KERNELS["roi_align"]), sm_count_of(ctx)
    return PlanLaunch(
        ctx.backend,
        lambda a: plan_roi_align(dtype, shape, num_rois, attrs, tuned=tuned, sm_count=sms),
        {"x": ("in", 0), "rois": ("in", 1), "batch": ("in", 2), "y": ("out", 0)},
        ctx.stage,
    )
