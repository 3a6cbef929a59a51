#!/usr/bin/env python3
"""GPU self-test of PipeLink's built-in CUDA kernels: numerics against a float64 NumPy reference and
bandwidth against a device-to-device copy. For the GPU host (cuda-core >= 1.2, cuda-bindings 13, torch);
it only reads and writes buffers it allocated itself and never changes device settings.

    python scripts/kernel_selftest.py [--quick] [--no-perf]

Kernels are built with cuda.core (NVRTC -> cubin) and launched with ``launch``; torch is used only to
allocate, move data and time the reference copy. Exit status 1 when any numerical check fails.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import torch
from cuda.core import Device, EventOptions, LaunchConfig, Program, ProgramOptions, launch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from pipelink.dtypes import tolerance  # noqa: E402
from pipelink.errors import InvalidArgumentError  # noqa: E402
from pipelink.ops.batch_norm.cuda import plan_batch_norm  # noqa: E402
from pipelink.ops.elementwise.cuda import plan_bias_add, plan_binary, plan_cast, plan_unary  # noqa: E402
from pipelink.ops.kernel import LaunchPlan  # noqa: E402
from pipelink.ops.normalization.cuda import plan_layer_norm, plan_rms_norm  # noqa: E402
from pipelink.ops.softmax.cuda import plan_softmax  # noqa: E402
from pipelink.ops.transpose.cuda import plan_transpose  # noqa: E402

EPS = 1e-5

NP = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float64": np.float64}
TORCH = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}
DTYPES = ("float32", "float16", "bfloat16", "float64")


class Runner:
    """Compiles plans (cached by their cache key) and launches them on one stream."""

    def __init__(self) -> None:
        self.device = Device()
        self.device.set_current()
        self.stream = self.device.create_stream()
        self.sm_count = self.device.properties.multiprocessor_count
        self._kernels: dict[tuple[str, str], object] = {}
        self.compile_s = 0.0

    def kernel(self, plan: LaunchPlan):
        key = (plan.cache_key, plan.kernel)
        if key not in self._kernels:
            t0 = time.perf_counter()
            prog = Program(plan.source(), "c++", ProgramOptions(**plan.program_options()))
            self._kernels[key] = prog.compile("cubin").get_kernel(plan.kernel)
            self.compile_s += time.perf_counter() - t0
        return self._kernels[key]

    def run(self, plan: LaunchPlan, **ptrs) -> None:
        config = LaunchConfig(grid=plan.grid, block=plan.block, shmem_size=plan.shared_mem)
        launch(self.stream, config, self.kernel(plan), *plan.args(**ptrs))

    def time_ms(self, plan: LaunchPlan, iters: int = 50, **ptrs) -> float:
        for _ in range(3):
            self.run(plan, **ptrs)
        opts = EventOptions(timing_enabled=True)
        start = self.stream.record(options=opts)
        for _ in range(iters):
            self.run(plan, **ptrs)
        end = self.stream.record(options=opts)
        end.sync()
        return (end - start) / iters


# ------------------------------------------------------------------------------------------------
# host <-> device
# ------------------------------------------------------------------------------------------------
def to_device(a: np.ndarray) -> torch.Tensor:
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).cuda()
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def to_host(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16).astype(np.float64)
    return t.numpy().astype(np.float64)


def poisoned(shape, dtype: str) -> torch.Tensor:
    return torch.full(tuple(shape), float("nan"), dtype=TORCH[dtype], device="cuda")


def rand(rng, shape, dtype: str, low: float | None = None) -> tuple[np.ndarray, torch.Tensor]:
    """Fresh random values, quantised to ``dtype``; returns (exact float64 values, device tensor)."""
    a = rng.standard_normal(shape) * 2.0
    if low is not None:
        a = np.abs(a) + low
    q = a.astype(NP[dtype])
    return q.astype(np.float64), to_device(q)


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| / (|ref| + rms(ref)); inf when anything is NaN or the shapes differ."""
    if got.shape != ref.shape or np.isnan(got).any() or np.isnan(ref).any():
        return float("inf")
    if got.size == 0:
        return 0.0
    scale = np.sqrt(np.mean(ref * ref)) + 1e-300
    return float(np.max(np.abs(got - ref) / (np.abs(ref) + scale)))


