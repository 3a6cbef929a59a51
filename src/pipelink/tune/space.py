"""The tuning space and the two ways of walking it: the full grid, or a budgeted search.

Searches only *propose* variants (ask/tell); they never build, verify or time anything themselves.
"""

from __future__ import annotations

import itertools
import math
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgumentError

__all__ = [
    "Params",
    "Constraint",
    "ParameterSpace",
    "ResourceLimit",
    "first_violation",
    "Search",
    "GridSearch",
    "BudgetedSearch",
    "make_search",
]

Params = dict[str, Any]
#: A pruning rule: ``None`` when the variant is feasible, otherwise the reason it is not.
Constraint = Callable[[Mapping[str, Any]], "str | None"]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class ParameterSpace:
    """Named parameters, each with a finite list of candidate values.

    Parameters
    ----------
    values : mapping of str to sequence
        ``{"block_size": [128, 256, 512], ...}``. Order is kept: the grid enumerates the parameters in
        this order, the last one varying fastest (like ``itertools.product``).

    Notes
    -----
    For local refinement each parameter is an *axis*: numeric values sorted ascending, anything else in
    the declared order. Two variants are neighbours when they differ by one step along one axis.
    """

    def __init__(self, values: Mapping[str, Sequence[Any]]):
        if not values:
            raise InvalidArgumentError("a tuning space needs at least one parameter (got none)")
        self._values: dict[str, tuple[Any, ...]] = {}
        self._axes: dict[str, tuple[Any, ...]] = {}
        for name, vals in values.items():
            vals = tuple(vals)
            if not vals:
                raise InvalidArgumentError(f"tuning parameter {name!r} has no values (got [])")
            if len(set(map(_hashable, vals))) != len(vals):
                raise InvalidArgumentError(f"tuning parameter {name!r} repeats a value (got {list(vals)})")
            self._values[name] = vals
            self._axes[name] = tuple(sorted(vals)) if all(map(_is_number, vals)) else vals

    @property
    def names(self) -> tuple[str, ...]:
        """Parameter names in declared order."""
        return tuple(self._values)

    @property
    def values(self) -> dict[str, tuple[Any, ...]]:
        """Candidate values per parameter, in declared order."""
        return dict(self._values)

    @property
    def size(self) -> int:
        """Number of variants (the product of the value counts)."""
        return math.prod(len(v) for v in self._values.values())

    def grid(self) -> Iterator[Params]:
        """Every variant once, in ``itertools.product`` order."""
        for combo in itertools.product(*self._values.values()):
            yield dict(zip(self._values, combo, strict=True))

    def contains(self, params: Mapping[str, Any]) -> bool:
        """Whether ``params`` assigns every parameter of the space one of its values."""
        return all(name in params and _in(params[name], vals) for name, vals in self._values.items())

    def key(self, params: Mapping[str, Any]) -> tuple[int, ...]:
        """Axis indices of a variant of this space (a hashable identity)."""
        try:
            return tuple(_index(self._axes[n], params[n]) for n in self._values)
        except (KeyError, ValueError) as e:
            raise InvalidArgumentError(f"{dict(params)!r} is not a variant of this space ({e})") from e

    def at(self, key: Sequence[int]) -> Params:
        """The variant with the given axis indices."""
        return {n: self._axes[n][i] for n, i in zip(self._values, key, strict=True)}

    def from_ordinal(self, ordinal: int) -> Params:
        """The ``ordinal``-th variant in mixed-radix order over the axes (0 <= ordinal < size)."""
        key = []
        for name in reversed(self._values):
            ordinal, digit = divmod(ordinal, len(self._axes[name]))
            key.append(digit)
        return self.at(tuple(reversed(key)))

    def neighbors(self, params: Mapping[str, Any]) -> list[Params]:
        """Variants one axis step away from ``params`` (down before up, axes in declared order)."""
        key = self.key(params)
        out = []
        for axis, name in enumerate(self._values):
            for step in (-1, 1):
                j = key[axis] + step
                if 0 <= j < len(self._axes[name]):
                    out.append(self.at(key[:axis] + (j,) + key[axis + 1 :]))
        return out


