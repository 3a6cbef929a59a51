"""Process isolation (``isolation: "process"``): a stage's module runs in a spawned worker process.

Tensors in the plan's arena cross without copies (the arena is shared memory the worker maps); an
external input or a returned output of the stage goes through a per-stage shared staging block. A
segfault, ``abort()`` or hang past ``timeout_ms`` in the worker is this stage's
``PIPELINK_ERR_MODULE_CRASH`` / ``PIPELINK_ERR_TIMEOUT``; the worker is restarted for the next run and
the caller's process never dies. Never fork: a forked CUDA or threaded runtime is undefined behaviour.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import signal
import time
import weakref
from dataclasses import dataclass
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import (
    ErrorCode,
    ModuleCrashError,
    ModuleLoadError,
    PipeLinkTimeoutError,
)
from .worker import worker_main

__all__ = ["WorkerSpec", "IsolatedKernel", "worker_spec"]

_ALIGN = 256
_START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to rebuild the stage's kernel in its own process (picklable)."""

    stage: str
    operator: str
    version: str
    source: str  # "builtin" | "python" | path of a native module
    variant: str
    function: Any  # a Python operator's function, pickled by reference
    attrs: dict
    in_shapes: tuple
    in_dtypes: tuple
    out_shapes: tuple
    out_dtypes: tuple
    params: dict
    arena: str | None  # shared memory name of the plan's arena
    staging: str | None  # shared memory name of this stage's staging block (CPU)
    device: str = "cpu"
    ipc_handle: bytes | None = None  # CUDA IPC handle of the device staging block (CUDA)
    staged: bool = False  # a host variant on a device: the worker stages its tensors (runtime.staging)
    offsets: tuple = ()  # byte offsets of each present input, then each output, in the staging block
    image: Any = None  # a native module's ModuleImage: the worker opens the bytes the caller verified


def worker_spec(stage, variant, ctx, **where: Any) -> WorkerSpec:
    """The picklable description a worker rebuilds the stage's kernel from (``where``: the memory it maps)."""
    return WorkerSpec(
        stage=stage.id,
        operator=stage.desc.name,
        version=str(stage.desc.version),
        source=variant.source,
        variant=variant.name,
        function=variant.origin if variant.source == "python" else None,
        attrs=dict(ctx.attrs),
        in_shapes=tuple(ctx.in_shapes),
        in_dtypes=tuple(ctx.in_dtypes),
        out_shapes=tuple(ctx.out_shapes),
        out_dtypes=tuple(ctx.out_dtypes),
        params=dict(ctx.params),
        image=getattr(variant.origin, "image", None),
        **{"arena": None, "staging": None, **where},
    )


