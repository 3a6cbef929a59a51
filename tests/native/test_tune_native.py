"""Tuning a native module on the CPU: rebuilt per variant with -D macros, or tunables passed as attributes;
a wrong variant never wins, results are cached and exported for `pipelink build -D`."""

from __future__ import annotations

import json

import pytest

from pipelink.modules.build import build_module
from pipelink.tune import TuneCache, load_tune_config, tune
from pipelink.tune.cli import default_target_factory

SOURCE = r"""
#include <pipelink.h>
#ifndef UNROLL
#define UNROLL 1
#endif
/* y = 2x, walked in chunks of the attribute "block"; UNROLL = 3 is a planted bug (drops the tail). */
PIPELINK_COMPUTE(tscale_compute) {
    const float* x = (const float*)in[0].data; float* y = (float*)out[0].data;
    int64_t n = pipelink_numel(&in[0]);
    int64_t block = pipelink_attr_int(attrs, n_attrs, "block", 64);
    int64_t end = (UNROLL == 3) ? n - (n % 7) - 1 : n;
    for (int64_t start = 0; start < end; start += block) {
        int64_t stop = start + block < end ? start + block : end;
        int64_t i = start;
        for (; i + UNROLL <= stop; i += UNROLL)
            for (int u = 0; u < UNROLL; ++u) y[i + u] = 2.0f * x[i + u];
        for (; i < stop; ++i) y[i] = 2.0f * x[i];
    }
    return PIPELINK_SUCCESS;
}
PIPELINK_VERSION(tscale, 1, 0, 0)
PIPELINK_MANIFEST({"name": "tscale", "version": "1.0.0", "entry": "tscale_compute", "devices": ["cpu"],
                   "inputs": [{"name": "x", "dtype": "float32"}], "outputs": [{"name": "y", "shape": "x"}],
                   "tunables": {"block": [64, 16, 256, 4096]}})
"""


@pytest.fixture
def module(tmp_path):
    src = tmp_path / "tscale.c"
    src.write_text(SOURCE)
    return src


def run(config_doc, tmp_path, name):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config_doc))
    config = load_tune_config(path)
    cache = TuneCache(tmp_path / "cache.json")
    return tune(default_target_factory(config, "cpu"), config, cache=cache), cache, config


def test_rebuilt_per_variant_and_the_wrong_one_never_wins(module, tmp_path):
    doc = {
        "operator": "tscale",
        "sources": [module.name],
        "device": "cpu",
        "shapes": {"x": [100_003]},
        "tuning_space": {"unroll": [1, 2, 3, 4]},
        "benchmark_criteria": "latency_us",
        "warmup_iters": 2,
        "measure_iters": 5,
    }
    result, cache, config = run(doc, tmp_path, "rebuild")
    status = {t.params["unroll"]: t.status for t in result.trials}  # unroll=1 is the default trial
    assert status[3] == "wrong", status  # verified against the default build: the planted bug is caught
    assert all(status[u] == "ok" for u in (1, 2, 4)), status
    assert result.best_params["unroll"] != 3
    wrong = next(t for t in result.trials if t.params["unroll"] == 3)
    assert not wrong.times_s, "a wrong variant is never timed"
    assert cache.lookup(result.key_fields) == result.best_params  # noqa: SIM300

    from pipelink.tune.report import export

    out = tmp_path / "best.json"
    export(result, out)
    flags = json.loads(out.read_text())["defines"]
    assert f"-DUNROLL={result.best_params['unroll']}" in flags
    rebuilt = build_module(module, tmp_path / "baked" / "libtscale.so", defines=flags)  # baked in
    assert rebuilt.is_file()


def test_library_tunables_arrive_as_attributes(module, tmp_path):
    lib = build_module(module, tmp_path / "lib" / "libtscale.so")
    doc = {
        "operator": "tscale",
        "library": str(lib),
        "device": "cpu",
        "shapes": {"x": [50_000]},
        "tuning_space": {"block": [16, 256, 4096]},
        "benchmark_criteria": "throughput_gbps",
        "warmup_iters": 2,
        "measure_iters": 5,
    }
    result, _, _ = run(doc, tmp_path, "attrs")
    assert {t.params["block"] for t in result.trials if t.status == "ok"} >= {16, 256, 4096}
    assert result.default.params["block"] == 64  # the manifest's default of the tunable
    assert result.best is not None and result.best.metric > 0


def test_load_applies_tuned_attributes_of_a_native_stage(module, tmp_path, monkeypatch):
    import numpy as np

    import pipelink as pl

    monkeypatch.setenv("PIPELINK_CACHE_DIR", str(tmp_path / "cachedir"))
    lib = build_module(module, tmp_path / "lib" / "libtscale.so")
    doc = {
        "operator": "tscale",
        "library": str(lib),
        "device": "cpu",
        "shapes": {"x": [4096]},
        "tuning_space": {"block": [16, 4096]},
        "benchmark_criteria": "latency_us",
        "warmup_iters": 1,
        "measure_iters": 3,
    }
    config = load_tune_config(doc)
    result = tune(default_target_factory(config, "cpu"), config, cache=TuneCache())
    pipe = pl.load(
        {
            "inputs": {"x": {"shape": [4096], "dtype": "float32"}},
            "pipeline": [{"name": "tscale", "library": str(lib), "inputs": ["x"], "outputs": ["y"]}],
        },
        device="cpu",
    )
    used = pipe.load_report.tuned["tscale"]
    assert used["source"] == "tuned" and used["params"]["block"] == result.best_params["block"]
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(pipe.run(x=x)["y"]), 2 * x)