def _hashable(value: Any) -> Any:
    # bool and int compare equal in Python but are different tuning values (True is not 1).
    return (type(value) is bool, value)


def _in(value: Any, values: Sequence[Any]) -> bool:
    return any(_hashable(value) == _hashable(v) for v in values)


def _index(values: Sequence[Any], value: Any) -> int:
    for i, v in enumerate(values):
        if _hashable(v) == _hashable(value):
            return i
    raise ValueError(f"{value!r} is not one of {list(values)}")


@dataclass(frozen=True)
class ResourceLimit:
    """A pruning rule ``quantity(params) <= limit``, e.g. shared memory per block on this device.

    Parameters
    ----------
    what : str
        What is measured, for the message (``"threads per block"``).
    quantity : callable
        Computes the quantity from a variant's parameters.
    limit : float
        The largest feasible value.
    """

    what: str
    quantity: Callable[[Mapping[str, Any]], float]
    limit: float

    def __call__(self, params: Mapping[str, Any]) -> str | None:
        value = self.quantity(params)
        if value > self.limit:
            return f"{self.what} = {value:g} exceeds the limit {self.limit:g}"
        return None


def first_violation(params: Mapping[str, Any], constraints: Sequence[Constraint]) -> str | None:
    """The reason given by the first constraint that rejects ``params``, or ``None``."""
    for rule in constraints:
        reason = rule(params)
        if reason:
            return reason
    return None


class Search(ABC):
    """Proposes variants one at a time: ``ask()`` a variant, ``tell()`` its score (lower is better).

    Scores are ``math.inf`` for variants that failed. ``tell(..., counted=False)`` reports a pruned
    variant: it is never proposed again but costs nothing from the budget.
    """

    def __init__(self, space: ParameterSpace):
        self.space = space
        self._visited: set[tuple[int, ...]] = set()
        self._pending: tuple[int, ...] | None = None
        self._used = 0
        self._best: tuple[float, tuple[int, ...]] | None = None

    @property
    def trials_used(self) -> int:
        """Variants told with ``counted=True`` (built and timed, or failed trying)."""
        return self._used

    @property
    @abstractmethod
    def total(self) -> int:
        """An upper bound on the number of counted trials (for progress bars)."""

    def ask(self) -> Params | None:
        """The next variant to evaluate, or ``None`` when the search is over."""
        if self._pending is not None:
            pending = self.space.at(self._pending)
            raise InvalidArgumentError(f"tell() the score of {pending} before asking again")
        key = self._next()
        if key is None:
            return None
        self._pending = key
        return self.space.at(key)

    def tell(self, params: Mapping[str, Any], score: float, *, counted: bool = True) -> None:
        """Report the score of a proposed variant (or of any variant, see :meth:`observe`)."""
        key = self.space.key(params)
        if key == self._pending:
            self._pending = None
        self._visited.add(key)
        if counted:
            self._used += 1
            if math.isfinite(score) and (self._best is None or score < self._best[0]):
                self._best = (score, key)
        self._told(key, counted)

    def observe(self, params: Mapping[str, Any], score: float) -> None:
        """Record a variant evaluated outside the search (the defaults): it counts and is not re-proposed."""
        self.tell(params, score)

    def _told(self, key: tuple[int, ...], counted: bool) -> None:  # noqa: B027 - optional hook
        """Hook for subclasses, called after every tell."""

    @abstractmethod
    def _next(self) -> tuple[int, ...] | None:
        """The key of the next unvisited variant, or ``None``."""


class GridSearch(Search):
    """Every variant of the space, in grid order (variants already observed are skipped)."""

    def __init__(self, space: ParameterSpace):
        super().__init__(space)
        self._grid = (space.key(p) for p in space.grid())

    @property
    def total(self) -> int:
        return self.space.size

    def _next(self) -> tuple[int, ...] | None:
        for key in self._grid:
            if key not in self._visited:
                return key
        return None