def _nbytes(shape, dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * get_dtype(dtype).itemsize


class IsolatedKernel:
    """Calls a stage in its worker; restarts the worker after a crash or a timeout."""

    def __init__(self, stage, variant, ctx, arena):
        self.stage = stage
        self.timeout_s = (
            stage.config.constraints.timeout_ms / 1000.0
            if stage.config.constraints.timeout_ms is not None
            else None
        )
        shapes = [s for s in ctx.in_shapes if s is not None] + list(ctx.out_shapes)
        dtypes = [d for d in ctx.in_dtypes if d is not None] + list(ctx.out_dtypes)
        offsets, total = [], 0
        for shape, dtype in zip(shapes, dtypes, strict=True):
            offsets.append(total)
            total += (_nbytes(shape, dtype) + _ALIGN - 1) // _ALIGN * _ALIGN
        self._staging = SharedMemory(create=True, size=max(total, 1))
        self._staging_offsets = offsets
        self._arena = arena
        self._arena_range = (
            (arena.ptr, arena.ptr + arena.nbytes) if arena is not None and arena.shared else (0, 0)
        )
        fn = variant.origin if variant.source == "python" else None
        if fn is not None and (
            getattr(fn, "__module__", "__main__") == "__main__" or "<locals>" in fn.__qualname__
        ):
            raise ModuleLoadError(
                f"stage {stage.id!r}: isolation 'process' needs operator {stage.desc.name!r} "
                f"to be importable "
                f"by the worker; move {fn.__qualname__} to a module's top level",
                stage=stage.id,
            )
        self.spec = worker_spec(
            stage,
            variant,
            ctx,
            arena=arena.shared.name if arena is not None and arena.shared else None,
            staging=self._staging.name,
        )
        self._proc = None
        self._conn = None
        self.restarts = 0
        self._finalizer = self._make_finalizer([None, None])
        self._start()

    # -- worker lifetime ---------------------------------------------------------------------------
    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(
            target=worker_main, args=(child, self.spec), daemon=True, name=f"pipelink-{self.stage.id}"
        )
        proc.start()
        child.close()
        if not parent.poll(_START_TIMEOUT_S):
            proc.kill()
            raise ModuleCrashError(
                f"stage {self.stage.id!r}: its worker process did not start",
                stage=self.stage.id,
                operator=self.stage.desc.name,
            )
        try:
            status, payload = parent.recv()
        except EOFError:
            proc.join(1)
            raise self._crash_error(proc.exitcode, "while loading the module") from None
        if status != "ready":
            proc.join(1)
            raise payload
        self._proc, self._conn = proc, parent
        self._finalizer.detach()
        self._finalizer = self._make_finalizer([proc, parent])

    def _make_finalizer(self, handles: list):
        """What closing (or collecting) this kernel must do: stop the worker, free the staging."""
        return weakref.finalize(self, _shutdown, self._staging, handles)

    def _kill(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is not None:
            if proc.is_alive():
                proc.kill()
            proc.join(5)

    def close(self) -> None:
        self._finalizer()

    # -- calls -------------------------------------------------------------------------------------
    def _ref(self, array: np.ndarray, slot: int, *, copy_in: bool):
        lo, hi = self._arena_range
        ptr = array.ctypes.data
        if lo <= ptr and ptr + array.nbytes <= hi:
            return ("arena", ptr - lo)
        offset = self._staging_offsets[slot]
        if copy_in:
            view = np.ndarray(array.shape, dtype=array.dtype, buffer=self._staging.buf, offset=offset)
            np.copyto(view, array)
        return ("staging", offset)

    def __call__(self, inputs, outputs, stream) -> None:
        if self._proc is None:
            self.restarts += 1
            self._start()
        slot = 0
        in_refs = []
        for x in inputs:
            if x is None:
                in_refs.append(None)
                continue
            in_refs.append(self._ref(x, slot, copy_in=True))
            slot += 1
        out_refs = [self._ref(y, slot + j, copy_in=False) for j, y in enumerate(outputs)]
        self._roundtrip(("run", in_refs, out_refs))
        for ref, y in zip(out_refs, outputs, strict=True):
            if ref[0] == "staging":
                np.copyto(y, np.ndarray(y.shape, dtype=y.dtype, buffer=self._staging.buf, offset=ref[1]))

    def _roundtrip(self, message) -> None:
        """Send one request to the worker and wait for its answer, within the stage's timeout."""
        if self._proc is None:
            self.restarts += 1
            self._start()
        self._conn.send(message)
        started = time.perf_counter()
        if not self._conn.poll(self.timeout_s):
            self._kill()
            waited_ms = (time.perf_counter() - started) * 1000
            raise PipeLinkTimeoutError(
                f"stage {self.stage.id!r} (operator {self.stage.desc.name!r}) did not finish within its "
                f"timeout_ms of {self.timeout_s * 1000:g} ms ({waited_ms:.0f} ms waited); its worker was "
                "stopped and will be restarted for the next run",
                stage=self.stage.id,
                operator=self.stage.desc.name,
                timeout_ms=self.timeout_s * 1000,
            )
        try:
            status, payload = self._conn.recv()
        except (EOFError, OSError):
            proc = self._proc
            self._kill()
            raise self._crash_error(proc.exitcode if proc else None, "while running") from None
        if status == "error":
            if getattr(payload, "code", None) == ErrorCode.PIPELINK_ERR_CUDA or payload.context.get(
                "cuda_error"
            ):
                self._kill()  # the worker's CUDA context may be corrupted: start a fresh one next time
            raise payload

    def _crash_error(self, exitcode, when: str) -> ModuleCrashError:
        if exitcode is not None and exitcode < 0:
            try:
                cause = signal.Signals(-exitcode).name
            except ValueError:
                cause = f"signal {-exitcode}"
        else:
            cause = f"exit code {exitcode}"
        return ModuleCrashError(
            f"stage {self.stage.id!r} (operator {self.stage.desc.name!r}, module {self.spec.source}): its "
            f"worker process died {when} ({cause}); the worker will be restarted for the next run",
            stage=self.stage.id,
            operator=self.stage.desc.name,
            module=self.spec.source,
            cause=cause,
        )


def _shutdown_proc(handles: list) -> None:
    """Ask a worker to exit, then make sure it has."""
    proc, conn = handles
    if conn is not None:
        with contextlib.suppress(OSError, ValueError):
            conn.send(("exit",))
        conn.close()
    if proc is not None:
        proc.join(1)
        if proc.is_alive():
            proc.kill()
            proc.join(1)


def _shutdown(staging: SharedMemory, handles: list) -> None:
    try:
        _shutdown_proc(handles)
    finally:
        staging.close()
        with contextlib.suppress(FileNotFoundError):
            staging.unlink()
