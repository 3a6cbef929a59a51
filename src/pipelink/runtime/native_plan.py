"""One input signature of a pipeline loaded into the native core, and what runs need to hand it tensors:
the runtime library (opened once per process), the loaded plan (:class:`LoadedPlan`: its handle, output
specs and per-thread ``DLTensor`` arrays), placing a tensor for it, fresh host outputs, the report of a run
the core made. ``native_path.py`` decides which runs come here; this module never runs a stage itself.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import PipeLinkError, error_for_code
from ..modules.services import PipeLinkTensor
from ..native import open_runtime
from ..tensor import Tensor, contiguous_strides
from .report import RunReport

__all__ = [
    "DEVICE_TYPE",
    "LoadedPlan",
    "core_error",
    "host_output",
    "host_ptr",
    "native_report",
    "place_tensor",
    "runtime",
    "signature_text",
]

DEVICE_TYPE = {"cpu": 1, "cuda": 2}  # DLPack device types of the plans the core runs
_LIB: ctypes.CDLL | None = None
_LIB_LOCK = threading.Lock()


def runtime() -> ctypes.CDLL:
    """The runtime library, opened, typed and initialised once per process."""
    global _LIB
    with _LIB_LOCK:
        if _LIB is None:
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
                handle,
            ]
            lib.pipeLinkGetLastErrorMessage.restype = ctypes.c_char_p
            # The entry of both sides of the hot path: pipeLinkExecuteAsync, with a join stream, the
            # capture refusal (_hotpath.c's) and whether a captured graph was launched.
            flag = ctypes.POINTER(ctypes.c_int32)
            lib.plk_execute_joined.argtypes = [handle, tensors, ctypes.c_int32, tensors, ctypes.c_int32]
            lib.plk_execute_joined.argtypes += [handle, handle, flag, flag]
            lib.plk_execute_joined.restype = ctypes.c_int
            status = lib.pipeLinkInitialize()
            if status:
                raise core_error(lib, status, "pipeLinkInitialize")
            _LIB = lib
        return _LIB


def core_error(lib: ctypes.CDLL, status: int, what: str) -> PipeLinkError:
    message = (lib.pipeLinkGetLastErrorMessage() or b"").decode(errors="replace")
    return error_for_code(status)(f"native core: {what} failed: {message}")


_address_of, _bytes_of = ctypes.addressof, ctypes.c_char.from_buffer


def host_ptr(array: np.ndarray) -> int:
    """The address of a C-contiguous array's first byte (``ctypes.data`` costs ~1 us, this ~0.15 us)."""
    try:
        return _address_of(_bytes_of(array))
    except (TypeError, ValueError):  # read-only or empty
        return array.__array_interface__["data"][0]


def place_tensor(value: Any, kind: str, device: str, index: int) -> tuple[int, tuple[int, ...], str] | None:
    """(pointer, shape, dtype name) of a contiguous tensor of the pipeline's device, else None."""
    if isinstance(value, np.ndarray):
        if kind != "cpu" or not value.flags.c_contiguous:
            return None
        return host_ptr(value), value.shape, get_dtype(value.dtype).name
    if isinstance(value, Tensor):
        if value.device != device or not value.is_contiguous:
            return None
        return value.ptr, tuple(value.shape), value.dtype.name
    if type(value).__module__.startswith("torch"):
        on_device = value.is_cuda and value.get_device() == index if kind == "cuda" else not value.is_cuda
        if not on_device or not value.is_contiguous():
            return None
        return value.data_ptr(), tuple(value.shape), str(value.dtype).removeprefix("torch.")
    return None


def host_output(shape: tuple[int, ...], dtype, strides: tuple[int, ...]) -> tuple[Tensor, int]:
    """A fresh host array for one output, wrapped without Tensor.from_numpy's checks: (tensor, address)."""
    array = np.empty(shape, dtype.numpy)
    ptr = host_ptr(array)
    tensor = Tensor._trusted(ptr, shape, dtype, "cpu", strides, array, True)
    tensor._array = array
    return tensor, ptr


def signature_text(key: tuple) -> str:
    return ", ".join(f"{n}={'x'.join(map(str, s)) or '()'}:{d}" for n, s, d in key)


class LoadedPlan:
    """One loaded plan: its handle, and per thread the ``DLTensor`` arrays its runs fill (shapes fixed)."""

    __slots__ = (
        "lib",
        "handle",
        "inputs",
        "outputs",
        "made",
        "n_in",
        "n_out",
        "text",
        "_keep",
        "_template",
        "_local",
        "_destroy",
        "ran",
        "static",
        "__weakref__",
    )

    def __init__(self, lib, handle, device, inputs, outputs, text: str) -> None:
        self.lib, self.handle, self.text = lib, handle, text
        self.inputs = inputs  # [(name, shape, dtype name)] in the plan's order
        self.outputs = outputs
        # What a run allocates for each output: (name, shape, DType, element strides).
        self.made = [(n, s, get_dtype(d), contiguous_strides(s)) for n, s, d in outputs]
        self.n_in, self.n_out = len(inputs), len(outputs)
        self.ran = False  # a run made its first execution context (the memory it holds is then told)
        self.static: dict | None = None  # static_outputs: {name: Tensor} every run writes and returns
        self._keep: list = []  # the shape arrays every thread's DLTensors point at (read-only for the core)
        self._template = (self._array(inputs, device), self._array(outputs, device))
        self._local = threading.local()
        # A pipeline dropped without close() still gives its plans back: once this object is unreachable,
        # no run can be using the handle. Not at interpreter exit (the driver may be gone by then).
        self._destroy = weakref.finalize(self, lib.pipeLinkDestroyPipeline, handle)
        self._destroy.atexit = False

    def _array(self, specs, device) -> Any:
        kind, index = device
        array = (PipeLinkTensor * max(1, len(specs)))()
        for t, (_, shape, dtype) in zip(array, specs, strict=False):
            dt = get_dtype(dtype)
            dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
            self._keep.append(dims)
            t.device.device_type, t.device.device_id = DEVICE_TYPE[kind], index
            t.ndim, t.shape = len(shape), dims
            t.dtype.code, t.dtype.bits, t.dtype.lanes = dt.dl_code, dt.bits, 1
        return array

    def arrays(self) -> tuple[Any, Any]:
        """This thread's (inputs, outputs) DLTensor arrays: copied from the template on its first run."""
        try:
            return self._local.arrays
        except AttributeError:
            ins, outs = self._template
            found = self._local.arrays = (type(ins).from_buffer_copy(ins), type(outs).from_buffer_copy(outs))
            return found

    def close(self) -> None:
        self._destroy()  # once: a finalizer runs at most one time
        self.handle = None


def native_report(
    text: str, total_time_s: float, graph_replay: bool = False, stages: Iterable[tuple[str, str, str]] = ()
) -> RunReport:
    """``last_report`` of a run the core made, built when read (the hot path stores only ``text``, the time
    and whether the core launched a graph it captured): ``stages`` are the plan's ``(stage id, operator,
    variant)`` (:meth:`NativeRunner.stages_of`), each reported ``"ok"`` (the core runs every stage or fails
    the run) with no time (it does not time stages)."""
    report = RunReport()
    report.executor, report.signature, report.total_time_s = "native", text, total_time_s
    report.graph_replay = graph_replay
    report.record_native(stages)
    return report
