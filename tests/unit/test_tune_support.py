"""A fake, in-memory TuneTarget for the tuner tests (no GPU): its "kernel" really computes, so
verification is a real comparison, and its "time" is a deterministic function of the parameters.

The tests at the bottom check the fake itself, so the tuner tests rest on what they claim.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from pipelink.tune import ResourceLimit, TuneConfig, TuneTarget, load_tune_config

SPACE = {"block_size": [32, 64, 128, 256, 512, 1024, 2048], "unroll": [1, 2, 4, 8], "vec": [1, 2, 4]}
DEFAULTS = {"block_size": 128, "unroll": 1, "vec": 1}
OPTIMUM = {"block_size": 256, "unroll": 4, "vec": 2}
N_ELEMENTS = 1 << 20
BYTES = 2 * 4 * N_ELEMENTS  # read x, write y (float32)


def landscape(params: Mapping[str, Any]) -> float:
    """Seconds per launch: a smooth bowl in log2 space with its minimum at OPTIMUM (10 us)."""
    d_bs = math.log2(params["block_size"]) - 8
    d_un = math.log2(params["unroll"]) - 2
    d_vec = math.log2(params["vec"]) - 1
    return 10e-6 * (1.0 + 0.10 * d_bs**2 + 0.06 * d_un**2 + 0.08 * d_vec**2)


class FakeTarget(TuneTarget):
    """y = 2 * x, with configurable failures.

    Parameters
    ----------
    fail_build : callable
        ``params -> bool``: these variants raise in build (like an NVRTC error).
    wrong : callable
        These variants build and are 100x faster than anything else, but drop the last element.
    fail_launch : callable
        These variants raise in verify (like a launch failure: too many resources requested).
    times : callable
        ``(params, iters) -> list of seconds``; default: the landscape with a small deterministic jitter.
    """

    constraints = (ResourceLimit("threads per block", lambda p: p["block_size"], 1024),)

    def __init__(
        self,
        *,
        fail_build: Callable[[Mapping[str, Any]], bool] = lambda p: False,
        wrong: Callable[[Mapping[str, Any]], bool] = lambda p: False,
        fail_launch: Callable[[Mapping[str, Any]], bool] = lambda p: False,
        times: Callable[[Mapping[str, Any], int], list[float]] | None = None,
        defaults: Mapping[str, Any] | None = None,
        key: Mapping[str, Any] | None = None,
        roofline_gbps: float | None = 4000.0,
    ):
        self.fail_build, self.wrong, self.fail_launch = fail_build, wrong, fail_launch
        self._times = times
        self._defaults = dict(defaults or DEFAULTS)
        self._key = dict(key or {})
        self._roofline = roofline_gbps
        self.log: list[tuple[str, tuple]] = []
        self.verified_ok: set[tuple] = set()
        self.released = 0
        self.rng = np.random.default_rng(1234)

    @staticmethod
    def ident(params: Mapping[str, Any]) -> tuple:
        return tuple(sorted(params.items()))

    def default_params(self) -> dict[str, Any]:
        return dict(self._defaults)

    def build(self, params: Mapping[str, Any]) -> dict[str, Any]:
        self.log.append(("build", self.ident(params)))
        if self.fail_build(params):
            raise RuntimeError(f"nvrtc: error: too many resources for {dict(params)}")
        return {"params": dict(params)}

    def _kernel(self, cand: Mapping[str, Any], x: np.ndarray, y: np.ndarray) -> None:
        np.multiply(x, 2.0, out=y)
        if self.wrong(cand["params"]):
            y[-1] = 0.0  # the classic missing tail iteration

    def verify(self, candidate: Mapping[str, Any]) -> tuple[bool, str]:
        self.log.append(("verify", self.ident(candidate["params"])))
        if self.fail_launch(candidate["params"]):
            raise RuntimeError("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
        x = self.rng.standard_normal(4099).astype(np.float32)
        y = np.full_like(x, np.nan)  # poisoned: an unwritten element fails
        self._kernel(candidate, x, y)
        ref = x * 2.0
        ok = bool(np.allclose(y, ref, rtol=1e-5, atol=0))
        if ok:
            self.verified_ok.add(self.ident(candidate["params"]))
        err = float(np.nanmax(np.abs(y - ref))) if not np.isnan(y).all() else math.inf
        return ok, f"max abs err {err:.3g}"

    def measure(self, candidate: Mapping[str, Any], warmup: int, iters: int) -> list[float]:
        params = candidate["params"]
        self.log.append(("measure", self.ident(params)))
        if self._times is not None:
            return self._times(params, iters)
        base = landscape(params) / (100.0 if self.wrong(params) else 1.0)
        return [base * (1.0 + 0.002 * (i % 7)) for i in range(iters)]

    def work(self, params: Mapping[str, Any]) -> tuple[float, float]:
        return float(BYTES), float(N_ELEMENTS)

    def roofline(self, criteria: str) -> float | None:
        return self._roofline if criteria == "throughput_gbps" else None

    def cache_key_fields(self) -> dict[str, Any]:
        return {
            "operator": "scale",
            "operator_version": "1.0.0",
            "source_hash": "ab" * 32,
            "device_name": "Fake H200",
            "compute_capability": "9.0",
            "driver_version": "13.0",
            "shapes": {"x": [N_ELEMENTS]},
            "dtypes": {"x": "float32"},
            **self._key,
        }

    def release(self, candidate: Any) -> None:
        self.released += 1


def make_config(**overrides: Any) -> TuneConfig:
    doc: dict[str, Any] = {
        "tuning_space": SPACE,
        "benchmark_criteria": "throughput_gbps",
        "warmup_iters": 2,
        "measure_iters": 20,
        "operator": "scale",
        "shapes": {"x": [N_ELEMENTS]},
        "dtypes": "float32",
    }
    doc.update(overrides)
    return load_tune_config(doc)


# -- the fake itself ------------------------------------------------------------------------------------


def test_landscape_minimum_is_the_declared_optimum():
    # If this failed, "the tuner finds OPTIMUM" would test nothing.
    import itertools

    feasible = [dict(zip(SPACE, c, strict=True)) for c in itertools.product(*SPACE.values())]
    feasible = [p for p in feasible if p["block_size"] <= 1024]
    assert min(feasible, key=landscape) == OPTIMUM
    assert sorted(map(landscape, feasible)).count(landscape(OPTIMUM)) == 1


def test_wrong_variant_really_disagrees_with_the_reference():
    target = FakeTarget(wrong=lambda p: p["vec"] == 4)
    ok, detail = target.verify(target.build({**DEFAULTS, "vec": 4}))
    assert not ok and "max abs err" in detail
    assert target.verify(target.build(DEFAULTS))[0]
