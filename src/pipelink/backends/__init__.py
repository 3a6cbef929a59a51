"""Backend selection: one shared backend instance per device.

Only the ``cuda`` package imports CUDA packages, inside its functions: importing this works without them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from .. import tensor
from ..distributed.env import launch_env
from ..errors import HardwareUnsupportedError, InvalidArgumentError
from ..hardware import HardwareInfo, check_requirements, requirements_from
from ..tensor import parse_device
from . import cuda
from .base import Allocation, Backend, Capabilities, MemoryStats
from .cpu import CPUBackend
from .cuda import CUDABackend

__all__ = [
    "Backend",
    "Capabilities",
    "Allocation",
    "MemoryStats",
    "CPUBackend",
    "get_backend",
    "resolve_device",
    "loaded_backends",
    "cuda_unavailable_reason",
    "validate_hardware",
]

log = logging.getLogger("pipelink")
_backends: dict[str, Backend] = {}
_lock = threading.Lock()


def cuda_unavailable_reason() -> str | None:
    """None when a CUDA device can be used, else why not (packages missing, no driver, no device)."""
    return cuda.unavailable_reason()


def resolve_device(device: str | None) -> str:
    """``"auto"`` -> this process's GPU when a GPU works, else ``"cpu"`` (with one info line).

    This process's GPU (also what ``"cuda"`` without an index means) is ``cuda:LOCAL_RANK`` in a world
    started by a launcher (torchrun, mpirun, srun: one process per GPU), ``cuda:0`` otherwise.
    """
    text = "auto" if device is None else str(device).lower()
    if text == "auto":
        reason = cuda_unavailable_reason()
        if reason is None:
            return f"cuda:{launch_env().local_rank}"
        log.info("pipelink: no usable GPU (%s); running on the CPU", reason)
        return "cpu"
    if text == "cuda":
        return f"cuda:{launch_env().local_rank}"
    kind, index = parse_device(device)
    return "cpu" if kind == "cpu" else f"cuda:{index}"


def get_backend(device: str | None = "cpu") -> Backend:
    """The shared backend of a device (created on first use).

    Raises
    ------
    HardwareUnsupportedError
        CUDA was asked for and cannot be used; the message says why.
    """
    name = resolve_device(device)
    with _lock:
        backend = _backends.get(name)
        if backend is not None:
            return backend
        if name == "cpu":
            backend = CPUBackend()
        else:
            reason = cuda_unavailable_reason()
            if reason is not None:
                raise HardwareUnsupportedError(
                    f"device {name!r} requested, but CUDA is unavailable: {reason}", device=name
                )
            try:
                backend = CUDABackend(int(name.split(":")[1]))
            except (ValueError, IndexError) as e:
                raise InvalidArgumentError(f"bad CUDA device {name!r}: {e}") from e
        _backends[name] = backend
        return backend


def loaded_backends() -> list[Backend]:
    with _lock:
        return list(_backends.values())


def validate_hardware(
    compute_capability: str | None = None, features: Sequence[str] = (), *, device: str = "auto"
) -> HardwareInfo:
    """Check a device against requirements (seed: ``pipeLinkValidateHardware``).

    Parameters
    ----------
    compute_capability : str, optional
        A specifier such as ``">=8.0"``.
    features : sequence of str
        Feature names that must be present (``"tensor_core"``, ``"bf16"``...).
    device : str
        ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.

    Returns
    -------
    HardwareInfo
        The device's description when every requirement holds.

    Raises
    ------
    HardwareUnsupportedError
        Naming the feature, what is required and what the device has.
    """
    info = get_backend(device).info
    check_requirements(info, requirements_from(compute_capability, features), what=f"device {info.name!r}")
    return info


tensor.set_backend_resolver(get_backend)