# ------------------------------------------------------------------------------------------------
# float64 references
# ------------------------------------------------------------------------------------------------
def erf(x: np.ndarray) -> np.ndarray:
    from math import erf as _erf

    return np.vectorize(_erf, otypes=[np.float64])(x)


UNARY = {
    "identity": lambda x, f: x,
    "relu": lambda x, f: np.maximum(x, 0),
    "silu": lambda x, f: x / (1 + np.exp(-x)),
    "gelu": lambda x, f: 0.5 * x * (1 + erf(x / np.sqrt(2))),
    "gelu_tanh": lambda x, f: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    "scale": lambda x, f: x * f,
    "sigmoid": lambda x, f: 1 / (1 + np.exp(-x)),
    "tanh": lambda x, f: np.tanh(x),
    "hardswish": lambda x, f: x * np.clip(x / 6 + 0.5, 0, 1),
    "erf": lambda x, f: erf(x),
    "exp": lambda x, f: np.exp(x),
    "sqrt": lambda x, f: np.sqrt(x),  # drawn from positive inputs below
}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power}


def layer_norm_ref(x, g, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(var + eps)
    y = (x - mean) * rstd
    return y * (1 if g is None else g) + (0 if b is None else b), mean[..., 0], rstd[..., 0]


# ------------------------------------------------------------------------------------------------
# numerical checks
# ------------------------------------------------------------------------------------------------
def check_all(r: Runner, quick: bool) -> list[tuple]:
    rng = np.random.default_rng(1234)
    rows: list[tuple] = []

    def record(op, dt, shape, err, plan, tol=None):
        tol = tolerance(dt)[0] if tol is None else tol
        rows.append((op, dt, str(shape), plan.kernel, err, tol, err <= tol))

    n = 1_000_003
    norm_cs = (1000, 4096) if quick else (1000, 4096, 1001, 100_000)
    for dt in DTYPES:
        for op, fn in UNARY.items():
            x, xd = rand(rng, (n,), dt, low=0.0 if op == "sqrt" else None)
            y = poisoned((n,), dt)
            plan = plan_unary(op, dt, (n,), factor=0.37, sm_count=r.sm_count)
            r.run(plan, x=xd.data_ptr(), y=y.data_ptr())
            r.stream.sync()
            record(op, dt, (n,), rel_err(to_host(y), fn(x, 0.37)), plan)
        for op, fn in BINARY.items():
            for sa, sb in (((n,), (n,)), ((37, 1, 1000), (5, 1000)), ((7, 1, 5, 3), (6, 1, 3))):
                a, ad = rand(rng, sa, dt, low=0.5 if op == "pow" else None)  # pow: positive bases
                b, bd = rand(rng, sb, dt, low=0.5 if op == "div" else None)
                out = np.broadcast_shapes(sa, sb)
                y = poisoned(out, dt)
                plan = plan_binary(op, dt, sa, sb, sm_count=r.sm_count)
                r.run(plan, a=ad.data_ptr(), b=bd.data_ptr(), y=y.data_ptr())
                r.stream.sync()
                record(op, dt, f"{sa}x{sb}", rel_err(to_host(y), fn(a, b)), plan)
        for shape in ((37, 1000), (37, 999), (5, 3, 4096)):
            x, xd = rand(rng, shape, dt)
            b, bd = rand(rng, shape[-1:], dt)
            y = poisoned(shape, dt)
            plan = plan_bias_add(dt, shape, sm_count=r.sm_count)
            r.run(plan, x=xd.data_ptr(), bias=bd.data_ptr(), y=y.data_ptr())
            r.stream.sync()
            record("bias_add", dt, shape, rel_err(to_host(y), x + b), plan)
        for out in DTYPES:
            x, xd = rand(rng, (n,), dt)
            y = poisoned((n,), out)
            plan = plan_cast(dt, out, (n,), sm_count=r.sm_count)
            r.run(plan, x=xd.data_ptr(), y=y.data_ptr())
            r.stream.sync()
            ref = x.astype(NP[out]).astype(np.float64)
            record(
                "cast",
                f"{dt}",
                f"->{out}",
                rel_err(to_host(y), ref),
                plan,
                tol=tolerance(out)[0] if out != dt else 0.0,
            )
        for c in norm_cs:
            shape = (37, c)
            stat = "float64" if dt == "float64" else "float32"
            for has_gb in (True, False):
                x, xd = rand(rng, shape, dt)
                x = x + 3.0  # a non-zero mean exercises the two-pass variance
                xd = to_device(x.astype(NP[dt]))
                x = x.astype(NP[dt]).astype(np.float64)
                g, gd = rand(rng, (c,), dt)
                b, bd = rand(rng, (c,), dt)
                y, mean, rstd = poisoned(shape, dt), poisoned((37,), stat), poisoned((37,), stat)
                plan = plan_layer_norm(
                    dt, shape, eps=1e-5, has_gamma=has_gb, has_beta=has_gb, sm_count=r.sm_count
                )
                ptrs = dict(x=xd.data_ptr(), y=y.data_ptr(), mean=mean.data_ptr(), rstd=rstd.data_ptr())
                if has_gb:
                    ptrs.update(gamma=gd.data_ptr(), beta=bd.data_ptr())
                r.run(plan, **ptrs)
                r.stream.sync()
                ry, rm, rs = layer_norm_ref(x, g if has_gb else None, b if has_gb else None, 1e-5)
                err = max(rel_err(to_host(y), ry), rel_err(to_host(mean), rm), rel_err(to_host(rstd), rs))
                record("layer_norm" + ("" if has_gb else "(no g/b)"), dt, shape, err, plan)
            x, xd = rand(rng, shape, dt)
            g, gd = rand(rng, (c,), dt)
            y = poisoned(shape, dt)
            plan = plan_rms_norm(dt, shape, eps=EPS, sm_count=r.sm_count)
            r.run(plan, x=xd.data_ptr(), gamma=gd.data_ptr(), y=y.data_ptr())
            r.stream.sync()
            ref = x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * g
            record("rms_norm", dt, shape, rel_err(to_host(y), ref), plan)
            x, xd = rand(rng, shape, dt)
            y = poisoned(shape, dt)
            plan = plan_softmax(dt, shape, sm_count=r.sm_count)
            r.run(plan, x=xd.data_ptr(), y=y.data_ptr())
            r.stream.sync()
            e = np.exp(x - x.max(-1, keepdims=True))
            record("softmax", dt, shape, rel_err(to_host(y), e / e.sum(-1, keepdims=True)), plan)
        for shape, perm in (
            ((3, 37, 1000), None),
            ((1000, 37), (1, 0)),
            ((2, 3, 4, 5), (3, 1, 0, 2)),
            ((4, 37, 33, 2), (0, 2, 1, 3)),
            ((129, 65), None),
        ):
            x, xd = rand(rng, shape, dt)
            ref = np.swapaxes(x, -1, -2) if perm is None else np.transpose(x, perm)
            y = poisoned(ref.shape, dt)
            plan = plan_transpose(dt, shape, perm, sm_count=r.sm_count)
            r.run(plan, x=xd.data_ptr(), y=y.data_ptr())
            r.stream.sync()
            record("transpose", dt, f"{shape}{perm or ''}", rel_err(to_host(y), ref), plan, tol=0.0)
        for shape in ((4, 6, 37, 41), (37, 16), (2, 5, 8)):
            c = shape[1]
            x, xd = rand(rng, shape, dt)
            m, md = rand(rng, (c,), dt)
            v, vd = rand(rng, (c,), dt, low=0.1)
            g, gd = rand(rng, (c,), dt)
            b, bd = rand(rng, (c,), dt)
            y = poisoned(shape, dt)
            plan = plan_batch_norm(dt, shape, eps=1e-5, sm_count=r.sm_count)
            r.run(
                plan,
                x=xd.data_ptr(),
                mean=md.data_ptr(),
                var=vd.data_ptr(),
                gamma=gd.data_ptr(),
                beta=bd.data_ptr(),
                y=y.data_ptr(),
            )
            r.stream.sync()
            bc = (1, c) + (1,) * (len(shape) - 2)
            ref = (x - m.reshape(bc)) / np.sqrt(v.reshape(bc) + 1e-5) * g.reshape(bc) + b.reshape(bc)
            record("batch_norm", dt, shape, rel_err(to_host(y), ref), plan)
    return rows


# ------------------------------------------------------------------------------------------------
# bandwidth
# ------------------------------------------------------------------------------------------------
def copy_gbps(nbytes: int) -> float:
    """Device-to-device copy bandwidth (bytes read + written per second) for ``nbytes`` per side."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(50):
        dst.copy_(src)
    end.record()
    end.synchronize()
    return 2 * nbytes / (start.elapsed_time(end) / 50 * 1e-3) / 1e9


ROW_SWEEP = [
    {"block": b, "group": g, "max_blocks_per_sm": m}
    for b in (128, 256, 512, 1024)
    for g in (0, 64, 128)
    for m in (4, 8, 32)
    if g <= b
]
FLAT_SWEEP = [
    {"block": b, "unroll": u, "max_blocks_per_sm": m}
    for b in (128, 256, 512)
    for u in (1, 2, 4)
    for m in (4, 8, 16)
]
TILE_SWEEP = [{"tile": t, "tile_rows": r} for t in (32, 64) for r in (4, 8, 16)]


def perf_all(r: Runner, sweep: bool) -> list[tuple]:
    """Bandwidth of the big cases; with ``sweep``, also the best of a small grid of tunables (marked *)."""
    rows = []
    baselines: dict[int, float] = {}

    def add_row(name, dt, shape, make_plan, moved, grid, **ptrs):
        # baseline: a copy of as many bytes as the op's output (same launch-overhead share)
        nbytes = moved // (3 if name == "add" else 2)
        if nbytes not in baselines:
            baselines[nbytes] = copy_gbps(nbytes)
        default = make_plan(None)
        best, ms = default, r.time_ms(default, **ptrs)
        for tuned in grid if sweep else ():
            try:
                cand = make_plan(tuned)
            except InvalidArgumentError:
                continue
            t = r.time_ms(cand, **ptrs)
            if t < ms:
                best, ms = cand, t
        gbps = moved / (ms * 1e-3) / 1e9
        rows.append(
            (name if best is default else name + "*", dt, shape, gbps, 100 * gbps / baselines[nbytes])
        )
        if best is not default:
            print(f"  best {name} {dt} {shape}: {best.params}")

    sm = r.sm_count
    for dt, shape in (("bfloat16", (65536, 4096)), ("float32", (8192, 4096))):
        x = torch.randn(shape, dtype=TORCH[dt], device="cuda")
        g, b = torch.randn(shape[-1], dtype=TORCH[dt], device="cuda"), torch.randn_like(x[0])
        y = torch.empty_like(x)
        mean = torch.empty(shape[0], dtype=torch.float32, device="cuda")
        rstd = torch.empty_like(mean)
        torch.cuda.synchronize()
        label = f"{shape[0]}x{shape[1]}"
        add_row(
            "layer_norm",
            dt,
            label,
            lambda t, dt=dt, shape=shape: plan_layer_norm(dt, shape, eps=EPS, tuned=t, sm_count=sm),
            2 * x.nbytes,
            ROW_SWEEP,
            x=x.data_ptr(),
            gamma=g.data_ptr(),
            beta=b.data_ptr(),
            y=y.data_ptr(),
            mean=mean.data_ptr(),
            rstd=rstd.data_ptr(),
        )
        add_row(
            "rms_norm",
            dt,
            label,
            lambda t, dt=dt, shape=shape: plan_rms_norm(dt, shape, eps=EPS, tuned=t, sm_count=sm),
            2 * x.nbytes,
            ROW_SWEEP,
            x=x.data_ptr(),
            gamma=g.data_ptr(),
            y=y.data_ptr(),
        )
        add_row(
            "softmax",
            dt,
            label,
            lambda t, dt=dt, shape=shape: plan_softmax(dt, shape, tuned=t, sm_count=sm),
            2 * x.nbytes,
            ROW_SWEEP,
            x=x.data_ptr(),
            y=y.data_ptr(),
        )
        del x, y
    big = 256 << 20
    for dt in ("float32", "bfloat16"):
        n = big // np.dtype(NP[dt]).itemsize
        a = torch.randn(n, dtype=TORCH[dt], device="cuda")
        b, y = torch.randn_like(a), torch.empty_like(a)
        torch.cuda.synchronize()
        for op in ("gelu", "silu", "identity"):
            add_row(
                op,
                dt,
                "256 MiB",
                lambda t, op=op, dt=dt, n=n: plan_unary(op, dt, (n,), tuned=t, sm_count=sm),
                2 * big,
                FLAT_SWEEP,
                x=a.data_ptr(),
                y=y.data_ptr(),
            )
        add_row(
            "add",
            dt,
            "256 MiB",
            lambda t, dt=dt, n=n: plan_binary("add", dt, (n,), (n,), tuned=t, sm_count=sm),
            3 * big,
            FLAT_SWEEP,
            a=a.data_ptr(),
            b=b.data_ptr(),
            y=y.data_ptr(),
        )
        side = int(np.sqrt(n))
        add_row(
            "transpose",
            dt,
            f"{side}x{side}",
            lambda t, dt=dt, side=side: plan_transpose(dt, (side, side), tuned=t, sm_count=sm),
            2 * side * side * a.element_size(),
            TILE_SWEEP,
            x=a.data_ptr(),
            y=y.data_ptr(),
        )
        del a, b, y
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer row lengths")
    parser.add_argument("--no-perf", action="store_true", help="skip the bandwidth measurements")
    parser.add_argument("--sweep", action="store_true", help="also time a small grid of tunables")
    parser.add_argument("--no-check", action="store_true", help="skip the numerical checks")
    args = parser.parse_args()
    r = Runner()
    print(f"device: {r.device.name}, {r.sm_count} SMs")
    t0 = time.perf_counter()
    checks = [] if args.no_check else check_all(r, args.quick)
    print(f"numerics: {len(checks)} checks in {time.perf_counter() - t0:.1f} s (compile {r.compile_s:.1f} s)")
    perf = [] if args.no_perf else perf_all(r, args.sweep)

    failed = [c for c in checks if not c[6]]
    print("\n== numerics (rel err = max|got-ref| / (|ref| + rms(ref))) ==")
    print(f"{'op':<20}{'dtype':<10}{'shape':<26}{'kernel':<18}{'rel err':>10}{'tol':>9}  ok")
    for op, dt, shape, kernel, err, tol, ok in checks:
        if not ok or not args.quick:
            verdict = "ok" if ok else "FAIL"
            print(f"{op:<20}{dt:<10}{shape[:25]:<26}{kernel:<18}{err:>10.2e}{tol:>9.0e}  {verdict}")
    if perf:
        print("\n== bandwidth (bytes read + written / time; copy baseline of the same size; * = swept) ==")
        print(f"{'op':<14}{'dtype':<10}{'shape':<14}{'GB/s':>9}{'% of copy':>11}")
        for op, dt, shape, gbps, pct in perf:
            print(f"{op:<14}{dt:<10}{shape:<14}{gbps:>9.0f}{pct:>10.1f}%")
    print(f"\n{len(checks) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
