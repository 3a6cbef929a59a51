"""The native core's C sources (libpipelink_runtime, the seed's C API) and where its library is installed.

Built at ``pip install`` by ``setup.py`` (see ``build.py``); this module only finds the result.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ModuleLoadError

__all__ = ["library_path", "lib_dir"]


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
