"""Host overhead on the CPU backend: per-stage dispatch cost and the added cost of process isolation.

    python benchmarks/cpu_overhead.py [--runs 3000]

Dispatch: a 20-stage chain of `identity` on 16 floats, minus 20 bare calls of the same NumPy kernel.
Isolation: one isolated `identity` stage vs the same stage in process (arena-resident input and output,
so the cost is the worker round trip, not copies).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import pipelink as pl


def median_us(fn, runs: int) -> float:
    for _ in range(min(200, runs)):
        fn()
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e6


def chain(n: int, isolation: str = "none") -> dict:
    stages = [{"name": "relu", "id": "head", "inputs": ["x"], "outputs": ["t0"]}]
    stages += [
        {
            "name": "identity",
            "id": f"s{i}",
            "inputs": [f"t{i}"],
            "outputs": [f"t{i + 1}"],
            "isolation": isolation if i == 0 else "none",
        }
        for i in range(n)
    ]
    stages.append({"name": "relu", "id": "tail", "inputs": [f"t{n}"], "outputs": ["y"]})
    return {"inputs": {"x": {"shape": [16], "dtype": "float32"}}, "pipeline": stages}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3000)
    args = parser.parse_args()
    x = np.random.default_rng(0).standard_normal(16).astype(np.float32)
    y = np.empty_like(x)

    short, long_ = pl.load(chain(1), device="cpu"), pl.load(chain(21), device="cpu")
    t_short = median_us(lambda: short.run(x=x), args.runs)
    t_long = median_us(lambda: long_.run(x=x), args.runs)
    t_kernel = median_us(lambda: np.copyto(y, x), args.runs)
    per_stage = (t_long - t_short) / 20
    print(f"run() of a 3-stage pipeline: {t_short:.1f} us; of a 23-stage one: {t_long:.1f} us")
    print(
        f"eager dispatch per stage: {per_stage:.2f} us including a {t_kernel:.2f} us kernel "
        f"-> {per_stage - t_kernel:.2f} us of PipeLink overhead per stage"
    )

    with pl.load(chain(1, "process"), device="cpu") as isolated:
        t_iso = median_us(lambda: isolated.run(x=x), max(500, args.runs // 3))
    print(
        f"isolation 'process': {t_iso:.1f} us per run vs {t_short:.1f} us in process "
        f"-> {t_iso - t_short:.1f} us added per isolated stage"
    )


if __name__ == "__main__":
    main()
