"""The sampling shared by deform_conv2d (``deform.py``) and deform_im2col (``deform_im2col.py``): the
geometry, the offset and mask checks, the NumPy sampler of the sampled columns, and the kernels of
``deform.cu``.

Tap ``(i, j)`` of output pixel ``(oh, ow)`` is sampled bilinearly at ``((oh * stride_h - pad_top + dy) +
i * dilation_h, (ow * stride_w - pad_left + dx) + j * dilation_w)``, added in that order in the compute
dtype (float32, float64 for float64), ``(dy, dx)`` the tap's offset; each corner outside the image reads
0 (onnx's reference: GridSample with zeros padding), and the weights are applied to every corner, so a
non-finite position gives NaN. The CUDA kernels sample the same way and pick the same corners.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...descriptor import KernelContext
from ...errors import InvalidArgumentError, ShapeMismatchError
from ...limits import shape_nbytes
from ...shapes import unify
from .._dims import derived, is_known
from ..kernel import BLOCKS, KernelSource
from .window import window_2d

__all__ = [
    "check_columns",
    "check_divides",
    "check_port",
    "check_sampling",
    "deform_geometry",
    "ColumnSampler",
    "DeformGeometry",
    "KERNELS",
]

_SOURCE = Path(__file__).resolve().parent / "deform.cu"
_TUNABLES = {"block": (256, BLOCKS), "max_blocks_per_sm": (8, (1, 2, 4, 8, 16, 32))}
#: Both kernels of deform.cu: the direct convolution (deform.py plans it) and the columns (deform_im2col.py).
KERNELS: dict[str, KernelSource] = {
    "deform_conv2d": KernelSource("deform_conv2d", _SOURCE, "pl_deform_conv2d", {}, dict(_TUNABLES)),
    "deform_im2col": KernelSource("deform_im2col", _SOURCE, "pl_deform_im2col", {}, dict(_TUNABLES)),
}
#: The reference's temporaries per column element, at most (gathered corners and their int64 indices, the
#: bilinear sums, the sample, the columns).
_COLUMN_COPIES = 8


@dataclass(frozen=True)
class DeformGeometry:
    """One stage's sizes: x ``[n, c, h, w]``, w ``[m, c / group, kh, kw]`` (``m`` 0 for deform_im2col,
    which has no w), ``offset_group`` offset groups, the output's ``out_hw``, strides, begin pads and
    dilations per spatial axis."""

    n: int
    c: int
    h: int
    w: int
    m: int
    group: int
    offset_group: int
    kernel: tuple[int, int]
    out_hw: tuple[int, int]
    strides: tuple[int, int]
    pads_begin: tuple[int, int]
    dilations: tuple[int, int]

    @property
    def taps(self) -> int:
        return self.kernel[0] * self.kernel[1]


def _window(in_hw: tuple, kernel: tuple, attrs: Mapping[str, Any], op: str):
    """conv2d's window over the input (DeformConv has no auto_pad: its pads are explicit)."""
    return window_2d(tuple(in_hw), tuple(kernel), {**attrs, "auto_pad": "NOTSET"}, op=op)


def check_divides(op: str, what: str, count, parts: int, attr: str, port: str) -> None:
    """``parts >= 1`` divides ``count`` (a dim, or a symbol: not checked)."""
    if parts < 1:
        raise InvalidArgumentError(
            f"{op}: attribute {attr!r} must be >= 1 (got {parts})", attr=attr, got=parts
        )
    if is_known(count) and count % parts:
        raise ShapeMismatchError(
            f"{op}: {count} {what} cannot be split into {attr}={parts} parts",
            port=port,
            attr=attr,
            expected=f"a multiple of {parts}",
            got=count,
        )


def check_port(op: str, port: str, shape: tuple, expected: tuple, layout: str) -> None:
    """Input ``port`` has the ``expected`` shape (dims or symbols that unify), laid out as ``layout``."""
    same = len(shape) == len(expected) and all(
        unify(a, b) is not None for a, b in zip(shape, expected, strict=True)
    )
    if not same:
        raise ShapeMismatchError(
            f"{op}: input {port!r} has shape {list(shape)}, but {layout} is {list(expected)} here",
            port=port,
            expected=list(expected),
            got=list(shape),
        )


def check_sampling(
    op: str, x: tuple, kernel: tuple, offset: tuple, mask: tuple | None, attrs: Mapping[str, Any]
) -> tuple:
    """The output's ``(H_out, W_out)`` (ints or symbols) after checking that offset_group divides x's
    channels and that ``offset`` (and ``mask``, when given) have the shapes the window implies.

    Raises
    ------
    InvalidArgumentError
        offset_group below 1; bad strides, pads or dilations.
    ShapeMismatchError
        Channels that offset_group does not divide, a window that does not fit, an offset or mask of
        another shape.
    """
    (n, c, h, w), (kh, kw), offset_group = x, kernel, int(attrs["offset_group"])
    check_divides(op, "input channels", c, offset_group, "offset_group", "x")
    if is_known(kh, kw):
        out_hw = _window((h, w), (kh, kw), attrs, op).out
        offsets, masks = offset_group * 2 * kh * kw, offset_group * kh * kw
    else:
        out_hw = (derived(op, h), derived(op, w))
        offsets, masks = derived(op, offset_group, 2, kh, kw), derived(op, offset_group, kh, kw)
    check_port(op, "offset", offset, (n, offsets, *out_hw), "[N, offset_group * 2 * kH * kW, H_out, W_out]")
    if mask is not None:
        check_port(op, "mask", mask, (n, masks, *out_hw), "[N, offset_group * kH * kW, H_out, W_out]")
    return tuple(out_hw)


