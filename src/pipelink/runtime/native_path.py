"""``run()`` through the native core: ``pl.load(..., native=True)``.

Each input signature is compiled once into a plan (``runtime/planfile.py``, the same ``.plk`` that
``Pipeline.save`` writes), loaded into ``libpipelink_runtime`` and run with one ``pipeLinkExecuteAsync``
call per ``run()``: the core launches every kernel and cuBLASLt product of the plan on the run's stream from
C (ctypes releases the GIL for the call). What Python still does per run is match the inputs to the
signature, allocate the returned outputs (unless ``out=`` gives them) and fill two prebuilt ``DLTensor``
arrays. Bound weights travel inside each plan as constants, loaded once by the core. A stage the core
cannot run (a Python operator, a host-staged operator, process isolation, per-stage policies on CUDA) makes
the first run fail with the compile's ``ConfigError`` naming it: load without ``native=True`` to run such
a pipeline. docs/native-core.md describes the core; docs/architecture.md says
which runs take this path.
"""

from __future__ import annotations

import ctypes
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import InvalidArgumentError, error_for_code
from ..modules.services import PipeLinkTensor
from ..native import open_runtime
from ..tensor import Tensor
from .planfile import write_plan

__all__ = ["NativeRunner"]

_DEVICE_TYPE = {"cpu": 1, "cuda": 2}  # DLPack device types of the plans the core runs


def _runtime() -> ctypes.CDLL:
    lib = open_runtime()
    handle = ctypes.c_void_p
    tensors = ctypes.POINTER(PipeLinkTensor)
    lib.pipeLinkInitialize.restype = ctypes.c_int
    lib.pipeLinkLoadPipeline.argtypes = [ctypes.c_char_p, ctypes.POINTER(handle)]
    lib.pipeLinkDestroyPipeline.argtypes = [handle]
    lib.pipeLinkExecuteAsync.argtypes = [
        handle,
        tensors,
        ctypes.c_int32,
        tensors,
        ctypes.c_int32,
        ctypes.c_void_p,
    ]
    lib.pipeLinkGetLastErrorMessage.restype = ctypes.c_char_p
    return lib


class _Compiled:
    """One loaded plan: its handle and the ``DLTensor`` arrays its runs fill in (shapes fixed)."""

    def __init__(self, lib, handle, device, inputs, outputs) -> None:
        self.lib, self.handle = lib, handle
        self.inputs = inputs  # [(name, shape, dtype name)] in the plan's order
        self.outputs = outputs
        self.keep: list = []
        self.in_array = self._array(inputs, device)
        self.out_array = self._array(outputs, device)

    def _array(self, specs, device) -> Any:
        kind, index = device
        array = (PipeLinkTensor * max(1, len(specs)))()
        for t, (_, shape, dtype) in zip(array, specs, strict=False):
            dt = get_dtype(dtype)
            dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
            self.keep.append(dims)
            t.device.device_type, t.device.device_id = _DEVICE_TYPE[kind], index
            t.ndim, t.shape = len(shape), dims
            t.dtype.code, t.dtype.bits, t.dtype.lanes = dt.dl_code, dt.bits, 1
        return array

    def close(self) -> None:
        if self.handle is not None:
            self.lib.pipeLinkDestroyPipeline(self.handle)
            self.handle = None


def _place(value: Any, kind: str, index: int) -> tuple[int, tuple[int, ...], str] | None:
    """(pointer, shape, dtype name) of a contiguous tensor of the pipeline's device, else None."""
    if isinstance(value, Tensor):
        if value.device != (kind if kind == "cpu" else f"cuda:{index}") or not value.is_contiguous:
            return None
        return value.ptr, tuple(value.shape), value.dtype.name
    if isinstance(value, np.ndarray):
        if kind != "cpu" or not value.flags.c_contiguous:
            return None
        return value.ctypes.data, value.shape, get_dtype(value.dtype).name
    if type(value).__module__.startswith("torch"):
        on_device = value.is_cuda and value.get_device() == index if kind == "cuda" else not value.is_cuda
        if not on_device or not value.is_contiguous():
            return None
        return value.data_ptr(), tuple(value.shape), str(value.dtype).removeprefix("torch.")
    return None


