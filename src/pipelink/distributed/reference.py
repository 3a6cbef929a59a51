"""The NumPy reference of the collectives: given every rank's input, every rank's output.

This is the one definition of what a collective computes; the engines (gloo on the CPU, NCCL on a GPU)
and the thread world are compared with it (docs/distributed.md). Inputs are listed in rank order, all of
one shape and dtype. Sums and means are computed in float64 (integers: in their own dtype, wrapping as
the engines do) and rounded once to the dtype; an engine that adds in the dtype itself, in its own
order, is within :func:`sum_error_bound` of it. Maxima, minima, gathers and copies are exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import ml_dtypes
import numpy as np

from ..errors import DTypeMismatchError, InvalidArgumentError, ShapeMismatchError

__all__ = [
    "REDUCE_OPS",
    "all_gather",
    "all_reduce",
    "broadcast",
    "check_reduce_op",
    "exchange",
    "reduce_scatter",
    "sum_error_bound",
]

REDUCE_OPS = ("sum", "max", "min", "avg")
"""The reductions of ``all_reduce`` and ``reduce_scatter``."""


def check_reduce_op(what: str, op: str, dtype: str | None) -> None:
    """``op`` must be a reduction, and ``avg`` is for floats only: integer division would round
    differently on each engine.

    Raises
    ------
    InvalidArgumentError
        ``op`` is not one of :data:`REDUCE_OPS`.
    DTypeMismatchError
        ``avg`` of an integer tensor.
    """
    if op not in REDUCE_OPS:
        raise InvalidArgumentError(f"{what}: op {op!r} is not one of {', '.join(REDUCE_OPS)}", attr="op")
    if op == "avg" and dtype is not None and not dtype.startswith(("float", "bfloat")):
        raise DTypeMismatchError(
            f"{what}: op 'avg' needs a float tensor (x is {dtype}); use op 'sum' and divide, or cast",
            port="x",
            expected="a float dtype",
            got=dtype,
        )


def _stack(what: str, xs: Sequence[np.ndarray]) -> np.ndarray:
    if not xs:
        raise InvalidArgumentError(f"{what}: a world has at least one rank; got no inputs")
    first = xs[0]
    for r, x in enumerate(xs):
        if x.shape != first.shape or x.dtype != first.dtype:
            raise ShapeMismatchError(
                f"{what}: rank {r}'s x is {x.dtype}{list(x.shape)} but rank 0's is "
                f"{first.dtype}{list(first.shape)}; every rank passes the same shape and dtype",
                port="x",
            )
    return np.stack(xs)


def _reduce(what: str, xs: Sequence[np.ndarray], op: str) -> np.ndarray:
    """``op`` over the ranks of ``xs``, in their dtype."""
    stacked = _stack(what, xs)
    dtype = stacked.dtype
    check_reduce_op(what, op, dtype.name)
    if op == "max":
        return stacked.max(axis=0)
    if op == "min":
        return stacked.min(axis=0)
    if np.issubdtype(dtype, np.integer):
        return stacked.sum(axis=0, dtype=dtype)
    total = stacked.astype(np.float64).sum(axis=0)
    return (total / len(xs) if op == "avg" else total).astype(dtype)


def _blocks(what: str, x: np.ndarray, n: int) -> list[np.ndarray]:
    """``x`` split into ``n`` equal blocks along its first axis."""
    if x.ndim == 0 or x.shape[0] % n:
        raise ShapeMismatchError(
            f"{what}: the first axis of x ({x.shape[:1]}) must split into {n} equal blocks, one per rank",
            port="x",
        )
    return np.split(x, n, axis=0)


def all_reduce(xs: Sequence[np.ndarray], op: str = "sum") -> list[np.ndarray]:
    """Every rank gets ``op`` (sum, max, min, avg) over the ranks' x."""
    y = _reduce("all_reduce", xs, op)
    return [y.copy() for _ in xs]


def all_gather(xs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Every rank gets the ranks' x concatenated along the first axis, in rank order."""
    stacked = _stack("all_gather", xs)
    if stacked.ndim < 2:
        raise ShapeMismatchError("all_gather: x is a scalar; it works on the first axis", port="x")
    y = np.concatenate(list(stacked), axis=0)
    return [y.copy() for _ in xs]


def reduce_scatter(xs: Sequence[np.ndarray], op: str = "sum") -> list[np.ndarray]:
    """Rank r gets block r (of world size blocks, first axis) of ``op`` over the ranks' x."""
    y = _reduce("reduce_scatter", xs, op)
    return [block.copy() for block in _blocks("reduce_scatter", y, len(xs))]


def broadcast(xs: Sequence[np.ndarray], root: int = 0) -> list[np.ndarray]:
    """Every rank gets the root rank's x."""
    stacked = _stack("broadcast", xs)
    if not 0 <= root < len(xs):
        raise InvalidArgumentError(
            f"broadcast: root={root} is not a rank of a world of {len(xs)}", attr="root"
        )
    return [stacked[root].copy() for _ in xs]


def exchange(sent: Mapping[tuple[int, int], np.ndarray]) -> dict[tuple[int, int], np.ndarray]:
    """Matched ``send``/``recv`` pairs: ``sent[(src, dst)]`` is what rank src sends to rank dst; the result
    maps the same pair to what dst's ``recv`` from src gets (the sent tensor, exactly). A pair whose ranks
    are equal is refused, as the operators refuse a peer that is the rank itself."""
    for src, dst in sent:
        if src == dst:
            raise InvalidArgumentError(f"send/recv: rank {src} names itself as its peer", attr="peer")
    return {pair: np.array(x, copy=True) for pair, x in sent.items()}


def sum_error_bound(xs: Sequence[np.ndarray]) -> np.ndarray:
    """Per element, how far an engine's float sum (or mean) of ``xs`` may lie from :func:`all_reduce`'s:
    adding n values in the dtype, in any order, is off by at most n·eps·Σ|x| (0 for integers, whose
    sums are exact modulo the dtype)."""
    stacked = _stack("sum_error_bound", xs)
    if stacked.dtype.kind in "iub":
        return np.zeros(stacked.shape[1:])
    eps = float(ml_dtypes.finfo(stacked.dtype).eps)
    return len(xs) * eps * np.abs(stacked.astype(np.float64)).sum(axis=0)
