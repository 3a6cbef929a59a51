"""CUDA-graph mode: which pipelines can be captured, capture of a compiled plan, and replay.

A captured graph reads the inputs whose addresses stay put in place and copies the others into static
buffers; it writes static output buffers. It never captures work that must stop between stages to look
at results (policies, finiteness checks, timeouts, worker processes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..dtypes import get_dtype
from ..graph.linker import LinkedGraph
from .executor import execute
from .plan import ExecutionPlan
from .report import RunReport

__all__ = ["graph_blockers", "binding_key", "capture", "replay", "replay_or_recapture"]


def graph_blockers(graph: LinkedGraph) -> list[str]:
    """Why a pipeline cannot be captured into a CUDA graph (empty when it can).

    A captured graph cannot stop between stages to look at results, so per-stage policies, finiteness
    checks, timeouts and worker processes keep a pipeline eager.
    """
    reasons = []
    for st in graph.stages:
        c = st.config
        if c.on_error.kind != "fail":
            reasons.append(f"stage {st.id!r} has on_error {c.on_error.kind!r}")
        if c.constraints.check_finite or c.constraints.timeout_ms is not None:
            reasons.append(f"stage {st.id!r} checks its outputs (check_finite/timeout_ms)")
        if c.isolation == "process":
            reasons.append(f"stage {st.id!r} runs in a worker process")
    return reasons


def binding_key(args: Mapping[str, Any], names) -> tuple:
    """Where the bound inputs of a captured graph live: (name, pointer, strides) per input."""
    return tuple((n, args[n].ptr, args[n].strides) for n in sorted(names))


def capture(
    plan: ExecutionPlan, graph: LinkedGraph, backend, stream, args: Mapping[str, Any], bound: set[str]
) -> None:
    """Capture the whole plan into a CUDA graph.

    Inputs in ``bound`` are read where the caller's tensors live (their addresses are baked into the
    graph, so no copy is made); the others are copied into static buffers before each replay. Outputs
    are written to static buffers.
    """
    if plan.graph is not None:
        plan.graph.close()
        plan.graph = None
    io = dict(plan.graph_io)
    inputs = {}
    for name, shape, dtype, _ in plan.signature:
        if name in bound:
            inputs[name] = args[name]
        else:
            if name not in io:
                io[name] = backend.empty(tuple(shape), get_dtype(dtype))
            inputs[name] = io[name]
    for name, shape, dtype in plan.outputs:
        if name not in io:
            io[name] = backend.empty(shape, get_dtype(dtype))
    outputs = {n: io[n] for n, *_ in plan.outputs}
    backend.synchronize(stream)
    backend.begin_capture(stream)
    try:
        execute(plan, graph, backend, inputs, report=RunReport(), out_buffers=outputs)
    finally:
        captured = backend.end_capture(stream)
    plan.graph, plan.graph_io = captured, io
    plan.graph_bound = set(bound)
    plan.graph_key = binding_key(args, bound)


def replay(
    plan: ExecutionPlan,
    graph: LinkedGraph,
    backend,
    args: Mapping[str, Any],
    stream,
    *,
    static_outputs: bool = False,
) -> dict[str, Any]:
    """Launch the captured graph: bound inputs must be where they were at capture (see
    :func:`replay_or_recapture`); the others are copied into the static buffers first. Outputs are copied
    out of the static buffers into fresh tensors, unless ``static_outputs``."""
    io = plan.graph_io
    for name, value in args.items():
        if name not in plan.graph_bound and value is not io.get(name):
            backend.copy(io[name], value, stream=stream)
    backend.launch_graph(plan.graph, stream)
    produced = {}
    for name, shape, dtype in plan.outputs:
        if static_outputs:
            produced[name] = io[name]
        else:
            out = backend.empty(shape, get_dtype(dtype))
            backend.copy(out, io[name], stream=stream)
            produced[name] = out
    for name in graph.outputs:
        if name not in produced and name in args:
            produced[name] = args[name]
    return produced


def replay_or_recapture(
    plan: ExecutionPlan,
    graph: LinkedGraph,
    backend,
    args: Mapping[str, Any],
    stream,
    *,
    static_outputs: bool = False,
) -> dict[str, Any]:
    """Replay; an input whose address moved since the capture becomes a copied input (once, by capturing
    again), so inputs that stay put (weights) are never copied and inputs that move (fresh activations)
    cost one device copy each."""
    if binding_key(args, plan.graph_bound) != plan.graph_key:
        moved = {
            n
            for n in plan.graph_bound
            if (args[n].ptr, args[n].strides) != next((p, s) for k, p, s in plan.graph_key if k == n)
        }
        capture(plan, graph, backend, stream, args, plan.graph_bound - moved)
    return replay(plan, graph, backend, args, stream, static_outputs=static_outputs)
