"""``run()`` through the native core, the default hot path (``pl.load(native=None | True | False)``).

Each input signature is compiled once into a plan (``runtime/planfile.py``, the same ``.plk`` that
``Pipeline.save`` writes), loaded into ``libpipelink_runtime`` and run with one call into the core per
``run()``: the core launches every kernel and cuBLASLt product of the plan on the run's stream from C, with
the GIL released. Runs take no pipeline lock: the core's execution contexts run concurrently, and only
compiling a new signature is serialised.

Two ways in, one core. The common case - no ``stream=``/``out=``/``profile``/``strict``, inputs that are
pl.Tensor or PyTorch tensors of the device (or NumPy arrays on the CPU), all PyTorch or none, a signature
already compiled, a stream not being captured - is ``_hotpath.Runner.run`` in C (``_hotpath.c``): inputs
matched, outputs from the backend's pool, the core called, no Python code run. Everything else, and the
first run of each signature, is :meth:`NativeRunner.run` below, which compiles, decides and explains.

AUTO (``native=None``) hands the core what it can run and leaves the rest to the Python executor, with the
reason in ``last_report.executor_reason``; ``native=True`` refuses the rest naming it. The pipeline-wide
decisions are made in :func:`native_blockers` alone; per-signature refusals are the plan compiler's.
This module must never run a stage itself. docs/architecture.md ("One hot path") says which runs go where.
"""

from __future__ import annotations

import ctypes
import math
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..dtypes import TORCH_DTYPE_NAMES, get_dtype
from ..errors import ConfigError, InvalidArgumentError, PipeLinkError
from ..native import arena_stats, held_bytes
from ..tensor import Tensor

try:
    from ._hotpath import Runner as _FastRunner
except ImportError:  # not built (no C compiler at install): every run takes the Python path below
    _FastRunner = None
from .declared import check_declared_dtype
from .executor import preload_inputs
from .external import import_outputs, run_stream
from .native_plan import (
    DEVICE_TYPE,
    LoadedPlan,
    core_error,
    host_output,
    native_report,
    place_tensor,
    runtime,
    signature_text,
)
from .planfile import write_plan

__all__ = ["NativeRunner", "native_blockers", "keeps_inputs", "native_report"]


# -- what the core never runs for a pipeline (one place; the lead flips entries here) ----------------------
def _cuda_graph_blocker(requested: bool, auto: bool, static: bool) -> str | None:
    # With cuda_graph=True the core captures and replays (plans with the cuda_graph flag), keying its graphs
    # by every external pointer (inputs and outputs, PLK_GRAPH_CACHE per context). With static_outputs the
    # outputs are the plan's own buffers, so only the inputs' places vary, as for the Python executor's
    # graphs. Without, AUTO keeps the Python executor's graphs (they copy outputs out of static buffers):
    # fresh outputs would give the core a new key on most runs of a caller that keeps them.
    if requested and auto and not static:
        return (
            "cuda_graph=True without static_outputs in AUTO (the Python executor captures and replays, "
            "copying each output out of the graph; load with static_outputs=True, or native=True, to have "
            "the core capture and replay them)"
        )
    return None


def native_blockers(pipe, *, cuda_graph: bool, auto: bool) -> list[str]:
    """Why the core can run no signature of ``pipe``: empty when it may run some.

    Parameters
    ----------
    cuda_graph : bool
        Whether ``load(cuda_graph=True)`` was asked.
    auto : bool
        AUTO (``native=None``) also leaves to the Python executor what the core could run but reports less
        of: per-stage policies (the Python executor reports each degraded or skipped stage and honours
        ``strict=True``) and ``async_preload`` inputs (its copy stream overlaps their upload).
    """
    blockers = []
    kind = pipe._backend.info.kind
    if kind not in DEVICE_TYPE:
        blockers.append(f"the native core runs CPU and CUDA plans, and this pipeline is on {pipe.device}")
    found = _cuda_graph_blocker(cuda_graph, auto, pipe.static_outputs)
    if found is not None:
        blockers.append(found)
    if pipe.checked:
        blockers.append("checked mode (the Python executor poisons and guards every stage's outputs)")
    if auto:
        policies = [st.id for st in pipe.graph.stages if _has_policy(st)]
        if policies:
            blockers.append(
                "per-stage policies (on_error, check_finite, timeout_ms) on "
                f"{', '.join(map(repr, policies))}: "
                "the Python executor reports each degraded or skipped stage in last_report"
            )
        if preload_inputs(pipe.graph):
            blockers.append("async_preload inputs (the Python executor uploads them on a copy stream)")
    return blockers


