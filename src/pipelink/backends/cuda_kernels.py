"""NVRTC compilation with an in-memory and an on-disk cubin cache, and the CUDA backend's own helper
kernels (strided copy, non-finite count, casts the operator catalogue does not cover).

Imported only by the CUDA backend. The cache key is a SHA-256 of everything that changes the cubin
(source, headers found in the include folders, options, architecture, NVRTC version): a stale cubin is
never loaded. cuda.core is imported inside :class:`KernelCompiler`, so the key helpers work without it.
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

from ..errors import ModuleLoadError

__all__ = ["cache_dir", "cache_key", "header_digest", "KernelCompiler", "HELPER_SOURCE", "CAST_SOURCE"]

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


def cache_key(source: str, options: Mapping[str, Any], arch: str, nvrtc_version: tuple[int, int],
              headers: str = "") -> str:
    """The cubin cache key: SHA-256 over the source, the options (order-independent), the architecture,
    the NVRTC version and the header digest."""
    h = hashlib.sha256()
    for part in (source, json.dumps(dict(options), sort_keys=True, default=repr), arch,
                 f"{nvrtc_version[0]}.{nvrtc_version[1]}", headers):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


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
        self._headers: dict[tuple[str, ...], str] = {}
        self._lock = threading.Lock()
        self.hits = {"memory": 0, "disk": 0, "compiled": 0}

    def get(self, source: str, name: str, options: Mapping[str, Any] | None = None,
            include_dirs: Sequence[str] = ()) -> Any:
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
            str(d) for d in _as_list(dict(options or {}).get("include_path")))
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
                raise ModuleLoadError(f"kernel {name!r} not found in the compiled module ({e})",
                                      kernel=name) from e
            self._kernels[(key, name)] = kernel
        return kernel

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
                kernel=name, arch=self.arch) from e
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


# Helper kernels of the backend. PL_ELEM: an unsigned type of the element size (1, 2, 4 or 8 bytes).
HELPER_SOURCE = r"""
#ifndef PL_ELEM
#define PL_ELEM unsigned int
#endif

// dst[dst_offset(i)] = src[src_offset(i)] for every logical index i, row-major over d0..d7 (unused
// trailing dims are 1); s* / t* are the source / destination strides in elements (any sign, or zero).
extern "C" __global__ void pl_strided_copy(
    const PL_ELEM* __restrict__ src, PL_ELEM* __restrict__ dst, long long n,
    long long d0, long long d1, long long d2, long long d3,
    long long d4, long long d5, long long d6, long long d7,
    long long s0, long long s1, long long s2, long long s3,
    long long s4, long long s5, long long s6, long long s7,
    long long t0, long long t1, long long t2, long long t3,
    long long t4, long long t5, long long t6, long long t7) {
    const long long dims[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
    const long long ss[8] = {s0, s1, s2, s3, s4, s5, s6, s7};
    const long long ts[8] = {t0, t1, t2, t3, t4, t5, t6, t7};
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        long long rest = i, s = 0, d = 0;
#pragma unroll
        for (int k = 7; k >= 0; --k) {
            const long long c = rest % dims[k];
            rest /= dims[k];
            s += c * ss[k];
            d += c * ts[k];
        }
        dst[d] = src[s];
    }
}

// Count elements whose exponent bits are all ones (NaN or Inf) into *out.
template <class U>
__device__ __forceinline__ void pl_count(const U* __restrict__ x, long long n, U mask,
                                         unsigned long long* out) {
    unsigned long long c = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        c += (x[i] & mask) == mask;
    }
    for (int off = 16; off > 0; off >>= 1) c += __shfl_down_sync(0xffffffffu, c, off);
    if ((threadIdx.x & 31) == 0 && c) atomicAdd(out, c);
}
extern "C" __global__ void pl_nonfinite_f32(const unsigned int* x, long long n, unsigned long long* out) {
    pl_count<unsigned int>(x, n, 0x7f800000u, out);
}
extern "C" __global__ void pl_nonfinite_f16(const unsigned short* x, long long n, unsigned long long* out) {
    pl_count<unsigned short>(x, n, (unsigned short)0x7c00u, out);
}
extern "C" __global__ void pl_nonfinite_bf16(const unsigned short* x, long long n, unsigned long long* out) {
    pl_count<unsigned short>(x, n, (unsigned short)0x7f80u, out);
}
extern "C" __global__ void pl_nonfinite_f64(const unsigned long long* x, long long n,
                                            unsigned long long* out) {
    pl_count<unsigned long long>(x, n, 0x7ff0000000000000ull, out);
}
"""

# Casts between any two dtypes with C semantics (as the CPU reference). PL_TIN / PL_TOUT are CUDA type
# names; PL_DIRECT=1 when neither is a 16-bit float (a plain C cast), else the value goes through double
# (exact for every 16-bit float, and rounded once, to odd, before the final narrowing).
CAST_SOURCE = r"""
#include "common.cuh"
#ifndef PL_DIRECT
#define PL_DIRECT 1
#endif
template <class T> __device__ __forceinline__ double pl_cast_in(T v) { return (double)v; }
__device__ __forceinline__ double pl_cast_in(__half v) { return (double)pl_to_acc(v); }
__device__ __forceinline__ double pl_cast_in(__nv_bfloat16 v) { return (double)pl_to_acc(v); }
template <class T> struct pl_cast_out { static __device__ __forceinline__ T from(double v) { return (T)v; } };
template <> struct pl_cast_out<bool> {
    static __device__ __forceinline__ bool from(double v) { return v != 0.0; } };
template <> struct pl_cast_out<__half> {
    static __device__ __forceinline__ __half from(double v) { return pl_from<__half>(v); } };
template <> struct pl_cast_out<__nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat16 from(double v) { return pl_from<__nv_bfloat16>(v); } };

extern "C" __global__ void pl_cast_any(const PL_TIN* __restrict__ x, PL_TOUT* __restrict__ y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
#if PL_DIRECT
        y[i] = (PL_TOUT)x[i];
#else
        y[i] = pl_cast_out<PL_TOUT>::from(pl_cast_in(x[i]));
#endif
    }
}
"""
