"""Sliding-window geometry of 2-d convolution and pooling (ONNX): padding, auto_pad and output size.

One place for the formulas both families use, so conv2d, max_pool2d and avg_pool2d cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...descriptor import Attr
from ...errors import InvalidArgumentError, ShapeMismatchError
from .._dims import check_ints, derived, is_known

__all__ = ["AUTO_PADS", "Window", "window_2d", "window_attrs"]

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@dataclass(frozen=True)
class Window:
    """Resolved geometry over (H, W): per-axis kernel size, stride, dilation, begin/end pads, output size."""

    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads_begin: tuple[int, int]
    pads_end: tuple[int, int]
    out: tuple

    @property
    def extent(self) -> tuple[int, int]:
        """The span of one dilated window: ``(k - 1) * d + 1`` per axis."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations, strict=True))


def window_attrs(*, pads_doc: str = "[top, left, bottom, right] zero padding"):
    """The attributes every 2-d window operator shares (strides, pads, dilations, auto_pad)."""
    return [
        Attr("strides", "ints", (1, 1), doc="step of the window per spatial axis"),
        Attr("pads", "ints", (0, 0, 0, 0), doc=pads_doc),
        Attr("dilations", "ints", (1, 1), doc="spacing of the window's taps"),
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
    """Resolve the window over an input of spatial size ``in_hw`` (ints or symbols).

    Raises
    ------
    InvalidArgumentError
        Wrong attribute lengths, non-positive strides/dilations/kernel, negative pads, or explicit pads
        together with an auto_pad other than NOTSET.
    ShapeMismatchError
        The dilated kernel does not fit in the padded input.
    """
    strides, dilations, pads = tuple(attrs["strides"]), tuple(attrs["dilations"]), tuple(attrs["pads"])
    auto_pad = attrs["auto_pad"]
    check_ints(kernel, 2, op=op, attr="kernel_shape", minimum=1)
    check_ints(strides, 2, op=op, attr="strides", minimum=1)
    check_ints(dilations, 2, op=op, attr="dilations", minimum=1)
    check_ints(pads, 4, op=op, attr="pads", minimum=0)
    if auto_pad != "NOTSET" and any(pads):
        raise InvalidArgumentError(
            f"{op}: explicit 'pads' {list(pads)} cannot be combined with auto_pad {auto_pad!r}; set one",
            attr="pads",
            got=list(pads),
        )
    begin, end, out = [], [], []
    for axis in range(2):
        size, k, s, d = in_hw[axis], kernel[axis], strides[axis], dilations[axis]
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
            pb, pe = (pads[axis], pads[axis + 2]) if auto_pad == "NOTSET" else (0, 0)
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
                symbol=f"axis {axis + 2}",
                expected=extent,
                got=size + pb + pe,
            )
        n = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (n - 1) * s >= size + pb:
            n -= 1  # the last window would start in the end padding: ONNX and PyTorch drop it
        out.append(n)
    return Window(tuple(kernel), strides, dilations, tuple(begin), tuple(end), tuple(out))
