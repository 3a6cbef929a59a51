"""``python -m benchmarks.interop``: PipeLink inside a PyTorch model on one GPU (issue 17, docs/interop.md).

The model is ``tanh(mlp(0.5 * x)) + x`` where ``mlp`` is the transformer MLP block of
``benchmarks/cases.py``: once in pure PyTorch, once as the PipeLink pipeline registered with
``pl.torch.as_op``. Each is run eagerly, captured whole in one ``torch.cuda.CUDAGraph``, and compiled with
``torch.compile(fullgraph=True)`` (default mode and ``reduce-overhead``); every variant is checked
against the eager PyTorch model and timed with CUDA events. Then a small host input declared
``pin_memory`` (host-mapped, read in place) against the same input staged, and a pipeline's cold first
run against its second. One line per measurement, starting ``INTEROP``; the last line is the verdict.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import pipelink as pl

from .cases import mlp
from .timing import BUDGETS, load_torch, measure, rel_err, tolerance

__all__ = ["main"]


def _inputs(torch: Any, case: Any) -> list[Any]:
    """Fresh random inputs of the case, in the order its torch function and the pipeline take them."""
    dtype = getattr(torch, case.dtype)
    return [
        (torch.randn(shape, device="cuda") * scale + offset).to(dtype)
        for shape, scale, offset in case.inputs.values()
    ]


def _model(torch: Any, middle: Callable[..., Any]) -> Callable[..., Any]:
    """A PyTorch model with ``middle`` between two PyTorch ops."""

    def model(x, *weights):
        return torch.tanh(middle(x * 0.5, *weights)) + x

    return model


def _graphed(torch: Any, model: Callable[..., Any], inputs: list[Any]) -> Callable[[], Any]:
    """``model`` on ``inputs`` captured whole in one CUDA graph (PyTorch's warm-up recipe first)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = model(*inputs)

    def replay():
        graph.replay()
        return out

    return replay


def _variants(torch: Any, op: Any, case: Any, inputs: list[Any]) -> list[tuple[str, str, Callable[[], Any]]]:
    """(mode, middle, call) for every way the model is run."""
    torch_model = _model(torch, case.torch_fn(torch))
    pl_model = _model(torch, op)
    out = []
    for middle, model in (("torch", torch_model), ("pipelink", pl_model)):
        compiled = torch.compile(model, fullgraph=True)
        overhead = torch.compile(model, fullgraph=True, mode="reduce-overhead")
        out += [
            ("eager", middle, lambda m=model: m(*inputs)),
            ("cuda_graph", middle, _graphed(torch, model, inputs)),
            ("compile", middle, lambda m=compiled: m(*inputs)),
            ("compile_reduce_overhead", middle, lambda m=overhead: m(*inputs).clone()),
        ]
    return out


def _mapped_vs_staged(torch: Any, budget: Any, elements: int = 4096) -> bool:
    """Print the time of a run whose small host input is host-mapped (``pin_memory``) and staged; True
    when both results are right."""
    rng = np.random.default_rng()
    x = rng.standard_normal(elements).astype(np.float32)
    ok = True
    for pinned in (False, True):
        doc = {
            "inputs": {"x": {"shape": [elements], "dtype": "float32", "pin_memory": pinned}},
            "pipeline": [{"name": "scale", "inputs": ["x"], "outputs": ["y"], "attrs": {"factor": 3.0}}],
        }
        with pl.load(doc, device="cuda:0") as pipe:
            good = bool(np.allclose(pipe.run(x=x)["y"].numpy(), 3 * x, rtol=1e-6))
            timing = measure([lambda p=pipe: p.run(x=x)], budget, torch=torch, use_events=True)
        ok &= good
        print(
            f"INTEROP small host input {x.nbytes} B {'host-mapped' if pinned else 'staged':<11}: "
            f"{timing.median_s * 1e6:8.1f} us/run (host {timing.host_s * 1e6:.1f} us) "
            f"{'ok' if good else 'MISMATCH'}"
        )
    return ok


def _cold_vs_second(torch: Any, case: Any, inputs: list[Any]) -> tuple[float, float]:
    """Host seconds (synchronised) of a fresh pipeline's first run and of its second."""
    feed = dict(zip(case.inputs, inputs, strict=True))
    times = []
    with pl.load(case.doc, device="cuda:0") as pipe:
        for _ in range(2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            pipe.run(feed)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    return times[0], times[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.interop", description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--d", type=int, default=4096)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--budget", default="default", choices=sorted(BUDGETS))
    args = parser.parse_args(argv)
    torch, why = load_torch()
    if torch is None or not torch.cuda.is_available():
        why = why or "torch.cuda.is_available() is False"
        print(f"INTEROP skipped: needs PyTorch with a CUDA device ({why})")
        return 1
    case = mlp(args.tokens, args.d, args.dtype)
    inputs = _inputs(torch, case)
    budget = BUDGETS[args.budget]
    tol = tolerance(args.dtype)
    with pl.load(case.doc, device="cuda:0") as pipe:
        op = pl.torch.as_op(pipe, "pipelink_bench::mlp_block")
        reference = _model(torch, case.torch_fn(torch))(*inputs).clone()
        times: dict[tuple[str, str], float] = {}
        ok = True
        for mode, middle, call in _variants(torch, op, case, inputs):
            err = rel_err(call(), reference, torch)
            timing = measure([call], budget, torch=torch, use_events=True)
            times[(mode, middle)] = timing.median_s
            good = err <= tol
            ok &= good
            print(
                f"INTEROP {mode:<24} middle={middle:<9} {case.shape} {args.dtype}: "
                f"{timing.median_s * 1e6:10.1f} us/call (spread {timing.spread:.0%})  rel_err={err:.2e} "
                f"{'ok' if good else f'MISMATCH (tolerance {tol:g})'}"
            )
    for mode in ("eager", "cuda_graph", "compile", "compile_reduce_overhead"):
        ratio = times[(mode, "pipelink")] / times[(mode, "torch")]
        print(f"INTEROP ratio {mode:<24} pipelink/torch = {ratio:.3f}")
    ok &= _mapped_vs_staged(torch, budget)
    cold, second = _cold_vs_second(torch, case, inputs)
    print(
        f"INTEROP cold first run {cold * 1e3:.2f} ms, second run {second * 1e3:.2f} ms ({cold / second:.1f}x)"
    )
    graph_ratio = times[("cuda_graph", "pipelink")] / times[("cuda_graph", "torch")]
    verdict = "PASS" if ok and graph_ratio <= 1.05 else "FAIL"
    print(
        f"INTEROP verdict {verdict}: every result matches its reference: {ok}; in one CUDA graph the "
        f"PipeLink middle costs {graph_ratio:.3f}x the PyTorch middle (target <= 1.05)"
    )
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main())
