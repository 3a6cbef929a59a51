"""ONNX Einsum lowered at import onto PipeLink's existing operators: :func:`parse` reads the equation,
:func:`lower` plans the stages (as_strided for a diagonal, reduce_sum, squeeze, transpose, unsqueeze,
reshape, mul and matmul) that compute it exactly.

It adds no kernel and computes nothing itself; what those operators cannot express (a diagonal of a dim
known only at run time, a contraction of integers, a merge of several run-time dims) is refused with
:class:`EinsumError`, which the converter reports with the node.
"""

from __future__ import annotations

import math
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import product
from typing import Any

__all__ = ["EinsumError", "Equation", "Step", "dots_are_ellipses", "parse", "lower", "plan"]

_LETTERS = frozenset(string.ascii_letters)
_ALLOWED = _LETTERS | frozenset(",.->")
# The labels of the dims an ellipsis stands for: characters no equation can hold (the k-th from the
# right is _ELLIPSIS_BASE - k), so they are never confused with a letter.
_ELLIPSIS_BASE = 0x2FF


class EinsumError(ValueError):
    """Why an Einsum equation is invalid, or cannot be lowered onto PipeLink's operators."""


@dataclass(frozen=True)
class Equation:
    """A parsed equation, its ellipses expanded: one string of labels per operand and the output's.

    A label is a letter, or for a dim an ellipsis stands for a character outside A-Z and a-z (the same
    one for the same dim, counted from the right as NumPy broadcasts).
    """

    inputs: tuple[str, ...]
    output: str


@dataclass(frozen=True)
class Step:
    """One stage of a plan: ``operator`` with ``attrs`` on values ``inputs``. Values ``0 .. n-1`` are the
    operands; step ``k`` makes value ``n + k``; the last step's value is the Einsum's output."""

    operator: str
    inputs: tuple[int, ...]
    attrs: dict[str, Any] = field(default_factory=dict)


def _label_name(label: str) -> str:
    if label in _LETTERS:
        return repr(label)
    return f"dim {_ELLIPSIS_BASE - ord(label)} of '...' (from the right)"


def _term(text: str, equation: str, what: str) -> tuple[str, bool, str]:
    """A term split at its ellipsis: (letters before, has an ellipsis, letters after)."""
    if text.count("...") > 1:
        raise EinsumError(f"equation {equation!r}: {what} {text!r} has more than one '...'")
    head, dots, tail = text.partition("...")
    if "." in head + tail:
        raise EinsumError(f"equation {equation!r}: {what} {text!r} has a '.' outside a '...'")
    return head, bool(dots), tail


def dots_are_ellipses(equation: str) -> bool:
    """Whether every ``.`` of ``equation`` is in a term's one ``...``. onnx 1.23's shape inference never
    returns on an equation with a stray dot (``i.j->ij``, ``....->``), so the import checks this first."""
    try:
        for k, text in enumerate(equation.replace("->", ",").split(",")):
            _term(text, equation, f"term {k}")
    except EinsumError:
        return False
    return True


