"""The executor: compiles a linked graph into a plan per input signature and replays it on ``run()``.

A plan holds everything that does not change between runs: concrete shapes, the memory plan and its
arena, views of every intermediate buffer, bound kernels with prebuilt argument lists, relayout copies,
streams and events. ``run()`` only imports inputs, allocates the outputs it returns and calls kernels.
It must never allocate intermediates or re-validate what the plan already checked.
"""

from __future__ import annotations

import difflib
import logging
import math
import time
from collections.abc import Collection, Mapping
from typing import Any

from ..descriptor import KernelContext
from ..dtypes import get_dtype
from ..errors import (
    InvalidArgumentError,
    ModuleCrashError,
)
from ..graph.linker import LinkedGraph, LinkedStage, check_policies, infer_signature
from ..graph.planner import BufferRequest, MemoryPlan, plan_memory
from ..modules.registry import OperatorRegistry
from .checked import GUARD_BYTES, CheckedPlan
from .isolate import isolate
from .plan import ExecutionPlan, Step
from .policies import (
    _NVTX_ENV,
    apply_policy,
    nvtx_module,
    post_checks,
    resolve_timeline,
    run_kernel,
    stage_error,
)
from .report import RunReport, StageReport
from .staging import HostStaged

__all__ = [
    "ExecutionPlan",
    "Step",
    "compile_plan",
    "copy_passthrough",
    "ensure_arena",
    "execute",
    "plan_views",
]