def _address(function: Any) -> int:
    """The address of one of the core's exported C functions (handed to ``_hotpath.c``)."""
    return ctypes.cast(function, ctypes.c_void_p).value


def _has_policy(st) -> bool:
    c = st.config
    return c.on_error.kind != "fail" or bool(c.constraints.check_finite) or bool(c.constraints.timeout_ms)


def keeps_inputs(stream: Any, values: Iterable[Any]) -> bool:
    """Whether a run's inputs are held until its work is done: not when every tensor is PyTorch's and the run
    is on PyTorch's current stream (its caching allocator reuses their memory only after the work queued
    there, ours included; holding them would leak them out of a torch.compile / CUDA-graph memory pool)."""
    return stream is not None or not all(type(v).__module__.startswith("torch") for v in values)


class NativeRunner:
    """The native core's side of one pipeline: a plan per input signature, compiled on first use.

    Parameters
    ----------
    required : bool
        ``native=True``: what the core cannot run is an error. Otherwise (AUTO) :meth:`run` returns the
        reason as a string and the caller runs the Python executor.
    """

    def __init__(self, pipe, *, required: bool, cuda_graph: bool = False) -> None:
        self._pipe = pipe
        self._required = required
        self._cuda_graph = cuda_graph and pipe._backend.info.kind == "cuda"  # plans the core captures
        # static_outputs (graph mode): each plan's outputs are buffers of its own, overwritten by every run
        self._static = self._cuda_graph and pipe.static_outputs
        backend = pipe._backend
        self._backend = backend
        self._kind, self._index = backend.info.kind, backend.info.index
        self._device = pipe.device
        self._cuda = self._kind == "cuda"
        self._names = tuple(pipe.inputs)  # bound weights are constants inside the plan
        self._plans: dict[tuple, LoadedPlan | str] = {}  # signature -> plan, or why Python runs it
        self.fast: Any = None  # the C side (_hotpath.Runner), once a plan is loaded: Pipeline.run's first try
        self._cond = threading.Condition()
        self._active = 0  # runs inside the core now: close() and reset() wait for them
        self._resetting = 0  # reset() in progress: new runs wait for it
        self._closed = False
        self._stages: dict[str, tuple] = {}  # signature text -> its plan's stages, for native_report

    # -- the hot path ------------------------------------------------------------------------------
    def run(
        self, given: Mapping[str, Any], stream: Any, out: Any, *, profile: bool, strict: bool
    ) -> dict[str, Any] | str:
        """One run: the outputs by name, or (AUTO) why the Python executor must run it."""
        if profile:
            return self._decline("profile=True needs the Python executor (per-stage times)")
        with self._cond:
            while self._resetting:
                self._cond.wait()
            if self._closed:
                raise InvalidArgumentError(f"pipeline {self._pipe.name!r} is closed")
            self._active += 1
        try:
            return self._run(given, stream, out, strict)
        finally:
            with self._cond:
                self._active -= 1
                if self._closed and not self._active:
                    self._cond.notify_all()

    def _run(self, given: Mapping[str, Any], stream: Any, out: Any, strict: bool) -> dict[str, Any] | str:
        t0 = time.perf_counter()
        backend, kind, device, index = self._backend, self._kind, self._device, self._index
        keep = None
        capturing = False
        if self._cuda:
            values = [*given.values(), *out.values()] if isinstance(out, Mapping) else list(given.values())
            if keeps_inputs(stream, values):
                keep = tuple(given.values())  # not the caller's dict: it may be refilled before the run ends
            stream = run_stream(backend, stream, values)
            capturing = backend.is_capturing(stream)
        elif stream is not None:
            run_stream(backend, stream, ())  # raises: the CPU runs on no stream
        names = self._names
        places = []
        for name in names:
            value = given.get(name)
            place = place_tensor(value, kind, device, index) if value is not None else None
            if place is None:
                return self._bad_input(name, given)
            places.append(place)
        if len(given) != len(names):
            return self._decline(f"unknown input(s) {sorted(set(given) - set(names))}; takes {list(names)}")
        key = tuple([(name, p[1], p[2]) for name, p in zip(names, places, strict=True)])
        compiled = self._plans.get(key)
        if capturing and not self._required:
            # Inside the caller's capture the core records a plan it already ran (warm), writing out=
            # buffers; anything else is the Python executor's, which refuses it naming what is wrong.
            outputs = self._pipe.graph.outputs
            warm = compiled.__class__ is LoadedPlan
            if not warm or not isinstance(out, Mapping) or len(out) < len(outputs):
                return "the caller's stream is being captured, and the core has no warm plan for this run"
        if compiled is None:
            compiled = self._compile(key)
        if compiled.__class__ is str:
            return compiled
        if strict and self._required and any(_has_policy(st) for st in self._pipe.graph.stages):
            raise InvalidArgumentError(
                f"pipeline {self._pipe.name!r} was loaded with native=True: strict=True needs the Python "
                "executor, which raises a stage's error instead of applying its on_error policy"
            )
        in_array, out_array = compiled.arrays()
        for t, place in zip(in_array, places, strict=False):
            t.data = place[0]
        outs = import_outputs(backend, self._pipe.graph, out, stream) if out is not None else None
        results = {}
        empty = backend.empty
        for t, (name, shape, dtype, strides) in zip(out_array, compiled.made, strict=False):
            buffer = outs.get(name) if outs else None
            if buffer is not None:  # the caller's (imported): written in place
                place = place_tensor(buffer, kind, device, index)
                if place is None or place[1:] != (shape, dtype.name):
                    return self._decline(
                        f"out= buffer {name!r} must be a contiguous {shape} {dtype.name} tensor of {device}"
                    )
                t.data = place[0]
                results[name] = backend.wrap(buffer)
            elif kind == "cpu":
                results[name], t.data = host_output(shape, dtype, strides)
            elif compiled.static is not None:
                tensor = results[name] = compiled.static[name]
                t.data = tensor.ptr
            else:  # cached for the run's stream: another stream's run never gets it while this one runs
                tensor = results[name] = empty(shape, dtype, stream=stream)
                t.data = tensor.ptr
        handle = int(backend.handle_of(stream)) if stream is not None else None  # a CUstream: its address
        replayed = ctypes.c_int32(0)
        status = compiled.lib.plk_execute_joined(
            compiled.handle, in_array, compiled.n_in, out_array, compiled.n_out, handle, None, None, replayed
        )
        if status:
            error = core_error(compiled.lib, status, f"running {self._pipe.name!r}")
            if self._required:
                raise error
            # A run the core refused (the caller's tensors are checked before anything runs) or a module
            # failed: the Python executor runs it again and raises its own error, with the stage reports.
            return f"the native core refused the run ({error.message})"
        if not compiled.ran:  # its first context now exists: the backend's peak hears of its arena
            compiled.ran = True
            self._note_native()
        if stream is not None and not capturing:
            # CUDA returns without waiting (the fence orders DLPack consumers and .numpy() after the run).
            backend.finish_run(stream, keepalive=(keep, results) if keep is not None else None)
        self._pipe._last_report = (compiled.text, time.perf_counter() - t0, bool(replayed.value))
        return results

    def _decline(self, reason: str) -> str:
        if self._required:
            raise InvalidArgumentError(
                f"pipeline {self._pipe.name!r} was loaded with native=True, but {reason}; load it without "
                "native=True to run this through the Python executor"
            )
        return reason

    def _bad_input(self, name: str, given: Mapping[str, Any]) -> str:
        if name not in given:
            if self._required:
                raise InvalidArgumentError(
                    f"missing input {name!r}; the pipeline takes {list(self._names)}", input=name
                )
            return f"missing input {name!r}"
        value = given[name]
        return self._decline(
            f"input {name!r} is not a contiguous tensor of {self._device} (got {type(value).__name__}; "
            "pl.Tensor, PyTorch, or NumPy on the CPU): move it there first (pl.from_dlpack / torch "
            ".to(device).contiguous())"
        )

    # -- compiling a signature (once, under the pipeline's lock) ------------------------------------
    def _compile(self, key: tuple) -> LoadedPlan | str:
        pipe = self._pipe
        with pipe._lock:
            found = self._plans.get(key)
            if found is not None:
                return found
            if self._closed:
                raise InvalidArgumentError(f"pipeline {pipe.name!r} is closed")
            text = signature_text(key)
            try:
                # The user's dtype and shape errors, and the outputs' shapes, before anything is compiled.
                for name, _, dtype in key:
                    check_declared_dtype(pipe.graph, name, dtype)
                specs = pipe.output_specs({name: (shape, dtype) for name, shape, dtype in key})
            except PipeLinkError as e:
                if self._required:
                    raise
                return f"the inputs do not fit: {e.message}"  # not cached: the Python executor raises it
            try:
                found = self._load(key, specs, text)
            except PipeLinkError as e:
                if self._required:
                    raise
                found = f"the native core cannot run this signature: {e.message}"
                if isinstance(e, ConfigError) and not self._cuda and not self._compiled_any():
                    # A CPU plan refuses a stage whatever the shapes (it calls native modules only): no
                    # signature of this pipeline can run in the core, so runs stop asking (one place).
                    self._give_up(found.replace("this signature", "this pipeline"))
            except Exception as e:  # AUTO never fails a run because the core could not take it
                if self._required:
                    raise
                found = f"compiling for the native core failed ({type(e).__name__}: {e})"
            pipe.load_report.executors[text] = "native" if found.__class__ is LoadedPlan else found
            self._plans[key] = found
            if found.__class__ is LoadedPlan:
                if self._static:
                    found.static = {n: self._backend.empty(s, dt) for n, s, dt, _ in found.made}
                self._note_native()  # its constants are on the device now
                self._give_fast(key, found)
            return found

    # -- the C side (_hotpath.c) -------------------------------------------------------------------
    def _give_fast(self, key: tuple, compiled: LoadedPlan) -> None:
        """Hand a loaded plan to the C side, making it on the first (never when it was not built)."""
        if _FastRunner is None or self._closed:
            return
        if self.fast is None:
            backend = self._backend
            lib = compiled.lib
            if self._cuda:  # the pool, the main stream, and the capture check asked before outputs are taken
                parts = dict(backend.hot_path_parts(), capturing=_address(lib.plk_stream_capturing))
            else:
                parts = {"host_output": host_output}  # CPU: NumPy
            self.fast = _FastRunner(
                self._names,
                DEVICE_TYPE[self._kind],
                self._index,
                self._device,
                _address(lib.plk_execute_joined),
                Tensor,
                self._pipe,
                ndarray_type=np.ndarray,
                **parts,
            )
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "Tensor"):
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None) if self._cuda else None  # noqa: SLF001
            dtypes = {getattr(torch, n): get_dtype(n) for n in TORCH_DTYPE_NAMES}
            self.fast.set_torch(torch.Tensor, dtypes, raw)
        ins = tuple((shape, get_dtype(d).dl_code, get_dtype(d).bits) for _, shape, d in key)
        outs = tuple(
            (name, shape, strides, dt, dt.dl_code, dt.bits, math.prod(shape) * dt.itemsize)
            for name, shape, dt, strides in compiled.made
        )
        static = tuple(compiled.static[name] for name, *_ in compiled.made) if compiled.static else None
        self.fast.add_plan(compiled.handle.value, ins, outs, compiled.text, static)

    def _note_native(self) -> None:
        """Tell the backend what the core's plans hold on this device now (pl.memory.stats' peak)."""
        self._backend.note_native_bytes(held_bytes(arena_stats(self._kind, self._index)))

    def _stop_fast(self) -> None:
        """Send new runs to the Python path, wait for those inside the core from C, forget the C side."""
        fast, self.fast = self.fast, None
        if fast is None:
            return
        fast.closed = True  # under the GIL: no C run starts after this
        while fast.active:
            time.sleep(0.0002)
        fast.drop_plans()

    def _give_up(self, reason: str) -> None:
        report = self._pipe.load_report
        report.hot_path, report.hot_path_reason = "python", reason
        self._pipe._native = None  # later runs go straight to the Python executor (no plan to close)

    def _compiled_any(self) -> bool:
        return any(v.__class__ is LoadedPlan for v in self._plans.values())

    def stages_of(self, text: str) -> tuple[tuple[str, str, str], ...]:
        """``(stage id, operator, variant)`` of each stage of the plan of signature ``text``, in plan order
        (for :func:`native_report`); empty for a signature never compiled for the core."""
        return self._stages.get(text, ())

    def _load(self, key: tuple, specs: Mapping[str, tuple], text: str) -> LoadedPlan:
        pipe = self._pipe
        shapes = {name: (shape, dtype) for name, shape, dtype in key}
        folder = Path(tempfile.mkdtemp(prefix="pipelink-native-"))
        variants: dict[str, str] = {}
        try:
            path = write_plan(
                pipe, folder / "plan.plk", shapes, cuda_graph=self._cuda_graph, variants=variants
            )
            lib = runtime()  # opened once a plan exists: a pipeline the core refuses never loads it
            handle = ctypes.c_void_p()
            status = lib.pipeLinkLoadPipeline(str(path).encode(), ctypes.byref(handle))
            if status:
                raise core_error(lib, status, f"loading the plan of {pipe.name!r}")
        finally:
            shutil.rmtree(folder, ignore_errors=True)  # the core keeps what it needs (modules: memfd copies)
        outputs = [(n, tuple(int(d) for d in s), get_dtype(d).name) for n, (s, d) in specs.items()]
        # What its runs' reports list (kept past reset(): a report read later describes the run it was).
        stages = pipe.graph.stages
        self._stages[text] = tuple((st.id, st.desc.name, variants.get(st.id, "")) for st in stages)
        return LoadedPlan(lib, handle, (self._kind, self._index), list(key), outputs, text)

    def _destroy_plans(self) -> None:
        """Destroy every plan; called with no run inside the core (``self._cond`` held, ``_active`` 0)."""
        plans, self._plans = self._plans, {}
        for compiled in plans.values():
            if compiled.__class__ is LoadedPlan:
                compiled.close()

    def reset(self) -> None:
        """Drop every plan (``Pipeline.reload`` changed modules): runs inside the core finish on the old
        plans, new runs wait, then compile against the pipeline's new graph. Call it without holding the
        pipeline's lock (a run inside the core may be compiling under it)."""
        self._stop_fast()  # the input names may change: the C side is made anew with the next plan
        with self._cond:
            self._resetting += 1
            try:
                while self._active:
                    self._cond.wait()
                self._destroy_plans()
                self._names = tuple(self._pipe.inputs)
                self._pipe.load_report.executors.clear()
            finally:
                self._resetting -= 1
                self._cond.notify_all()

    def close(self) -> None:
        """Refuse new runs, wait for those inside the core, then destroy every plan."""
        self._stop_fast()
        with self._cond:
            self._closed = True
            while self._active:
                self._cond.wait()
            self._destroy_plans()
