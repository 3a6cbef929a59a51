"""The tuning loop: propose, prune, build, verify, then (and only then) time; pick the best.

A failing variant scores ``inf`` and the search goes on; a variant that is not verified is never timed.

Statistic. Each variant is launched ``measure_iters`` times and the per-launch *times* are reduced with
the configured statistic; the metric is computed from that one time. With ``p95`` (the default, as in
the seed: "measure 50 times, take P95") the time is the nearest-rank 95th percentile, i.e. the slow
tail, so ``throughput_gbps`` is the throughput that 95% of launches reach or beat. Ranking by a tail
rather than a mean keeps a variant with occasional stalls from winning. Nearest rank returns an
observed sample, so "p95 of time" and "5th percentile of throughput" are the same launch.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import InvalidArgumentError, TuningError
from .cache import TuneCache, key_digest
from .config import TuneConfig
from .space import make_search
from .target import CRITERIA, TuneTarget

__all__ = ["Trial", "TuneResult", "Tuner", "tune", "time_statistic", "ProgressCallback"]

Status = Literal["ok", "failed", "pruned", "wrong"]
#: ``progress(done, total, trial)`` after each trial; ``total`` is an upper bound.
ProgressCallback = Callable[[int, int, "Trial"], None]


def time_statistic(times: list[float], statistic: str) -> float:
    """Reduce per-launch times: ``"p95"`` (nearest rank, the slow tail) or ``"median"``.

    Raises
    ------
    InvalidArgumentError
        On an empty list or an unknown statistic.
    """
    if not times:
        raise InvalidArgumentError("no times to reduce (got an empty list)")
    if statistic == "median":
        return statistics.median(times)
    if statistic == "p95":
        ordered = sorted(times)
        return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]
    raise InvalidArgumentError(f"statistic must be 'p95' or 'median' (got {statistic!r})")


@dataclass
class Trial:
    """One evaluated variant.

    ``status`` is ``ok`` (verified and timed), ``wrong`` (built but disagreed with the CPU reference;
    never timed), ``failed`` (compile, resource, launch or timing failure) or ``pruned`` (rejected by a
    constraint before compiling). Only ``ok`` trials have finite ``statistic_s`` and ``metric``.
    """

    index: int
    params: dict[str, Any]
    status: Status
    error: str | None = None
    times_s: list[float] = field(default_factory=list)
    statistic_s: float = math.inf
    metric: float | None = None
    roofline_pct: float | None = None
    is_default: bool = False

    @property
    def is_verified(self) -> bool:
        """Whether the variant matched the CPU reference."""
        return self.status == "ok"


@dataclass
class TuneResult:
    """Everything a tuning run found; ``best`` is ``None`` only when no variant passed."""

    operator: str | None
    criteria: str
    statistic: str
    key_fields: dict[str, Any]
    space_names: tuple[str, ...]
    trials: list[Trial]
    best: Trial | None
    default: Trial | None
    elapsed_s: float = 0.0
    from_cache: bool = False
    cached_params: dict[str, Any] | None = None

    @property
    def unit(self) -> str:
        return CRITERIA[self.criteria][0]

    @property
    def best_params(self) -> dict[str, Any] | None:
        """The chosen parameters (from the cache when ``from_cache``)."""
        if self.best is not None:
            return dict(self.best.params)
        return dict(self.cached_params) if self.cached_params is not None else None

    @property
    def gain(self) -> float | None:
        """How many times better the best is than the defaults (>= 1), or ``None`` if either failed."""
        if self.best is None or self.default is None or self.default.metric is None:
            return None
        a, b = self.best.metric, self.default.metric
        if a is None or a <= 0 or b <= 0:
            return None
        return a / b if CRITERIA[self.criteria][1] else b / a

    def counts(self) -> dict[str, int]:
        """Number of trials per status."""
        out = {"ok": 0, "wrong": 0, "failed": 0, "pruned": 0}
        for t in self.trials:
            out[t.status] += 1
        return out

    def cache_entry(self) -> dict[str, Any]:
        """What the cache stores for this result."""
        if self.best is None:
            raise TuningError("no verified variant: nothing to cache", operator=self.operator)
        return {
            "params": dict(self.best.params),
            "criteria": self.criteria,
            "statistic": self.statistic,
            "metric": self.best.metric,
            "default_metric": self.default.metric if self.default else None,
            "gain": self.gain,
            "trials": len(self.trials),
        }


def score(trial: Trial, criteria: str) -> float:
    """Lower is better; ``inf`` for anything that is not a verified, timed variant."""
    if trial.status != "ok" or trial.metric is None:
        return math.inf
    return -trial.metric if CRITERIA[criteria][1] else trial.metric


class Tuner:
    """Evaluates the variants of one :class:`TuneTarget` as a :class:`TuneConfig` asks.

    Parameters
    ----------
    target : TuneTarget
        The operator at fixed shapes and dtypes on one device.
    config : TuneConfig
        Space, criterion, statistic, iterations and search strategy.
    cache : TuneCache, optional
        Where the best parameters are stored (nothing is stored when ``None``).
    progress : callable, optional
        Called as ``progress(done, total, trial)`` after each trial.
    """

    def __init__(
        self,
        target: TuneTarget,
        config: TuneConfig,
        *,
        cache: TuneCache | None = None,
        progress: ProgressCallback | None = None,
    ):
        self.target = target
        self.config = config
        self.cache = cache
        self.progress = progress

    def _work_metric(self, params: Mapping[str, Any], t: float) -> float:
        crit = self.config.benchmark_criteria
        if crit == "latency_us":
            return t * 1e6
        nbytes, flops = self.target.work(params)
        amount, scale, what = (nbytes, 1e9, "bytes") if crit == "throughput_gbps" else (flops, 1e12, "flops")
        if not amount or amount <= 0:
            raise TuningError(f"work() reported {amount!r} {what}, so {crit} cannot be computed")
        return amount / t / scale

    def evaluate(self, index: int, params: dict[str, Any], *, is_default: bool = False) -> Trial:
        """Prune, build, verify and (only if verified) time one variant; never raises for the variant."""
        trial = Trial(index, dict(params), "failed", is_default=is_default)
        try:
            reason = self.target.prune(params)
        except Exception as e:  # a broken rule must not stop the search either
            reason = f"constraint raised {type(e).__name__}: {e}"
        if reason:
            trial.status, trial.error = "pruned", reason
            return trial
        stage = "build"
        candidate = None
        try:
            candidate = self.target.build(params)
            stage = "verify"
            ok, detail = self.target.verify(candidate)
            if not ok:
                trial.status, trial.error = "wrong", f"does not match the CPU reference: {detail}"
                return trial
            stage = "measure"
            times = [
                float(x)
                for x in self.target.measure(candidate, self.config.warmup_iters, self.config.measure_iters)
            ]
            if len(times) != self.config.measure_iters or not all(math.isfinite(x) and x > 0 for x in times):
                raise TuningError(
                    f"measure() must return {self.config.measure_iters} positive finite times "
                    f"(got {len(times)}, e.g. {times[:3]})"
                )
            trial.times_s = times
            trial.statistic_s = time_statistic(times, self.config.statistic)
            stage = "metric"
            trial.metric = self._work_metric(params, trial.statistic_s)
            trial.roofline_pct = self._roofline_pct(trial.metric)
            trial.status = "ok"
        except Exception as e:  # every failure scores inf; KeyboardInterrupt still stops the run
            trial.status, trial.error = "failed", f"{stage}: {type(e).__name__}: {e}"
            trial.times_s, trial.statistic_s, trial.metric = [], math.inf, None
        finally:
            if candidate is not None:
                # Freeing a variant must not change its verdict.
                with contextlib.suppress(Exception):
                    self.target.release(candidate)
        return trial

    def _roofline_pct(self, metric: float) -> float | None:
        bound = self.target.roofline(self.config.benchmark_criteria)
        if bound is None or bound <= 0 or metric <= 0:
            return None
        return 100.0 * (metric / bound if CRITERIA[self.config.benchmark_criteria][1] else bound / metric)

    def key_fields(self) -> dict[str, Any]:
        """The cache key: the target's fields over the config's operator, shapes and dtypes."""
        base: dict[str, Any] = {
            "operator": self.config.operator,
            "shapes": {k: list(v) for k, v in self.config.shapes.items()},
            "dtypes": dict(self.config.dtypes),
        }
        return {**base, **self.target.cache_key_fields()}

    def run(self, *, use_cached: bool = False) -> TuneResult:
        """Tune, store the best in the cache, and return every trial.

        Parameters
        ----------
        use_cached : bool
            Return the cached parameters without measuring anything when the key matches.

        Raises
        ------
        TuningError
            When the space names parameters the target does not have, or no variant passed
            (``.result`` then holds every trial, for the report).
        """
        start = time.perf_counter()
        cfg = self.config
        key = self.key_fields()
        key_digest(key)  # a malformed key fails now, not after an hour of tuning
        space = cfg.space
        defaults = dict(self.target.default_params())
        unknown = [n for n in space.names if n not in defaults]
        if unknown:
            names = ", ".join(map(repr, unknown))
            raise TuningError(
                f"operator {cfg.operator!r} has no tunable parameter {names}; "
                f"its parameters are: {', '.join(defaults) or '(none)'}",
                operator=cfg.operator,
            )
        if use_cached and self.cache is not None:
            cached = self.cache.lookup(key)
            if cached is not None:
                return TuneResult(
                    cfg.operator,
                    cfg.benchmark_criteria,
                    cfg.statistic,
                    key,
                    space.names,
                    [],
                    None,
                    None,
                    time.perf_counter() - start,
                    True,
                    cached,
                )
        search = make_search(space, cfg.strategy, max_trials=cfg.max_trials, seed=cfg.seed)
        default_in_space = space.contains(defaults)
        total = search.total + (0 if default_in_space else 1)
        trials: list[Trial] = []

        def record(trial: Trial) -> None:
            trials.append(trial)
            if self.progress is not None:
                self.progress(len(trials), max(total, len(trials)), trial)

        default_trial = self.evaluate(0, defaults, is_default=True)
        record(default_trial)
        if default_in_space:
            search.tell(
                defaults,
                score(default_trial, cfg.benchmark_criteria),
                counted=default_trial.status != "pruned",
            )
        while (proposal := search.ask()) is not None:
            trial = self.evaluate(len(trials), {**defaults, **proposal})
            record(trial)
            search.tell(proposal, score(trial, cfg.benchmark_criteria), counted=trial.status != "pruned")

        ranked = [t for t in trials if t.status == "ok"]
        best = min(ranked, key=lambda t: score(t, cfg.benchmark_criteria)) if ranked else None
        result = TuneResult(
            cfg.operator,
            cfg.benchmark_criteria,
            cfg.statistic,
            key,
            space.names,
            trials,
            best,
            default_trial,
            time.perf_counter() - start,
        )
        if best is None:
            counts = ", ".join(f"{n} {s}" for s, n in result.counts().items() if n)
            raise TuningError(
                f"no variant of {cfg.operator!r} passed verification and timing ({counts}); "
                "the defaults stay in use",
                operator=cfg.operator,
                result=result,
            )
        if self.cache is not None:
            self.cache.store(key, result)
        return result


def tune(
    target: TuneTarget,
    config: TuneConfig,
    *,
    cache: TuneCache | None = None,
    progress: ProgressCallback | None = None,
    use_cached: bool = False,
) -> TuneResult:
    """Tune ``target`` over ``config``'s space.

    Parameters
    ----------
    target : TuneTarget
        What to tune (a backend's kernel at fixed shapes and dtypes on one device).
    config : TuneConfig
        From :func:`~pipelink.tune.config.load_tune_config`.
    cache : TuneCache, optional
        Where the best parameters are stored; ``None`` stores nothing.
    progress : callable, optional
        ``progress(done, total, trial)`` after each trial.
    use_cached : bool
        Return the cached parameters (``from_cache=True``, no trials) when the key matches.

    Returns
    -------
    TuneResult
        Every trial, the best and the defaults' trial, and the gain.

    Raises
    ------
    InvalidArgumentError
        ``config`` is not a :class:`TuneConfig`, or the target's cache key is malformed.
    TuningError
        The space names a parameter the target lacks, or no variant passed (``.result`` has the trials).
    """
    if not isinstance(config, TuneConfig):
        raise InvalidArgumentError(
            f"config must be a TuneConfig (got {type(config).__name__}); use load_tune_config() first"
        )
    return Tuner(target, config, cache=cache, progress=progress).run(use_cached=use_cached)
