"""The CUDA backend's own kernels (``helpers.cu``): the strided copy behind ``Backend.copy`` and the
NaN/Inf count behind ``check_finite``; and :func:`plan_copy`, which picks how ``Backend.copy`` moves a
view (one memcpy, or the strided kernel with its unit width and index size).

Uses only the public backend contract (``compile_kernel``, ``launch``, ``memcpy``, ``empty``...); knows
no operator. Compiled with the operators' one CUDA header (``ops/common.cuh``: stride decoding, index type)
on the include path.
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from ...ops.kernel import include_dir
from ...tensor import Tensor

__all__ = ["HELPERS_CU", "CopyPlan", "StridedCopy", "NonFiniteCounter", "collapse", "plan_copy"]

HELPERS_CU = Path(__file__).with_name("helpers.cu")
# The kernel's unit types: element sizes, and 16 bytes for merged aligned runs.
_UINT = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long", 16: "uint4"}
MAX_COPY_DIMS = 8  # pl_strided_copy's dims
COPY_UNROLL = 4  # PL_COPY_UNROLL of helpers.cu: units each thread moves per grid step
_INT32_MAX = (1 << 31) - 1
_BLOCK, _BLOCKS_PER_SM = 256, 8
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

    blocks = max(1, min(-(-n // _BLOCK), sm_count * _BLOCKS_PER_SM))
    return LaunchConfig(grid=blocks, block=_BLOCK)


def max_threads(sm_count: int) -> int:
    """The most threads a :func:`flat_config` grid has on a device of ``sm_count`` SMs."""
    return sm_count * _BLOCKS_PER_SM * _BLOCK


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


@dataclass(frozen=True)
class CopyPlan:
    """How ``Backend.copy`` moves one view: ``kind`` is ``"memcpy"`` (``dims[0]`` units in one run) or
    ``"kernel"`` (pl_strided_copy over ``dims``). ``src`` / ``dst`` are the
    byte addresses of the first unit walked, ``unit`` the bytes of one unit (the element size, or a wider
    vector of whole elements for the kernel), strides count units; ``index32``: the kernel may index
    with 32 bits."""

    kind: str
    src: int
    dst: int
    unit: int
    dims: tuple[int, ...]
    src_strides: tuple[int, ...]
    dst_strides: tuple[int, ...]
    index32: bool = False

    @property
    def units(self) -> int:
        """Units moved."""
        return math.prod(self.dims)


def _flip_backwards(
    dims: list[int], src: list[int], dst: list[int], itemsize: int, src_ptr: int, dst_ptr: int
) -> tuple[list[int], list[int], int, int]:
    """Walk every dim the destination walks backwards (or the source, where the destination stays put)
    in the other direction: a copy's pairs do not depend on the order, and forward walks merge and
    vectorise."""
    s, t = list(src), list(dst)
    for k, d in enumerate(dims):
        if d > 1 and (t[k] < 0 or (t[k] == 0 and s[k] < 0)):
            src_ptr += (d - 1) * s[k] * itemsize
            dst_ptr += (d - 1) * t[k] * itemsize
            s[k], t[k] = -s[k], -t[k]
    return s, t, src_ptr, dst_ptr


def _widest_unit(dims: list[int], src: list[int], dst: list[int], itemsize: int, src_ptr: int, dst_ptr: int):
    """The widest vector (up to 16 bytes) of whole elements the kernel can move as one unit: the inner
    dim runs contiguously in both, its length, every other stride and both addresses divide evenly."""
    if src[-1] != 1 or dst[-1] != 1:
        return itemsize
    for unit in (16, 8, 4, 2):
        k = unit // itemsize
        if (
            unit > itemsize
            and dims[-1] % k == 0
            and src_ptr % unit == 0
            and dst_ptr % unit == 0
            and all(s % k == 0 and t % k == 0 for s, t in zip(src[:-1], dst[:-1], strict=True))
        ):
            return unit
    return itemsize


def _fits_int32(n: int, dims: list[int], *strides: list[int], threads: int) -> bool:
    """Whether the kernel's index, its grid steps and every offset of each walk stay below 2^31."""
    if n + COPY_UNROLL * threads > _INT32_MAX:
        return False
    return all(sum((d - 1) * abs(s) for d, s in zip(dims, st, strict=True)) <= _INT32_MAX for st in strides)


