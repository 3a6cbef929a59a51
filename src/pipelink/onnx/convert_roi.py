"""ONNX region and block converters: RoiAlign (``roi_align``) and Col2Im (``col2im``, its image and block
shapes constant inputs that become attributes). Attribute values the operators refuse are refused here,
at import, with the operators' own rules (``ops/roi``, ``ops/conv/col2im.py``).
"""

from __future__ import annotations

from typing import Any

from ..errors import PipeLinkError
from ..ops.conv.col2im import col2im_geometry
from ..ops.roi import check_roi_align_attrs
from .convert_common import _attr, _inputs
from .graph import Graph, Node, Unsupported, float32_attr

__all__: list[str] = []


def _roi_align(g: Graph, node: Node) -> None:
    """RoiAlign-10 and -16: opset 10 has no coordinate_transformation_mode and maps rois as
    ``output_half_pixel`` does (no half-pixel shift); 16 adds the mode, ``half_pixel`` by default."""
    names = _inputs(node, 3)
    if len(names) != 3:
        raise Unsupported("RoiAlign needs its X, rois and batch_indices inputs")
    default_mode = "half_pixel" if g.opset >= 16 else "output_half_pixel"
    attrs: dict[str, Any] = {
        "mode": str(_attr(node, "mode", "avg")),
        "output_height": int(_attr(node, "output_height", 1)),
        "output_width": int(_attr(node, "output_width", 1)),
        "sampling_ratio": int(_attr(node, "sampling_ratio", 0)),
        "spatial_scale": float32_attr(_attr(node, "spatial_scale", 1.0)),
        "coordinate_transformation_mode": str(_attr(node, "coordinate_transformation_mode", default_mode)),
    }
    try:
        check_roi_align_attrs(attrs)
    except PipeLinkError as e:
        raise Unsupported(e.message) from None
    g.stage(node, "roi_align", names, node.outputs[:1], **attrs)


def _col2im(g: Graph, node: Node) -> None:
    """Col2Im-18: image_shape and block_shape must be constants (the output's shape depends on them)."""
    image = g.ints(node, 1, "", "image_shape")
    block = g.ints(node, 2, "", "block_shape")
    if image is None or block is None:
        raise Unsupported("Col2Im needs its image_shape and block_shape inputs")
    attrs: dict[str, Any] = {"image_shape": image, "block_shape": block}
    for name in ("dilations", "pads", "strides"):
        if name in node.attrs:
            attrs[name] = [int(v) for v in node.attrs[name]]
    try:
        col2im_geometry({"dilations": (), "pads": (), "strides": (), **attrs})
    except PipeLinkError as e:
        raise Unsupported(e.message) from None
    g.stage(node, "col2im", node.inputs[:1], node.outputs[:1], **attrs)
