"""Device facts and CUDA error handling for the CUDA backend: feature derivation from a compute
capability, why CUDA is unavailable, and driver results turned into :class:`~pipelink.errors.CUDAError`.

Imported only by ``backends/cuda.py``. CUDA packages are imported inside functions, so the pure helpers
(``derive_features``, ``version_text``) work on a machine without them.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from ...errors import CUDAError

__all__ = [
    "ContextHealth",
    "STICKY_ERRORS",
    "derive_features",
    "version_text",
    "unavailable_reason",
    "error_name",
    "check_driver",
    "wrap_cuda_exception",
    "is_cuda_exception",
]

# Errors after which the context is unusable: the process must be restarted (cuda.core's error table).
STICKY_ERRORS = frozenset({700, 714, 715, 716, 717, 718, 719})
_NAME = re.compile(r"\b(CUDA_ERROR_[A-Z0-9_]+|NVRTC_ERROR_[A-Z0-9_]+)\b")


def derive_features(
    compute_capability: tuple[int, int], sm_count: int, memory_bytes: int
) -> dict[str, float]:
    """The feature table of a GPU (``HardwareInfo.features``) from its compute capability.

    Parameters
    ----------
    compute_capability : tuple of int
        ``(major, minor)``.
    sm_count : int
        Number of streaming multiprocessors.
    memory_bytes : int
        Device memory.

    Returns
    -------
    dict
        ``tensor_core`` (4 per SM from 7.0 on, else 0), ``fp16`` (5.3+), ``bf16`` and ``tf32`` (8.0+),
        ``fp8`` (8.9+), ``fp32`` and ``fp64`` (1), ``atomic_double`` (6.0+), ``sm_count``, ``memory_bytes``.
    """
    cc = tuple(int(v) for v in compute_capability)
    return {
        "tensor_core": 4 * int(sm_count) if cc >= (7, 0) else 0,
        "fp16": int(cc >= (5, 3)),
        "bf16": int(cc >= (8, 0)),
        "tf32": int(cc >= (8, 0)),
        "fp8": int(cc >= (8, 9)),
        "fp32": 1,
        "fp64": 1,
        "atomic_double": int(cc >= (6, 0)),
        "sm_count": int(sm_count),
        "memory_bytes": int(memory_bytes),
    }


def version_text(version: int) -> str:
    """CUDA's integer versions as text: ``12080`` -> ``"12.8"``, ``13000`` -> ``"13.0"``."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def unavailable_reason() -> str | None:
    """None when a CUDA device can be used, else why not: packages missing, no driver, or no device."""
    try:
        importlib.import_module("cuda.core")
        driver = importlib.import_module("cuda.bindings.driver")
    except ImportError as e:
        missing = getattr(e, "name", None) or str(e)
        return (
            f"the CUDA packages are not installed ({missing}); "
            "install them with: pip install 'pipelink[cuda]'"
        )
    try:
        (err,) = driver.cuInit(0)
    except Exception as e:  # noqa: BLE001 - the loader raises its own types when libcuda is absent
        return f"no CUDA driver: libcuda could not be loaded ({type(e).__name__}: {e})"
    code = int(err)
    if code == int(driver.CUresult.CUDA_ERROR_NO_DEVICE):
        return "no CUDA device: the driver is installed but sees no GPU (check CUDA_VISIBLE_DEVICES)"
    if code != 0:
        return f"no CUDA driver: cuInit failed with {error_name(code)} ({code})"
    err, count = driver.cuDeviceGetCount()
    if int(err) != 0 or count == 0:
        return "no CUDA device: the driver reports 0 GPUs"
    return None


def device_count() -> int:
    """How many GPUs the driver sees (0 when CUDA cannot be used: :func:`unavailable_reason` says why)."""
    if unavailable_reason() is not None:
        return 0
    driver = importlib.import_module("cuda.bindings.driver")
    return int(check_driver(driver.cuDeviceGetCount(), "cuDeviceGetCount"))


