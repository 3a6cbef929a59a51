"""A pipeline of a native module vs calling the same kernel directly (the seed's "< 3 %" claim).

Builds ``examples/layernorm_module`` into a temporary folder (nvcc on CUDA; the C twin on the CPU), runs
it as a one-stage pipeline, and on CUDA calls its exported legacy ``pipeLinkLayerNorm`` through ctypes
with torch tensors' pointers on torch's current stream. A failed build makes the case "skipped".
"""

from __future__ import annotations

import ctypes
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import pipelink as pl

from .env import Env
from .runner import _timed, short_error
from .timing import measure, n_input_sets, tolerance

__all__ = ["run_native", "native_sizes"]

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "layernorm_module" / "src"
EPS = 1e-5


def native_sizes(size: str) -> list[tuple[int, int]]:
    return {"default": [(1024, 1024), (8192, 4096)], "quick": [(1024, 1024)], "tiny": [(8, 64)]}[size]


def _build(env: Env, out_dir: Path) -> Path:
    from pipelink.modules.build import build_module, detect_cuda_arch

    src = EXAMPLE / ("layernorm_kernel.cu" if env.is_cuda else "layernorm_cpu.c")
    arch = detect_cuda_arch() if env.is_cuda else None
    return build_module([src, EXAMPLE / "layernorm.desc.h"], out_dir / "liblayernorm_module.so", arch=arch)


def _doc(lib: Path, rows: int, cols: int) -> dict[str, Any]:
    f32 = "float32"
    return {
        "name": "bench_native_layer_norm",
        "inputs": {
            "input_tensor": {"shape": [rows, cols], "dtype": f32},
            "gamma_tensor": {"shape": [cols], "dtype": f32},
            "beta_tensor": {"shape": [cols], "dtype": f32},
            "eps_scalar": {"shape": [], "dtype": f32},
        },
        "outputs": ["norm_output"],
        "pipeline": [
            {
                "name": "layer_norm_v1",
                "id": "ln",
                "library": str(lib),
                "inputs": ["input_tensor", "gamma_tensor", "beta_tensor", "eps_scalar"],
                "outputs": ["norm_output"],
            }
        ],
    }


def run_native(env: Env) -> list[dict[str, Any]]:
    """One result record per size; every record is "skipped" with the reason when the build fails."""
    sizes = native_sizes(env.size)
    names = [f"native_layer_norm_{r}x{c}_fp32" for r, c in sizes]
    with tempfile.TemporaryDirectory(prefix="pipelink-bench-") as tmp:
        try:
            lib = _build(env, Path(tmp))
        except Exception as e:  # noqa: BLE001 - a missing compiler must not stop the suite
            reason = f"build failed: {short_error(e)}"
            return [
                {"case": n, "group": "native", "status": "skipped", "reason": reason, "roles": ["native"]}
                for n in names
            ]
        env.log(f"  built {lib.name} ({'nvcc' if env.is_cuda else 'cc'})")
        results = []
        for name, (rows, cols) in zip(names, sizes, strict=True):
            try:
                results.append(_one(env, lib, name, rows, cols))
            except Exception as e:  # noqa: BLE001 - one size failing keeps the other
                results.append(
                    {
                        "case": name,
                        "group": "native",
                        "status": "error",
                        "error": short_error(e),
                        "roles": ["native"],
                    }
                )
            env.free()
        return results


