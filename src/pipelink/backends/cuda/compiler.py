"""NVRTC compilation with an in-memory and an on-disk cubin cache.

Imported only by the CUDA backend; it compiles whatever source it is given and knows no operator. The
cache key is a SHA-256 of everything that changes the cubin (source, headers found in the include
folders, options, architecture, NVRTC version): a stale cubin is never loaded. cuda.core is imported
inside :class:`KernelCompiler`, so the key helpers work without it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...errors import ModuleLoadError
from ...ops.kernel import source_hash

__all__ = ["cache_dir", "cache_key", "header_digest", "KernelCompiler"]

_HEADER_SUFFIXES = (".h", ".cuh", ".hpp", ".inl")


def cache_dir() -> Path:
    """``$PIPELINK_CACHE_DIR/kernels``, else ``$XDG_CACHE_HOME/pipelink/kernels``, else
    ``~/.cache/pipelink/kernels`` (the tuner's cache root, one folder down)."""
    if os.environ.get("PIPELINK_CACHE_DIR"):
        root = Path(os.environ["PIPELINK_CACHE_DIR"])
    elif os.environ.get("XDG_CACHE_HOME"):
        root = Path(os.environ["XDG_CACHE_HOME"]) / "pipelink"
    else:
        root = Path.home() / ".cache" / "pipelink"
    return root / "kernels"


def header_digest(include_dirs: Sequence[str]) -> str:
    """A hash of the headers directly inside each include folder (name and content), in order."""
    h = hashlib.sha256()
    for d in include_dirs:
        h.update(str(d).encode() + b"\0")
        folder = Path(d)
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if path.suffix in _HEADER_SUFFIXES and path.is_file():
                h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def cache_key(
    source: str, options: Mapping[str, Any], arch: str, nvrtc_version: tuple[int, int], headers: str = ""
) -> str:
    """The cubin cache key: the one kernel-source hash (:func:`pipelink.ops.kernel.source_hash`) of the
    source and the header digest, with the options (order-independent), the architecture and the NVRTC
    version in place of macros."""
    return source_hash(
        source,
        {
            "options": json.dumps(dict(options), sort_keys=True, default=repr),
            "arch": arch,
            "nvrtc": f"{nvrtc_version[0]}.{nvrtc_version[1]}",
        },
        (headers,),
    )


class KernelCompiler:
    """Compiles CUDA C++ with NVRTC (cuda.core ``Program``) into cubins, caching them twice.

    Parameters
    ----------
    arch : str
        ``"sm_90"``: the device's architecture.
    directory : Path, optional
        The on-disk cache folder (default :func:`cache_dir`); unwritable folders only disable the disk cache.
    """

    def __init__(self, arch: str, directory: Path | None = None):
        from cuda.bindings import nvrtc

        self.arch = arch
        self.directory = Path(directory) if directory is not None else cache_dir()
        err, major, minor = nvrtc.nvrtcVersion()
        self.nvrtc_version = (int(major), int(minor))
        self._modules: dict[str, Any] = {}
        self._kernels: dict[tuple[str, str], Any] = {}
        self._key_of: dict[int, str] = {}  # id of a kernel handed out -> its module's key (cubin_of)
        self._headers: dict[tuple[str, ...], str] = {}
        self._lock = threading.Lock()
        self.hits = {"memory": 0, "disk": 0, "compiled": 0}

    def get(
        self,
        source: str,
        name: str,
        options: Mapping[str, Any] | None = None,
        include_dirs: Sequence[str] = (),
    ) -> Any:
        """The loaded kernel ``name`` of ``source`` (a cuda.core ``Kernel``).

        Parameters
        ----------
        source : str
            CUDA C++ text; kernels to fetch must be ``extern "C"``.
        name : str
            The kernel's symbol.
        options : mapping, optional
            ``cuda.core.ProgramOptions`` keyword arguments (``define_macro``, ``std``...); ``arch`` and
            ``include_path`` are set here.
        include_dirs : sequence of str
            Folders searched for ``#include``.

        Raises
        ------
        ModuleLoadError
            When NVRTC rejects the source (the message holds the compiler log) or the kernel is absent.
        """
        opts = {k: v for k, v in dict(options or {}).items() if k not in ("arch", "include_path")}
        dirs = tuple(str(d) for d in include_dirs) + tuple(
            str(d) for d in _as_list(dict(options or {}).get("include_path"))
        )
        headers = self._headers.get(dirs)
        if headers is None:
            headers = self._headers[dirs] = header_digest(dirs)
        key = cache_key(source, {**opts, "include_path": list(dirs)}, self.arch, self.nvrtc_version, headers)
        kernel = self._kernels.get((key, name))
        if kernel is not None:
            self.hits["memory"] += 1
            return kernel
        with self._lock:
            module = self._modules.get(key)
            if module is None:
                module = self._load_disk(key) or self._compile(key, source, opts, dirs, name)
                self._modules[key] = module
            try:
                kernel = module.get_kernel(name)
            except Exception as e:  # noqa: BLE001 - cuda.core raises its own error for a missing symbol
                raise ModuleLoadError(
                    f"kernel {name!r} not found in the compiled module ({e})", kernel=name
                ) from e
            self._kernels[(key, name)] = kernel
            self._key_of[id(kernel)] = key
        return kernel

    def cubin_of(self, kernel: Any) -> bytes:
        """The cubin bytes of the module holding ``kernel`` (one this compiler handed out and keeps)."""
        return bytes(self._modules[self._key_of[id(kernel)]].code)

    # -- internals ---------------------------------------------------------------------------------
    def _load_disk(self, key: str) -> Any:
        from cuda.core import ObjectCode

        path = self.directory / f"{key}.cubin"
        try:
            data = path.read_bytes()
        except OSError:
            return None
        self.hits["disk"] += 1
        return ObjectCode.from_cubin(data, name=key[:16])

    def _compile(self, key: str, source: str, opts: dict[str, Any], dirs: tuple[str, ...], name: str) -> Any:
        from cuda.core import Program, ProgramOptions

        log = io.StringIO()
        try:
            options = ProgramOptions(arch=self.arch, include_path=list(dirs) or None, **opts)
            module = Program(source, "c++", options).compile("cubin", logs=log)
        except Exception as e:  # noqa: BLE001 - NVRTCError (or a bad option): report the compiler log
            raise ModuleLoadError(
                f"NVRTC could not compile the kernel {name!r} for {self.arch}: {e}\n"
                f"{log.getvalue()}".rstrip(),
                kernel=name,
                arch=self.arch,
            ) from e
        self.hits["compiled"] += 1
        self._store_disk(key, bytes(module.code))
        return module

    def _store_disk(self, key: str, data: bytes) -> None:
        # Write to a temporary name, then rename: a concurrent reader never sees half a cubin.
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self.directory / f"{key}.cubin")
        except OSError:
            pass  # a read-only cache folder costs a recompilation next time, nothing else


def _as_list(value: Any) -> list:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)
