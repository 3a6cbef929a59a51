"""The helpers every ONNX converter family uses: attributes, inputs, a one-to-one converter, a bound
scalar constant and a tensor's shape. convert.py and the ``convert_*`` families import them from here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

from ..dtypes import get_dtype
from .graph import Graph, Node, Unsupported

__all__ = ["Converter", "saturating_cast"]


Converter = Callable[[Graph, Node], None]


def _attr(node: Node, name: str, default: Any = None) -> Any:
    value = node.attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else value


def _only(node: Node, **allowed: Any) -> None:
    """Refuse attributes set to a value PipeLink does not implement (``name=default`` each)."""
    for name, default in allowed.items():
        value = _attr(node, name, default)
        if value != default:
            raise Unsupported(f"attribute {name}={value!r} is not supported (only {default!r})")


def _inputs(node: Node, count: int) -> list[str]:
    """The first ``count`` inputs, trailing absent ones dropped; an absent one in the middle is refused."""
    names = list(node.inputs[:count])
    while names and not names[-1]:
        names.pop()
    if "" in names:
        raise Unsupported(
            f"an absent optional input before a present one (inputs {node.inputs}) is not supported"
        )
    return names


def _one_to_one(operator: str, arity: int) -> Converter:
    def convert_node(g: Graph, node: Node) -> None:
        g.stage(node, operator, _inputs(node, arity), node.outputs[:1])

    return convert_node


def _scalar(g: Graph, node: Node, like: str, key: str, value: float) -> str:
    """A bound scalar constant of ``like``'s float dtype for one of ``node``'s composed stages."""
    dtype = g.dtypes.get(like)
    if dtype is None or not get_dtype(dtype).is_floating:
        raise Unsupported(f"{node.op_type} needs a float input of known dtype (for its constants)")
    name = f"{node.outputs[0]}__{key}"
    g.constants[name] = np.array(value, dtype=get_dtype(dtype).numpy)
    g.dtypes[name] = dtype
    return name


def saturating_cast(
    g: Graph, node: Node, value: str, y: str, dtype: str, compute: str, tag: str = ""
) -> None:
    """``y = cast(clip(value, the range of the integer dtype), dtype)``: ``value`` (a float tensor of type
    ``compute``, already rounded) clipped by a max and a min stage, so the cast after is exact."""
    limits = ml_dtypes.iinfo(get_dtype(dtype).numpy)  # NumPy's integers and the sub-byte ones
    for op, bound in (("max", limits.min), ("min", limits.max)):
        name = f"{y}__{tag}{op}_bound"
        g.constants[name] = np.asarray(bound, get_dtype(compute).numpy)
        g.dtypes[name] = compute
        g.stage(node, op, [value, name], [f"{y}__{tag}{op}"])
        value = f"{y}__{tag}{op}"
    g.stage(node, "cast", [value], [y], dtype=dtype)
