"""The tuning loop on a fake target: inf-scoring, verification before timing, statistics, budgets."""

from __future__ import annotations

import math

import pytest

from pipelink.errors import ErrorCode, InvalidArgumentError, TuningError
from pipelink.tune import TuneCache, Tuner, time_statistic, tune

try:
    from test_tune_support import (
        BYTES,
        N_ELEMENTS,
        OPTIMUM,
        SPACE,
        FakeTarget,
        landscape,
        make_config,
    )
except ImportError:  # tests/unit collected as a package
    from .test_tune_support import (  # type: ignore[no-redef]
        BYTES,
        N_ELEMENTS,
        OPTIMUM,
        SPACE,
        FakeTarget,
        landscape,
        make_config,
    )

GRID_SIZE = 7 * 4 * 3


def test_grid_evaluates_every_variant_once_and_finds_the_optimum():
    target = FakeTarget()
    result = tune(target, make_config())
    # Defaults lie in the space, so they are not evaluated twice.
    assert len(result.trials) == GRID_SIZE
    assert len({FakeTarget.ident(t.params) for t in result.trials}) == GRID_SIZE
    assert result.trials[0].is_default and result.default is result.trials[0]
    assert result.best.params == OPTIMUM
    counts = result.counts()
    assert counts == {"ok": GRID_SIZE - 12, "wrong": 0, "failed": 0, "pruned": 12}  # block_size 2048


def test_metric_is_bytes_over_the_p95_time_and_gain_is_relative_to_defaults():
    result = tune(FakeTarget(), make_config())
    best = result.best
    assert best.statistic_s == pytest.approx(time_statistic(best.times_s, "p95"))
    assert best.metric == pytest.approx(BYTES / best.statistic_s / 1e9)
    assert best.roofline_pct == pytest.approx(100 * best.metric / 4000.0)
    expected_gain = result.default.statistic_s / best.statistic_s
    assert result.gain == pytest.approx(expected_gain)
    assert result.gain > 1.0


def test_pruned_variants_are_never_built_and_are_reported_with_the_reason():
    target = FakeTarget()
    result = tune(target, make_config())
    pruned = [t for t in result.trials if t.status == "pruned"]
    assert pruned and all(t.params["block_size"] == 2048 for t in pruned)
    assert all("threads per block = 2048 exceeds the limit 1024" in t.error for t in pruned)
    built = {key for op, key in target.log if op == "build"}
    assert not built & {FakeTarget.ident(t.params) for t in pruned}
    assert all(t.statistic_s == math.inf and t.metric is None for t in pruned)


def test_build_and_launch_failures_score_inf_and_the_search_goes_on():
    target = FakeTarget(fail_build=lambda p: p["unroll"] == 8, fail_launch=lambda p: p["block_size"] == 1024)
    result = tune(target, make_config())
    failed = [t for t in result.trials if t.status == "failed"]
    assert {t.params["unroll"] == 8 or t.params["block_size"] == 1024 for t in failed} == {True}
    assert any(t.error.startswith("build: RuntimeError: nvrtc") for t in failed)
    assert any(t.error.startswith("verify: RuntimeError: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES") for t in failed)
    assert all(t.statistic_s == math.inf for t in failed)
    assert result.best.params == OPTIMUM  # later variants were still evaluated
    assert target.released == sum(1 for op, _ in target.log if op == "build") - sum(
        1 for t in failed if t.error.startswith("build")
    )


def test_a_fast_but_wrong_variant_never_wins_and_is_never_timed():
    # 100x faster than anything else, but drops the last element.
    target = FakeTarget(wrong=lambda p: p["block_size"] == 64 and p["vec"] == 4)
    result = tune(target, make_config())
    wrong = [t for t in result.trials if t.status == "wrong"]
    assert len(wrong) == 4
    assert all("does not match the CPU reference" in t.error for t in wrong)
    assert result.best.params == OPTIMUM
    measured = {key for op, key in target.log if op == "measure"}
    assert not measured & {FakeTarget.ident(t.params) for t in wrong}


def test_nothing_is_timed_before_it_was_verified():
    target = FakeTarget(wrong=lambda p: p["unroll"] == 2)
    tune(target, make_config(strategy="budgeted", max_trials=30))
    verified = set()
    for op, key in target.log:
        if op == "verify":
            verified.add(key)
        if op == "measure":
            assert key in verified and key in target.verified_ok


def test_measure_returning_bad_times_is_a_failure():
    def times(p, iters):
        if p["vec"] == 4:
            return [float("nan")] * iters
        if p["vec"] == 1:
            return [1e-5] * (iters - 1)  # one short
        return [landscape(p)] * iters

    result = tune(FakeTarget(times=times), make_config())
    bad = [t for t in result.trials if t.params["vec"] != 2 and t.status != "pruned"]
    assert bad and all(t.status == "failed" and t.error.startswith("measure:") for t in bad)
    assert result.default.status == "failed" and result.gain is None  # defaults have vec=1
    assert result.best.params == OPTIMUM


def _tail_times(p, iters):
    # block_size 256: fastest median, but 10% of launches stall (p95 sees them); 512: steady.
    if p["block_size"] == 256:
        return [5e-6 if i % 10 else 50e-6 for i in range(iters)]
    if p["block_size"] == 512:
        return [8e-6] * iters
    return [20e-6] * iters


@pytest.mark.parametrize(("statistic", "winner"), [("p95", 512), ("median", 256)])
def test_statistic_decides_between_a_stalling_and_a_steady_variant(statistic, winner):
    result = tune(FakeTarget(times=_tail_times), make_config(statistic=statistic))
    assert result.best.params["block_size"] == winner


