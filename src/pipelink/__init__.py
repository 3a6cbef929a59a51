"""PipeLink: modular, reusable, composable GPU operators, linked from JSON pipelines.

``import pipelink`` works with no GPU and no CUDA packages; the CUDA backend loads on first use.
"""

from __future__ import annotations

import importlib
import numbers
from typing import Any

from . import distributed, memory
from .backends import get_backend, validate_hardware
from .descriptor import Attr, OperatorDescriptor, Port, Variant
from .dtypes import (
    DType,
    bfloat16,
    bool_,
    float16,
    float32,
    float64,
    get_dtype,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from .errors import (
    ConfigError,
    CUDAError,
    DTypeMismatchError,
    ErrorCode,
    HardwareUnsupportedError,
    IntegrityError,
    InvalidArgumentError,
    ModuleCrashError,
    ModuleLoadError,
    OutOfMemoryError,
    PipeLinkError,
    PipeLinkTimeoutError,
    Problem,
    ShapeMismatchError,
    TuningError,
    VersionMismatchError,
)
from .hardware import HardwareInfo
from .modules.native import load_library as _load_library
from .modules.plugins import load_entry_points
from .modules.python import operator
from .modules.registry import UnknownOperatorError
from .modules.registry import registry as _registry
from .onnx import from_onnx
from .ops import register_builtins
from .pipeline import Pipeline, load, validate
from .runtime.errorlog import configure_error_log
from .runtime.report import LoadReport, RunReport, StageReport
from .tensor import Tensor, asarray

__version__ = "0.1.0"

__all__ = [
    "load",
    "validate",
    "from_onnx",
    "Pipeline",
    "operator",
    "list_operators",
    "get_operator_info",
    "load_library",
    "validate_hardware",
    "memory",
    "distributed",
    "empty",
    "Tensor",
    "asarray",
    "configure_error_log",
    "OperatorDescriptor",
    "Port",
    "Attr",
    "Variant",
    "HardwareInfo",
    "RunReport",
    "StageReport",
    "LoadReport",
    "DType",
    "float32",
    "float16",
    "bfloat16",
    "float64",
    "int8",
    "int32",
    "int64",
    "uint8",
    "int16",
    "uint16",
    "uint32",
    "uint64",
    "bool_",
    "ErrorCode",
    "Problem",
    "PipeLinkError",
    "ConfigError",
    "InvalidArgumentError",
    "ModuleLoadError",
    "VersionMismatchError",
    "IntegrityError",
    "ShapeMismatchError",
    "DTypeMismatchError",
    "HardwareUnsupportedError",
    "ModuleCrashError",
    "PipeLinkTimeoutError",
    "OutOfMemoryError",
    "CUDAError",
    "TuningError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    # pl.torch imports PyTorch: only when it is used, so `import pipelink` never needs it.
    if name == "torch":
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'pipelink' has no attribute {name!r}")


def _builtins():
    register_builtins(_registry)
    load_entry_points()
    return _registry


def list_operators() -> list[str]:
    """Names of every registered operator (built-ins, Python operators, loaded native modules)."""
    return _builtins().names()


def get_operator_info(name: str, version: str | None = None) -> OperatorDescriptor:
    """The descriptor of an operator (the highest version satisfying ``version``).

    Raises
    ------
    InvalidArgumentError
        For an unknown name (with a suggestion).
    """
    try:
        return _builtins().get(name, version)
    except UnknownOperatorError as e:
        raise InvalidArgumentError(str(e), operator=name) from None


def load_library(path, sha256: str | None = None, *, probe: bool | None = None) -> Any:
    """Load a native operator module and register its operators (see ``docs/native-modules.md``).

    ``probe``: open it in a child process first (default: ``PIPELINK_PROBE_LIBRARIES``, on).
    """
    return _load_library(path, sha256=sha256, registry=_builtins(), probe=probe)


def empty(shape, dtype=float32, device: str = "cpu") -> Tensor:
    """An uninitialised tensor from the runtime's allocator on ``device``.

    ``device="cuda_host"`` (or ``"cuda_host:N"``): page-locked host memory mapped into GPU N's address
    space. The tensor is a ``cuda:N`` tensor kernels read and write in place over the bus (no upload);
    ``Tensor.host()`` is its NumPy view on the host (docs/interop.md, "Host-mapped memory").
    """
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, list | tuple) or not all(
        isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise InvalidArgumentError(
            f"empty(): the shape is a sequence of non-negative ints, got {shape!r}", shape=repr(shape)
        )
    if not isinstance(device, str):
        raise InvalidArgumentError(
            f"empty(): the device is a string such as 'cpu' or 'cuda:0', got {device!r}"
        )
    shape, dtype = tuple(int(s) for s in shape), get_dtype(dtype)
    if device == "cuda_host" or device.startswith("cuda_host:"):
        return get_backend("cuda" + device[len("cuda_host") :]).empty_mapped(shape, dtype)
    backend = get_backend(device)
    return backend.wrap(backend.empty(shape, dtype))