def _one(env: Env, lib: Path, name: str, rows: int, cols: int) -> dict[str, Any]:
    n = rows * cols
    res: dict[str, Any] = {
        "case": name,
        "group": "native",
        "dtype": "float32",
        "shape": f"{rows}x{cols}",
        "bytes": (2 * n + 2 * cols) * 4 + 8 * rows,
        "flops": 8 * n,
        "roles": ["native"],
        "large": n * 4 >= 100e6,
        "status": "ok",
        "times_s": {},
        "host_s": {},
        "timings": {},
        "correctness": {},
        "errors": {},
        "notes": [],
        "library": lib.name,
    }
    budget, torch = env.budget, env.torch
    sets = []
    for _ in range(n_input_sets(n * 4)):
        if env.is_cuda:
            eps = env.torch.full((), EPS, device="cuda", dtype=env.torch.float32)
        else:
            eps = np.array(EPS, np.float32)
        sets.append(
            {
                "input_tensor": env.randn((rows, cols), "float32"),
                "gamma_tensor": env.randn((cols,), "float32", 0.1, 1.0),
                "beta_tensor": env.randn((cols,), "float32", 0.1, 0.0),
                "eps_scalar": eps,
            }
        )
    res["input_sets"] = len(sets)
    doc = _doc(lib, rows, cols)
    ref = _reference(env, sets[0])
    tol = tolerance("float32")
    for g in (False, True):
        key = "pipelink_graph" if g else "pipelink_eager"
        pipe = None
        try:  # one mode failing keeps the other's numbers
            pipe = pl.load(doc, device=env.pl_device, cuda_graph=g, static_outputs=g)
            for _ in range(2):  # graph mode: the first run captures, the second replays
                out = pipe.run(**sets[0])["norm_output"]
            err = env.rel_err(env.from_pl(out), ref)
            res["correctness"][key] = {"rel_err": err, "tolerance": tol, "ok": err <= tol}
            if g:
                res["graph_mode"] = pipe.cuda_graph
                res["graph_replay"] = bool(pipe.last_report.graph_replay)
                res["load_warnings"] = list(pipe.load_report.warnings)
            _timed(
                res,
                key,
                lambda p=pipe: measure(
                    [lambda s=s, p=p: p.run(**s) for s in sets], budget, torch=torch, use_events=env.is_cuda
                ),
            )
        except Exception as e:  # noqa: BLE001
            res["errors"][key] = short_error(e)
        finally:
            if pipe is not None:
                pipe.close()
    # The temporary module must not stay registered: another copy of it would then conflict.
    from pipelink.modules.native import load_library

    load_library(lib).unload()
    if "pipelink_eager" in res["errors"] and "pipelink_graph" in res["errors"]:
        raise RuntimeError(f"both modes failed: {res['errors']['pipelink_eager']}")
    if env.is_cuda:
        try:
            _direct(env, res, lib, sets, ref, rows, cols)
        except Exception as e:  # noqa: BLE001
            res["errors"]["direct"] = short_error(e)
    else:
        res["errors"]["direct"] = (
            "CPU run: the C twin exports only the ABI entry (the legacy "
            "pipeLinkLayerNorm is CUDA-only); PipeLink timed alone"
        )
    res["correct"] = all(c["ok"] for c in res["correctness"].values())
    _overheads(res)
    return res


def _reference(env: Env, inputs: dict[str, Any]) -> Any:
    x, g, b = (env.to_reference(inputs[k]) for k in ("input_tensor", "gamma_tensor", "beta_tensor"))
    if env.is_cuda:
        return env.torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b, EPS)
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + EPS) * g + b


def _direct(env: Env, res: dict[str, Any], lib: Path, sets, ref, rows: int, cols: int) -> None:
    """The legacy entry called through ctypes on torch's current stream, outputs preallocated once."""
    torch = env.torch
    fn = ctypes.CDLL(str(lib)).pipeLinkLayerNorm
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p] * 6 + [ctypes.POINTER(ctypes.c_int32), ctypes.c_void_p, ctypes.c_void_p]
    shape = (ctypes.c_int32 * 2)(rows, cols)
    y = torch.empty((rows, cols), device="cuda", dtype=torch.float32)
    mean = torch.empty(rows, device="cuda", dtype=torch.float32)
    rstd = torch.empty(rows, device="cuda", dtype=torch.float32)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    argsets = [
        (
            s["input_tensor"].data_ptr(),
            s["gamma_tensor"].data_ptr(),
            s["beta_tensor"].data_ptr(),
            y.data_ptr(),
            mean.data_ptr(),
            rstd.data_ptr(),
            shape,
            s["eps_scalar"].data_ptr(),
            stream,
        )
        for s in sets
    ]
    y.fill_(float("nan"))  # poisoned: every element must be written
    fn(*argsets[0])
    torch.cuda.synchronize()
    err = env.rel_err(y, ref)
    res["correctness"]["direct"] = {
        "rel_err": err,
        "tolerance": tolerance("float32"),
        "ok": err <= tolerance("float32"),
    }
    calls = [lambda a=a: fn(*a) for a in argsets]
    _timed(res, "direct", lambda: measure(calls, env.budget, torch=torch, use_events=True))
    _timed(
        res,
        "direct_sync",
        lambda: measure(
            [lambda a=a: (fn(*a), torch.cuda.synchronize()) for a in argsets],
            env.budget,
            torch=torch,
            use_events=True,
        ),
    )


def _overheads(res: dict[str, Any]) -> None:
    """Overhead of the pipeline over the direct call, in percent (sync: the direct call also waits)."""
    t, comp = res["times_s"], {}
    for mode in ("eager", "graph"):
        key = f"pipelink_{mode}"
        if key not in t:
            continue
        for base in ("direct_sync", "direct"):
            if base in t and t[base] > 0:
                comp[f"{mode}_overhead_vs_{base}_pct"] = 100.0 * (t[key] / t[base] - 1.0)
                comp[f"{mode}_added_us_vs_{base}"] = 1e6 * (t[key] - t[base])
    res["comparisons"] = comp