class NativeRunner:
    """The native core's side of one pipeline: a plan per input signature, compiled on first use."""

    def __init__(self, pipe) -> None:
        self._pipe = pipe
        self._lib = _runtime()
        status = self._lib.pipeLinkInitialize()
        if status:
            raise self._error(status, "pipeLinkInitialize")
        backend = pipe._backend
        self._kind, self._index = backend.info.kind, backend.info.index
        self._dir = Path(tempfile.mkdtemp(prefix="pipelink-native-"))
        self._plans: dict[tuple, _Compiled] = {}

    def _error(self, status: int, what: str):
        message = (self._lib.pipeLinkGetLastErrorMessage() or b"").decode(errors="replace")
        return error_for_code(status)(f"native core: {what} failed: {message}")

    def _compile(self, key: tuple) -> _Compiled:
        pipe = self._pipe
        shapes = {name: (shape, dtype) for name, shape, dtype in key}
        path = write_plan(pipe, self._dir / f"plan{len(self._plans)}.plk", shapes)
        handle = ctypes.c_void_p()
        status = self._lib.pipeLinkLoadPipeline(str(path).encode(), ctypes.byref(handle))
        if status:
            raise self._error(status, f"loading the plan of {pipe.name!r}")
        specs = pipe.output_specs({name: (shape, dtype) for name, shape, dtype in key})
        outputs = [(n, tuple(int(d) for d in s), get_dtype(d).name) for n, (s, d) in specs.items()]
        compiled = _Compiled(self._lib, handle, (self._kind, self._index), list(key), outputs)
        self._plans[key] = compiled
        return compiled

    def run(self, given: Mapping[str, Any], stream: Any, out: Mapping[str, Tensor]) -> dict[str, Any]:
        """One run: ``given`` the inputs by name, ``out`` the caller's output buffers (imported)."""
        pipe = self._pipe
        backend = pipe._backend
        names = pipe.inputs  # bound weights are constants inside the plan
        places = []
        for name in names:
            if name not in given:
                raise InvalidArgumentError(
                    f"missing input {name!r}; the pipeline takes {list(names)}", input=name
                )
            place = _place(given[name], self._kind, self._index)
            if place is None:
                raise InvalidArgumentError(
                    f"input {name!r}: a pipeline loaded with native=True takes contiguous tensors of its "
                    f"device ({pipe.device}: pl.Tensor or PyTorch); got {type(given[name]).__name__}. Move "
                    "it there first (pl.from_dlpack / torch .to(device).contiguous()), or load without "
                    "native=True",
                    input=name,
                )
            places.append(place)
        if len(given) != len(names):
            unknown = sorted(set(given) - set(names))
            raise InvalidArgumentError(f"unknown input(s) {unknown}; the pipeline takes {list(names)}")
        key = tuple((name, shape, dtype) for name, (_, shape, dtype) in zip(names, places, strict=True))
        compiled = self._plans.get(key) or self._compile(key)
        for t, (ptr, _, _) in zip(compiled.in_array, places, strict=False):
            t.data = ptr
        results = {}
        for t, (name, shape, dtype) in zip(compiled.out_array, compiled.outputs, strict=False):
            buffer = out.get(name)
            if buffer is None:
                buffer = backend.empty(shape, get_dtype(dtype))
            place = _place(buffer, self._kind, self._index)
            if place is None or place[1:] != (shape, dtype):
                raise InvalidArgumentError(
                    f"out= buffer {name!r} must be a contiguous {shape} {dtype} tensor of {pipe.device}",
                    output=name,
                )
            t.data = place[0]
            results[name] = buffer
        handle = backend.handle_of(stream)
        status = self._lib.pipeLinkExecuteAsync(
            compiled.handle,
            compiled.in_array,
            len(compiled.inputs),
            compiled.out_array,
            len(compiled.outputs),
            int(handle) if handle is not None else None,
        )
        if status:
            raise self._error(status, f"running {pipe.name!r}")
        if stream is not None:
            backend.finish_run(stream, keepalive=(given, results))
        return {n: backend.wrap(v) for n, v in results.items()}

    def close(self) -> None:
        for compiled in self._plans.values():
            compiled.close()
        self._plans.clear()
        shutil.rmtree(self._dir, ignore_errors=True)