def parse(equation: str, ranks: Sequence[int]) -> Equation:
    """Parse an ONNX Einsum equation for operands of the given ranks.

    Parameters
    ----------
    equation : str
        ``term,term,...->output`` or, implicit, without ``->`` (the output is then the labels that appear
        once, sorted, after the ellipsis's dims). Letters (case-sensitive), ``...`` at most once a term,
        spaces anywhere.
    ranks : sequence of int
        The rank of each operand.

    Returns
    -------
    Equation

    Raises
    ------
    EinsumError
        A bad character, a stray ``.``, ``-`` or ``>``, a term count that differs from the operands', a
        term naming more or fewer dims than its operand has, an output label in no operand or repeated,
        or an output without ``...`` where the operands' ellipses stand for dims.
    """
    text = equation.replace(" ", "")
    if not text:
        raise EinsumError("the equation is empty")
    bad = sorted(set(text) - _ALLOWED)
    if bad:
        raise EinsumError(
            f"equation {equation!r} has {''.join(bad)!r}: only letters, ',', '...', '->' and spaces "
            "may appear"
        )
    lhs, arrow, rhs = text.partition("->")
    if "-" in lhs + rhs or ">" in lhs + rhs:
        raise EinsumError(f"equation {equation!r}: '-' and '>' may appear only as one '->'")
    if "," in rhs:
        raise EinsumError(f"equation {equation!r}: the output (after '->') is one term, without ','")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise EinsumError(
            f"equation {equation!r} has {len(terms)} operand term(s) but the node has {len(ranks)} input(s)"
        )
    parts = [_term(t, equation, f"operand {k}'s term") for k, t in enumerate(terms)]
    spans = []
    for k, ((head, has_dots, tail), rank) in enumerate(zip(parts, ranks, strict=True)):
        named = len(head) + len(tail)
        if (named != rank and not has_dots) or named > rank:
            raise EinsumError(
                f"equation {equation!r}: operand {k}'s term {terms[k]!r} names {named} dim(s) but input "
                f"{k} has rank {rank}"
            )
        spans.append(rank - named if has_dots else 0)
    dots = max(spans)
    ellipsis = "".join(chr(_ELLIPSIS_BASE - k) for k in range(dots - 1, -1, -1))
    inputs = tuple(
        head + ellipsis[dots - span :] + tail for (head, _, tail), span in zip(parts, spans, strict=True)
    )
    letters = Counter(c for labels in inputs for c in labels if c in _LETTERS)
    if not arrow:
        return Equation(inputs, ellipsis + "".join(sorted(c for c, n in letters.items() if n == 1)))
    head, has_dots, tail = _term(rhs, equation, "the output")
    for c, n in Counter(head + tail).items():
        if c not in letters:
            raise EinsumError(f"equation {equation!r}: output label {c!r} is in no operand's term")
        if n > 1:
            raise EinsumError(f"equation {equation!r}: output label {c!r} appears {n} times (at most once)")
    if dots and not has_dots:
        raise EinsumError(
            f"equation {equation!r}: the operands' '...' stands for {dots} dim(s) but the output has no '...'"
        )
    return Equation(inputs, head + ellipsis + tail)


def plan(equation: str, shapes: Sequence[Sequence[int | None]], dtype: str | None) -> list[Step]:
    """The stages of an Einsum node: :func:`parse` of ``equation`` for operands of ``shapes``, then
    :func:`lower` (see both; raises :class:`EinsumError`)."""
    return lower(parse(equation, [len(s) for s in shapes]), shapes, dtype)


@dataclass(frozen=True)
class _Term:
    """A value of the plan: what each of its axes holds (a label, several labels merged into one axis
    as their string, or ``""`` for an inserted axis of 1) and each label's size in it (None: known only
    at run time)."""

    value: int
    axes: tuple[str, ...]
    sizes: dict[str, int | None]

    @property
    def labels(self) -> str:
        return "".join(self.axes)

    def having(self, value: int, axes: Sequence[str]) -> _Term:
        """The term ``value`` whose axes are ``axes``, with this term's sizes of their labels."""
        return _Term(value, tuple(axes), {c: self.sizes[c] for c in "".join(axes)})


class _Inexpressible(Exception):
    """A regrouping a reshape cannot write (two dims known only at run time to infer)."""


def lower(equation: Equation, shapes: Sequence[Sequence[int | None]], dtype: str | None) -> list[Step]:
    """The stages that compute ``equation`` on operands of ``shapes`` (an int per known dim, None for one
    known only at run time) and ``dtype``.

    One operand: its diagonal (as_strided) where a label repeats, a reduce_sum over the labels the output
    lacks, a transpose to the output's order. Two: each first summed over the labels only it has and the
    output lacks; then with no label to contract an outer product (mul, broadcasting), else a batched
    matmul ``[batch..., M, K] @ [batch..., K, N]`` (free labels merged into M and N where a reshape can
    write it, else kept as matmul's broadcast batch dims) — or, when neither operand has a free label, or
    for integers, a mul and a reduce_sum — and a transpose to the output's order. More: from left to
    right, pairwise. A batch label of size 1 in one operand broadcasts (mul and matmul do); a contracted
    one is squeezed from it and summed in the other, which is the same sum.

    Raises
    ------
    EinsumError
        Sizes of one label that differ (and are not 1), a diagonal of a dim not known at import, a
        contraction of integers that would make a product larger than its inputs, or merged dims a
        reshape cannot write.
    """
    return _Planner(equation, shapes, dtype).plan()