def test_time_statistic_definitions():
    times = [float(i) for i in range(1, 101)]
    assert time_statistic(times, "p95") == 95.0  # nearest rank: an observed sample
    assert time_statistic(times, "median") == 50.5
    assert time_statistic([3.0], "p95") == 3.0
    assert time_statistic([5.0, 1.0] * 10, "p95") == 5.0
    with pytest.raises(InvalidArgumentError):
        time_statistic([], "p95")
    with pytest.raises(InvalidArgumentError):
        time_statistic([1.0], "mean")


def test_latency_criteria_minimises_time_and_tflops_uses_flops():
    lat = tune(FakeTarget(), make_config(benchmark_criteria="latency_us"))
    assert lat.best.params == OPTIMUM
    assert lat.best.metric == pytest.approx(lat.best.statistic_s * 1e6)
    assert lat.gain == pytest.approx(lat.default.metric / lat.best.metric)
    assert lat.best.roofline_pct is None  # the fake knows no latency bound
    tf = tune(FakeTarget(), make_config(benchmark_criteria="tflops"))
    assert tf.best.metric == pytest.approx(N_ELEMENTS / tf.best.statistic_s / 1e12)


@pytest.mark.parametrize("seed", range(5))
def test_budgeted_search_respects_max_trials_and_finds_the_smooth_optimum(seed):
    space = {"block_size": [32 * k for k in range(1, 33)], "unroll": [1, 2, 4, 8, 16], "vec": [1, 2, 4, 8]}

    def times(p, iters):
        t = 10e-6 * (
            1
            + ((p["block_size"] - 416) / 320) ** 2
            + 0.3 * (math.log2(p["unroll"]) - 2) ** 2
            + 0.2 * (math.log2(p["vec"]) - 1) ** 2
        )
        return [t] * iters

    target = FakeTarget(times=times, defaults={"block_size": 128, "unroll": 1, "vec": 1})
    result = tune(target, make_config(tuning_space=space, strategy="budgeted", max_trials=80, seed=seed))
    timed = [t for t in result.trials if t.status != "pruned"]
    assert len(timed) <= 80  # of 640 variants (the defaults included)
    assert len({FakeTarget.ident(t.params) for t in result.trials}) == len(result.trials)
    assert result.best.params == {"block_size": 416, "unroll": 4, "vec": 2}


def test_defaults_outside_the_space_are_an_extra_baseline():
    target = FakeTarget(defaults={"block_size": 96, "unroll": 1, "vec": 1})
    result = tune(target, make_config())
    assert result.trials[0].is_default and result.trials[0].params["block_size"] == 96
    assert len(result.trials) == GRID_SIZE + 1


def test_unknown_space_parameter_fails_before_building_anything():
    target = FakeTarget()
    with pytest.raises(TuningError, match="no tunable parameter 'num_warps'") as info:
        tune(target, make_config(tuning_space={**SPACE, "num_warps": [4, 8]}))
    assert info.value.code is ErrorCode.PIPELINK_ERR_TUNING_FAILED
    assert target.log == []


def test_all_variants_failing_raises_with_every_trial_and_stores_nothing(tmp_path):
    cache = TuneCache(tmp_path / "c.json")
    with pytest.raises(TuningError, match="no variant of 'scale' passed") as info:
        tune(FakeTarget(fail_build=lambda p: True), make_config(), cache=cache)
    result = info.value.result
    assert len(result.trials) == GRID_SIZE and result.best is None
    assert result.counts()["failed"] == GRID_SIZE - 12
    assert not cache.path.exists()


def test_progress_is_reported_once_per_trial_with_a_stable_total():
    calls = []
    result = tune(FakeTarget(), make_config(), progress=lambda d, n, t: calls.append((d, n, t.status)))
    assert [c[0] for c in calls] == list(range(1, len(result.trials) + 1))
    assert {c[1] for c in calls} == {GRID_SIZE}


def test_the_best_is_cached_and_reused_without_measuring(tmp_path):
    cache = TuneCache(tmp_path / "c.json")
    first = tune(FakeTarget(), make_config(), cache=cache)
    target = FakeTarget()
    again = Tuner(target, make_config(), cache=cache).run(use_cached=True)
    assert again.from_cache and again.best_params == first.best.params == OPTIMUM
    assert target.log == []
    entry = cache.entry(target.cache_key_fields())
    assert entry["gain"] == pytest.approx(first.gain) and entry["criteria"] == "throughput_gbps"


def test_a_malformed_cache_key_fails_before_tuning():
    target = FakeTarget(key={"driver_version": None})
    with pytest.raises(InvalidArgumentError, match="driver_version"):
        tune(target, make_config())
    assert target.log == []


def test_tune_requires_a_loaded_config():
    with pytest.raises(InvalidArgumentError, match="load_tune_config"):
        tune(FakeTarget(), {"tuning_space": SPACE})  # type: ignore[arg-type]


def test_a_raising_constraint_prunes_instead_of_crashing():
    class Broken(FakeTarget):
        def prune(self, params):
            if params["vec"] == 4:
                raise KeyError("smem_per_vec")
            return None

    result = tune(Broken(), make_config())
    hit = [t for t in result.trials if t.params["vec"] == 4]
    assert all(t.status == "pruned" and "KeyError" in t.error for t in hit)
    assert len(hit) == 7 * 4
    assert result.best.params == OPTIMUM
