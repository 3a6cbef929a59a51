"""The CUDA backend's own kernels (``helpers.cu``): the strided copy behind ``Backend.copy`` and the
NaN/Inf count behind ``check_finite``.

Uses only the public backend contract (``compile_kernel``, ``launch``, ``memcpy``, ``empty``...); knows
no operator. Compiled with the operators' one CUDA header (``ops/common.cuh``: stride decoding, index type)
on the include path.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from ...ops.kernel import include_dir
from ...tensor import Tensor

__all__ = ["HELPERS_CU", "StridedCopy", "NonFiniteCounter", "collapse"]

HELPERS_CU = Path(__file__).with_name("helpers.cu")
_UINT = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
_NONFINITE = {
    "float32": "pl_nonfinite_f32",
    "float16": "pl_nonfinite_f16",
    "bfloat16": "pl_nonfinite_bf16",
    "float64": "pl_nonfinite_f64",
}
_source: str | None = None


def helper_source() -> str:
    """The text of ``helpers.cu`` (read once)."""
    global _source
    if _source is None:
        _source = HELPERS_CU.read_text()
    return _source


def flat_config(n: int, sm_count: int) -> Any:
    """A grid-stride launch over ``n`` elements: 256 threads, at most 8 blocks per SM."""
    from cuda.core import LaunchConfig

    blocks = max(1, min(-(-n // 256), sm_count * 8))
    return LaunchConfig(grid=blocks, block=256)


def collapse(dims: list[int], src: list[int], dst: list[int]) -> tuple[list[int], list[int], list[int]]:
    """Drop size-1 dims and merge neighbours both operands walk contiguously."""
    keep = [i for i, d in enumerate(dims) if d != 1] or [0]
    d = [dims[i] for i in keep]
    s = [src[i] if dims[i] != 1 else 0 for i in keep]
    t = [dst[i] if dims[i] != 1 else 0 for i in keep]
    i = len(d) - 2
    while i >= 0:
        if s[i] == s[i + 1] * d[i + 1] and t[i] == t[i + 1] * d[i + 1]:
            d[i] *= d[i + 1]
            s[i], t[i] = s[i + 1], t[i + 1]
            del d[i + 1], s[i + 1], t[i + 1]
        i -= 1
    return d, s, t


class StridedCopy:
    """``dst[...] = src`` for tensors of any strides (up to 8 dimensions after merging)."""

    def __init__(self, backend: Any):
        self._backend = backend

    def __call__(self, dst: Tensor, src: Tensor, stream: Any) -> None:
        dims, s_str, d_str = collapse(list(src.shape), list(src.strides), list(dst.strides))
        if len(dims) > 8:
            raise InvalidArgumentError(
                f"a strided copy supports up to 8 dimensions after merging (got {dims})"
            )
        pad = 8 - len(dims)
        be = self._backend
        kernel = be.compile_kernel(
            helper_source(),
            "pl_strided_copy",
            {"define_macro": [("PL_ELEM", _UINT[src.dtype.itemsize])]},
            (include_dir(),),
        )
        n = src.size
        args = [np.uint64(src.ptr), np.uint64(dst.ptr), np.int64(n)]
        args += [np.int64(v) for v in [1] * pad + dims]
        args += [np.int64(v) for v in [0] * pad + s_str]
        args += [np.int64(v) for v in [0] * pad + d_str]
        be.launch(stream, flat_config(n, int(be.info.features["sm_count"])), kernel, *args)


class NonFiniteCounter:
    """Counts NaN/Inf elements of a floating tensor on the device into one reused counter."""

    def __init__(self, backend: Any):
        self._backend = backend
        self._lock = threading.Lock()
        self._counter: Tensor | None = None
        self._host: np.ndarray | None = None

    def __call__(self, arg: Tensor, stream: Any, memset: Any) -> int:
        """The count (synchronises ``stream``); ``memset(ptr, nbytes, stream)`` zeroes device memory."""
        name = _NONFINITE.get(arg.dtype.name)
        if name is None or arg.size == 0:
            return 0
        be = self._backend
        if not arg.is_contiguous:
            tmp = be.empty(arg.shape, arg.dtype)
            be.copy(tmp, arg, stream=stream)
            arg = tmp
        kernel = be.compile_kernel(
            helper_source(), name, {"define_macro": [("PL_ELEM", "unsigned int")]}, (include_dir(),)
        )
        config = flat_config(arg.size, int(be.info.features["sm_count"]))
        with self._lock:
            if self._counter is None:
                self._counter = be.empty((1,), "int64")
                self._host = be.pinned_empty((1,), "int64")
            counter, host = self._counter, self._host
            memset(counter.ptr, 8, stream)
            be.launch(stream, config, kernel, np.uint64(arg.ptr), np.int64(arg.size), np.uint64(counter.ptr))
            be.memcpy(host.ctypes.data, counter.ptr, 8, stream=stream)
            be.synchronize(stream)
            return int(host[0])
