"""Sliding-window geometry of convolution and pooling (ONNX) over 2 or 3 spatial axes: padding, auto_pad,
output size, the transposed convolution's output size, and the strided view of every window.

One place for the formulas both families use, so the 2-d and 3-d convolutions and pools cannot disagree.
Nothing here allocates array data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...descriptor import Attr
from ...errors import InvalidArgumentError, ShapeMismatchError
from .._dims import check_ints, derived, is_known

__all__ = [
    "AUTO_PADS",
    "PADS_ORDER",
    "SPATIAL_AXES",
    "Window",
    "window_2d",
    "window_attrs",
    "window_nd",
    "window_view",
    "transpose_geometry",
]

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
#: What ``pads`` lists, by the number of spatial axes: every begin, then every end (ONNX's order).
PADS_ORDER = {2: "[top, left, bottom, right]", 3: "[front, top, left, back, bottom, right]"}
#: The spatial axes after N and C, by their number.
SPATIAL_AXES = {2: ("H", "W"), 3: ("D", "H", "W")}


@dataclass(frozen=True)
class Window:
    """Resolved geometry over the spatial axes ((H, W) or (D, H, W)): per-axis kernel size, stride,
    dilation, begin/end pads, output size."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    out: tuple

    @property
    def rank(self) -> int:
        """The number of spatial axes."""
        return len(self.kernel)

    @property
    def extent(self) -> tuple[int, ...]:
        """The span of one dilated window: ``(k - 1) * d + 1`` per axis."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations, strict=True))


def window_attrs(*, rank: int = 2, pads_doc: str | None = None):
    """The attributes every window operator over ``rank`` spatial axes shares (strides, pads, dilations,
    auto_pad), their defaults of that length."""
    return [
        Attr("strides", "ints", (1,) * rank, doc="step of the window per spatial axis"),
        Attr("pads", "ints", (0,) * (2 * rank), doc=pads_doc or f"{PADS_ORDER[rank]} zero padding"),
        Attr("dilations", "ints", (1,) * rank, doc="spacing of the window's taps"),
        Attr(
            "auto_pad",
            "str",
            "NOTSET",
            choices=AUTO_PADS,
            doc="SAME_UPPER/SAME_LOWER: pad so out = ceil(in / stride) (odd pad at the end/begin); "
            "VALID: no padding; NOTSET: use pads",
        ),
    ]


def window_2d(
    in_hw: tuple, kernel: tuple[int, int], attrs: Mapping[str, Any], *, op: str, ceil_mode: bool = False
) -> Window:
    """:func:`window_nd` over the two spatial axes (H, W) of a 2-d window (conv2d, max_pool2d, avg_pool2d).

    Raises
    ------
    InvalidArgumentError
        ``in_hw`` is not 2 sizes; else as :func:`window_nd`.
    ShapeMismatchError
        As :func:`window_nd`.
    """
    if len(in_hw) != 2:
        raise InvalidArgumentError(f"{op}: a 2-d window needs 2 spatial sizes (got {list(in_hw)})")
    return window_nd(tuple(in_hw), kernel, attrs, op=op, ceil_mode=ceil_mode)


def window_nd(
    in_sizes: tuple, kernel: tuple, attrs: Mapping[str, Any], *, op: str, ceil_mode: bool = False
) -> Window:
    """Resolve the window over an input of spatial size ``in_sizes`` (ints or symbols; its length is the
    number of spatial axes, which every attribute must match: ``pads`` lists every begin, then every end).

    Raises
    ------
    InvalidArgumentError
        Wrong attribute lengths, non-positive strides/dilations/kernel, negative pads, or explicit pads
        together with an auto_pad other than NOTSET.
    ShapeMismatchError
        The dilated kernel does not fit in the padded input.
    """
    strides, dilations, pads = tuple(attrs["strides"]), tuple(attrs["dilations"]), tuple(attrs["pads"])
    auto_pad, rank = attrs["auto_pad"], len(in_sizes)
    check_ints(kernel, rank, op=op, attr="kernel_shape", minimum=1)
    check_ints(strides, rank, op=op, attr="strides", minimum=1)
    check_ints(dilations, rank, op=op, attr="dilations", minimum=1)
    check_ints(pads, 2 * rank, op=op, attr="pads", minimum=0)
    if auto_pad != "NOTSET" and any(pads):
        raise InvalidArgumentError(
            f"{op}: explicit 'pads' {list(pads)} cannot be combined with auto_pad {auto_pad!r}; set one",
            attr="pads",
            got=list(pads),
        )
    begin, end, out = [], [], []
    for axis in range(rank):
        size, k, s, d = in_sizes[axis], kernel[axis], strides[axis], dilations[axis]
        extent = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            if not is_known(size):
                begin.append(0)
                end.append(0)
                out.append(derived(op, size, f"/{s}"))
                continue
            n = -(-size // s)
            total = max(0, (n - 1) * s + extent - size)
            small, large = total // 2, total - total // 2
            pb, pe = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
        else:
            pb, pe = (pads[axis], pads[axis + rank]) if auto_pad == "NOTSET" else (0, 0)
        begin.append(pb)
        end.append(pe)
        if not is_known(size):
            out.append(derived(op, size, k, s, d, pb, pe))
            continue
        span = size + pb + pe - extent
        if span < 0:
            raise ShapeMismatchError(
                f"{op}: the window ({k} taps, dilation {d}: {extent} wide) does not fit in spatial axis "
                f"{axis} of size {size} padded by {pb}+{pe}",
                port="x",
                symbol=f"axis {axis + 2}",  # after N and C
                expected=extent,
                got=size + pb + pe,
            )
        n = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (n - 1) * s >= size + pb:
            n -= 1  # the last window would start in the end padding: ONNX and PyTorch drop it
        out.append(n)
    return Window(tuple(kernel), strides, dilations, tuple(begin), tuple(end), tuple(out))


def window_view(padded: np.ndarray, win: Window) -> np.ndarray:
    """The strided view (no copy) of every window of ``padded``, whose last ``win.rank`` axes are the
    padded spatial ones: ``[..., *out, *kernel]``, each window's taps already dilated."""
    axes = tuple(range(padded.ndim - win.rank, padded.ndim))
    views = sliding_window_view(padded, win.extent, axis=axes)
    steps = tuple(slice(None, o * s, s) for o, s in zip(win.out, win.strides, strict=True))
    taps = tuple(slice(None, None, d) for d in win.dilations)
    return views[(..., *steps, *taps)]


