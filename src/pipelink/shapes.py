"""Symbolic shapes: unification of dimension symbols and NumPy broadcasting (docs/architecture.md,
"From JSON to kernel").

A dimension is an ``int`` (known) or a ``str`` symbol (unknown until bound). A port's shape pattern is a
list of ints, symbols and at most one ``"..."`` (any number of leading dimensions). Failures come back
as plain ``Mismatch`` values so the caller can name the stage and port.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Dim",
    "Shape",
    "Bindings",
    "Mismatch",
    "match_pattern",
    "broadcast_shapes",
    "substitute",
    "is_concrete",
    "ELLIPSIS",
]

Dim = int | str
Shape = tuple[Dim, ...]
ELLIPSIS = "..."


@dataclass(frozen=True)
class Mismatch:
    """Why a shape does not fit: ``symbol`` is bound to ``expected`` elsewhere but is ``got`` here."""

    symbol: str
    expected: object
    got: object
    reason: str = ""


class Bindings:
    """Symbol -> dimension (or, for ``"..."``, a tuple of dimensions) bound while matching ports.

    ``origin`` remembers which port bound each symbol first, for error messages.
    """

    def __init__(self):
        self.values: dict[str, Dim | Shape] = {}
        self.origin: dict[str, str] = {}

    def copy(self) -> Bindings:
        other = Bindings()
        other.values = dict(self.values)
        other.origin = dict(self.origin)
        return other

    def bind(self, symbol: str, value, where: str) -> Mismatch | None:
        current = self.values.get(symbol)
        if current is None:
            self.values[symbol] = value
            self.origin[symbol] = where
            return None
        merged = unify(current, value)
        if merged is None:
            return Mismatch(symbol, current, value, f"bound by {self.origin[symbol]}")
        self.values[symbol] = merged
        return None


def unify(a, b):
    """The most specific value equal to both ``a`` and ``b`` (dims or tuples of dims), else None."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        if not (isinstance(a, tuple) and isinstance(b, tuple)) or len(a) != len(b):
            return None
        out = []
        for x, y in zip(a, b, strict=True):
            m = unify(x, y)
            if m is None:
                return None
            out.append(m)
        return tuple(out)
    if isinstance(a, int) and isinstance(b, int):
        return a if a == b else None
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return a  # two symbols: keep the first name


def match_pattern(pattern, shape: Shape, bindings: Bindings, where: str) -> Mismatch | None:
    """Bind the symbols of ``pattern`` against ``shape``; a literal int must match exactly."""
    if pattern is None:
        return None
    pattern = tuple(pattern)
    n_ell = pattern.count(ELLIPSIS)
    if n_ell == 0:
        if len(pattern) != len(shape):
            return Mismatch(
                "rank", len(pattern), len(shape), f"expects {len(pattern)} dimensions {list(pattern)}"
            )
        pairs = list(zip(pattern, shape, strict=True))
    else:
        i = pattern.index(ELLIPSIS)
        head, tail = pattern[:i], pattern[i + 1 :]
        if len(shape) < len(head) + len(tail):
            return Mismatch(
                "rank",
                f">= {len(head) + len(tail)}",
                len(shape),
                f"expects at least {len(head) + len(tail)} dimensions {list(pattern)}",
            )
        lead = tuple(shape[len(head) : len(shape) - len(tail)])
        problem = bindings.bind(ELLIPSIS, lead, where)
        if problem is not None:
            return problem
        pairs = list(zip(head, shape[: len(head)], strict=True)) + list(
            zip(tail, shape[len(shape) - len(tail) :], strict=True)
        )
    for pat, dim in pairs:
        if isinstance(pat, int):
            if unify(pat, dim) is None:
                return Mismatch(str(pat), pat, dim, "fixed by the operator")
            continue
        problem = bindings.bind(pat, dim, where)
        if problem is not None:
            return problem
    return None


def substitute(pattern, bindings: Bindings) -> Shape:
    """A concrete-or-symbolic shape from a pattern and the bindings of its symbols."""
    out: list[Dim] = []
    for item in pattern:
        if item == ELLIPSIS:
            out.extend(bindings.values.get(ELLIPSIS, ()))
        elif isinstance(item, int):
            out.append(item)
        else:
            out.append(bindings.values.get(item, item))
    return tuple(out)


def broadcast_shapes(*shapes: Shape) -> Shape | Mismatch:
    """NumPy broadcasting over possibly symbolic shapes. Symbols are assumed not to be 1."""
    ndim = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for axis in range(ndim):
        dims = [s[len(s) - ndim + axis] for s in shapes if len(s) - ndim + axis >= 0]
        result: Dim = 1
        for d in dims:
            if d == 1:
                continue
            if result == 1:
                result = d
                continue
            merged = unify(result, d)
            if merged is None:
                return Mismatch(f"axis {axis - ndim}", result, d, "shapes do not broadcast")
            result = merged
        out.append(result)
    return tuple(out)


def is_concrete(shape: Shape) -> bool:
    return all(isinstance(d, int) for d in shape)
