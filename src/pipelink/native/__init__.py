"""The native core's C sources (libpipelink_runtime, the seed's C API) and where its library is installed.

Built at ``pip install`` by ``setup.py`` (see ``build.py``); this module only finds the result.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
from pathlib import Path

from ..errors import ModuleLoadError

__all__ = [
    "library_path",
    "lib_dir",
    "cublaslt_path",
    "open_runtime",
    "ArenaStats",
    "arena_stats",
    "held_bytes",
]

CUBLASLT = "libcublasLt.so.13"


def library_path() -> Path:
    """The installed ``libpipelink_runtime.so``.

    Raises
    ------
    ModuleLoadError
        It was not built: no C compiler at install time.
    """
    from .build import LIBRARY_NAME, default_output  # noqa: PLC0415 (python -m pipelink.native.build runs it)

    path = default_output()
    if not path.is_file():
        raise ModuleLoadError(
            f"{LIBRARY_NAME} is not built ({path} is missing): no C compiler was found when PipeLink was "
            "installed. Install gcc or clang and reinstall PipeLink, or build it in place with "
            "`python -m pipelink.native.build`",
            library=str(path),
        )
    return path


def lib_dir() -> Path:
    """The folder holding ``libpipelink_runtime.so`` (``pipelink lib-dir``, for ``-L`` and rpath)."""
    return library_path().parent


def cublaslt_path() -> Path | None:
    """``libcublasLt.so.13`` from the installed NVIDIA wheel (``nvidia/cu13/lib`` or ``nvidia/cublas/lib``),
    or None when no wheel has it (the core then asks the dynamic loader)."""
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        for sub in ("cu13/lib", "cublas/lib"):
            path = Path(root) / sub / CUBLASLT
            if path.is_file():
                return path
    return None


def open_runtime() -> ctypes.CDLL:
    """Load ``libpipelink_runtime.so`` in this process, telling it where cuBLASLt is.

    The core opens cuBLASLt at run time from ``$PIPELINK_CUBLASLT``; unless the caller set it, it is set
    here to the wheel's copy (:func:`cublaslt_path`).

    Raises
    ------
    ModuleLoadError
        The library is not built.
    """
    found = cublaslt_path()
    if found is not None and not os.environ.get("PIPELINK_CUBLASLT"):
        os.environ["PIPELINK_CUBLASLT"] = str(found)
    return ctypes.CDLL(str(library_path()))


class ArenaStats(ctypes.Structure):
    """``PipeLinkArenaStats`` of ``pipelink/runtime.h`` (its ``size`` field versions it)."""

    _fields_ = [
        ("size", ctypes.c_uint32),
        ("n_contexts", ctypes.c_int32),
        ("arena_bytes", ctypes.c_uint64),
        ("workspace_bytes", ctypes.c_uint64),
        ("constant_bytes", ctypes.c_uint64),
        ("peak_bytes", ctypes.c_uint64),
    ]


_stats_function = None


def _loaded_stats_function():
    """``pipeLinkGetArenaStats`` of the runtime library once it is loaded in this process, else None."""
    global _stats_function
    if _stats_function is None:
        try:
            # RTLD_NOLOAD: a handle only if the library is already loaded (the same file: the same counters).
            lib = ctypes.CDLL(str(library_path()), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            fn = lib.pipeLinkGetArenaStats
        except (OSError, ModuleLoadError, AttributeError):  # not loaded (or a build from before the function)
            return None
        fn.argtypes = [ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ArenaStats)]
        fn.restype = ctypes.c_int
        _stats_function = fn
    return _stats_function


_DEVICE_TYPES = {"cpu": 1, "cuda": 2}  # DLPack device types of the plans the core runs
_ARENA_FIELDS = ("n_contexts", "arena_bytes", "workspace_bytes", "constant_bytes", "peak_bytes")


def held_bytes(stats: dict[str, int]) -> int:
    """What an :func:`arena_stats` answer says the core holds now: arenas, workspaces and constants."""
    return stats["arena_bytes"] + stats["workspace_bytes"] + stats["constant_bytes"]


def arena_stats(kind: str, index: int = 0) -> dict[str, int]:
    """What the core's loaded pipelines hold on a device (``pipeLinkGetArenaStats``): ``n_contexts``,
    ``arena_bytes``, ``workspace_bytes``, ``constant_bytes`` and ``peak_bytes`` (of their sum).

    All zeros when the runtime library is not loaded in this process (no plan was ever loaded, so nothing is
    held): this never loads it, and never fails for a device the core does not run plans on.
    """
    found = dict.fromkeys(_ARENA_FIELDS, 0)
    device_type = _DEVICE_TYPES.get(kind)
    if device_type is None or (kind == "cpu" and index != 0):
        return found
    fn = _loaded_stats_function()
    if fn is None:
        return found
    stats = ArenaStats(size=ctypes.sizeof(ArenaStats))
    if fn(device_type, index, ctypes.byref(stats)) == 0:
        found.update({name: int(getattr(stats, name)) for name in _ARENA_FIELDS})
    return found
