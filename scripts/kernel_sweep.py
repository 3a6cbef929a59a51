"""Kernel-only sweep of launch parameters for the cases that miss their bandwidth target: every variant
is launched back to back on one stream and timed with CUDA events (warm-up, median of repeats), next to
a device copy of the same bytes measured in the same run.

python scripts/kernel_sweep.py [--json OUT.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics

import numpy as np

from pipelink.backends import get_backend
from pipelink.dtypes import get_dtype
from pipelink.ops.elementwise.cuda import plan_unary
from pipelink.ops.kernel import PlanLaunch
from pipelink.ops.normalization.cuda import plan_layer_norm


def timed(backend, stream, fn, iters: int = 20, repeats: int = 5) -> float:
    for _ in range(3):
        fn()
    backend.synchronize(stream)
    times = []
    for _ in range(repeats):
        start = backend.record_event(stream, timing=True)
        for _ in range(iters):
            fn()
        end = backend.record_event(stream, timing=True)
        times.append(backend.elapsed(start, end) / iters)
    return statistics.median(times)


def sweep(backend, stream, label: str, moved: int, bw: float, space, make, args) -> list[dict]:
    """Time ``make(tuned)`` (a PlanLaunch) for every ``tuned`` of ``space``; print the default and best."""
    rows = []
    ins, outs = args
    for tuned in space:
        try:
            launch = make(tuned)
        except Exception as e:  # noqa: BLE001 - an invalid combination is skipped
            print(f"skip {label} {tuned}: {e}")
            continue
        t = timed(backend, stream, lambda la=launch: la(ins, outs, stream))
        rows.append(
            {
                "case": label,
                "tuned": tuned,
                "params": launch.plan.params,
                "us": t * 1e6,
                "pct_copy": moved / t / bw * 100,
            }
        )
    best = max(rows, key=lambda r: r["pct_copy"])
    print(
        f"{label}: copy {bw / 1e12:.2f} TB/s; default {rows[0]['us']:.1f} us = {rows[0]['pct_copy']:.0f}% "
        f"{rows[0]['params']}; best {best['us']:.1f} us = {best['pct_copy']:.0f}% {best['params']}",
        flush=True,
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    a = parser.parse_args()
    backend = get_backend("cuda")
    stream = backend.default_stream()
    sms = int(backend.info.features["sm_count"])
    rng = np.random.default_rng(0)
    results = []

    def tensor(shape, dtype):
        host = rng.standard_normal(shape).astype(np.float32).astype(get_dtype(dtype).numpy)
        return backend.import_input(host)

    def copy_bw(x, y):
        t = timed(backend, stream, lambda: backend.copy(y, x, stream=stream))
        return 2 * x.nbytes / t

    norm_slots = {"x": ("in", 0), "gamma": ("in", 1), "beta": ("in", 2), "y": ("out", 0)}
    for rows, cols, dtype in ((8192, 4096, "float32"), (65536, 4096, "bfloat16")):
        x, y = tensor((rows, cols), dtype), backend.empty((rows, cols), get_dtype(dtype))
        g, b = tensor((cols,), dtype), tensor((cols,), dtype)
        grid = itertools.product((256, 512, 1024), (0, 256, 512, 1024), (4, 32))
        if dtype != "float32":
            grid = itertools.product((256, 512), (0, 128, 512), (32,))
        space = [{}] + [{"block": blk, "group": grp, "max_blocks_per_sm": mb} for blk, grp, mb in grid]

        def make(tuned, shape=(rows, cols), dtype=dtype):
            return PlanLaunch(
                backend,
                lambda al: plan_layer_norm(
                    dtype, shape, eps=1e-5, tuned=tuned or None, alignment=al, sm_count=sms
                ),
                norm_slots,
                "sweep",
            )

        results += sweep(
            backend,
            stream,
            f"layer_norm {rows}x{cols} {dtype}",
            2 * x.nbytes,
            copy_bw(x, y),
            space,
            make,
            ([x, g, b], [y]),
        )

    for op, dtype in (("gelu", "bfloat16"), ("silu", "bfloat16"), ("gelu", "float32"), ("silu", "float32")):
        count = (256 << 20) // get_dtype(dtype).itemsize
        x, y = tensor((count,), dtype), backend.empty((count,), get_dtype(dtype))
        space = [{}]
        if dtype == "bfloat16":
            grid = itertools.product((256, 512), (1, 2, 4), (8, 16))
            space += [{"block": blk, "unroll": u, "max_blocks_per_sm": mb} for blk, u, mb in grid]

        def make(tuned, op=op, dtype=dtype, count=count):
            return PlanLaunch(
                backend,
                lambda al: plan_unary(op, dtype, (count,), tuned=tuned or None, alignment=al, sm_count=sms),
                {"x": ("in", 0), "y": ("out", 0)},
                "sweep",
            )

        results += sweep(
            backend, stream, f"{op} 256MiB {dtype}", 2 * x.nbytes, copy_bw(x, y), space, make, ([x], [y])
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
