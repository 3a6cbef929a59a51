"""col2im (ONNX Col2Im-18, PyTorch's fold): the descriptor, the NumPy reference and the CUDA plan.

x ``[N, C * prod(block_shape), L]`` holds, for every sliding block (``L`` of them, over 1 to
:data:`MAX_SPATIAL` spatial axes), the ``prod(block_shape)`` taps of each channel; col2im adds every tap
into the image ``[N, C, *image_shape]`` at ``block * stride - pad_begin + tap * dilation`` (taps that land
in the pads are dropped). Both variants add the taps of one pixel in the same order (tap index ascending,
in the compute dtype: float32, float64 for float64), so they agree exactly: the reference adds one tap
offset at a time over the whole image, the CUDA kernel (``col2im.cu``, one thread per output element,
no atomics) gathers its pixel's taps. The block geometry is :func:`col2im_geometry`'s, for both.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...descriptor import REQUIRED, Attr, KernelContext, OperatorDescriptor, Port
from ...errors import InvalidArgumentError, ShapeMismatchError
from .._common import FLOATS, builtin_operator, compute_dtype
from .._dims import check_ints, derived, is_known
from ..kernel import (
    BLOCKS,
    DEFAULT_SM_COUNT,
    ArgSpec,
    KernelSource,
    LaunchPlan,
    PlanLaunch,
    cuda_variant,
    flat_grid,
    kernel_dtype,
    make_plan,
    pointer,
    prod,
    sm_count_of,
    tuned_of,
    tuned_values,
)

__all__ = ["descriptors", "col2im_geometry", "infer_col2im", "plan_col2im", "Col2ImGeometry", "KERNELS"]

MAX_SPATIAL = 6  # x's spatial axes the kernel takes (rank 8 with N and C)
_SOURCE = Path(__file__).resolve().parent / "col2im.cu"
_TUNABLES = {"block": (256, BLOCKS), "max_blocks_per_sm": (8, (1, 2, 4, 8, 16, 32))}
KERNELS: dict[str, KernelSource] = {
    "col2im": KernelSource("col2im", _SOURCE, "pl_col2im", {}, dict(_TUNABLES)),
}
_AXIS_ARGS = ("img", "blk", "nb", "st", "dl", "pd")


@dataclass(frozen=True)
class Col2ImGeometry:
    """Per spatial axis: image size, block (taps), dilation, begin and end pad, stride, and the number of
    sliding blocks ``(image + pads - dilation * (block - 1) - 1) // stride + 1``."""

    image: tuple[int, ...]
    block: tuple[int, ...]
    dilations: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    strides: tuple[int, ...]
    blocks: tuple[int, ...]


