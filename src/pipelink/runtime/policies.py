"""One stage's run inside a plan: the kernel call, the checks after it (CUDA errors, timeouts, NaN/Inf),
and the stage's ``on_error`` policy when it fails. Never lets a stage's exception escape unwrapped.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import CUDAError, ModuleCrashError, PipeLinkError, PipeLinkTimeoutError
from ..graph.linker import LinkedGraph
from .plan import Step
from .report import StageReport

__all__ = ["run_kernel", "resolve_timeline", "stage_error", "post_checks", "apply_policy", "nvtx_module"]


_NVTX_ENV = os.environ.get("PIPELINK_NVTX") == "1"


def nvtx_module():
    """The ``nvtx`` package when installed (NVTX ranges per stage for Nsight), else None."""
    try:
        import nvtx
    except ImportError:
        return None
    return nvtx


def run_kernel(
    step: Step, ins, outs, stream, backend, rep: StageReport, timeline: list | None = None
) -> PipeLinkError | None:
    """Run one stage's kernel; with a ``timeline`` (profiling on a device backend) the stage's work is
    bracketed by two timing events, appended as ``(rep, start, end)`` and read after the run's last launch
    (:func:`resolve_timeline`), so profiling waits for nothing between stages and streams still overlap."""
    try:
        if timeline is not None:
            start = backend.record_event(stream, timing=True)
            step.kernel(ins, outs, stream)
            timeline.append((rep, start, backend.record_event(stream, timing=True)))
        else:
            step.kernel(ins, outs, stream)
        return None
    except Exception as e:  # noqa: BLE001 - any failure of user code is this stage's failure
        return stage_error(step, e)


def resolve_timeline(backend, origin: Any, timeline: list) -> None:
    """Fill each profiled stage's device times from its events: ``device_start_s`` from ``origin`` (an
    event recorded on the main stream when the run started) and ``device_time_s`` (waits for the last)."""
    for rep, start, end in timeline:
        rep.device_time_s = backend.elapsed(start, end)
        rep.device_start_s = backend.elapsed(origin, start)


def stage_error(step: Step, e: Exception) -> PipeLinkError:
    """The PipeLink error of a stage whose kernel raised ``e`` (a PipeLinkError gains the stage's name)."""
    st = step.stage
    if isinstance(e, PipeLinkError):
        e.context.setdefault("stage", st.id)
        e.context.setdefault("operator", st.desc.name)
        return e
    return ModuleCrashError(
        f"stage {st.id!r} (operator {st.desc.name!r}) raised {type(e).__name__}: {e}",
        stage=st.id,
        operator=st.desc.name,
        cause=f"{type(e).__name__}: {e}",
    )


def post_checks(step: Step, outs, stream, backend, rep: StageReport) -> PipeLinkError | None:
    st = step.stage
    c = st.config.constraints
    asynchronous = backend.capabilities.asynchronous
    if asynchronous and (c.check_finite or c.timeout_ms is not None or step.isolated):
        try:
            backend.check_errors(stage=st.id)
        except CUDAError as e:
            return e
    if c.timeout_ms is not None and not step.isolated:
        if asynchronous:
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


def apply_policy(
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
        fb_error = run_kernel(
            Step(st, step.fallback_kernel, step.fallback_variant, (), ()),
            ins[:n_in] + [None] * max(0, n_in - len(ins)),
            outs[:n_out],
            stream,
            backend,
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
