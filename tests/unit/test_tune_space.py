"""The tuning space and the searches: exact grids, budgets, no repeats, pruning, reproducibility."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelink.errors import InvalidArgumentError
from pipelink.tune import (
    BudgetedSearch,
    GridSearch,
    ParameterSpace,
    ResourceLimit,
    first_violation,
    make_search,
)

names = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)
values = st.lists(
    st.integers(-50, 5000) | st.sampled_from(["a", "b2", "float4"]), min_size=1, max_size=5, unique=True
)
spaces = st.dictionaries(names, values, min_size=1, max_size=4)


def _run(search, score=lambda p: 0.0, prune=lambda p: False):
    seen = []
    while (p := search.ask()) is not None:
        seen.append(p)
        search.tell(p, math.inf if prune(p) else score(p), counted=not prune(p))
    return seen


@given(spaces)
def test_grid_enumerates_exactly_the_product(space_values):
    space = ParameterSpace(space_values)
    expected = [dict(zip(space_values, c, strict=True)) for c in itertools.product(*space_values.values())]
    assert list(space.grid()) == expected
    assert space.size == len(expected)
    assert _run(GridSearch(space)) == expected


@settings(max_examples=150, deadline=None)
@given(spaces, st.integers(1, 40), st.integers(0, 2**32), st.integers(0, 3))
def test_budgeted_search_never_repeats_nor_exceeds_its_budget(space_values, max_trials, seed, prune_mod):
    space = ParameterSpace(space_values)
    rng = random.Random(seed)
    scores = {}

    def score(p):
        return scores.setdefault(space.key(p), rng.choice([rng.random(), math.inf]))

    def prune(p):
        return prune_mod > 0 and sum(space.key(p)) % (prune_mod + 1) == 0

    search = BudgetedSearch(space, max_trials, seed=seed)
    seen = _run(search, score, prune)
    keys = [space.key(p) for p in seen]
    assert len(keys) == len(set(keys))
    assert all(space.contains(p) for p in seen)
    counted = [p for p in seen if not prune(p)]
    assert len(counted) <= max_trials and search.trials_used == len(counted)
    feasible = sum(1 for p in space.grid() if not prune(p))
    # The budget is spent whenever the space allows it.
    assert len(counted) == min(max_trials, feasible)


def test_budget_at_least_the_space_covers_the_whole_space():
    space = ParameterSpace({"a": [1, 2, 3], "b": ["x", "y"]})
    seen = _run(BudgetedSearch(space, 100, seed=3))
    assert sorted(space.key(p) for p in seen) == sorted(space.key(p) for p in space.grid())


def test_budgeted_search_is_reproducible_per_seed():
    space = ParameterSpace({"a": list(range(20)), "b": list(range(20))})
    score = lambda p: (p["a"] - 7) ** 2 + (p["b"] - 13) ** 2  # noqa: E731
    one = _run(BudgetedSearch(space, 30, seed=11), score)
    assert one == _run(BudgetedSearch(space, 30, seed=11), score)
    assert one != _run(BudgetedSearch(space, 30, seed=12), score)


def test_refinement_walks_to_the_optimum_of_a_bowl():
    space = ParameterSpace({"a": list(range(40)), "b": list(range(40))})
    score = lambda p: (p["a"] - 31) ** 2 + (p["b"] - 5) ** 2  # noqa: E731
    seen = _run(BudgetedSearch(space, 60, seed=0, explore_fraction=0.25), score)
    assert {"a": 31, "b": 5} in seen
    # Pure random sampling of 60 of 1600 points almost surely misses it: the refinement found it.
    assert {"a": 31, "b": 5} not in _run(BudgetedSearch(space, 60, seed=0, explore_fraction=1.0), score)


def test_pruned_variants_are_free_but_bounded():
    space = ParameterSpace({"a": list(range(100))})
    search = BudgetedSearch(space, 5, seed=0, max_pruned=20)
    seen = _run(search, prune=lambda p: True)
    assert len(seen) == 20 and search.trials_used == 0


def test_huge_spaces_are_sampled_lazily_without_repeats():
    space = ParameterSpace({f"p{i}": list(range(10)) for i in range(9)})  # 10**9 variants
    assert space.size == 10**9
    seen = _run(BudgetedSearch(space, 200, seed=5), score=lambda p: sum(p.values()))
    assert len({space.key(p) for p in seen}) == 200


def test_observed_defaults_are_not_proposed_again_and_count():
    space = ParameterSpace({"a": [1, 2, 3]})
    grid = GridSearch(space)
    grid.observe({"a": 2}, 1.0)
    assert _run(grid) == [{"a": 1}, {"a": 3}]
    budget = BudgetedSearch(space, 2, seed=0)
    budget.observe({"a": 2}, 1.0)
    assert len(_run(budget)) == 1


def test_ask_twice_without_tell_is_an_error():
    search = GridSearch(ParameterSpace({"a": [1, 2]}))
    search.ask()
    with pytest.raises(InvalidArgumentError, match="tell"):
        search.ask()


def test_neighbors_step_one_along_one_sorted_axis():
    space = ParameterSpace({"bs": [512, 128, 256], "mode": ["b", "a"]})
    assert space.neighbors({"bs": 256, "mode": "b"}) == [
        {"bs": 128, "mode": "b"},
        {"bs": 512, "mode": "b"},
        {"bs": 256, "mode": "a"},
    ]
    assert space.neighbors({"bs": 128, "mode": "a"}) == [{"bs": 256, "mode": "a"}, {"bs": 128, "mode": "b"}]
    assert list(space.grid())[0] == {"bs": 512, "mode": "b"}  # the grid keeps declared order


@given(spaces)
def test_ordinals_are_a_bijection_onto_the_space(space_values):
    space = ParameterSpace(space_values)
    keys = {space.key(space.from_ordinal(i)) for i in range(min(space.size, 300))}
    assert len(keys) == min(space.size, 300)


def test_space_rejects_empty_and_repeated_values_but_keeps_true_apart_from_one():
    with pytest.raises(InvalidArgumentError, match="no values"):
        ParameterSpace({"a": []})
    with pytest.raises(InvalidArgumentError, match="repeats"):
        ParameterSpace({"a": [1, 1]})
    with pytest.raises(InvalidArgumentError):
        ParameterSpace({})
    space = ParameterSpace({"a": [True, 1]})
    assert space.size == 2 and space.key({"a": True}) != space.key({"a": 1})
    assert not space.contains({"a": 2}) and not space.contains({"b": 1})


def test_resource_limits_and_first_violation():
    threads = ResourceLimit("threads per block", lambda p: p["bs"] * p["unroll"], 1024)
    smem = ResourceLimit("shared memory per block", lambda p: p["smem"], 49152)
    assert threads({"bs": 512, "unroll": 2}) is None
    assert threads({"bs": 512, "unroll": 4}) == "threads per block = 2048 exceeds the limit 1024"
    rules = [threads, smem]
    assert first_violation({"bs": 64, "unroll": 1, "smem": 65536}, rules) == (
        "shared memory per block = 65536 exceeds the limit 49152"
    )
    assert first_violation({"bs": 64, "unroll": 1, "smem": 1024}, rules) is None


def test_make_search_validates_its_arguments():
    space = ParameterSpace({"a": [1, 2]})
    assert isinstance(make_search(space, "grid"), GridSearch)
    assert isinstance(make_search(space, "budgeted", max_trials=1), BudgetedSearch)
    with pytest.raises(InvalidArgumentError, match="needs max_trials"):
        make_search(space, "budgeted")
    with pytest.raises(InvalidArgumentError, match="got 'anneal'"):
        make_search(space, "anneal")
    with pytest.raises(InvalidArgumentError, match="positive int"):
        BudgetedSearch(space, 0)
