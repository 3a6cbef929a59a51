"""``python -m benchmarks.copy_paths``: the CUDA backend's ``copy`` of strided views, path by path, on one
GPU (the views ops/shape's split / concat / slice / expand hand it).

For each view: PipeLink's ``copy`` (one cuMemcpyAsync or the strided kernel; the path and the kernel's unit
width are printed) and PyTorch's ``copy_`` of the same view; each checked equal to PyTorch's result, then
timed with CUDA events over many calls. One line per view, starting ``COPY``: microseconds per call and TB/s
(bytes read + written). The first view is GPT-2's qkv split (three parts of a [4096, 2304] fp32 tensor:
266 us before the vectorised kernel; cuMemcpy2DAsync, tried too, took 52.6 us against the kernel's 39.6).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import pipelink as pl
from pipelink.backends import get_backend

__all__ = ["main"]


def _views(torch: Any) -> list[tuple[str, list[tuple[Any, Any]]]]:
    """(name, [(source view, destination view)...]) in torch tensors; one name may move several parts."""
    f32, bf16 = torch.float32, torch.bfloat16
    x = torch.randn(4096, 2304, device="cuda", dtype=f32)
    parts = [torch.empty(4096, 768, device="cuda", dtype=f32) for _ in range(3)]
    split = [(x[:, i * 768 : (i + 1) * 768], parts[i]) for i in range(3)]
    cat = torch.empty_like(x)
    concat = [(parts[i], cat[:, i * 768 : (i + 1) * 768]) for i in range(3)]
    h = torch.randn(32, 1024, 3 * 1024, device="cuda", dtype=bf16)
    mid = [(h[:, 256:768, :], torch.empty(32, 512, 3072, device="cuda", dtype=bf16))]
    tr = [(x.t(), torch.empty(2304, 4096, device="cuda", dtype=f32))]  # (torch has no negative strides)
    row = torch.randn(1, 4096, device="cuda", dtype=f32)
    expand = [(row.expand(8192, 4096), torch.empty(8192, 4096, device="cuda", dtype=f32))]
    odd = x[1:, 3:2301:2]  # odd columns at a step of 2
    step = [(odd, torch.empty(odd.shape, device="cuda", dtype=f32))]
    return [
        ("split3_4096x2304_fp32", split),
        ("concat3_4096x2304_fp32", concat),
        ("split_mid_axis_32x1024x3072_bf16", mid),
        ("transpose_2304x4096_fp32", tr),
        ("expand_row_8192x4096_fp32", expand),
        ("cols_step2_4095x1149_fp32", step),
    ]


def _time(torch: Any, fn: Callable[[], None], iters: int) -> float:
    """Seconds per call of ``fn`` (CUDA events on the current stream; ``fn`` queues on it)."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=200)
    args = p.parse_args(argv)
    import torch

    backend = get_backend("cuda")
    pl_stream = backend.stream_of(torch.cuda.current_stream())  # PipeLink's copies on torch's stream
    ok = True
    for name, pairs in _views(torch):
        nbytes = sum(2 * s.numel() * s.element_size() for s, _ in pairs)
        pls = [(pl.Tensor.from_dlpack(d), pl.Tensor.from_dlpack(s)) for s, d in pairs]
        plans = [backend._plan_copy(d, s) for d, s in pls]
        auto, units = {p.kind for p in plans}, {p.unit for p in plans}

        def run(pls=pls) -> None:
            for d, s in pls:
                backend.copy(d, s, stream=pl_stream)

        def torch_copy(pairs=pairs) -> None:
            for s, d in pairs:
                d.copy_(s)

        row = {}
        for label, fn in (
            ("pipelink", run),
            ("torch", torch_copy),
        ):
            for _, d in pairs:
                d.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            same = all(torch.equal(d, s.contiguous()) for s, d in pairs)
            ok &= same
            t = _time(torch, fn, args.iters)
            row[label] = f"{label}={t * 1e6:8.1f} us {nbytes / t / 1e12:5.2f} TB/s{'' if same else ' WRONG'}"
        path = "/".join(sorted(auto)) + f"; kernel unit {'/'.join(str(u) for u in sorted(units))}B"
        print(f"COPY {name:34s} [{path}] " + " | ".join(row.values()), flush=True)
    print("COPY verdict:", "all copies equal PyTorch's" if ok else "SOME COPIES WRONG (see WRONG above)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