def error_name(code: int) -> str:
    """``700`` -> ``"CUDA_ERROR_ILLEGAL_ADDRESS"`` (``"CUDA_ERROR_<code>"`` when the code is unknown)."""
    try:
        driver = importlib.import_module("cuda.bindings.driver")
        return driver.CUresult(int(code)).name
    except (ImportError, ValueError):
        return f"CUDA_ERROR_{int(code)}"


def check_driver(result: Any, what: str, **context: Any) -> Any:
    """Unpack a ``cuda.bindings.driver`` result tuple ``(CUresult, *values)``; raise on an error.

    Returns
    -------
    The single value, a tuple of values, or None.

    Raises
    ------
    CUDAError
        Naming the call, the CUDA error name and code.
    """
    if isinstance(result, tuple):
        err, values = result[0], result[1:]
    else:
        err, values = result, ()
    code = int(err)
    if code != 0:
        name = error_name(code)
        raise CUDAError(f"{what} failed: {name} ({code})", cuda_error=name, cuda_code=code, **context)
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def is_cuda_exception(exc: BaseException) -> bool:
    """True for the exceptions cuda.core raises for driver and NVRTC errors."""
    return type(exc).__name__ in ("CUDAError", "NVRTCError") and not isinstance(exc, CUDAError)


def wrap_cuda_exception(exc: BaseException, what: str, **context: Any) -> CUDAError:
    """A PipeLink :class:`CUDAError` for a cuda.core exception, with the CUDA error name and code parsed
    from its message (``"CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access ..."``)."""
    text = str(exc)
    match = _NAME.search(text)
    name = match.group(1) if match else type(exc).__name__
    code = None
    if match and name.startswith("CUDA_ERROR_"):
        try:
            driver = importlib.import_module("cuda.bindings.driver")
            code = int(getattr(driver.CUresult, name))
        except (ImportError, AttributeError):
            code = None
    return CUDAError(f"{what} failed: {text}", cuda_error=name, cuda_code=code, **context)


class ContextHealth:
    """Whether a device's CUDA context is still usable, and the :class:`CUDAError` of each failure.

    After a sticky error (700, 714-719) the context is corrupted for good: :meth:`check` then refuses all
    further work, because the process must restart.
    """

    def __init__(self, device: str, uuid: str | None):
        self.device = device
        self.uuid = uuid
        self.corrupted: str | None = None  # the CUDA error name that corrupted the context
        self.corrupted_code: int | None = None

    def check(self) -> None:
        """Raise when the context is corrupted."""
        if self.corrupted is not None:
            raise CUDAError(
                f"{self.device}: the CUDA context is corrupted by {self.corrupted}; the process must "
                "restart: use isolation 'process' for stages that may crash",
                cuda_error=self.corrupted,
                cuda_code=self.corrupted_code,
                device=self.device,
                device_uuid=self.uuid,
            )

    def error(self, code: int, what: str, stage: str | None = None) -> CUDAError:
        """The error of a driver call that returned ``code`` (a sticky one marks the context)."""
        name = error_name(code)
        where = f"stage {stage!r}: " if stage else ""
        message = f"{where}{what} reported {name} ({code}) on {self.device}"
        if code in STICKY_ERRORS:
            self.corrupted, self.corrupted_code = name, code
            message += (
                f"; the CUDA context is corrupted by {name}; the process must restart: use isolation "
                "'process' for stages that may crash"
            )
        return CUDAError(
            message, cuda_error=name, cuda_code=code, stage=stage, device=self.device, device_uuid=self.uuid
        )

    def wrap(self, exc: BaseException, what: str, stage: str | None = None) -> CUDAError:
        """The error for an exception of cuda.core (or any exception raised around a CUDA call)."""
        if isinstance(exc, CUDAError):
            return exc
        if not is_cuda_exception(exc):
            return CUDAError(
                f"{what} failed: {type(exc).__name__}: {exc}", stage=stage, device_uuid=self.uuid
            )
        err = wrap_cuda_exception(exc, what, stage=stage, device=self.device, device_uuid=self.uuid)
        code = err.context.get("cuda_code")
        return self.error(int(code), what, stage) if code is not None else err
