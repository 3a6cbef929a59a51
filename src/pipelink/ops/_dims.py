"""Axis and dimension rules shared by the shape-changing operator families (ONNX conventions).

Shape rules run at load on possibly symbolic shapes (a dimension is an int or a symbol string); a
dimension computed from an unknown one becomes a *derived* symbol that no user symbol can equal.
Nothing here touches array data.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from ..errors import InvalidArgumentError

__all__ = ["normalize_axis", "normalize_axes", "is_known", "derived", "product", "check_ints"]


def normalize_axis(axis: int, ndim: int, *, op: str, attr: str = "axis", inclusive: bool = False) -> int:
    """``axis`` in ``[0, ndim)`` (``[0, ndim]`` when ``inclusive``), negative counting from the end.

    Raises
    ------
    InvalidArgumentError
        ``axis`` is outside ``[-ndim, ndim)`` (``[-ndim, ndim]`` when ``inclusive``).
    """
    top = ndim + 1 if inclusive else ndim
    if not -ndim <= axis < top:
        bound = f"[-{ndim}, {ndim}]" if inclusive else f"[-{ndim}, {ndim})"
        raise InvalidArgumentError(
            f"{op}: attribute {attr!r} must be in {bound} for a {ndim}-d input (got {axis})",
            attr=attr,
            got=axis,
        )
    return axis + ndim if axis < 0 else axis


def normalize_axes(axes: Iterable[int], ndim: int, *, op: str, attr: str = "axes") -> tuple[int, ...]:
    """Each axis normalised by :func:`normalize_axis`, in the given order.

    Raises
    ------
    InvalidArgumentError
        An axis is out of range or named twice (``-1`` and ``ndim-1`` are the same axis).
    """
    out = tuple(normalize_axis(a, ndim, op=op, attr=attr) for a in axes)
    if len(set(out)) != len(out):
        raise InvalidArgumentError(
            f"{op}: attribute {attr!r} names an axis twice (got {list(axes)}, i.e. {list(out)} for a "
            f"{ndim}-d input)",
            attr=attr,
            got=list(axes),
        )
    return out


def is_known(*dims) -> bool:
    """True when every dimension is an int (not a symbol)."""
    return all(isinstance(d, int) for d in dims)


def derived(op: str, *parts) -> str:
    """A symbol for a dimension computed by ``op`` from unknown ones (bound when the pipeline runs).

    Its parentheses keep it apart from user symbols (letters, digits and ``_`` only).
    """
    return f"{op}({','.join(str(p) for p in parts)})"


def product(dims: Sequence, *, op: str):
    """The product of dimensions: an int when all are known (or one is 0), else a derived symbol."""
    if 0 in dims:
        return 0
    if is_known(*dims):
        return math.prod(dims)
    return derived(op, "*".join(str(d) for d in dims))


def check_ints(values: Sequence[int], count: int, *, op: str, attr: str, minimum: int | None = None) -> None:
    """``values`` has ``count`` entries, each ``>= minimum`` when given.

    Raises
    ------
    InvalidArgumentError
        Naming the attribute, the rule and the value.
    """
    if len(values) != count:
        raise InvalidArgumentError(
            f"{op}: attribute {attr!r} must have {count} values (got {list(values)})",
            attr=attr,
            got=list(values),
        )
    if minimum is not None and any(v < minimum for v in values):
        raise InvalidArgumentError(
            f"{op}: every value of attribute {attr!r} must be >= {minimum} (got {list(values)})",
            attr=attr,
            got=list(values),
        )