class _Planner:
    def __init__(self, equation: Equation, shapes: Sequence[Sequence[int | None]], dtype: str | None):
        self.eq = equation
        self.shapes = [tuple(d if isinstance(d, int) else None for d in s) for s in shapes]
        self.floating = dtype is None or "float" in dtype  # float16/32/64, bfloat16: matmul's types
        self.dtype = dtype
        self.steps: list[Step] = []

    # -- the plan --------------------------------------------------------------------------------------
    def plan(self) -> list[Step]:
        terms = [self._diagonal(k, labels) for k, labels in enumerate(self.eq.inputs)]
        _check_sizes(terms)
        out = set(self.eq.output)
        # each operand first summed over the labels no other operand and not the output has
        terms = [
            self._reduce(t, out.union(*(u.labels for j, u in enumerate(terms) if j != k)))
            for k, t in enumerate(terms)
        ]
        acc = terms[0]
        for k in range(1, len(terms)):
            acc = self._pair(acc, terms[k], out.union(*(t.labels for t in terms[k + 1 :])))
        acc = self._permute(acc, tuple(self.eq.output))
        if not self.steps:  # the output is the operand itself
            self._add("identity", [acc.value])
        return self.steps

    def _add(self, operator: str, inputs: Sequence[int], **attrs: Any) -> int:
        self.steps.append(Step(operator, tuple(inputs), attrs))
        return len(self.eq.inputs) + len(self.steps) - 1

    # -- one operand -----------------------------------------------------------------------------------
    def _diagonal(self, k: int, labels: str) -> _Term:
        """Operand ``k``, each repeated label's diagonal taken (as_strided over its storage)."""
        shape = self.shapes[k]
        if len(set(labels)) == len(labels):
            return _Term(k, tuple(labels), dict(zip(labels, shape, strict=True)))
        repeated = sorted({c for c in labels if labels.count(c) > 1})
        if None in shape:
            raise EinsumError(
                f"operand {k} repeats label(s) {', '.join(map(_label_name, repeated))} (a diagonal), which "
                f"needs its shape with every dim known at import (got {_show(shape)})"
            )
        strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
        unique = "".join(dict.fromkeys(labels))
        dims, steps = [], []
        for c in unique:
            sizes = {shape[i] for i, d in enumerate(labels) if d == c}
            if len(sizes) > 1:
                raise EinsumError(
                    f"operand {k} repeats label {_label_name(c)} over dims of sizes {sorted(sizes)} "
                    f"(shape {_show(shape)}); a diagonal needs them equal"
                )
            dims.append(sizes.pop())
            steps.append(sum(strides[i] for i, d in enumerate(labels) if d == c))
        value = self._add("as_strided", [k], shape=dims, strides=steps, offset=0)
        return _Term(value, tuple(unique), dict(zip(unique, dims, strict=True)))

    def _reduce(self, term: _Term, needed: set[str], squeeze: set[str] = frozenset()) -> _Term:
        """``term`` without its labels outside ``needed`` (summed) and those in ``squeeze`` (of size 1:
        dropped); one reduce_sum does both."""
        axes = [i for i, c in enumerate(term.axes) if c not in needed or c in squeeze]
        if not axes:
            return term
        kept = [c for i, c in enumerate(term.axes) if i not in axes]
        if all(term.axes[i] in squeeze for i in axes):
            return term.having(self._add("squeeze", [term.value], axes=axes), kept)
        return term.having(self._add("reduce_sum", [term.value], axes=axes, keepdims=False), kept)

    def _permute(self, term: _Term, order: Sequence[str]) -> _Term:
        perm = [term.axes.index(c) for c in order]
        if perm == list(range(len(perm))):
            return term
        return term.having(self._add("transpose", [term.value], perm=perm), order)

    # -- two operands ----------------------------------------------------------------------------------
    def _pair(self, a: _Term, b: _Term, keep: set[str]) -> _Term:
        """``a`` and ``b`` contracted over the labels both have and ``keep`` lacks."""
        # A contracted label of size 1 in one operand broadcasts: drop it there, sum it in the other.
        shared = [c for c in a.axes if c in b.axes and c not in keep]
        drop_a = {c for c in shared if a.sizes[c] == 1 and b.sizes[c] != 1}
        drop_b = {c for c in shared if b.sizes[c] == 1 and a.sizes[c] != 1}
        a = self._reduce(a, keep | (set(b.labels) - drop_b), squeeze=drop_a)
        b = self._reduce(b, keep | set(a.labels), squeeze=drop_b)
        batch = [c for c in a.axes if c in b.axes and c in keep]
        summed = [c for c in a.axes if c in b.axes and c not in keep]
        left = [c for c in a.axes if c not in b.axes]
        right = [c for c in b.axes if c not in a.axes]
        if not summed or (not left and not right) or (not self.floating and not (left and right)):
            return self._multiply(a, b, batch, summed, left, right)
        if not self.floating:
            raise EinsumError(
                f"contracting {', '.join(map(_label_name, summed))} of {self.dtype} operands that both "
                "keep other labels needs a matmul, which takes float types"
            )
        tried = sorted(product(range(len(left), -1, -1), range(len(right), -1, -1)), key=lambda s: -sum(s))
        for inner_left, inner_right in tried:
            try:
                return self._matmul(a, b, batch, summed, left, right, inner_left, inner_right)
            except _Inexpressible:
                continue
        raise EinsumError(
            f"contracting {', '.join(map(_label_name, summed))} needs dims merged into one, which a reshape "
            "cannot write when more than one of them is known only at run time (export with fixed shapes)"
        )

    def _multiply(self, a: _Term, b: _Term, batch: list, summed: list, left: list, right: list) -> _Term:
        """``sum(a[batch, left, 1..., summed] * b[batch, 1..., right, summed])`` over ``summed`` (mul
        broadcasts; no summed label: an outer product)."""
        a = self._permute(a, (*batch, *left, *summed))
        b = self._permute(b, (*batch, *right, *summed))
        a = self._emit(a, _strip((*batch, *left, *[""] * len(right), *summed), 0))
        b = self._emit(b, _strip((*batch, *[""] * len(left), *right, *summed), 0))
        axes = (*batch, *left, *right, *summed)
        c = _Term(self._add("mul", [a.value, b.value]), axes, _broadcast(a.sizes, b.sizes))
        return self._reduce(c, set(batch + left + right))

    def _matmul(
        self, a: _Term, b: _Term, batch: list, summed: list, left: list, right: list, nl: int, nr: int
    ) -> _Term:
        """``a @ b`` with the last ``nl`` left labels merged into M, the last ``nr`` right ones into N
        (none: an axis of 1), the others matmul's broadcast batch dims; all of it planned before any
        stage is added, so a layout a reshape cannot write (:class:`_Inexpressible`) adds none."""
        outer_l, inner_l = left[: len(left) - nl], left[len(left) - nl :]
        outer_r, inner_r = right[: len(right) - nr], right[len(right) - nr :]
        m, k, n = "".join(inner_l), "".join(summed), "".join(inner_r)
        a_axes = (*batch, *outer_l, *inner_l, *summed)
        b_axes = (*batch, *outer_r, *summed, *inner_r)
        a_mat = _strip((*batch, *outer_l, *[""] * len(outer_r), m, k), 2)
        b_mat = _strip((*batch, *[""] * len(outer_l), *outer_r, k, n), 2)
        c_axes = (*batch, *outer_l, *outer_r, m, n)
        c_out = (*batch, *outer_l, *outer_r, *inner_l, *inner_r)
        c_sizes = _broadcast(a.sizes, b.sizes)
        a_plan = _regroup(a_axes, a_mat, a.sizes)
        b_plan = _regroup(b_axes, b_mat, b.sizes)
        c_plan = _regroup(c_axes, c_out, c_sizes)
        a = self._emit(self._permute(a, a_axes), a_mat, a_plan)
        b = self._emit(self._permute(b, b_axes), b_mat, b_plan)
        c = _Term(self._add("matmul", [a.value, b.value]), c_axes, c_sizes)
        return self._emit(c, c_out, c_plan)

    def _emit(self, term: _Term, axes: tuple[str, ...], plan: Any = None) -> _Term:
        """``term`` regrouped to ``axes`` by the stage :func:`_regroup` plans (none when they are its)."""
        plan = _regroup(term.axes, axes, term.sizes) if plan is None else plan
        if plan is False:
            return term
        operator, attrs = plan
        return term.having(self._add(operator, [term.value], **attrs), axes)


