"""CUDA-graph mode: which pipelines can be captured, capture of a compiled plan, and replay.

A plan keeps one graph per place of its inputs (up to ``MAX_BOUND_GRAPHS``): each reads the inputs where
they are, so a replay copies nothing. Past that, one graph reads in place the inputs that stay put and
copies the others into static buffers. Every graph writes the plan's static output buffers, from which a
replay copies into fresh tensors or the caller's ``out=`` buffers. Graphs are captured on the backend's
own main stream and replayed on the run's stream (the caller's, when it names one). It never captures
work that must stop between stages to look at results (policies, finiteness checks, timeouts, worker
processes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..dtypes import get_dtype
from ..graph.linker import LinkedGraph
from .executor import copy_passthrough, execute
from .plan import ExecutionPlan
from .report import RunReport

__all__ = [
    "MAX_BOUND_GRAPHS",
    "graph_blockers",
    "binding_key",
    "places",
    "capture",
    "capture_bound",
    "graph_outputs",
    "replay",
]


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


MAX_BOUND_GRAPHS = 16  # input places captured per plan before moving inputs are copied instead


def binding_key(args: Mapping[str, Any], names) -> tuple:
    """Where the bound inputs of a captured graph live: (name, pointer, strides) per input."""
    return tuple((n, args[n].ptr, args[n].strides) for n in sorted(names))


def places(plan: ExecutionPlan, args: Mapping[str, Any]) -> tuple:
    """Where every input of a run lives: (pointer, strides) per input, in signature order."""
    return tuple((args[n].ptr, args[n].strides) for n, *_ in plan.signature)


def capture(
    plan: ExecutionPlan, graph: LinkedGraph, backend, args: Mapping[str, Any], bound: set[str]
) -> Any:
    """Capture the whole plan into a CUDA graph on the backend's main stream and return it.

    Inputs in ``bound`` are read where the caller's tensors live (their addresses are baked into the
    graph, so no copy is made); the others are copied into static buffers (``plan.graph_io``) before each
    replay. Outputs are written to static buffers shared by every graph of the plan.
    """
    stream = backend.default_stream()
    io = plan.graph_io
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
        execute(
            plan, graph, backend, inputs, report=RunReport(), out_buffers=outputs, fresh_passthrough=False
        )
    finally:
        captured = backend.end_capture(stream)
    return captured


def capture_bound(plan: ExecutionPlan, graph: LinkedGraph, backend, args: Mapping[str, Any]) -> Any:
    """Capture a graph reading every input where it is now (after the eager run that warmed the kernels),
    unless the plan already holds ``MAX_BOUND_GRAPHS`` of them. Returns the graph, or None."""
    if len(plan.bound_graphs) >= MAX_BOUND_GRAPHS:
        return None
    key = places(plan, args)
    found = plan.bound_graphs.get(key)
    if found is None:
        found = plan.bound_graphs[key] = capture(plan, graph, backend, args, set(args))
    return found


def graph_outputs(
    plan: ExecutionPlan,
    backend,
    stream,
    *,
    static_outputs: bool,
    out: Mapping[str, Any],
) -> dict[str, Any]:
    """The produced outputs of a replay: copied from the graph's static buffers into the caller's ``out``
    buffers or fresh tensors, or the static buffers themselves (``static_outputs``)."""
    io = plan.graph_io
    produced = {}
    for name, shape, dtype in plan.outputs:
        target = out.get(name)
        if target is None and static_outputs:
            produced[name] = io[name]
            continue
        if target is None:
            target = backend.empty(shape, get_dtype(dtype))
        backend.copy(target, io[name], stream=stream)
        produced[name] = target
    return produced


def _outputs(
    plan: ExecutionPlan,
    graph: LinkedGraph,
    backend,
    args: Mapping[str, Any],
    stream,
    static_outputs: bool,
    out: Mapping[str, Any],
) -> dict[str, Any]:
    produced = graph_outputs(plan, backend, stream, static_outputs=static_outputs, out=out)
    passthrough = {n: args[n] for n in plan.passthrough}
    copy_passthrough(plan, backend, passthrough, stream, out)
    produced.update(passthrough)
    return {n: produced[n] for n in graph.outputs}


def replay(
    plan: ExecutionPlan,
    graph: LinkedGraph,
    backend,
    args: Mapping[str, Any],
    stream,
    *,
    static_outputs: bool = False,
    out: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Launch the plan's graph for where the inputs are on ``stream``, capturing one when needed.

    A graph captured for these input places reads them in place. Past ``MAX_BOUND_GRAPHS`` places, the
    copying graph runs: inputs that kept their place since it was captured (weights) are read in place,
    the others are copied into its static buffers first. Outputs are copied out of the static buffers
    into the caller's ``out`` buffers or fresh tensors, unless ``static_outputs`` (for those not in
    ``out``).
    """
    out = out or {}
    bound = plan.bound_graphs.get(places(plan, args)) or capture_bound(plan, graph, backend, args)
    if bound is not None:
        backend.launch_graph(bound, stream)
        return _outputs(plan, graph, backend, args, stream, static_outputs, out)
    if plan.graph is None or binding_key(args, plan.graph_bound) != plan.graph_key:
        _capture_copying(plan, graph, backend, args)
    io = plan.graph_io
    for name, value in args.items():
        if name not in plan.graph_bound and value is not io.get(name):
            backend.copy(io[name], value, stream=stream)
    backend.launch_graph(plan.graph, stream)
    return _outputs(plan, graph, backend, args, stream, static_outputs, out)


def _capture_copying(plan: ExecutionPlan, graph: LinkedGraph, backend, args: Mapping[str, Any]) -> None:
    """(Re)capture the copying graph: it reads in place the inputs that have had one place in every graph
    so far (weights), and copies the others; an input that moves later becomes copied (once, by capturing
    again), so inputs that stay put are never copied and inputs that move cost one device copy each."""
    if plan.graph is None:
        seen: dict[str, set] = {}
        for key in plan.bound_graphs:
            for (name, *_), place in zip(plan.signature, key, strict=True):
                seen.setdefault(name, set()).add(place)
        stay = {n for n, p in seen.items() if len(p) == 1 and (args[n].ptr, args[n].strides) in p}
    else:
        previous = {k: (p, s) for k, p, s in plan.graph_key}
        stay = {n for n in plan.graph_bound if (args[n].ptr, args[n].strides) == previous[n]}
        plan.graph.close()
        plan.graph = None
    plan.graph = capture(plan, graph, backend, args, stay)
    plan.graph_bound = stay
    plan.graph_key = binding_key(args, stay)
