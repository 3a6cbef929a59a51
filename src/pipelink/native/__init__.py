"""The native core's C sources (libpipelink_runtime, the seed's C API) and where its library is installed.

Built at ``pip install`` by ``setup.py`` (see ``build.py``); this module only finds the result.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
from pathlib import Path

from ..errors import ModuleLoadError

__all__ = ["library_path", "lib_dir", "cublaslt_path", "open_runtime"]

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