def _check_sizes(terms: list[_Term]) -> None:
    """Each label's known sizes across the operands agree, but for 1s (which broadcast)."""
    seen: dict[str, dict[int, list[int]]] = {}
    for k, term in enumerate(terms):
        for c, d in term.sizes.items():
            if d is not None and d != 1:
                seen.setdefault(c, {}).setdefault(d, []).append(k)
    for c, found in seen.items():
        if len(found) > 1:
            where = "; ".join(f"{d} in input(s) {ks}" for d, ks in sorted(found.items()))
            raise EinsumError(f"label {_label_name(c)} has sizes that do not broadcast: {where}")


def _broadcast(a: dict[str, int | None], b: dict[str, int | None]) -> dict[str, int | None]:
    """The labels' sizes in a product of terms of sizes ``a`` and ``b`` (a 1 takes the other's)."""
    out = dict(a)
    for c, d in b.items():
        if c not in out or out[c] == 1 or (out[c] is None and d != 1):
            out[c] = d
    return out


def _regroup(src: tuple[str, ...], dst: tuple[str, ...], sizes: dict[str, int | None]) -> Any:
    """The stage that turns axes ``src`` into ``dst`` (the same labels, in order; merged, split, or axes
    of 1 inserted or removed): False for none, else (operator, attrs).

    Raises
    ------
    _Inexpressible
        A reshape would need two dims it cannot write (known only at run time, not in place).
    """
    if src == dst:
        return False
    if tuple(a for a in dst if a) == src:
        return "unsqueeze", {"axes": [i for i, a in enumerate(dst) if not a]}
    if tuple(a for a in src if a) == dst:
        return "squeeze", {"axes": [i for i, a in enumerate(src) if not a]}
    dims = [None if None in (s := [sizes[c] for c in key]) else math.prod(s) for key in dst]
    target, inferred, copied = [], False, False
    for i, (key, dim) in enumerate(zip(dst, dims, strict=True)):
        if dim is not None:
            target.append(dim)
        elif i < len(src) and src[i] == key:  # known only at run time, in place: 0 copies it
            target.append(0)
            copied = True
        elif not inferred:
            target.append(-1)
            inferred = True
        else:
            raise _Inexpressible
    if copied and 0 in dims:
        raise _Inexpressible  # an empty dim and a copied one: allowzero cannot say both
    return "reshape", {"shape": target, "allowzero": not copied}


def _strip(axes: tuple[str, ...], tail: int) -> tuple[str, ...]:
    """``axes`` without the inserted axes of 1 that lead it (broadcasting adds them), but for the last
    ``tail`` axes (a matmul's M, K or K, N)."""
    lead = len(axes) - tail
    k = 0
    while k < lead and not axes[k]:
        k += 1
    return axes[k:]


def _show(shape: Sequence[int | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
