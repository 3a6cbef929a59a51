"""Timing, correctness and ceiling measurements shared by every benchmark case.

Device work is timed with CUDA events around many iterations (warm-up first, median over repeats); the
CPU is timed with the host clock. Nothing here imports torch at module level: the suite must import and
run (``--device cpu``) on a machine without it.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from pipelink.dtypes import tolerance as dtype_tolerance

__all__ = ["Budget", "BUDGETS", "Timing", "measure", "rel_err", "tolerance", "measure_ceilings", "load_torch"]

L2_ROTATE_BYTES = 200e6  # input sets smaller than this are rotated so the working set exceeds the L2


@dataclass(frozen=True)
class Budget:
    """How long to time one thing: each of ``repeats`` repeats runs about ``repeat_s`` seconds."""

    repeat_s: float
    repeats: int
    warmup: int
    max_iters: int


BUDGETS = {
    "default": Budget(repeat_s=0.04, repeats=5, warmup=3, max_iters=3000),
    "quick": Budget(repeat_s=0.01, repeats=3, warmup=2, max_iters=1000),
    "tiny": Budget(repeat_s=0.002, repeats=3, warmup=1, max_iters=200),
}


@dataclass
class Timing:
    """One timed loop: per-call times (seconds) as medians over repeats."""

    median_s: float  # device time per call (CUDA events), or host time on the CPU
    host_s: float  # host wall time per call, loop included
    min_s: float
    spread: float  # (max - min) / median over the repeats: differences smaller than this are noise
    iters: int
    repeats: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_torch() -> tuple[Any, str | None]:
    """(torch, None) when torch imports, else (None, why not)."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means "compare without torch"
        return None, f"torch is not importable ({type(e).__name__}: {e})"
    return torch, None


def _sync(torch: Any) -> None:
    if torch is not None and torch.cuda.is_available():
        torch.cuda.synchronize()


def measure(
    calls: Sequence[Callable[[], Any]], budget: Budget, *, torch: Any = None, use_events: bool = False
) -> Timing:
    """Time ``calls[i % len(calls)]()`` in a loop (one call per input set: rotation).

    Parameters
    ----------
    calls : sequence of callables
        Each runs the thing once on its own input set.
    budget : Budget
    torch : module, optional
        Needed with ``use_events``.
    use_events : bool
        Time with ``torch.cuda.Event`` on the current stream (device time); else the host clock.

    Returns
    -------
    Timing
    """
    n = len(calls)
    for i in range(max(budget.warmup, n)):
        calls[i % n]()
    _sync(torch)
    # Calibrate: enough iterations per repeat to fill ``repeat_s``.
    probe = max(n, 3)
    t0 = time.perf_counter()
    for i in range(probe):
        calls[i % n]()
    _sync(torch)
    est = max((time.perf_counter() - t0) / probe, 1e-7)
    iters = int(min(budget.max_iters, max(1, round(budget.repeat_s / est))))
    device, host = [], []
    k = 0
    for _ in range(budget.repeats):
        if use_events:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        h0 = time.perf_counter()
        for _ in range(iters):
            calls[k % n]()
            k += 1
        if use_events:
            # PipeLink runs on its own streams and returns without waiting: join the whole device
            # before the end event, so the interval covers every stream's work, not just torch's.
            torch.cuda.synchronize()
            end.record()
            end.synchronize()
        h1 = time.perf_counter()
        host.append((h1 - h0) / iters)
        device.append(start.elapsed_time(end) / 1000.0 / iters if use_events else host[-1])
    med = statistics.median(device)
    return Timing(
        median_s=med,
        host_s=statistics.median(host),
        min_s=min(device),
        spread=(max(device) - min(device)) / med if med > 0 else 0.0,
        iters=iters,
        repeats=budget.repeats,
    )


def n_input_sets(set_bytes: int) -> int:
    """How many input sets to rotate through: one above 200 MB, else enough to exceed the L2 (3 to 16)."""
    if set_bytes >= L2_ROTATE_BYTES:
        return 1
    return max(3, min(16, math.ceil(L2_ROTATE_BYTES / max(set_bytes, 1))))


def tolerance(dtype: str) -> float:
    """The largest relative (norm) error a result of ``dtype`` may have: the rtol of the package's one
    tolerance table (:data:`pipelink.dtypes.TOLERANCES`), shared with the tests and the tuner."""
    return dtype_tolerance(dtype)[0]


def rel_err(out: Any, ref: Any, torch: Any = None) -> float:
    """``||out - ref|| / ||ref||`` (float32 on the device, float64 on the CPU); NaN/Inf give inf."""
    if torch is not None and isinstance(out, torch.Tensor):
        o, r = out.float(), ref.to(device=out.device).float()
        if not bool(torch.isfinite(o).all()):
            return math.inf
        num = float(torch.linalg.vector_norm(o - r))
        den = float(torch.linalg.vector_norm(r))
    else:
        o = np.asarray(out).astype(np.float64)
        r = np.asarray(ref).astype(np.float64)
        if not np.isfinite(o).all():
            return math.inf
        num, den = float(np.linalg.norm(o - r)), float(np.linalg.norm(r))
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


def measure_ceilings(env: Any) -> dict[str, Any]:
    """Device copy bandwidth (bytes read + written per second) and the bf16 matrix-product rate.

    CUDA: a ``copy_`` of 1 GiB and ``torch.mm`` of two bf16 8192x8192 matrices. CPU: ``np.copyto`` and a
    float32 ``np.matmul`` (small, for the ``--tiny`` smoke run).
    """
    torch = env.torch
    if env.is_cuda:
        nbytes = 1 << 30
        src = torch.randn(nbytes // 4, device="cuda", dtype=torch.float32)
        dst = torch.empty_like(src)
        t_copy = measure([lambda: dst.copy_(src)], env.budget, torch=torch, use_events=True)
        del src, dst
        n = 8192
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
        t_mm = measure([lambda: torch.mm(a, b, out=c)], env.budget, torch=torch, use_events=True)
        del a, b, c
        torch.cuda.empty_cache()
        what = {"copy": "torch copy_ of 1 GiB (float32)", "mm": "torch.mm bf16 8192^3"}
    else:
        nbytes = (16 << 20) if env.tiny else (256 << 20)
        src = env.rng.standard_normal(nbytes // 4).astype(np.float32)
        dst = np.empty_like(src)
        t_copy = measure([lambda: np.copyto(dst, src)], env.budget)
        n = 256 if env.tiny else 1024
        a = env.rng.standard_normal((n, n)).astype(np.float32)
        b = env.rng.standard_normal((n, n)).astype(np.float32)
        c = np.empty((n, n), np.float32)
        t_mm = measure([lambda: np.matmul(a, b, out=c)], env.budget)
        what = {"copy": f"np.copyto of {nbytes >> 20} MiB", "mm": f"np.matmul float32 {n}^3 (CPU stand-in)"}
    return {
        "copy_bandwidth_Bps": 2 * nbytes / t_copy.median_s,
        "mm_flops_per_s": 2 * n**3 / t_mm.median_s,
        "copy": {"what": what["copy"], "bytes_moved": 2 * nbytes, "timing": t_copy.to_dict()},
        "mm": {"what": what["mm"], "flops": 2 * n**3, "timing": t_mm.to_dict()},
    }