def transpose_geometry(
    in_sizes: tuple, kernel: tuple, attrs: Mapping[str, Any], *, op: str
) -> tuple[tuple, tuple]:
    """A transposed convolution over ``len(in_sizes)`` spatial axes: the output size per axis and the full
    (uncropped) size the taps scatter into, ``None`` where the input or kernel size is a symbol.

    ``full = stride * (in - 1) + output_padding + (k - 1) * dilation + 1`` and
    ``out = full - pad_begin - pad_end`` (``pads`` lists every begin, then every end).

    Raises
    ------
    InvalidArgumentError
        Bad attribute lengths or values; output_padding not smaller than the stride or the dilation.
    ShapeMismatchError
        The pads crop the whole output away.
    """
    rank = len(in_sizes)
    strides, dilations = tuple(attrs["strides"]), tuple(attrs["dilations"])
    pads, extra = tuple(attrs["pads"]), tuple(attrs["output_padding"])
    if is_known(*kernel):
        check_ints(kernel, rank, op=op, attr="kernel_shape", minimum=1)
    check_ints(strides, rank, op=op, attr="strides", minimum=1)
    check_ints(dilations, rank, op=op, attr="dilations", minimum=1)
    check_ints(pads, 2 * rank, op=op, attr="pads", minimum=0)
    check_ints(extra, rank, op=op, attr="output_padding", minimum=0)
    out, full = [], []
    for axis in range(rank):
        s, d, p = strides[axis], dilations[axis], extra[axis]
        if p >= s and p >= d:
            raise InvalidArgumentError(
                f"{op}: output_padding {list(extra)} must be smaller than the stride {list(strides)} or the "
                f"dilation {list(dilations)} on each axis",
                attr="output_padding",
                got=list(extra),
            )
        size = in_sizes[axis]
        if not is_known(size, kernel[axis]):
            out.append(derived(op, size, kernel[axis]))
            full.append(None)
            continue
        whole = s * (size - 1) + p + (kernel[axis] - 1) * d + 1
        cropped = whole - pads[axis] - pads[axis + rank]
        if cropped < 0:
            raise ShapeMismatchError(
                f"{op}: pads {list(pads)} remove more than the {whole} output positions of spatial axis "
                f"{axis}",
                port="x",
                attr="pads",
                expected=f"<= {whole}",
                got=pads[axis] + pads[axis + rank],
            )
        out.append(cropped)
        full.append(whole)
    return tuple(out), tuple(full)