def col2im_geometry(attrs: Mapping[str, Any]) -> Col2ImGeometry:
    """The block geometry of col2im's attributes (empty dilations, pads, strides: 1, 0, 1 per axis).

    Raises
    ------
    InvalidArgumentError
        image_shape and block_shape of different lengths or of more than :data:`MAX_SPATIAL` axes,
        attribute lengths other than one value per axis (two for pads), sizes below 1, negative pads.
    ShapeMismatchError
        A dilated block larger than the padded image along an axis.
    """
    op = "col2im"
    image, block = tuple(attrs["image_shape"]), tuple(attrs["block_shape"])
    d = len(image)
    if not 1 <= d <= MAX_SPATIAL:
        raise InvalidArgumentError(
            f"{op}: attribute 'image_shape' must have 1 to {MAX_SPATIAL} values (got {list(image)})",
            attr="image_shape",
            got=list(image),
        )
    dilations = tuple(attrs["dilations"]) or (1,) * d
    pads = tuple(attrs["pads"]) or (0,) * (2 * d)
    strides = tuple(attrs["strides"]) or (1,) * d
    check_ints(image, d, op=op, attr="image_shape", minimum=1)
    check_ints(block, d, op=op, attr="block_shape", minimum=1)
    check_ints(dilations, d, op=op, attr="dilations", minimum=1)
    check_ints(strides, d, op=op, attr="strides", minimum=1)
    check_ints(pads, 2 * d, op=op, attr="pads", minimum=0)
    blocks = []
    for axis in range(d):
        span = image[axis] + pads[axis] + pads[axis + d] - dilations[axis] * (block[axis] - 1) - 1
        if span < 0:
            raise ShapeMismatchError(
                f"{op}: block_shape {list(block)} with dilations {list(dilations)} does not fit spatial axis "
                f"{axis} of image_shape {list(image)} padded by {pads[axis]}+{pads[axis + d]}",
                attr="block_shape",
                expected=f"<= {image[axis] + pads[axis] + pads[axis + d]}",
                got=dilations[axis] * (block[axis] - 1) + 1,
            )
        blocks.append(span // strides[axis] + 1)
    return Col2ImGeometry(image, block, dilations, pads[:d], pads[d:], strides, tuple(blocks))


def infer_col2im(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of col2im: x ``[N, C * prod(block_shape), L]`` gives ``[N, C, *image_shape]``.

    Raises
    ------
    ShapeMismatchError
        x's channels not a multiple of ``prod(block_shape)``, or ``L`` other than the number of blocks.
    """
    geo = col2im_geometry(attrs)
    n, channels, length = tuple(in_shapes[0])
    taps = math.prod(geo.block)
    if is_known(channels) and channels % taps:
        raise ShapeMismatchError(
            f"col2im: input 'x' has {channels} channels, not a multiple of prod(block_shape) = {taps} "
            f"(block_shape {list(geo.block)})",
            port="x",
            symbol="C",
            expected=f"a multiple of {taps}",
            got=channels,
        )
    blocks = math.prod(geo.blocks)
    if is_known(length) and length != blocks:
        raise ShapeMismatchError(
            f"col2im: input 'x' has {length} blocks along its last axis, but image_shape {list(geo.image)} "
            f"gives {list(geo.blocks)} = {blocks} sliding blocks",
            port="x",
            symbol="L",
            expected=blocks,
            got=length,
        )
    c = channels // taps if is_known(channels) else derived("col2im", channels, taps)
    return ((n, c, *geo.image),), (in_dtypes[0],)


def _tap_slices(geo: Col2ImGeometry, tap: tuple[int, ...]) -> tuple[tuple, tuple] | None:
    """For one tap offset: the blocks whose tap lands in the image, and where (slices per spatial axis),
    or None when none does. Block l's tap lands at ``l * stride - pad_begin + tap * dilation``."""
    src, dst = [], []
    for axis, k in enumerate(tap):
        s, start = geo.strides[axis], k * geo.dilations[axis] - geo.pads_begin[axis]
        lo = max(0, -(start // s))  # the first block landing at >= 0: ceil(-start / s)
        hi = min(geo.blocks[axis], (geo.image[axis] - 1 - start) // s + 1)  # past the last one inside
        if hi <= lo:
            return None
        src.append(slice(lo, hi))
        dst.append(slice(start + lo * s, start + (hi - 1) * s + 1, s))
    return tuple(src), tuple(dst)


def _col2im_bind(ctx: KernelContext):
    geo = col2im_geometry(ctx.attrs)
    n, channels, _ = tuple(ctx.in_shapes[0])
    taps = math.prod(geo.block)
    c = channels // taps
    cdt = compute_dtype(ctx.in_dtypes[0])
    acc = np.empty(ctx.out_shapes[0], cdt)
    # every tap offset (tap index ascending) that lands in the image, with its slices: no padded buffer;
    # none for an empty x (its channels bound the taps only when there are some)
    steps = []
    offsets = itertools.product(*(range(k) for k in geo.block)) if channels else ()
    for index, tap in enumerate(offsets):
        where = _tap_slices(geo, tap)
        if where is not None:
            steps.append((index, *where))

    def kernel(inputs, outputs, stream):
        cols = inputs[0].reshape(n, c, taps, *geo.blocks)
        acc.fill(0)
        for index, src, dst in steps:
            acc[(slice(None), slice(None), *dst)] += cols[(slice(None), slice(None), index, *src)]
        np.copyto(outputs[0], acc, casting="unsafe")

    return kernel


def plan_col2im(
    dtype: Any,
    x_shape: Any,
    geo: Col2ImGeometry,
    *,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan col2im of a contiguous x ``[N, C * K, L]`` with the resolved geometry ``geo``:
    ``pl_col2im(x, y, n, C, K, L, img0..5, blk0..5, nb0..5, st0..5, dl0..5, pd0..5)``.

    Raises
    ------
    InvalidArgumentError
        A dtype the kernel does not take, an x that is not 3-d, a bad tunable.
    """
    source = KERNELS["col2im"]
    dt = kernel_dtype(dtype, "col2im", source.dtypes)
    shp = tuple(int(v) for v in x_shape)
    if len(shp) != 3:
        raise InvalidArgumentError(f"col2im: x must be [N, C * K, L] (got {list(shp)})", op="col2im")
    taps = math.prod(geo.block)
    c = shp[1] // taps
    n = shp[0] * c * prod(geo.image)
    t = tuned_values(source, tuned)
    d = len(geo.image)
    macros = {"PL_T": dt.cuda_type, "PL_D": d, "PL_BLOCK": t["block"]}
    scalars: dict[str, Any] = {"n": n, "C": c, "K": taps, "L": shp[2]}
    values = (geo.image, geo.block, geo.blocks, geo.strides, geo.dilations, geo.pads_begin)
    for name, axis_values in zip(_AXIS_ARGS, values, strict=True):
        for k in range(MAX_SPATIAL):
            scalars[f"{name}{k}"] = int(axis_values[k]) if k < d else 1
    specs = [
        pointer("x"),
        pointer("y"),
        *[ArgSpec(k, "i64") for k in ("n", "C", "K", "L")],
        *[ArgSpec(f"{name}{k}", "i64") for name in _AXIS_ARGS for k in range(MAX_SPATIAL)],
    ]
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return make_plan(source, "pl_col2im", macros, grid, t["block"], specs, scalars, dict(t))


def _col2im_cuda_bind(ctx: KernelContext):
    dtype, shape = ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
    geo = col2im_geometry(ctx.attrs)
    tuned, sms = tuned_of(ctx, KERNELS["col2im"]), sm_count_of(ctx)
    return PlanLaunch(
        ctx.backend,
        lambda a: plan_col2im(dtype, shape, geo, tuned=tuned, sm_count=sms),
        {"x": ("in", 0), "y": ("out", 0)},
        ctx.stage,
    )


def descriptors() -> list[OperatorDescriptor]:
    """A fresh descriptor of col2im (one per registry)."""
    return [
        builtin_operator(
            "col2im",
            doc="Add the sliding blocks' taps of x [N, C * prod(block_shape), L] back into the image "
            f"[N, C, *image_shape] (1 to {MAX_SPATIAL} spatial axes; PyTorch's fold).",
            inputs=[Port("x", shape=["N", "CK", "L"], dtype="T", doc="[N, C * prod(block_shape), L]")],
            outputs=[Port("y", dtype="T", doc="[N, C, *image_shape]")],
            attrs=[
                Attr("image_shape", "ints", REQUIRED, doc="the output's spatial size"),
                Attr("block_shape", "ints", REQUIRED, doc="the taps of one block per spatial axis"),
                Attr("dilations", "ints", (), doc="spacing of a block's taps per axis (empty: 1)"),
                Attr(
                    "pads", "ints", (), doc="[begin..., end...] per axis, dropped from the image (empty: 0)"
                ),
                Attr("strides", "ints", (), doc="step between blocks per axis (empty: 1)"),
            ],
            dtype_vars={"T": FLOATS},
            variant_dtypes=FLOATS,
            infer=infer_col2im,
            bind=_col2im_bind,
            cuda=cuda_variant(_col2im_cuda_bind, FLOATS),
            onnx="Col2Im",
        )
    ]
