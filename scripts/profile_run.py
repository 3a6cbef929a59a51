"""Where does the host time of one eager run() go? cProfile over many runs of a one-stage pipeline.

python scripts/profile_run.py [--device cuda] [--runs 2000]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np

import pipelink as pl


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    doc = {"pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"]}]}
    pipe = pl.load(doc, device=args.device)
    try:
        import torch

        x = (
            torch.randn(1024, device="cuda")
            if args.device != "cpu"
            else np.random.rand(1024).astype(np.float32)
        )
    except ImportError:
        x = np.random.rand(1024).astype(np.float32)
    for _ in range(100):
        pipe.run(x=x)
    t0 = time.perf_counter()
    for _ in range(args.runs):
        pipe.run(x=x)
    print(f"run(): {(time.perf_counter() - t0) / args.runs * 1e6:.1f} us per call (host)")
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(args.runs):
        pipe.run(x=x)
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
