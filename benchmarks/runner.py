"""Runs one ``OpCase``: correctness first, then PipeLink eager and graph, summed kernel times, PyTorch
eager and torch.compile, and (for the MLP) peak device memory.

A failure in one measurement is recorded under ``errors`` and the others still run; a failure of the
case itself (load, correctness run) propagates to the suite, which records the case as an error.
"""

from __future__ import annotations

import statistics
import time
import traceback
from typing import Any

import pipelink as pl

from .cases import OpCase
from .env import Env
from .timing import measure, n_input_sets, tolerance

__all__ = ["run_op_case", "derive", "short_error"]


def short_error(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    return text if len(text) < 2000 else text[:2000] + " ..."


def _make_sets(env: Env, case: OpCase, count: int) -> list[dict[str, Any]]:
    return [
        {n: env.randn(s, case.dtype, scale, offset) for n, (s, scale, offset) in case.inputs.items()}
        for _ in range(count)
    ]


def _reference(env: Env, case: OpCase, inputs: dict[str, Any]) -> Any:
    """The case's function in higher precision on the same inputs (float32 torch / float64 NumPy)."""
    args = [env.to_reference(v) for v in inputs.values()]
    if env.has_torch:
        torch = env.torch
        old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        # A true float32 reference: no TF32 in matmuls, nor in cuDNN's convolutions.
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        try:
            return case.torch_fn(torch)(*args)
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old
    return case.numpy_ref(*args)


def _pl_memory(env: Env) -> dict[str, int]:
    return pl.memory.stats(env.pl_device)


def run_op_case(env: Env, case: OpCase) -> dict[str, Any]:
    """Measure one case; returns its result record (see ``benchmarks/report.py`` for the fields)."""
    res: dict[str, Any] = {
        "case": case.name,
        "group": case.group,
        "dtype": case.dtype,
        "shape": case.shape,
        "bytes": case.nbytes,
        "flops": case.flops,
        "roles": list(case.roles),
        "large": case.large,
        "status": "ok",
        "times_s": {},
        "host_s": {},
        "timings": {},
        "correctness": {},
        "errors": {},
        "notes": list(case.notes),
    }
    budget, torch = env.budget, env.torch
    events = env.is_cuda
    nsets = n_input_sets(case.set_bytes)
    res["input_sets"] = nsets
    sets = _make_sets(env, case, nsets)
    tol = tolerance(case.dtype)

    mem0 = _pl_memory(env) if case.memory else None
    eager = pl.load(case.doc, device=env.pl_device, cuda_graph=False)
    graph = None
    try:
        # -- correctness (and, for memory cases, the first run's peak) ---------------------------------
        ref = _reference(env, case, sets[0])
        out = env.from_pl(eager.run(**sets[0])[case.output])
        env.synchronize()
        err = env.rel_err(out, ref)
        res["correctness"]["pipelink_eager"] = {"rel_err": err, "tolerance": tol, "ok": err <= tol}
        del out
        if case.memory:
            res["memory"] = _memory_pipelink(env, eager, mem0)
        try:
            graph = _check_graph(env, case, res, sets[0], ref)
        except Exception as e:  # noqa: BLE001 - graph mode failing must not lose the eager numbers
            res["errors"]["pipelink_graph"] = short_error(e)
            res.setdefault("tracebacks", {})["pipelink_graph"] = traceback.format_exc(limit=8)
        del ref
        res["correct"] = all(c["ok"] for c in res["correctness"].values())
        if not res["correct"]:
            res["notes"].append("PipeLink output differs from the reference beyond the tolerance")

        # -- PipeLink timings ---------------------------------------------------------------------------
        for key, pipe in (("pipelink_eager", eager), ("pipelink_graph", graph)):
            if pipe is None:
                continue
            _timed(
                res,
                key,
                lambda p=pipe: measure(
                    [lambda s=s, p=p: p.run(**s) for s in sets], budget, torch=torch, use_events=events
                ),
            )
        if env.is_cuda:
            _timed(res, "pipelink_kernels", lambda: _kernel_sum(eager, sets, budget.repeats))
    finally:
        for pipe in (eager, graph):
            if pipe is not None:
                pipe.close()

    # -- PyTorch --------------------------------------------------------------------------------------
    if env.has_torch:
        fn = case.torch_fn(torch)
        calls = [lambda s=s: fn(*s.values()) for s in sets]
        _timed(res, "torch_eager", lambda: measure(calls, budget, torch=torch, use_events=True))
        if case.memory:
            _store_peak(res, "torch_eager_peak_delta_bytes", lambda: _torch_peak(env, fn, sets[0]))
        if env.compile:
            _torch_compile(env, case, res, fn, sets)
        else:
            res["errors"]["torch_compile"] = "skipped (torch.compile off: --quick or --no-compile)"
    else:
        res["errors"]["torch_eager"] = res["errors"]["torch_compile"] = f"skipped: {env.torch_note}"
    derive(env, res)
    return res


def _check_graph(env: Env, case: OpCase, res: dict[str, Any], inputs: dict[str, Any], ref: Any):
    """Load the graph-mode pipeline and check its replayed output; returns the pipeline."""
    mem1 = _pl_memory(env) if case.memory else None
    graph = pl.load(case.doc, device=env.pl_device, cuda_graph=True, static_outputs=True)
    res["graph_mode"] = graph.cuda_graph
    res["load_warnings"] = list(graph.load_report.warnings)
    try:
        for _ in range(2):  # the first run is eager and captures; the second replays
            out = graph.run(**inputs)[case.output]
        res["graph_replay"] = bool(graph.last_report and graph.last_report.graph_replay)
        out = env.from_pl(out)
        env.synchronize()
        err = env.rel_err(out, ref)
        tol = tolerance(case.dtype)
        res["correctness"]["pipelink_graph"] = {"rel_err": err, "tolerance": tol, "ok": err <= tol}
        del out
        if case.memory:
            res["memory"]["pipelink_graph_peak_delta_bytes"] = _peak_delta(env, mem1)
    except BaseException:
        graph.close()
        raise
    return graph


def _store_peak(res: dict[str, Any], key: str, thunk) -> None:
    try:
        res["memory"][key] = thunk()
    except Exception as e:  # noqa: BLE001
        res["errors"][key] = short_error(e)


def _timed(res: dict[str, Any], key: str, thunk) -> None:
    """Store a Timing (or a float of seconds) under ``key``; an exception becomes ``errors[key]``."""
    try:
        t = thunk()
    except Exception as e:  # noqa: BLE001 - one column failing must not lose the others
        res["errors"][key] = short_error(e)
        res.setdefault("tracebacks", {})[key] = traceback.format_exc(limit=8)
        return
    if isinstance(t, float):
        res["times_s"][key] = t
    else:
        res["times_s"][key], res["host_s"][key], res["timings"][key] = t.median_s, t.host_s, t.to_dict()


def _kernel_sum(pipe, sets, repeats: int) -> float:
    """Median over runs of the summed per-stage device times of ``run(profile=True)``."""
    sums = []
    for i in range(max(3, repeats)):
        pipe.run(**sets[i % len(sets)], profile=True)
        times = [s.device_time_s for s in pipe.last_report.stages.values()]
        if any(t is None for t in times):
            raise RuntimeError("run(profile=True) left a stage's device_time_s empty")
        sums.append(sum(times))
    return statistics.median(sums)


def _torch_compile(env: Env, case: OpCase, res: dict[str, Any], fn, sets) -> None:
    torch = env.torch
    try:
        compiled = torch.compile(fn, dynamic=False)
        t0 = time.perf_counter()
        compiled(*sets[0].values())
        torch.cuda.synchronize()
        res["torch_compile_s"] = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001
        res["errors"]["torch_compile"] = short_error(e)
        return
    calls = [lambda s=s: compiled(*s.values()) for s in sets]
    _timed(res, "torch_compile", lambda: measure(calls, env.budget, torch=torch, use_events=True))
    if case.memory:
        _store_peak(res, "torch_compile_peak_delta_bytes", lambda: _torch_peak(env, compiled, sets[0]))


def _torch_peak(env: Env, fn, inputs: dict[str, Any]) -> int:
    """Peak bytes torch allocates above what is live before one call (its output included)."""
    torch = env.torch
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn(*inputs.values())
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return int(peak)


def _peak_delta(env: Env, before: dict[str, Any]) -> int | None:
    """PipeLink's peak above what it had allocated before, or None when an earlier, higher peak hides it."""
    after = _pl_memory(env)
    if after["peak_bytes"] <= before["peak_bytes"] and before["peak_bytes"] > before["allocated_bytes"]:
        return None
    return int(after["peak_bytes"] - before["allocated_bytes"])


def _memory_pipelink(env: Env, pipe, before: dict[str, Any]) -> dict[str, Any]:
    plan = pipe.memory_plan
    return {
        "pipelink_eager_peak_delta_bytes": _peak_delta(env, before),
        "pipelink_plan_peak_bytes": plan.peak_bytes if plan is not None else None,
        "pipelink_plan_naive_bytes": plan.naive_bytes if plan is not None else None,
        "pipelink_stats": _pl_memory(env),
    }


def derive(env: Env, res: dict[str, Any]) -> None:
    """Roofline, % of roofline, bandwidth and the ratios vs PyTorch from the measured times."""
    bw = env.ceilings.get("copy_bandwidth_Bps")
    rate = env.ceilings.get("mm_flops_per_s")
    t = res["times_s"]
    if bw and rate:
        res["roofline_s"] = max(res["bytes"] / bw, res["flops"] / rate)
        res["roofline_bound"] = "memory" if res["bytes"] / bw >= res["flops"] / rate else "compute"
    modes = {k: t[k] for k in ("pipelink_eager", "pipelink_graph") if k in t}
    if modes:
        best = min(modes, key=modes.get)
        res["pipelink_best"] = {"mode": best.removeprefix("pipelink_"), "time_s": modes[best]}
    comp: dict[str, Any] = {}
    for key, value in t.items():
        if key.startswith("pipelink") and value > 0:
            if "roofline_s" in res:
                comp[f"{key}_pct_of_roofline"] = 100.0 * res["roofline_s"] / value
            if bw:
                comp[f"{key}_bandwidth_Bps"] = res["bytes"] / value
                comp[f"{key}_pct_of_copy_bw"] = 100.0 * res["bytes"] / value / bw
            if rate:
                comp[f"{key}_pct_of_mm_rate"] = 100.0 * res["flops"] / value / rate
            for base in ("torch_eager", "torch_compile"):
                if base in t:
                    comp[f"{key}_speedup_vs_{base}"] = t[base] / value  # > 1: PipeLink is faster
    if "pipelink_graph" in t and t.get("pipelink_kernels"):
        comp["graph_overhead_pct"] = 100.0 * (t["pipelink_graph"] / t["pipelink_kernels"] - 1.0)
        if "pipelink_eager" in t:
            comp["eager_overhead_pct"] = 100.0 * (t["pipelink_eager"] / t["pipelink_kernels"] - 1.0)
    res["comparisons"] = comp
