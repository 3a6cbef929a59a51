"""ONNX cast and quantization converters: Cast, CastLike (saturating into float8), QuantizeLinear and
DequantizeLinear.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import PipeLinkError
from .convert_common import _attr, _inputs, _only
from .graph import Graph, Node, Unsupported, onnx_dtype

__all__: list[str] = []


#: float8 dtypes: ONNX's Cast and CastLike saturate into them by default.
_FLOAT8 = ("float8_e4m3fn", "float8_e5m2")


#: What quantize_linear (the saturating cast) reads.
_SATURATING_FROM = ("float32", "float16", "bfloat16")


def _cast_to(g: Graph, node: Node, dtype: str) -> None:
    """Cast, CastLike: ``cast`` to ``dtype``; into a float8 type with saturate (ONNX's default) a value
    beyond the finite range (or an infinity) clips to its largest finite value, as ``quantize_linear``
    by a scale of 1 computes it (round to nearest even, then clip); saturate 0 is the plain cast (NaN, or
    inf for float8_e5m2)."""
    _only(node, round_mode="up")
    saturate = bool(_attr(node, "saturate", 1))
    if dtype not in _FLOAT8 or not saturate:
        g.stage(node, "cast", node.inputs[:1], node.outputs[:1], dtype=dtype)
        return
    source = g.dtypes.get(node.inputs[0])
    if source not in _SATURATING_FROM:
        raise Unsupported(
            f"a saturating cast to {dtype} from {source or 'an unknown dtype'}: PipeLink saturates from "
            f"{', '.join(_SATURATING_FROM)} (cast to float32 first, or set saturate=0)"
        )
    one = f"{node.outputs[0]}__unit_scale"
    g.constants[one] = np.ones((), get_dtype(source).numpy)
    g.dtypes[one] = source
    g.stage(node, "quantize_linear", [node.inputs[0], one], node.outputs[:1], output_dtype=dtype)


def _cast(g: Graph, node: Node) -> None:
    _cast_to(g, node, onnx_dtype(int(_attr(node, "to"))))


def _cast_like(g: Graph, node: Node) -> None:
    """CastLike: cast to the dtype of the second input, read from the graph's types (its values are not
    needed: it is no stage input)."""
    like = node.inputs[1] if len(node.inputs) > 1 else ""
    dtype = g.dtypes.get(like)
    if dtype is None and like in g.constants:
        try:
            dtype = get_dtype(g.constants[like].dtype).name
        except PipeLinkError:
            raise Unsupported(
                f"target_type {like!r} has dtype {g.constants[like].dtype}, which PipeLink lacks"
            ) from None
    if dtype is None:
        raise Unsupported(
            f"CastLike needs the dtype of its target_type input {like!r} (the graph does not give it)"
        )
    _cast_to(g, node, dtype)


def _quantize(g: Graph, node: Node) -> None:
    _only(node, block_size=0, precision=0)
    attrs: dict[str, Any] = {"axis": int(_attr(node, "axis", 1))}
    if not _attr(node, "saturate", 1):
        attrs["saturate"] = False
    if _attr(node, "output_dtype", 0):
        attrs["output_dtype"] = onnx_dtype(int(_attr(node, "output_dtype")))
    g.stage(node, "quantize_linear", _inputs(node, 3), node.outputs[:1], **attrs)


def _dequantize(g: Graph, node: Node) -> None:
    _only(node, block_size=0, output_dtype=0)
    g.stage(node, "dequantize_linear", _inputs(node, 3), node.outputs[:1], axis=int(_attr(node, "axis", 1)))