class BudgetedSearch(Search):
    """At most ``max_trials`` variants: random sampling without replacement, then local refinement.

    * The first ``explore_fraction`` of the budget samples the space uniformly without replacement
      (seeded, so a run is reproducible).
    * The rest refines greedily: propose the unvisited neighbours of the best variant so far, moving to
      any neighbour that beats it; at a local optimum, draw a fresh random variant and continue.

    Pruned variants (told with ``counted=False``) are free, but at most ``max_pruned`` of them are
    drawn, so a space that is almost entirely infeasible still ends.

    Why not successive halving: it saves *measurement* by timing many variants briefly and few at
    length, but here every variant must still be compiled and verified against the CPU reference
    before its first timing, and compiling dominates (NVRTC takes 0.1-1 s; 50 launches take
    microseconds to milliseconds). Launch parameters also form smooth landscapes (neighbouring block
    sizes and unroll factors perform alike), which local refinement exploits and halving ignores.
    """

    def __init__(
        self,
        space: ParameterSpace,
        max_trials: int,
        *,
        seed: int = 0,
        explore_fraction: float = 0.5,
        max_pruned: int | None = None,
    ):
        super().__init__(space)
        if not isinstance(max_trials, int) or max_trials < 1:
            raise InvalidArgumentError(f"max_trials must be a positive int (got {max_trials!r})")
        if not 0.0 < explore_fraction <= 1.0:
            raise InvalidArgumentError(f"explore_fraction must be in (0, 1] (got {explore_fraction!r})")
        self.max_trials = max_trials
        self._rng = random.Random(seed)
        self._n_explore = max(1, math.ceil(explore_fraction * max_trials))
        self._max_pruned = max_pruned if max_pruned is not None else max(1000, 50 * max_trials)
        self._pruned = 0
        self._order: list[int] | None = None

    @property
    def total(self) -> int:
        return min(self.max_trials, self.space.size)

    def _told(self, key: tuple[int, ...], counted: bool) -> None:
        if not counted:
            self._pruned += 1

    def _next(self) -> tuple[int, ...] | None:
        if self._used >= self.max_trials or self._pruned >= self._max_pruned:
            return None
        if len(self._visited) >= self.space.size:
            return None
        if self._used >= self._n_explore and self._best is not None:
            for params in self.space.neighbors(self.space.at(self._best[1])):
                key = self.space.key(params)
                if key not in self._visited:
                    return key
        return self._random_unvisited()

    def _random_unvisited(self) -> tuple[int, ...] | None:
        size = self.space.size
        if size <= 1 << 20:
            # Small enough to shuffle once: a true permutation, so sampling never repeats.
            if self._order is None:
                self._order = list(range(size))
                self._rng.shuffle(self._order)
            while self._order:
                key = self.space.key(self.space.from_ordinal(self._order.pop()))
                if key not in self._visited:
                    return key
            return None
        # Huge space, tiny budget: rejection sampling almost never rejects.
        while True:
            key = self.space.key(self.space.from_ordinal(self._rng.randrange(size)))
            if key not in self._visited:
                return key


def make_search(
    space: ParameterSpace, strategy: str, *, max_trials: int | None = None, seed: int = 0
) -> Search:
    """The search a config asks for (``"grid"`` or ``"budgeted"``).

    Raises
    ------
    InvalidArgumentError
        For an unknown strategy, or ``"budgeted"`` without ``max_trials``.
    """
    if strategy == "grid":
        return GridSearch(space)
    if strategy == "budgeted":
        if max_trials is None:
            raise InvalidArgumentError("strategy 'budgeted' needs max_trials (got none)")
        return BudgetedSearch(space, max_trials, seed=seed)
    raise InvalidArgumentError(f"strategy must be 'grid' or 'budgeted' (got {strategy!r})")
