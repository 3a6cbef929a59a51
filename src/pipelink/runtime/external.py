"""The caller's side of a run (docs/interop.md): the stream it goes to, the caller's output buffers
(``out=``), and what a run refuses while that stream is being captured into someone else's CUDA graph.

It never imports a framework: what it must know of streams and buffers it asks the backend. Every refusal
happens before anything is queued, so a refused run leaves the caller's capture intact.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..errors import DTypeMismatchError, InvalidArgumentError, ShapeMismatchError
from ..graph.linker import LinkedGraph
from ..tensor import Tensor
from .graphs import graph_blockers
from .plan import ExecutionPlan

__all__ = ["check_capturable", "check_outputs", "import_outputs", "plan_capturable", "run_stream"]


def run_stream(backend, stream: Any, values: Iterable[Any]) -> Any:
    """The backend stream a run goes to: the caller's ``stream``, else the current stream of the
    framework whose tensors are among ``values`` (PyTorch's), else the backend's own.

    Raises
    ------
    InvalidArgumentError
        ``stream`` on a backend without streams (the CPU), or an object that is no CUDA stream.
    """
    if stream is None:
        return backend.caller_stream(values)
    return backend.stream_of(stream)


def import_outputs(backend, graph: LinkedGraph, out: Any, stream: Any) -> dict[str, Any]:
    """The caller's output buffers as kernel arguments, by output name (nothing allocated, nothing copied).

    Raises
    ------
    InvalidArgumentError
        ``out`` is not a mapping, names something the pipeline does not return, or a buffer is not
        writable memory of the pipeline's device (``Backend.import_output`` says which).
    """
    if not isinstance(out, Mapping):
        raise InvalidArgumentError(
            f"out= must be a dict of output name -> buffer (got {type(out).__name__}); the pipeline returns "
            f"{list(graph.outputs)}"
        )
    for name in out:
        if name not in graph.outputs:
            hint = difflib.get_close_matches(str(name), graph.outputs, n=1)
            raise InvalidArgumentError(
                f"out= names {name!r}, which the pipeline does not return"
                + (f"; did you mean {hint[0]!r}?" if hint else "")
                + f"; its outputs are {list(graph.outputs)}",
                output=str(name),
            )
    return {name: backend.import_output(name, value, stream=stream) for name, value in out.items()}


def check_outputs(backend, plan: ExecutionPlan, outs: Mapping[str, Any], args: Mapping[str, Any]) -> None:
    """Each caller buffer has the shape and dtype this run produces, and shares no byte with an input or
    another output buffer (a pipeline reads its inputs while it writes its outputs).

    Raises
    ------
    ShapeMismatchError, DTypeMismatchError
        Naming the output, what was given and what the run produces.
    InvalidArgumentError
        For overlapping buffers, naming both.
    """
    spans = {}
    for name, arg in outs.items():
        shape, dtype, _ = backend.signature_of(arg)
        want_shape, want_dtype = tuple(plan.shapes[name]), plan.dtypes[name]
        if tuple(shape) != want_shape:
            raise ShapeMismatchError(
                f"out[{name!r}] has shape {list(shape)}, but this run produces {list(want_shape)}: pass a "
                "buffer of that shape",
                output=name,
                expected=want_shape,
                got=tuple(shape),
            )
        if dtype != want_dtype:
            raise DTypeMismatchError(
                f"out[{name!r}] has dtype {dtype}, but this run produces {want_dtype}: pass a buffer of that "
                "dtype",
                output=name,
                expected=want_dtype,
                got=dtype,
            )
        spans[name] = byte_span(arg)
    inputs = {name: byte_span(arg) for name, arg in args.items()}
    for name, (lo, hi) in spans.items():
        clash = [f"input {n!r}" for n, (a, b) in inputs.items() if a < hi and lo < b]
        clash += [f"out[{n!r}]" for n, (a, b) in spans.items() if n != name and a < hi and lo < b]
        if clash:
            raise InvalidArgumentError(
                f"out[{name!r}] overlaps {clash[0]}: the pipeline reads its inputs while it writes its "
                "outputs, so every output buffer must be memory of its own",
                output=name,
            )


def byte_span(arg: Any) -> tuple[int, int]:
    """``[first, last)`` byte addresses a kernel argument (NumPy array or Tensor) covers; empty for a
    tensor without elements."""
    if isinstance(arg, np.ndarray):
        ptr, shape, itemsize = arg.__array_interface__["data"][0], arg.shape, arg.itemsize
        strides = arg.strides
    elif isinstance(arg, Tensor):
        ptr, shape, itemsize = arg.ptr, arg.shape, arg.dtype.itemsize
        strides = tuple(s * itemsize for s in arg.strides)
    else:  # a bound scalar or other host value: no buffer of the caller's
        return (0, 0)
    if any(d == 0 for d in shape):
        return (ptr, ptr)
    lo = hi = ptr
    for d, st in zip(shape, strides, strict=True):
        if st >= 0:
            hi += (d - 1) * st
        else:
            lo += (d - 1) * st
    return (lo, hi + itemsize)


def check_capturable(
    name: str,
    graph: LinkedGraph,
    given: Mapping[str, Any],
    outs: Mapping[str, Any] | None,
    *,
    checked: bool,
    profile: bool,
) -> None:
    """Refuse, before anything is queued, a run whose stream is being captured when the run would
    synchronise, read device values on the host, allocate per run or stage host data (each would break
    the caller's capture or bake memory PipeLink does not own into it).

    Raises
    ------
    InvalidArgumentError
        Naming the feature that cannot run inside a capture and what to do instead.
    """
    reasons = []
    if checked:
        reasons.append("checked mode reads every stage's outputs back on the host: load with checked=False")
    if profile:
        reasons.append("profile=True waits for timing events: profile outside the capture")
    reasons += [f"{r}: those stop between stages to look at results" for r in graph_blockers(graph)]
    host = [n for n, v in given.items() if not _on_device(v)]
    if host:
        reasons.append(
            f"input {host[0]!r} is host data, which a run uploads through a staging buffer: pass a device "
            "tensor (copy it to the device before the capture, or inside it with your framework)"
        )
    missing = [n for n in graph.outputs if n not in (outs or {})]
    if missing:
        reasons.append(
            f"output {missing[0]!r} has no out= buffer: a fresh tensor from PipeLink's pool would be written "
            "by every replay after you dropped it; pass out= buffers that live as long as the graph "
            "(torch.empty inside the capture, say), or use pl.torch.as_op"
        )
    if reasons:
        raise InvalidArgumentError(_refusal(name, reasons[0]), feature=reasons[0].split(":")[0])


def plan_capturable(name: str, plan: ExecutionPlan | None) -> None:
    """Refuse a capture of a plan that was never run (its first run compiles kernels and makes per-stream
    resources, which syncs) or whose stages run host code each time.

    Raises
    ------
    InvalidArgumentError
        Saying to run once before capturing, or which stages cannot be captured.
    """
    if plan is None or not plan.warm:
        raise InvalidArgumentError(
            _refusal(
                name,
                "this input signature has not run yet: its first run compiles kernels and allocates memory, "
                "which a capture cannot record; run it once with these shapes before capturing (warm-up)",
            ),
            feature="first run",
        )
    if plan.uncapturable:
        stages = ", ".join(map(repr, plan.uncapturable))
        raise InvalidArgumentError(
            _refusal(
                name,
                f"stages {stages} run host code on every run (host staging, or a kernel that reads device "
                "values on the host): run this pipeline outside the capture",
            ),
            feature="host stages",
            stages=stages,
        )


def _refusal(name: str, reason: str) -> str:
    return (
        f"pipeline {name!r} cannot run on this stream: it is being captured into a CUDA graph and {reason} "
        "(nothing was queued; the capture is intact)"
    )


def _on_device(value: Any) -> bool:
    """Whether an input is device memory already (no upload needed)."""
    if isinstance(value, Tensor):
        return value.is_cuda
    device = getattr(value, "__dlpack_device__", None)
    return device is not None and device()[0] == 2  # kDLCUDA
