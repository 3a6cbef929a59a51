"""Soak: many CPU runs with stable memory (RSS and allocator statistics flat after warm-up).

CI runs 5,000 runs; ``PIPELINK_LONG=1`` runs the issue's 100,000.
"""

from __future__ import annotations

import gc
import os

import numpy as np

import pipelink as pl

LONG = os.environ.get("PIPELINK_LONG") == "1"
RUNS = 100_000 if LONG else 5_000


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_soak_memory_is_flat():
    doc = {
        "inputs": {"x": {"shape": [32, 64], "dtype": "float32"}, "g": {"shape": [64], "dtype": "float32"}},
        "pipeline": [
            {"name": "layer_norm", "inputs": ["x", "g"], "outputs": ["h"]},
            {"name": "gelu", "inputs": ["h"], "outputs": ["a"]},
            {"name": "add", "inputs": ["a", "x"], "outputs": ["y"]},
        ],
    }
    rng = np.random.default_rng(0)
    x, g = rng.standard_normal((32, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    pipe = pl.load(doc, device="cpu")
    first = np.asarray(pipe.run(x=x, g=g)["y"]).copy()
    for _ in range(500):  # warm-up: caches, allocator pools, interned objects
        pipe.run(x=x, g=g)
    gc.collect()
    rss0, stats0 = rss_bytes(), pl.memory.stats("cpu")
    for i in range(RUNS):
        out = pipe.run(x=x, g=g)
        if i % 997 == 0:
            np.testing.assert_array_equal(np.asarray(out["y"]), first)
    del out
    gc.collect()
    grown = rss_bytes() - rss0
    stats1 = pl.memory.stats("cpu")
    assert stats1["allocated_bytes"] == stats0["allocated_bytes"], "the runtime's allocations must not grow"
    assert grown < 8 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB over {RUNS} runs"