@functools.lru_cache(maxsize=4096)  # a pipeline's copies repeat run after run (same views, same arena)
def plan_copy(
    shape: tuple[int, ...],
    src_strides: tuple[int, ...],
    dst_strides: tuple[int, ...],
    itemsize: int,
    src_ptr: int,
    dst_ptr: int,
    *,
    max_threads: int,
) -> CopyPlan:
    """How to copy a non-empty view of ``shape`` (strides in elements of ``itemsize`` bytes) from
    ``src_ptr`` to ``dst_ptr``: one memcpy when both walk one run, else the strided kernel
    (``max_threads``: the most threads its grid has, for the 32-bit index check). Rows of a run go through
    the kernel too: on an H200 its 16-byte units beat cuMemcpy2DAsync by 1.3-2.2x (a [4096, 2304] fp32
    split part 39.6 vs 52.6 us, a middle-axis bf16 split 55.8 vs 121.7 us; benchmarks/copy_paths.py).

    Raises
    ------
    InvalidArgumentError
        When more than 8 dims remain after merging (the kernel's limit).
    """
    s, t, src_ptr, dst_ptr = _flip_backwards(
        list(shape), list(src_strides), list(dst_strides), itemsize, src_ptr, dst_ptr
    )
    dims, s, t = collapse(list(shape), s, t)
    if dims == [1] or (len(dims) == 1 and s == [1] and t == [1]):
        return CopyPlan("memcpy", src_ptr, dst_ptr, itemsize, tuple(dims), (1,), (1,))
    if len(dims) > MAX_COPY_DIMS:
        raise InvalidArgumentError(
            f"a strided copy supports up to {MAX_COPY_DIMS} dimensions after merging (got {dims}); "
            "copy the tensor in parts or make it contiguous first"
        )
    unit = _widest_unit(dims, s, t, itemsize, src_ptr, dst_ptr)
    k = unit // itemsize
    dims[-1] //= k
    s = [v // k for v in s[:-1]] + [s[-1] if k == 1 else 1]
    t = [v // k for v in t[:-1]] + [t[-1] if k == 1 else 1]
    n = math.prod(dims)
    index32 = _fits_int32(n, dims, s, t, threads=max_threads)
    return CopyPlan("kernel", src_ptr, dst_ptr, unit, tuple(dims), tuple(s), tuple(t), index32)


def copy_config(units: int, sm_count: int) -> Any:
    """The strided copy's grid: enough blocks for every thread to move COPY_UNROLL units per step, at
    most 8 blocks per SM (then each thread loops)."""
    return flat_config(-(-units // COPY_UNROLL), sm_count)


class StridedCopy:
    """Runs a ``"kernel"`` :class:`CopyPlan` (pl_strided_copy, compiled per unit, dim count and index
    size)."""

    def __init__(self, backend: Any):
        self._backend = backend
        self._kernels: dict[tuple[int, int, bool], Any] = {}
        self._sm_count = int(backend.info.features["sm_count"])

    def __call__(self, plan: CopyPlan, stream: Any) -> None:
        key = (plan.unit, len(plan.dims), plan.index32)
        kernel = self._kernels.get(key)
        if kernel is None:
            kernel = self._kernels[key] = self._backend.compile_kernel(
                helper_source(),
                "pl_strided_copy",
                {
                    "define_macro": [
                        ("PL_ELEM", _UINT[plan.unit]),
                        ("PL_NDIM", str(len(plan.dims))),
                        ("PL_COPY32", "1" if plan.index32 else "0"),
                    ]
                },
                (include_dir(),),
            )
        config, args = _launch_args(plan, self._sm_count)
        self._backend.launch(stream, config, kernel, *args)


@functools.lru_cache(maxsize=4096)
def _launch_args(plan: CopyPlan, sm_count: int) -> tuple[Any, tuple]:
    """The grid and the kernel arguments of a plan (the leading unused dims padded with size 1)."""
    pad = MAX_COPY_DIMS - len(plan.dims)
    n = plan.units
    args = [np.uint64(plan.src), np.uint64(plan.dst), np.int64(n)]
    args += [np.int64(v) for v in [1] * pad + list(plan.dims)]
    args += [np.int64(v) for v in [0] * pad + list(plan.src_strides)]
    args += [np.int64(v) for v in [0] * pad + list(plan.dst_strides)]
    return copy_config(n, sm_count), tuple(args)


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
