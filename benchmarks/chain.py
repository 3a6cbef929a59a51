"""The launch-bound case: a chain of small elementwise stages (scale / relu on 4096 floats).

Reports PipeLink's host time per ``run()`` (eager and graph) and its per-stage cost (the slope between a
1-stage and an N-stage pipeline), against N torch ops eager and the same ops in a torch CUDA graph.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import pipelink as pl

from .env import Env
from .runner import _timed, short_error
from .timing import measure, tolerance

__all__ = ["chain_doc", "run_chain"]

FACTOR = 1.1


def chain_doc(stages: int, length: int) -> dict[str, Any]:
    """``stages`` alternating ``scale`` (factor 1.1) and ``relu`` stages on a [length] float32 vector."""
    pipeline = []
    for i in range(stages):
        src = "x" if i == 0 else f"t{i}"
        dst = "y" if i == stages - 1 else f"t{i + 1}"
        stage = {"name": "scale" if i % 2 == 0 else "relu", "id": f"s{i}", "inputs": [src], "outputs": [dst]}
        if i % 2 == 0:
            stage["attrs"] = {"factor": FACTOR}
        pipeline.append(stage)
    return {
        "name": f"bench_chain_{stages}",
        "inputs": {"x": {"shape": [length], "dtype": "float32"}},
        "outputs": ["y"],
        "pipeline": pipeline,
    }


def _reference(x: np.ndarray, stages: int) -> np.ndarray:
    y = x.astype(np.float64)
    for i in range(stages):
        y = y * FACTOR if i % 2 == 0 else np.maximum(y, 0.0)
    return y


def run_chain(env: Env, stages: int = 20, length: int = 4096) -> dict[str, Any]:
    """Measure the chain; returns its result record."""
    if env.tiny:
        length = 64
    res: dict[str, Any] = {
        "case": f"chain_{stages}x{length}_fp32",
        "group": "chain",
        "dtype": "float32",
        "shape": f"{stages} stages x {length}",
        "bytes": 2 * length * 4 * stages,
        "flops": length * stages,
        "roles": ["chain"],
        "large": False,
        "status": "ok",
        "times_s": {},
        "host_s": {},
        "timings": {},
        "correctness": {},
        "errors": {},
        "notes": [],
        "stages": stages,
    }
    budget, torch = env.budget, env.torch
    sets = [{"x": env.randn((length,), "float32")} for _ in range(3)]
    ref = _reference(np.asarray(_host(env, sets[0]["x"])), stages)
    for g in (False, True):
        mode = "pipelink_graph" if g else "pipelink_eager"
        pipes = {}
        try:  # one mode failing keeps the other's numbers
            pipes = {
                n: pl.load(chain_doc(n, length), device=env.pl_device, cuda_graph=g, static_outputs=g)
                for n in (1, stages)
            }
            for _ in range(2):  # graph mode: the first run captures, the second replays
                out = pipes[stages].run(**sets[0])["y"]
            host = _host(env, env.from_pl(out)).astype(np.float64)
            err = float(np.linalg.norm(host - ref) / np.linalg.norm(ref))
            tol = tolerance("float32")
            res["correctness"][mode] = {"rel_err": err, "tolerance": tol, "ok": err <= tol}
            if g:
                res["graph_mode"] = pipes[stages].cuda_graph
                res["graph_replay"] = bool(pipes[stages].last_report.graph_replay)
                res["load_warnings"] = list(pipes[stages].load_report.warnings)
            for n, pipe in pipes.items():
                _timed(
                    res,
                    mode + ("" if n == stages else "_1stage"),
                    lambda p=pipe: measure(
                        [lambda s=s, p=p: p.run(**s) for s in sets],
                        budget,
                        torch=torch,
                        use_events=env.is_cuda,
                    ),
                )
            if not g:
                _timed(res, "launch_floor", lambda p=pipes[stages]: _launch_floor(p, budget))
        except Exception as e:  # noqa: BLE001
            res["errors"][mode] = short_error(e)
        finally:
            for pipe in pipes.values():
                pipe.close()
    if "pipelink_eager" in res["errors"] and "pipelink_graph" in res["errors"]:
        raise RuntimeError(f"both modes failed: {res['errors']['pipelink_eager']}")
    res["correct"] = all(c["ok"] for c in res["correctness"].values())

    if env.has_torch:
        _torch_chain(env, res, stages, sets)
    else:
        res["errors"]["torch_eager"] = res["errors"]["torch_graph"] = f"skipped: {env.torch_note}"
    _per_stage(res, stages)
    return res


def _launch_floor(pipe, budget):
    """Host time of one stage's kernel called directly, as the executor calls it (on CUDA: one
    ``cuLaunchKernel`` with the prebuilt parameter array): what a stage costs before PipeLink adds
    anything. Timed on the host clock."""
    plan = pipe._last_plan  # noqa: SLF001 - the benchmark looks inside on purpose
    step = plan.steps[1]  # a stage reading and writing arena buffers
    ins = [plan.static[n] for n in step.in_names]
    outs = [plan.static[n] for n in step.out_names]
    stream = plan.streams[0]
    return measure([lambda: step.kernel(ins, outs, stream)], budget)


def _host(env: Env, x: Any) -> np.ndarray:
    return x.cpu().numpy() if env.is_cuda else np.asarray(x)


def _torch_chain(env: Env, res: dict[str, Any], stages: int, sets) -> None:
    torch = env.torch

    def ops(x):
        for i in range(stages):
            x = x * FACTOR if i % 2 == 0 else torch.relu(x)
        return x

    budget = env.budget
    _timed(
        res,
        "torch_eager",
        lambda: measure([lambda s=s: ops(s["x"]) for s in sets], budget, torch=torch, use_events=True),
    )
    _timed(
        res,
        "torch_eager_sync",
        lambda: measure(
            [lambda s=s: (ops(s["x"]), torch.cuda.synchronize()) for s in sets],
            budget,
            torch=torch,
            use_events=True,
        ),
    )

    def graph_timing():
        static_x = sets[0]["x"].clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                ops(static_x)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_y = ops(static_x)
        g.replay()
        torch.cuda.synchronize()
        ref = ops(static_x)
        if not torch.allclose(static_y, ref):
            raise RuntimeError("the torch CUDA graph's output differs from eager torch")
        res["timings"]["torch_graph_sync"] = measure(
            [lambda: (g.replay(), torch.cuda.synchronize())], budget, torch=torch, use_events=True
        ).to_dict()
        return measure([g.replay], budget, torch=torch, use_events=True)

    _timed(res, "torch_graph", graph_timing)


def _per_stage(res: dict[str, Any], stages: int) -> None:
    """Per-stage costs in microseconds: the slope between 1 and N stages, and run time / N."""
    h, comp = res["host_s"], {}
    for mode in ("eager", "graph"):
        full, one = h.get(f"pipelink_{mode}"), h.get(f"pipelink_{mode}_1stage")
        if full is not None:
            comp[f"pipelink_{mode}_run_us"] = full * 1e6
            comp[f"pipelink_{mode}_us_per_stage_avg"] = full * 1e6 / stages
        if full is not None and one is not None:
            comp[f"pipelink_{mode}_us_per_stage_slope"] = (full - one) * 1e6 / (stages - 1)
            comp[f"pipelink_{mode}_fixed_us"] = one * 1e6 - comp[f"pipelink_{mode}_us_per_stage_slope"]
    floor = h.get("launch_floor")
    if floor is not None:
        comp["launch_floor_us"] = floor * 1e6
        slope = comp.get("pipelink_eager_us_per_stage_slope")
        if slope is not None:
            comp["pipelink_eager_us_per_stage_added"] = slope - floor * 1e6
    t = res["times_s"]
    for key in ("torch_eager", "torch_graph"):
        if key in t:
            comp[f"{key}_us_per_op"] = t[key] * 1e6 / stages
            for mode in ("eager", "graph"):
                if f"pipelink_{mode}" in t:
                    comp[f"pipelink_{mode}_speedup_vs_{key}"] = t[key] / t[f"pipelink_{mode}"]
    res["comparisons"] = comp
