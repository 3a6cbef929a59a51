"""The executor: compiles a linked graph into a plan per input signature and replays it on ``run()``.

A plan holds everything that does not change between runs: concrete shapes, the memory plan and its
arena, views of every intermediate buffer, bound kernels with prebuilt argument lists, relayout copies,
streams and events. ``run()`` only imports inputs, allocates the outputs it returns and calls kernels.
It must never allocate intermediates or re-validate what the plan already checked.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..descriptor import KernelContext
from ..dtypes import get_dtype
from ..errors import (
    CUDAError,
    InvalidArgumentError,
    ModuleCrashError,
    PipeLinkError,
    PipeLinkTimeoutError,
)
from ..graph.linker import LinkedGraph, LinkedStage, infer_signature
from ..graph.planner import BufferRequest, MemoryPlan, plan_memory
from ..modules.registry import OperatorRegistry
from .report import RunReport, StageReport

__all__ = ["ExecutionPlan", "Step", "compile_plan", "execute"]

log = logging.getLogger("pipelink")


@dataclass
class Step:
    """One stage of a plan with its bound kernel and argument lists."""

    stage: LinkedStage
    kernel: Any
    variant: str
    in_names: tuple[str | None, ...]
    out_names: tuple[str, ...]
    stream_id: int = 0
    relayouts: list[tuple[str, Any]] = field(default_factory=list)  # (source input name, contiguous buffer)
    waits: list[int] = field(default_factory=list)  # producer step indices on other streams
    fallback_kernel: Any = None
    fallback_variant: str = ""
    isolated: bool = False
    reads_preloaded: bool = False  # waits for the async_preload copy stream before running


@dataclass
class ExecutionPlan:
    """Everything ``run()`` needs for one input signature."""

    signature: tuple
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, str]
    memory: MemoryPlan
    arena: Any
    static: dict[str, Any]  # tensor name -> kernel argument living in the arena
    steps: list[Step]
    outputs: list[tuple[str, tuple[int, ...], str]]  # returned tensors allocated per run
    streams: dict[int, Any]
    graph: Any = None  # captured CUDA graph (graph mode)
    graph_io: dict[str, Any] = field(default_factory=dict)  # static input and output buffers
    graph_bound: set[str] = field(default_factory=set)  # inputs read in place by the graph
    graph_key: tuple = ()

    def release(self) -> None:
        if self.graph is not None:
            self.graph.close()
            self.graph = None
        for step in self.steps:
            if step.isolated:
                step.kernel.close()
        if self.arena is not None:
            self.arena.free()
            self.arena = None


def signature_of(backend, graph: LinkedGraph, args: Mapping[str, Any]) -> tuple:
    return tuple((name,) + tuple(backend.signature_of(args[name])) for name in graph.external_inputs)


def compile_plan(
    graph: LinkedGraph,
    registry: OperatorRegistry,
    backend,
    args: Mapping[str, Any],
    signature: tuple,
    *,
    tuned: Mapping[str, Mapping[str, Any]] | None = None,
    services: Any = None,
) -> ExecutionPlan:
    """Infer concrete shapes, choose variants, plan memory, allocate the arena and bind kernels."""
    inputs = {name: (tuple(shape), dtype) for name, shape, dtype, _ in signature}
    known = infer_signature(graph, inputs)
    shapes = {n: tuple(int(d) for d in s) for n, (s, _) in known.items()}
    dtypes = {n: d for n, (_, d) in known.items()}
    contiguous = {name: contig for name, _, _, contig in signature}
    order = {st.index: i for i, st in enumerate(graph.stages)}

    # Lifetimes: intermediate tensors live from their producer to their last consumer.
    requests: list[BufferRequest] = []
    returned = {n for n in graph.outputs if graph.tensors[n].producer >= 0}
    for name, t in graph.tensors.items():
        if t.producer < 0 or name in returned:
            continue
        st = graph.stages[order[t.producer]]
        first = order[t.producer]
        last = max([order[c] for c in t.consumers] + [first])
        requests.append(
            BufferRequest(
                name, _nbytes(shapes[name], dtypes[name]), first, last, st.config.constraints.memory_alignment
            )
        )
    relayout_of: dict[str, str] = {}
    for name in graph.external_inputs:
        t = graph.tensors[name]
        needs = [c for c in t.consumers if _needs_contiguous(graph.stages[order[c]], name)]
        if not contiguous.get(name, True) and needs:
            buf = f"{name}.contiguous"
            relayout_of[name] = buf
            first = min(order[c] for c in t.consumers)
            last = max(order[c] for c in t.consumers)
            requests.append(
                BufferRequest(
                    buf,
                    _nbytes(shapes[name], dtypes[name]),
                    first,
                    last,
                    graph.stages[first].config.constraints.memory_alignment,
                )
            )
            shapes[buf], dtypes[buf] = shapes[name], dtypes[name]
    memory = plan_memory(requests)
    # CPU worker processes of isolated stages map the arena: intermediates cross without copies (CUDA
    # workers use an IPC staging block of their own instead).
    shared = backend.kind == "cpu" and any(st.config.isolation == "process" for st in graph.stages)
    arena = (
        backend.allocate(
            memory.peak_bytes,
            alignment=max([r.alignment for r in requests] + [256]),
            tag="arena",
            shared=shared,
        )
        if requests
        else None
    )
    static = {
        b.name: backend.view(arena, b.offset, shapes[b.name], get_dtype(dtypes[b.name]))
        for b in memory.buffers.values()
    }

    streams, stream_of = _assign_streams(graph, backend)
    preloaded = preload_inputs(graph)
    steps: list[Step] = []
    relayout_done: set[str] = set()
    for st in graph.stages:
        in_dtypes = tuple(dtypes.get(n) if n else None for n in st.inputs)
        choice = registry.select_variant(st.desc, graph.info, in_dtypes, stage=st.id)
        params = dict((tuned or {}).get(st.id, {}))
        if st.math:
            params["math"] = st.math
        ctx = _context(st, st.attrs, shapes, dtypes, backend, params, services)
        kernel = choice.variant.bind(ctx)
        isolated = st.config.isolation == "process"
        if isolated:
            from .isolation import isolate  # noqa: PLC0415 (only pipelines that ask pay for it)

            kernel = isolate(st, choice.variant, ctx, backend, arena)
        step = Step(
            st,
            kernel,
            choice.variant.name or choice.variant.device,
            tuple(relayout_of.get(n, n) if n else None for n in st.inputs),
            st.outputs,
            stream_id=stream_of[st.id],
            isolated=isolated,
            reads_preloaded=any(n in preloaded for n in st.inputs if n is not None),
        )
        for name in st.inputs:
            if name in relayout_of and name not in relayout_done:
                relayout_done.add(name)
                step.relayouts.append((name, static[relayout_of[name]]))
            t = graph.tensors.get(name) if name else None
            if t is not None and t.producer >= 0:
                producer = order[t.producer]
                if stream_of[graph.stages[producer].id] != step.stream_id and producer not in step.waits:
                    step.waits.append(producer)
        if st.fallback is not None:
            fb_in = tuple(dtypes.get(n) if n else None for n in st.inputs[: len(st.fallback.inputs)])
            fb_choice = registry.select_variant(st.fallback, graph.info, fb_in, stage=st.id)
            fb_ctx = _context(
                st,
                st.fallback_attrs,
                shapes,
                dtypes,
                backend,
                {},
                services,
                n_in=len(st.fallback.inputs),
                n_out=len(st.fallback.outputs),
            )
            step.fallback_kernel = fb_choice.variant.bind(fb_ctx)
            step.fallback_variant = f"{st.fallback.name}:{fb_choice.variant.name or fb_choice.variant.device}"
        steps.append(step)
    if len(streams) > 1:
        _order_reused_memory(memory, steps, graph, order, relayout_of)
    outputs = [(n, shapes[n], dtypes[n]) for n in graph.outputs if n in returned]
    return ExecutionPlan(signature, shapes, dtypes, memory, arena, static, steps, outputs, streams)


def _order_reused_memory(
    memory: MemoryPlan,
    steps: list[Step],
    graph: LinkedGraph,
    order: dict[int, int],
    relayout_of: dict[str, str],
) -> None:
    """With several streams, a buffer placed where an earlier buffer lived must not be written before
    every reader of the earlier one (on another stream) has finished: add those waits."""
    source = {buf: name for name, buf in relayout_of.items()}
    users: dict[str, list[int]] = {}
    for name in memory.buffers:
        t = graph.tensors[source.get(name, name)]
        users[name] = sorted(
            {order[c] for c in t.consumers} | ({order[t.producer]} if name not in source else set())
        )
    buffers = sorted(memory.buffers.values(), key=lambda b: b.first)
    for i, a in enumerate(buffers):
        for b in buffers[i + 1 :]:
            if a.last >= b.first or not a.overlaps_in_space(b):
                continue
            writer = steps[b.first]
            for u in users[a.name]:
                if u < b.first and steps[u].stream_id != writer.stream_id and u not in writer.waits:
                    writer.waits.append(u)


def preload_inputs(graph: LinkedGraph) -> set[str]:
    """External inputs read by an ``async_preload`` stage: uploaded on a copy stream of their own, so the
    copy overlaps the stages before it; every stage reading one waits for that copy (and only those)."""
    return {
        n
        for n in graph.external_inputs
        if any(
            graph.stages[i].config.constraints.stream_affinity == "async_preload"
            for i in graph.tensors[n].consumers
        )
    }


def _context(st: LinkedStage, attrs, shapes, dtypes, backend, params, services, *, n_in=None, n_out=None):
    ins = st.inputs[:n_in] if n_in is not None else st.inputs
    outs = st.outputs[:n_out] if n_out is not None else st.outputs
    return KernelContext(
        stage=st.id,
        attrs=attrs,
        in_shapes=tuple(shapes.get(n) if n else None for n in ins),
        in_dtypes=tuple(dtypes.get(n) if n else None for n in ins),
        out_shapes=tuple(shapes[n] for n in outs),
        out_dtypes=tuple(dtypes[n] for n in outs),
        backend=backend,
        params=dict(params),
        services=services,
    )


def _nbytes(shape: tuple[int, ...], dtype: str) -> int:
    return math.prod(shape) * get_dtype(dtype).itemsize


def _needs_contiguous(st: LinkedStage, name: str) -> bool:
    return any(n == name and p.contiguous for n, p in zip(st.inputs, st.desc.inputs, strict=False))


def _assign_streams(graph: LinkedGraph, backend) -> tuple[dict[int, Any], dict[str, int]]:
    """Logical stream per stage from ``stream_affinity``; one backend stream per logical id."""
    stream_of: dict[str, int] = {}
    current, next_new = 0, 1000
    used_ids = {
        c.constraints.stream_affinity
        for c in graph.config.stages
        if isinstance(c.constraints.stream_affinity, int)
    }
    for st in graph.stages:
        aff = st.config.constraints.stream_affinity
        if isinstance(aff, int):
            current = aff
        elif aff == "new":
            while next_new in used_ids:
                next_new += 1
            current, next_new = next_new, next_new + 1
        stream_of[st.id] = current
    streams = {
        sid: backend.default_stream() if sid == 0 else backend.new_stream()
        for sid in sorted(set(stream_of.values()) | {0})
    }
    return streams, stream_of


def execute(
    plan: ExecutionPlan,
    graph: LinkedGraph,
    backend,
    args: dict[str, Any],
    *,
    strict: bool = False,
    profile: bool = False,
    report: RunReport,
    error_log=None,
    out_buffers: Mapping[str, Any] | None = None,
    preload_event: Any = None,
) -> dict[str, Any]:
    """Run every step of a plan; returns the kernel arguments of the outputs that were produced.

    ``out_buffers`` replaces the per-run output allocation (graph capture writes into static buffers).
    """
    values = dict(plan.static)
    values.update(args)
    for name, shape, dtype in plan.outputs:
        values[name] = (
            out_buffers[name] if out_buffers is not None else backend.empty(shape, get_dtype(dtype))
        )
    missing: set[str] = set()
    events: dict[int, Any] = {}
    multi_stream = len(plan.streams) > 1
    clock = time.perf_counter
    nvtx = _nvtx() if profile or _NVTX_ENV else None
    for index, step in enumerate(plan.steps):
        st = step.stage
        rep = StageReport(st.id, st.desc.name, variant=step.variant)
        report.stages[st.id] = rep
        needed = [n for n in st.inputs if n is not None and n in missing]
        if needed:
            rep.status, rep.action = "skipped", "skip"
            rep.error = ModuleCrashError(
                f"stage {st.id!r} skipped: its input {needed[0]!r} is missing "
                "because an earlier stage failed",
                stage=st.id,
                operator=st.desc.name,
            )
            missing.update(step.out_names)
            continue
        stream = plan.streams[step.stream_id]
        if preload_event is not None and step.reads_preloaded:
            backend.wait_event(stream, preload_event)
        if multi_stream:
            for producer in step.waits:
                backend.wait_event(stream, events[producer])
        for source, buffer in step.relayouts:
            backend.copy(buffer, values[source], stream=stream)
        ins = [values[n] if n is not None else None for n in step.in_names]
        outs = [values[n] for n in step.out_names]
        if nvtx is not None:
            nvtx.push_range(f"{st.id} ({st.desc.name})", domain="pipelink")
        t0 = clock()
        error = _run_kernel(step, ins, outs, stream, backend, profile, rep)
        rep.time_s = clock() - t0
        if nvtx is not None:
            nvtx.pop_range(domain="pipelink")
        if error is None:
            error = _post_checks(step, outs, stream, backend, rep)
        if error is not None:
            _apply_policy(step, error, ins, outs, stream, backend, rep, missing, strict, error_log, graph)
        if multi_stream:
            events[index] = backend.record_event(stream)
    if multi_stream:
        main = plan.streams[0]
        for index, step in enumerate(plan.steps):
            if step.stream_id != 0 and index in events:
                backend.wait_event(main, events[index])
    report.missing_outputs = [n for n in graph.outputs if n in missing]
    return {n: values[n] for n in graph.outputs if n not in missing}


_NVTX_ENV = os.environ.get("PIPELINK_NVTX") == "1"


def _nvtx():
    """The ``nvtx`` package when installed (NVTX ranges per stage for Nsight), else None."""
    try:
        import nvtx
    except ImportError:
        return None
    return nvtx


def _run_kernel(
    step: Step, ins, outs, stream, backend, profile: bool, rep: StageReport
) -> PipeLinkError | None:
    st = step.stage
    try:
        if profile and backend.kind != "cpu":
            start = backend.record_event(stream, timing=True)
            step.kernel(ins, outs, stream)
            end = backend.record_event(stream, timing=True)
            rep.device_time_s = backend.elapsed(start, end)
        else:
            step.kernel(ins, outs, stream)
        return None
    except PipeLinkError as e:
        e.context.setdefault("stage", st.id)
        e.context.setdefault("operator", st.desc.name)
        return e
    except Exception as e:  # noqa: BLE001 - any failure of user code is this stage's failure
        return ModuleCrashError(
            f"stage {st.id!r} (operator {st.desc.name!r}) raised {type(e).__name__}: {e}",
            stage=st.id,
            operator=st.desc.name,
            cause=f"{type(e).__name__}: {e}",
        )


def _post_checks(step: Step, outs, stream, backend, rep: StageReport) -> PipeLinkError | None:
    st = step.stage
    c = st.config.constraints
    if backend.kind != "cpu" and (c.check_finite or c.timeout_ms is not None or step.isolated):
        try:
            backend.check_errors(stage=st.id)
        except CUDAError as e:
            return e
    if c.timeout_ms is not None and not step.isolated:
        if backend.kind != "cpu":
            backend.synchronize(stream)
            rep.time_s = max(rep.time_s, 0.0)
        if rep.time_s * 1000 > c.timeout_ms:
            return PipeLinkTimeoutError(
                f"stage {st.id!r} (operator {st.desc.name!r}) took {rep.time_s * 1000:.1f} ms, over its "
                f"timeout_ms of {c.timeout_ms:g}; its outputs were discarded (use isolation 'process' to "
                "stop a stage that hangs)",
                stage=st.id,
                operator=st.desc.name,
                timeout_ms=c.timeout_ms,
            )
    if c.check_finite:
        for name, out in zip(step.out_names, outs, strict=True):
            bad = backend.count_nonfinite(out, stream=stream)
            if bad:
                return ModuleCrashError(
                    f"stage {st.id!r} (operator {st.desc.name!r}) produced {bad} non-finite values (NaN/Inf) "
                    f"in output {name!r}",
                    stage=st.id,
                    operator=st.desc.name,
                    output=name,
                    nonfinite=bad,
                )
    return None


def _apply_policy(
    step: Step,
    error: PipeLinkError,
    ins,
    outs,
    stream,
    backend,
    rep: StageReport,
    missing: set[str],
    strict: bool,
    error_log,
    graph: LinkedGraph,
) -> None:
    st = step.stage
    rep.error = error
    if error_log is not None:
        error_log(error, st, graph)
    policy = st.config.on_error.kind
    if strict or policy == "fail":
        rep.status = "failed"
        raise error
    if policy == "identity":
        present = [x for x in ins if x is not None]
        for src, dst in zip(present, outs, strict=False):
            backend.copy(dst, src, stream=stream)
        rep.status, rep.action = "degraded", "identity"
    elif policy == "skip":
        rep.status, rep.action = "skipped", "skip"
        missing.update(step.out_names)
    elif policy == "fallback":
        n_in, n_out = len(st.fallback.inputs), len(st.fallback.outputs)
        fb_error = _run_kernel(
            Step(st, step.fallback_kernel, step.fallback_variant, (), ()),
            ins[:n_in] + [None] * max(0, n_in - len(ins)),
            outs[:n_out],
            stream,
            backend,
            False,
            rep,
        )
        if fb_error is not None:
            rep.status = "failed"
            raise ModuleCrashError(
                f"stage {st.id!r}: fallback {st.fallback.name!r} failed too: "
                f"{fb_error.message} (original error: {error.message})",
                stage=st.id,
                operator=st.desc.name,
            ) from fb_error
        rep.status, rep.action, rep.variant = (
            "degraded",
            f"fallback:{st.fallback.name}",
            step.fallback_variant,
        )
        missing.update(step.out_names[n_out:])


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


def check_inputs(graph: LinkedGraph, given: Mapping[str, Any]) -> None:
    """Missing and unexpected input names are errors naming the input."""
    expected = graph.external_inputs
    missing = [n for n in expected if n not in given]
    extra = [n for n in given if n not in expected]
    if missing:
        raise InvalidArgumentError(
            f"missing input {missing[0]!r}; the pipeline takes {expected}", input=missing[0]
        )
    if extra:
        import difflib

        hint = difflib.get_close_matches(extra[0], expected, n=1)
        raise InvalidArgumentError(
            f"unexpected input {extra[0]!r}"
            + (f"; did you mean {hint[0]!r}?" if hint else "")
            + f"; the pipeline takes {expected}",
            input=extra[0],
        )