def deform_geometry(
    x_shape: tuple, kernel: tuple, attrs: Mapping[str, Any], *, m: int = 0, op: str = "deform_conv2d"
) -> DeformGeometry:
    """The resolved sizes of a stage of known shapes (as :func:`check_sampling` checked them); ``m``
    output channels (deform_conv2d's; 0 for deform_im2col, whose columns have none) in ``attrs["group"]``
    groups (1 when absent)."""
    n, c, h, w = (int(d) for d in x_shape)
    kh, kw = (int(d) for d in kernel)
    win = _window((h, w), (kh, kw), attrs, op)
    group, offset_group = int(attrs.get("group", 1)), int(attrs["offset_group"])
    spatial = (tuple(win.out), tuple(win.strides), tuple(win.pads_begin), tuple(win.dilations))
    return DeformGeometry(n, c, h, w, int(m), group, offset_group, (kh, kw), *spatial)


def _positions(geo: DeformGeometry, offset: np.ndarray, cdt: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The taps' sampling rows and columns of one batch element, ``[G, K, oH * oW]`` each:
    ``(o * stride - pad + d) + tap * dilation`` in ``cdt``, in that order (the CUDA kernel's)."""
    (kh, kw), (oh, ow) = geo.kernel, geo.out_hw
    off = offset.astype(cdt, copy=False).reshape(geo.offset_group, geo.taps, 2, oh, ow)
    top = (np.arange(oh) * geo.strides[0] - geo.pads_begin[0]).astype(cdt).reshape(oh, 1)
    left = (np.arange(ow) * geo.strides[1] - geo.pads_begin[1]).astype(cdt).reshape(1, ow)
    ky = np.repeat(np.arange(kh) * geo.dilations[0], kw).astype(cdt).reshape(geo.taps, 1, 1)
    kx = np.tile(np.arange(kw) * geo.dilations[1], kh).astype(cdt).reshape(geo.taps, 1, 1)
    rows = (top + off[:, :, 0]) + ky
    cols = (left + off[:, :, 1]) + kx
    return rows.reshape(geo.offset_group, geo.taps, -1), cols.reshape(geo.offset_group, geo.taps, -1)


def _sample(geo: DeformGeometry, padded: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Bilinear samples ``[G, C / G, K * P]`` of one batch element's ``padded`` x ``[G, C / G, (H + 2) *
    (W + 2)]`` (one zero pixel around) at ``rows``, ``cols`` ``[G, K, P]``: each corner's index clamped
    into the zero border (NaN too: fmax / fmin drop it), the weights applied to every corner."""
    y0, x0 = np.floor(rows), np.floor(cols)
    with np.errstate(invalid="ignore"):  # an infinite position: inf - inf, NaN weights, a NaN sample
        fy, fx = rows - y0, cols - x0
    gy, gx = 1 - fy, 1 - fx
    width = geo.w + 2

    def corner(r: np.ndarray, c: np.ndarray) -> np.ndarray:
        r = np.fmin(np.fmax(r, -1), geo.h).astype(np.int64) + 1
        c = np.fmin(np.fmax(c, -1), geo.w).astype(np.int64) + 1
        index = (r * width + c).reshape(geo.offset_group, 1, -1)
        return np.take_along_axis(padded, index, axis=2)

    def flat(a: np.ndarray) -> np.ndarray:
        return a.reshape(geo.offset_group, 1, -1)

    upper = flat(gx) * corner(y0, x0) + flat(fx) * corner(y0, x0 + 1)
    lower = flat(gx) * corner(y0 + 1, x0) + flat(fx) * corner(y0 + 1, x0 + 1)
    return flat(gy) * upper + flat(fy) * lower


class ColumnSampler:
    """The reference's sampling of one stage: x's batch elements copied, one at a time, inside a zero
    border made once, which :meth:`columns` reads."""

    def __init__(self, geo: DeformGeometry, cdt: np.dtype):
        self.geo, self.cdt = geo, cdt
        self.padded = np.zeros((geo.c, geo.h + 2, geo.w + 2), cdt)  # the border stays 0 across runs
        og = geo.offset_group
        self.planes = self.padded.reshape(og, geo.c // og, (geo.h + 2) * (geo.w + 2))  # per offset group

    def columns(self, x: np.ndarray, offset: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        """The sampled columns ``[C * kH * kW, H_out * W_out]`` (rows channel-major, then tap) of one batch
        element's x ``[C, H, W]``, offset and mask, in the compute dtype."""
        geo = self.geo
        np.copyto(self.padded[:, 1:-1, 1:-1], x, casting="unsafe")
        rows, cols = _positions(geo, offset, self.cdt)
        samples = _sample(geo, self.planes, rows, cols)  # [G, C/G, K * P]
        if mask is not None:
            samples *= mask.astype(self.cdt, copy=False).reshape(geo.offset_group, 1, -1)
        return samples.reshape(geo.c * geo.taps, math.prod(geo.out_hw))


def check_columns(ctx: KernelContext, geo: DeformGeometry, cdt: np.dtype, extra: int = 0) -> None:
    """Refuse, with the numbers and before anything is made, a stage whose reference temporaries (one
    batch element's columns, :data:`_COLUMN_COPIES` times) and ``extra`` bytes do not fit the host."""
    nbytes = _COLUMN_COPIES * shape_nbytes((geo.c * geo.taps, math.prod(geo.out_hw)), cdt.itemsize) + extra
    ctx.backend.check_fits(nbytes, tag=f"stage {ctx.stage!r} sampled columns")
