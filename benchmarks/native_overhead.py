"""Host overhead of a native operator call through the bound kernel vs a bare ctypes call of the same entry.

Builds a module whose operator does nothing (returns PIPELINK_SUCCESS), binds it for two inputs and one
output as the executor would, and reports the median of many calls, in microseconds. Target: < 2 us added.

    PYTHONPATH=src python benchmarks/native_overhead.py [--calls 200000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from pipelink.backends.cpu import CPUBackend
from pipelink.descriptor import KernelContext
from pipelink.modules.build import build_module
from pipelink.modules.native import load_library
from pipelink.modules.registry import OperatorRegistry

SOURCE = r"""
#include <pipelink.h>
PIPELINK_COMPUTE(noop_compute) { return PIPELINK_SUCCESS; }
PIPELINK_VERSION(noop, 1, 0, 0)
PIPELINK_MANIFEST({"name": "noop", "version": "1.0.0", "entry": "noop_compute", "devices": ["cpu"],
  "inputs": [{"name": "a", "dtype": "float32"}, {"name": "b", "dtype": "float32"}],
  "outputs": [{"name": "y", "shape": "a"}], "attrs": [{"name": "alpha", "type": "float", "default": 1.0}]})
"""


def median_us(fn, calls: int, rounds: int = 7) -> float:
    """Median over ``rounds`` of the mean time per call of ``calls`` calls, in microseconds."""
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "noop.c"
        src.write_text(SOURCE)
        module = load_library(build_module(src, Path(tmp) / "libnoop.so"), registry=OperatorRegistry())
        desc = module.operator("noop")
        a = np.random.default_rng().standard_normal((64, 64)).astype(np.float32)
        b, y = a.copy(), np.empty_like(a)
        ctx = KernelContext(
            "bench",
            {"alpha": 1.0},
            (a.shape, b.shape),
            ("float32", "float32"),
            (y.shape,),
            ("float32",),
            CPUBackend(),
        )
        kernel = desc.variants[0].bind(ctx)
        inputs, outputs = [a, b], [y]

        # The bare call: the same entry with prebuilt arrays, no pointer updates, no status check.
        bare_fn = module.library.noop_compute
        cell = kernel.__closure__  # the bound kernel's prebuilt arguments
        prebuilt = next(
            c.cell_contents for c in cell if isinstance(c.cell_contents, tuple) and len(c.cell_contents) == 7
        )

        def bare():
            bare_fn(*prebuilt, None)

        def bound():
            kernel(inputs, outputs, None)

        views_in = [[a[:], b[:]] for _ in range(2)]
        views_out = [[y[:]] for _ in range(2)]
        turn = [0]

        def bound_new_objects():
            turn[0] ^= 1
            kernel(views_in[turn[0]], views_out[turn[0]], None)

        bare_us = median_us(bare, args.calls)
        bound_us = median_us(bound, args.calls)
        fresh_us = median_us(bound_new_objects, args.calls)
    print(f"bare ctypes call:          {bare_us:6.3f} us/call")
    print(f"bound kernel (2 in, 1 out): {bound_us:6.3f} us/call")
    print(f"added by PipeLink:         {bound_us - bare_us:6.3f} us/call (target < 2 us)")
    print(f"added, new array objects on every call: {fresh_us - bare_us:6.3f} us/call")


if __name__ == "__main__":
    main()
