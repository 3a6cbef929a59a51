"""Speed of the config layer (issue 12): a 50 MB config through ``pl.validate`` and a 10,000-stage pipeline
through ``pl.load``. Targets: 50 MB validates in <= 3 s; 10,000 stages load in <= 1 s. CPU only.

Usage: ``python -m benchmarks.config_speed [--mb 50] [--stages 10000]``. Prints one line per case.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def _chain(stages: int) -> dict:
    """``relu`` stages in a chain, each with an id and constraints, as a user would write them."""
    return {
        "inputs": {"t0": {"shape": ["B", 64], "dtype": "float32"}},
        "pipeline": [
            {
                "id": f"s{i}",
                "name": "relu",
                "inputs": [f"t{i}"],
                "outputs": [f"t{i + 1}"],
                "constraints": {"memory_alignment": 256},
            }
            for i in range(stages)
        ],
    }


def _big_text(megabytes: int) -> str:
    """A valid config of about ``megabytes`` MB: comments, trailing commas and a large attribute list."""
    values = ", ".join(f"{(i % 997) / 7:.6f}" for i in range(megabytes * 1024 * 1024 // 10))
    return (
        "// a commented config with a large table attribute\n{\n  /* block comment */\n"
        '  "pipeline": [\n    {"name": "relu", "inputs": ["x"], "outputs": ["y"], // trailing\n'
        f'     "attrs": {{"table": [{values},]}}}},\n  ],\n}}\n'
    )


def _time(fn, repeat: int = 3) -> tuple[float, float]:
    """Best (wall, CPU) seconds of ``repeat`` calls. CPU time is the figure to compare on a shared machine:
    wall time there counts other processes' turns too."""
    best = (float("inf"), float("inf"))
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        best = min(best, (time.perf_counter() - w0, time.process_time() - c0), key=lambda t: t[1])
    return best


def _fmt(t: tuple[float, float]) -> str:
    return f"{t[1]:.2f} s CPU ({t[0]:.2f} s wall)"


def main(argv: list[str] | None = None) -> int:
    import pipelink as pl
    from pipelink.config.reader import read_config

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--stages", type=int, default=10_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big.json"
        big.write_text(_big_text(args.mb))
        size = big.stat().st_size / 1e6
        t_read = _time(lambda: read_config(big), 1)
        t_validate = _time(lambda: pl.validate(big, libraries=False), 1)
        print(f"{size:.1f} MB config: read {_fmt(t_read)}, validate {_fmt(t_validate)} (target <= 3 s)")
        chain = Path(tmp) / "chain.json"
        chain.write_text(json.dumps(_chain(args.stages), indent=1))
        t_load = _time(lambda: pl.load(chain, device="cpu"))
        t_val = _time(lambda: pl.validate(chain))
        print(f"{args.stages} stages: load {_fmt(t_load)}, validate {_fmt(t_val)} (target: load <= 1 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
