"""Stable error codes and the exception hierarchy (docs/architecture.md, "Checked mode, isolation,
errors").

Every failure a user can cause is one of these. Nothing else lives here: no imports from the rest of the
package, so the native header generator, worker processes and the CLI can all depend on it.
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = [
    "ErrorCode",
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
    "Problem",
    "error_for_code",
]


class ErrorCode(enum.IntEnum):
    """Status codes shared by Python and the C ABI (``pipelink.h`` uses the same numbers)."""

    PIPELINK_SUCCESS = 0
    PIPELINK_ERR_INVALID_CONFIG = 1
    PIPELINK_ERR_INVALID_ARGUMENT = 2
    PIPELINK_ERR_MODULE_LOAD_FAILED = 3
    PIPELINK_ERR_VERSION_MISMATCH = 4
    PIPELINK_ERR_INTEGRITY = 5
    PIPELINK_ERR_SHAPE_MISMATCH = 6
    PIPELINK_ERR_DTYPE_MISMATCH = 7
    PIPELINK_ERR_HARDWARE_UNSUPPORTED = 8
    PIPELINK_ERR_MODULE_CRASH = 9
    PIPELINK_ERR_TIMEOUT = 10
    PIPELINK_ERR_OUT_OF_MEMORY = 11
    PIPELINK_ERR_CUDA = 12
    PIPELINK_ERR_TUNING_FAILED = 13

    def __str__(self) -> str:
        return self.name


class Problem:
    """One problem found while validating a config.

    Parameters
    ----------
    code : ErrorCode
        The stable code of the problem (``PIPELINK_ERR_INVALID_CONFIG`` for schema and reference errors,
        ``PIPELINK_ERR_SHAPE_MISMATCH`` for a shape found wrong at load, ...).
    path : str
        RFC 6901 JSON Pointer to the offending place in the config (``""`` is the whole document).
    message : str
        What is wrong and, where possible, how to fix it.
    """

    __slots__ = ("code", "path", "message")

    def __init__(self, code: ErrorCode, path: str, message: str):
        self.code = ErrorCode(code)
        self.path = path
        self.message = message

    def __repr__(self) -> str:
        return f"Problem({self.code.name}, {self.path!r}, {self.message!r})"

    def __str__(self) -> str:
        where = self.path or "/"
        return f"{where}: {self.message}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Problem):
            return NotImplemented
        return (self.code, self.path, self.message) == (other.code, other.path, other.message)

    def __hash__(self) -> int:
        return hash((self.code, self.path, self.message))

    def __reduce__(self):
        return (Problem, (int(self.code), self.path, self.message))

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code.name, "path": self.path, "message": self.message}


class PipeLinkError(Exception):
    """Base of every PipeLink error.

    ``.code`` is the stable :class:`ErrorCode`; ``.context`` holds the named context fields (stage,
    port, module, device UUID, CUDA error name, ...), also reachable as attributes. Instances pickle,
    so they cross process boundaries unchanged.
    """

    code: ErrorCode = ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT

    def __init__(self, message: str, **context: Any):
        super().__init__(message)
        self.message = message
        self.context = {k: v for k, v in context.items() if v is not None}

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: expose context fields as attributes, None if absent.
        if name.startswith("__") or name in ("message", "context"):
            raise AttributeError(name)
        return self.__dict__.get("context", {}).get(name)

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.name}: {self.message!r})"

    def __reduce__(self):
        return (_rebuild_error, (type(self), self.message, self.context))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able description (used by the error log and worker processes)."""
        out: dict[str, Any] = {"code": self.code.name, "message": self.message}
        for key, value in self.context.items():
            out[key] = value if isinstance(value, str | int | float | bool) else repr(value)
        return out


def _rebuild_error(cls: type[PipeLinkError], message: str, context: dict[str, Any]) -> PipeLinkError:
    return cls(message, **context)


class ConfigError(PipeLinkError, ValueError):
    """The config is invalid; ``.errors`` lists every :class:`Problem` found."""

    code = ErrorCode.PIPELINK_ERR_INVALID_CONFIG

    def __init__(self, message: str, errors: list[Problem] | None = None, **context: Any):
        errors = list(errors or [])
        if errors and message.endswith(":"):
            message = message + "\n" + "\n".join(f"  {p}" for p in errors)
        super().__init__(message, errors=errors, **context)

    @property
    def errors(self) -> list[Problem]:
        return self.context.get("errors", [])


class InvalidArgumentError(PipeLinkError, ValueError):
    code = ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT


class ModuleLoadError(PipeLinkError, ImportError):
    code = ErrorCode.PIPELINK_ERR_MODULE_LOAD_FAILED


class VersionMismatchError(PipeLinkError, ValueError):
    code = ErrorCode.PIPELINK_ERR_VERSION_MISMATCH


class IntegrityError(PipeLinkError, ValueError):
    code = ErrorCode.PIPELINK_ERR_INTEGRITY


class ShapeMismatchError(PipeLinkError, ValueError):
    """A dimension bound to two different values, or shapes that do not broadcast."""

    code = ErrorCode.PIPELINK_ERR_SHAPE_MISMATCH


class DTypeMismatchError(PipeLinkError, TypeError):
    code = ErrorCode.PIPELINK_ERR_DTYPE_MISMATCH


class HardwareUnsupportedError(PipeLinkError, RuntimeError):
    code = ErrorCode.PIPELINK_ERR_HARDWARE_UNSUPPORTED


class ModuleCrashError(PipeLinkError, RuntimeError):
    """A stage failed while running: a Python exception, a non-zero status, NaN output, a dead worker."""

    code = ErrorCode.PIPELINK_ERR_MODULE_CRASH


class PipeLinkTimeoutError(PipeLinkError, TimeoutError):
    code = ErrorCode.PIPELINK_ERR_TIMEOUT


class OutOfMemoryError(PipeLinkError, MemoryError):
    code = ErrorCode.PIPELINK_ERR_OUT_OF_MEMORY


class CUDAError(PipeLinkError, RuntimeError):
    code = ErrorCode.PIPELINK_ERR_CUDA


class TuningError(PipeLinkError, RuntimeError):
    code = ErrorCode.PIPELINK_ERR_TUNING_FAILED


_BY_CODE: dict[ErrorCode, type[PipeLinkError]] = {
    cls.code: cls
    for cls in (
        ConfigError,
        InvalidArgumentError,
        ModuleLoadError,
        VersionMismatchError,
        IntegrityError,
        ShapeMismatchError,
        DTypeMismatchError,
        HardwareUnsupportedError,
        ModuleCrashError,
        PipeLinkTimeoutError,
        OutOfMemoryError,
        CUDAError,
        TuningError,
    )
}


def error_for_code(code: int | ErrorCode) -> type[PipeLinkError]:
    """The exception class for a status code (a native module's return value, a worker's report).

    Unknown non-zero codes map to :class:`ModuleCrashError`.
    """
    try:
        return _BY_CODE[ErrorCode(code)]
    except (ValueError, KeyError):
        return ModuleCrashError
