"""Tuning built-in kernels on the GPU: verified variants only, cached, and picked up by pl.load."""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from pipelink.tune import TuneCache, load_tune_config, tune

pytestmark = pytest.mark.gpu


def test_tune_gelu_then_load_uses_the_cached_parameters(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINK_CACHE_DIR", str(tmp_path))
    from pipelink.tune.kernel_target import make_tune_target

    config = load_tune_config(
        {
            "operator": "gelu",
            "shapes": {"x": [1 << 20]},
            "dtypes": {"x": "bfloat16"},
            "tuning_space": {
                "block_size": [128, 256, 1024],
                "shared_mem_per_block": [0, 16384],
                "unroll_factor": [1, 4],
            },
            "benchmark_criteria": "throughput_gbps",
            "warmup_iters": 2,
            "measure_iters": 5,
        }
    )
    cache = TuneCache(tmp_path / "tune_cache.json")
    result = tune(make_tune_target(config, "cuda"), config, cache=cache)
    counts = result.counts()
    assert counts.get("ok", 0) >= 6, counts  # 3 blocks x 2 unrolls, each verified against the CPU
    assert counts.get("pruned", 0) >= 6, "shared_mem_per_block is not a gelu parameter: one value built"
    assert all(t.status in ("ok", "pruned") for t in result.trials), [t.error for t in result.trials]
    best = result.best_params
    # The defaults (block 512) are a candidate too: tuning never picks something slower than them.
    assert best["block_size"] in (128, 256, 1024) or result.best is result.default

    doc = {"pipeline": [{"name": "gelu", "inputs": ["x"], "outputs": ["y"]}]}
    pipe = pl.load(doc, device="cuda")
    x = np.random.default_rng(0).standard_normal(1 << 20).astype(pl.bfloat16.numpy)
    out = pipe.run(x=x)["y"].numpy().astype(np.float64)
    ref = np.asarray(pl.load(doc, device="cpu").run(x=x)["y"]).astype(np.float64)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-2
    used = pipe.load_report.tuned["gelu"]
    assert used["source"] == "tuned", used
    assert used["params"]["block"] == best["block_size"] and used["params"]["unroll"] == best["unroll_factor"]
