"""Run the fault-tolerance example: batches where a few samples have zero variance.

    python examples/fault_tolerance/run.py [--batches 200] [--batch-size 16] [--bad-rate 0.013]

A classic framework loses every batch that contains a NaN; PipeLink degrades the failing stage to
identity for that batch (reported in ``last_report``), so every batch still produces finite outputs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import pipelink as pl

HERE = Path(__file__).resolve().parent


def simulate(batches: int = 200, batch_size: int = 16, bad_rate: float = 0.013, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((64, 32)) / 8).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    pipe = pl.load(HERE / "pipeline.json", device="cpu")
    samples = degraded_batches = finite_samples = bad_samples = 0
    for _ in range(batches):
        x = rng.standard_normal((batch_size, 64)).astype(np.float32)
        bad = rng.random(batch_size) < bad_rate
        x[bad] = 3.0  # a constant sample: zero variance, so eps=0 normalisation gives 0/0 = NaN
        y = np.asarray(pipe.run(x=x, w=w, b=b)["y"])
        samples += batch_size
        bad_samples += int(bad.sum())
        finite_samples += int(np.isfinite(y).all(axis=1).sum())
        if pipe.last_report.stages["norm"].status == "degraded":
            degraded_batches += 1
    return {
        "batches": batches,
        "samples": samples,
        "zero_variance_samples": bad_samples,
        "degraded_batches": degraded_batches,
        "finite_samples": finite_samples,
        "last_error": pipe.last_report.stages["norm"].error,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--bad-rate", type=float, default=0.013)
    args = parser.parse_args()
    r = simulate(args.batches, args.batch_size, args.bad_rate)
    clean = r["samples"] - r["degraded_batches"] * args.batch_size
    print(f"{r['samples']} samples in {r['batches']} batches; {r['zero_variance_samples']} had zero variance")
    print(
        f"stage 'norm' degraded to identity in {r['degraded_batches']} batches; "
        f"{r['finite_samples']}/{r['samples']} outputs finite (a framework that drops NaN batches keeps "
        f"{clean}/{r['samples']}, {100 * clean / r['samples']:.1f}%)"
    )


if __name__ == "__main__":
    main()