log = logging.getLogger("pipelink")


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
    checked: bool = False,
    views: str = "all",
    allocate: bool = True,
) -> ExecutionPlan:
    """Infer concrete shapes, choose variants, plan memory, allocate the arena and bind kernels.

    A ``checked`` plan has guard bytes after every buffer and poisons outputs before each stage
    (``runtime.checked``). Declared input shapes are the caller's to check first (``runtime.declared``).
    ``views`` says which stages may run as views (``plan_views``): ``"all"``, ``"arena"`` (views of
    intermediates only, not of inputs) or ``"none"``; a checked plan runs none.

    ``allocate=False`` plans the memory but allocates no arena: kernels bind to tensors given per call
    (a native launch refers to them by port), so binding never needs the arena's memory. Such a plan is
    written as a ``.plk`` for the native core (``runtime/planfile.py``), or gets its arena from
    :func:`ensure_arena` before its first execution. Checked plans and plans with process-isolated stages
    (their workers map the arena when they are bound) are allocated regardless.
    """
    inputs = {name: (tuple(shape), dtype) for name, shape, dtype, _ in signature}
    known = infer_signature(graph, inputs)
    check_policies(graph, known)  # what was symbolic at load is concrete now
    shapes = {n: tuple(int(d) for d in s) for n, (s, _) in known.items()}
    dtypes = {n: d for n, (_, d) in known.items()}
    contiguous = {name: contig for name, _, _, contig in signature}
    order = {st.index: i for i, st in enumerate(graph.stages)}
    streams, stream_of = _assign_streams(graph, backend)
    preloaded = preload_inputs(graph)
    view_of = (
        {}
        if checked or views == "none"
        else plan_views(graph, shapes, dtypes, contiguous, stream_of, preloaded, of_inputs=views == "all")
    )

    # Lifetimes: intermediate tensors live from their producer to their last consumer (a view's source
    # until the view's last consumer: the planner extends it).
    requests: list[BufferRequest] = []
    returned = {n for n in graph.outputs if graph.tensors[n].producer >= 0}
    for name, t in graph.tensors.items():
        if t.producer < 0 or name in returned:
            continue
        source = view_of.get(name, "")
        if source and graph.tensors[source].producer < 0:
            continue  # a view of an input: made per run
        st = graph.stages[order[t.producer]]
        first = order[t.producer]
        last = max([order[c] for c in t.consumers] + [first])
        requests.append(
            BufferRequest(
                name,
                _nbytes(shapes[name], dtypes[name]),
                first,
                last,
                st.config.constraints.memory_alignment,
                alias_of=source,
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
    memory = plan_memory(requests, guard_bytes=GUARD_BYTES if checked else 0)
    # Worker processes of isolated stages map a shared-memory arena: intermediates cross without copies
    # (IPC workers use a device staging block of their own instead).
    isolated_stages = any(st.config.isolation == "process" for st in graph.stages)
    shared = backend.capabilities.isolation == "shared_memory" and isolated_stages
    # The outputs are made per run, outside the arena: each, and the arena with all of them (a run holds
    # them at once), refused here, before anything is allocated or any kernel bound.
    if memory.buffers:
        backend.check_fits(memory.peak_bytes, tag="arena")
    made = [name for name in graph.outputs if name in shapes and name not in graph.external_inputs]
    for name in made:
        backend.check_fits(_nbytes(shapes[name], dtypes[name]), tag=f"output {name!r}")
    outputs_bytes = sum(_nbytes(shapes[name], dtypes[name]) for name in made)
    if outputs_bytes and (memory.buffers or len(made) > 1):
        backend.check_fits(memory.peak_bytes + outputs_bytes, tag="arena and the outputs of one run")
    arena, static = None, {}
    if allocate or checked or isolated_stages:
        arena, static = _allocate_arena(backend, memory, shapes, dtypes, shared=shared)

    steps: list[Step] = []
    uncapturable: list[str] = []  # stages whose kernel must run on the host each time (no graph)
    relayout_done: set[str] = set()
    for st in graph.stages:
        if st.outputs[0] in view_of:
            steps.append(Step(st, _view_kernel, VIEW_VARIANT, st.inputs, st.outputs, view=True))
            continue
        if all(math.prod(shapes[n]) == 0 for n in st.outputs if n):
            steps.append(
                Step(
                    st,
                    _empty_kernel,
                    EMPTY_VARIANT,
                    st.inputs,
                    st.outputs,
                    stream_id=stream_of[st.id],
                    empty=True,
                )
            )
            continue
        in_dtypes = tuple(dtypes.get(n) if n else None for n in st.inputs)
        choice = registry.select_variant(st.desc, graph.info, in_dtypes, stage=st.id)
        params = dict((tuned or {}).get(st.id, {}))
        if st.math:
            params["math"] = st.math
        ctx = _context(st, st.attrs, shapes, dtypes, backend, params, services)
        isolated = st.config.isolation == "process"
        if isolated:
            # Bound only in the worker (which stages its own host copies): binding here would open an
            # isolated native module in this process.
            kernel = isolate(st, choice.variant, ctx, backend, arena)
        else:
            choice, kernel = registry.bind_variant(choice, st.desc, graph.info, in_dtypes, ctx)
            if choice.staged:
                kernel = HostStaged(kernel, ctx, backend)
        if not choice.variant.supports_graphs or not getattr(kernel, "graph_safe", True):
            uncapturable.append(st.id)
        step = Step(
            st,
            kernel,
            choice.variant.name or choice.variant.device,
            tuple(relayout_of.get(n, n) if n else None for n in st.inputs),
            st.outputs,
            stream_id=stream_of[st.id],
            isolated=isolated,
            reads_preloaded=any(n in preloaded for n in st.inputs if n is not None),
            skipped_variants=choice.skipped,
            staged=choice.staged,
        )
        for name in st.inputs:
            if name in relayout_of and name not in relayout_done:
                relayout_done.add(name)
                step.relayouts.append((name, relayout_of[name]))
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
            fb_choice, step.fallback_kernel = registry.bind_variant(
                fb_choice, st.fallback, graph.info, fb_in, fb_ctx
            )
            if fb_choice.staged:
                step.fallback_kernel = HostStaged(step.fallback_kernel, fb_ctx, backend)
            step.fallback_variant = f"{st.fallback.name}:{fb_choice.variant.name or fb_choice.variant.device}"
        steps.append(step)
    if len(streams) > 1:
        _order_reused_memory(memory, steps, graph, order, relayout_of)
    outputs = [(n, shapes[n], dtypes[n]) for n in graph.outputs if n in returned]
    if backend.capabilities.asynchronous and not checked:
        # The seed's warm-up of fresh pool blocks: the blocks of the returned outputs are made now and
        # given back to the pool, so a first run takes them from its cache like every later run.
        made = [backend.empty(shape, get_dtype(dtype)) for _, shape, dtype in outputs]
        del made
    passthrough = tuple(n for n in graph.outputs if graph.tensors[n].producer < 0)
    lean = not checked and len(streams) == 1 and all(_is_lean(step) for step in steps)
    checks = None
    if checked:
        written = {n: (shapes[n], dtypes[n]) for step in steps for n in step.out_names}
        checks = CheckedPlan(backend, memory, arena, written)
    return ExecutionPlan(
        signature,
        shapes,
        dtypes,
        memory,
        arena,
        static,
        steps,
        outputs,
        streams,
        lean=lean,
        uncapturable=uncapturable,
        passthrough=passthrough,
        checks=checks,
        input_views=tuple((n, src) for n, src in view_of.items() if graph.tensors[src].producer < 0),
    )


def _allocate_arena(backend, memory: MemoryPlan, shapes, dtypes, *, shared: bool = False) -> tuple[Any, dict]:
    """The arena of a memory plan (None when it has no buffer) and a view of each buffer in it."""
    if not memory.buffers:
        return None, {}
    arena = backend.allocate(
        memory.peak_bytes,
        alignment=max([b.alignment for b in memory.buffers.values()] + [256]),
        tag="arena",
        shared=shared,
    )
    static = {
        b.name: backend.view(arena, b.offset, shapes[b.name], get_dtype(dtypes[b.name]))
        for b in memory.buffers.values()
    }
    return arena, static


def ensure_arena(plan: ExecutionPlan, backend) -> None:
    """Allocate the arena of a plan compiled with ``allocate=False`` (and its buffers' views) before it first
    runs on the Python executor; nothing when it has one or needs none. Call it under the lock that
    serialises the plan's runs."""
    if plan.arena is None and plan.memory.buffers:
        plan.arena, static = _allocate_arena(backend, plan.memory, plan.shapes, plan.dtypes)
        plan.static.update(static)


VIEW_VARIANT = "view"  # the variant the load and run reports name for a stage run as a view


def _view_kernel(inputs, outputs, stream) -> None:
    """A view stage's step: nothing to do, its output already is its input's memory."""


#: The variant the reports name for a stage whose every output is empty (a dim of 0: nothing to compute).
EMPTY_VARIANT = "empty"


def _empty_kernel(inputs, outputs, stream) -> None:
    """The step of a stage whose outputs have no element: nothing to write (a softmax of [3, 0, 0], the
    last window of a local attention at a short length; its reference would reduce over nothing)."""


def plan_views(
    graph: LinkedGraph,
    shapes: Mapping[str, tuple[int, ...]],
    dtypes: Mapping[str, str],
    contiguous: Mapping[str, bool],
    stream_of: Mapping[str, int],
    preloaded: Collection[str],
    *,
    of_inputs: bool = True,
) -> dict[str, str]:
    """The stages that run as views, no kernel: their output name -> the tensor whose memory it is (the
    first of a chain of views). A stage whose operator is a ``view`` (reshape, identity), with one input
    and one output of the same dtype and size, runs as one when aliasing is invisible; it copies when:

    - its output is a pipeline output (``run()`` returns fresh memory, never an input's or the arena's);
    - it has an ``on_error`` policy, ``check_finite``, ``timeout_ms`` or process isolation (they need a
      real stage), or a process-isolated stage reads its output;
    - its source is returned by the run (that memory is the caller's or made per run), or an input that is
      strided, uploaded by an ``async_preload`` copy stream, or (``of_inputs`` False) any input;
    - the plan has several streams (a view would need the waits of its readers on its source's producer).
    """
    if len(set(stream_of.values())) > 1:
        return {}
    outputs = set(graph.outputs)
    order = {st.index: st for st in graph.stages}
    source_of: dict[str, str] = {}
    for st in graph.stages:
        c = st.config
        out = st.outputs[0] if len(st.outputs) == 1 else None
        ins = [n for n in st.inputs if n is not None]
        if (
            not st.desc.view
            or out is None
            or len(ins) != 1
            or out in outputs
            or _nbytes(shapes[out], dtypes[out]) != _nbytes(shapes[ins[0]], dtypes[ins[0]])
            or dtypes[out] != dtypes[ins[0]]
            or c.on_error.kind != "fail"
            or c.constraints.check_finite
            or c.constraints.timeout_ms is not None
            or c.isolation == "process"
            or any(order[i].config.isolation == "process" for i in graph.tensors[out].consumers)
        ):
            continue
        source = source_of.get(ins[0], ins[0])
        if graph.tensors[source].producer >= 0:
            if source in outputs:
                continue
        elif not of_inputs or not contiguous.get(source, True) or source in preloaded:
            continue
        source_of[out] = source
    return source_of


def _is_lean(step: Step) -> bool:
    """A step that needs nothing between its kernel and the next one: no policy, check, worker,
    relayout, fallback or wait on another stream."""
    c = step.stage.config
    return (
        c.on_error.kind == "fail"
        and not c.constraints.check_finite
        and c.constraints.timeout_ms is None
        and not step.isolated
        and not step.relayouts
        and not step.waits
        and not step.reads_preloaded
        and step.fallback_kernel is None
    )


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
        timeout_ms=st.config.constraints.timeout_ms,
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
    fresh_passthrough: bool = True,
    preload_event: Any = None,
    stream: Any = None,
) -> dict[str, Any]:
    """Run every step of a plan; returns the kernel arguments of the outputs that were produced.

    ``out_buffers`` replaces the per-run allocation of the outputs it names (the caller's ``out=``, or a
    graph capture's static buffers); an output passed through from an input is copied into its buffer, or
    into a fresh tensor unless ``fresh_passthrough`` is False (a capture: its caller copies them).
    ``stream`` replaces the plan's main stream (a caller's stream): side streams fork from it when the run
    starts and join back into it at the end.
    """
    values = dict(plan.static)
    values.update(args)
    for name, source in plan.input_views:
        values[name] = backend.reshaped(values[source], plan.shapes[name])
    checks = plan.checks
    given = out_buffers or {}
    for name, shape, dtype in plan.outputs:
        if name in given:
            values[name] = given[name] if checks is None else checks.caller_output(name, given[name])
        elif checks is not None:
            values[name] = checks.new_output(name, shape, get_dtype(dtype))
        else:
            values[name] = backend.empty(shape, get_dtype(dtype))
    streams = plan.streams if stream is None else {**plan.streams, 0: stream}
    nvtx = nvtx_module() if profile or _NVTX_ENV else None
    if plan.lean and not profile and nvtx is None and preload_event is None:
        into = given if fresh_passthrough else None
        return _execute_lean(plan, graph, backend, values, report, strict, error_log, streams[0], into)
    missing: set[str] = set()
    events: dict[int, Any] = {}
    multi_stream = len(streams) > 1
    # Profiling on a device: each stage between two timing events, read once everything is queued.
    timeline = [] if profile and backend.capabilities.asynchronous else None
    origin = backend.record_event(streams[0], timing=True) if timeline is not None else None
    if multi_stream:
        # Side streams start after what is queued on the main stream (the inputs, the caller's work) and,
        # in a capture, join it through this event.
        fork = backend.record_event(streams[0])
        for sid, side in streams.items():
            if sid != 0:
                backend.wait_event(side, fork)
    clock = time.perf_counter
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
        if step.view:  # no kernel: its output is its input's memory (and so costs nothing)
            rep.device_time_s = 0.0 if timeline is not None else None
            continue
        stream = streams[step.stream_id]
        if preload_event is not None and step.reads_preloaded:
            backend.wait_event(stream, preload_event)
        if multi_stream:
            for producer in step.waits:
                backend.wait_event(stream, events[producer])
        for source, buffer in step.relayouts:
            backend.copy(values[buffer], values[source], stream=stream)
        ins = [values[n] if n is not None else None for n in step.in_names]
        outs = [values[n] for n in step.out_names]
        if checks is not None:
            checks.arm(step, outs, stream)
        if nvtx is not None:
            nvtx.push_range(f"{st.id} ({st.desc.name})", domain="pipelink")
        t0 = clock()
        error = run_kernel(step, ins, outs, stream, backend, rep, timeline)
        rep.time_s = clock() - t0
        if nvtx is not None:
            nvtx.pop_range(domain="pipelink")
        if error is None and checks is not None:
            error = checks.verify(step, outs, stream)
        if error is None:
            error = post_checks(step, outs, stream, backend, rep)
        if error is not None:
            apply_policy(step, error, ins, outs, stream, backend, rep, missing, strict, error_log, graph)
        if multi_stream:
            events[index] = backend.record_event(stream)
    if multi_stream:
        main = streams[0]
        for index, step in enumerate(plan.steps):
            if step.stream_id != 0 and index in events:
                backend.wait_event(main, events[index])
    if timeline:
        resolve_timeline(backend, origin, timeline)
    report.missing_outputs = [n for n in graph.outputs if n in missing]
    if fresh_passthrough:  # a graph capture's caller copies them (never inside the capture)
        copy_passthrough(plan, backend, values, streams[0], given)
    return {n: values[n] for n in graph.outputs if n not in missing}


def copy_passthrough(
    plan: ExecutionPlan, backend, values: dict[str, Any], stream: Any, into: Mapping[str, Any]
) -> None:
    """Outputs that are external inputs become copies in ``values``: into the caller's buffer where
    ``into`` has one, else into a fresh tensor (``run()`` never returns the caller's input memory)."""
    for name in plan.passthrough:
        target = into.get(name)
        if target is None:
            target = backend.empty(plan.shapes[name], get_dtype(plan.dtypes[name]))
        backend.copy(target, values[name], stream=stream)
        values[name] = target


def _execute_lean(
    plan: ExecutionPlan,
    graph: LinkedGraph,
    backend,
    values: dict[str, Any],
    report: RunReport,
    strict: bool,
    error_log,
    stream: Any,
    passthrough_into: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """``execute`` for a lean plan: the kernels back to back, one clock reading after each; stage reports
    are built only if read. A failing stage is reported and raised exactly as in the general loop.
    Passed-through inputs are copied as ``copy_passthrough`` does, unless ``passthrough_into`` is None."""
    clock = time.perf_counter
    stamps = [clock()]
    try:
        for step in plan.steps:
            step.kernel(
                [values[n] if n is not None else None for n in step.in_names],
                [values[n] for n in step.out_names],
                stream,
            )
            stamps.append(clock())
    except Exception as e:  # noqa: BLE001 - turned into the stage's error below, as run_kernel does
        step = plan.steps[len(stamps) - 1]
        report.record_ok(plan.steps, stamps)
        rep = StageReport(
            step.stage.id, step.stage.desc.name, variant=step.variant, time_s=clock() - stamps[-1]
        )
        report.stages[step.stage.id] = rep
        error = stage_error(step, e)
        ins = [values[n] if n is not None else None for n in step.in_names]
        outs = [values[n] for n in step.out_names]
        apply_policy(step, error, ins, outs, stream, backend, rep, set(), strict, error_log, graph)
        raise error from e  # apply_policy raises for a lean step (its policy is "fail"); never reached
    report.record_ok(plan.steps, stamps)
    if passthrough_into is not None:
        copy_passthrough(plan, backend, values, stream, passthrough_into)
    return {n: values[n] for n in graph.outputs}


def check_inputs(graph: LinkedGraph, given: Mapping[str, Any], bound: Collection[str] = ()) -> None:
    """Missing and unexpected input names are errors naming the input; so is one of ``bound`` (the
    inputs a weights file binds at load, which ``run()`` does not take)."""

    odd = next((n for n in given if not isinstance(n, str)), None)
    if odd is not None:
        raise InvalidArgumentError(
            f"input names are strings; run() was given the key {odd!r} ({type(odd).__name__})",
            input=repr(odd),
        )
    clash = [n for n in given if n in bound]
    expected = [n for n in graph.external_inputs if n not in bound]
    if clash:
        raise InvalidArgumentError(
            f"{clash[0]!r} is bound by the weights file; leave it out of run() (the pipeline takes "
            f"{expected})",
            input=clash[0],
        )
    missing = [n for n in expected if n not in given]
    extra = [n for n in given if n not in expected]
    # A misspelled input shows up as one missing and one unexpected name: pair them up as a suggestion.
    hints = [f"{m!r} (given {e!r})" for e in extra for m in difflib.get_close_matches(e, missing, n=1)]
    hint = f"; did you mean {', '.join(hints)}?" if hints else ""
    if missing:
        raise InvalidArgumentError(
            f"missing input{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}{hint}; "
            f"the pipeline takes {expected}",
            input=missing[0],
        )
    if extra:
        hint = difflib.get_close_matches(extra[0], expected, n=1)
        raise InvalidArgumentError(
            f"unexpected input {extra[0]!r}"
            + (f"; did you mean {hint[0]!r}?" if hint else "")
            + f"; the pipeline takes {expected}",
            input=extra[0],
        )
