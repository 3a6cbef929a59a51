"""CPU checks of how the CUDA backend's ``copy`` moves a view (``backends/cuda/helpers.plan_copy``): the
choice between one memcpy and the strided kernel, the kernel's unit width and index size,
and — by running each plan on a NumPy byte buffer the way the driver / kernel would — that every plan
copies exactly what ``dst[...] = src`` copies. The GPU runs of the same views are in
tests/cuda/test_copy_cuda.py."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

from pipelink.backends.cuda.helpers import COPY_UNROLL, CopyPlan, max_threads, plan_copy
from pipelink.errors import InvalidArgumentError

THREADS = max_threads(132)


def _plan(src: np.ndarray, dst: np.ndarray, mem: np.ndarray) -> CopyPlan:
    """The plan for two views into ``mem`` (addresses are byte offsets into it)."""
    base = mem.__array_interface__["data"][0]
    item = src.itemsize
    return plan_copy(
        src.shape,
        tuple(s // item for s in src.strides),
        tuple(s // item for s in dst.strides),
        item,
        src.__array_interface__["data"][0] - base,
        dst.__array_interface__["data"][0] - base,
        max_threads=THREADS,
    )


def _run(plan: CopyPlan, mem: np.ndarray) -> None:
    """Carry out ``plan`` on the byte buffer ``mem`` the way cuMemcpy / pl_strided_copy do."""
    u = plan.unit
    if plan.kind == "memcpy":
        n = plan.units * u
        mem[plan.dst : plan.dst + n] = mem[plan.src : plan.src + n].copy()
        return
    assert plan.kind == "kernel" and plan.src % u == 0 and plan.dst % u == 0, "unaligned vector unit"

    def walk(ptr, strides):
        reach = [
            sum((d - 1) * s * u for d, s in zip(plan.dims, strides, strict=True) if s * sign > 0)
            for sign in (-1, 1)
        ]
        assert ptr + reach[0] >= 0 and ptr + reach[1] + u <= mem.size, "the walk leaves the buffer"
        start = mem[ptr:]
        return as_strided(start, plan.dims + (u,), tuple(s * u for s in strides) + (1,), writeable=True)

    walk(plan.dst, plan.dst_strides)[...] = walk(plan.src, plan.src_strides).copy()


def _buffer(nbytes: int) -> np.ndarray:
    """A 256-byte aligned byte buffer (device allocations are)."""
    raw = np.zeros(nbytes + 256, np.uint8)
    off = -raw.__array_interface__["data"][0] % 256
    return raw[off : off + nbytes]


def _views(src_shape, src_index, dst_shape, dst_index, dtype, *, broadcast=None):
    """A source and a destination view of one byte buffer, the source filled with distinct values and
    the destination poisoned."""
    dt = np.dtype(dtype)
    ns, nd = int(np.prod(src_shape)), int(np.prod(dst_shape))
    pad = 16 // dt.itemsize  # a gap between the two arrays, and a misaligned start when asked
    mem = _buffer((ns + nd + 4 * pad) * dt.itemsize)
    arr = mem.view(dt)
    a = arr[pad : pad + ns].reshape(src_shape)
    b = arr[ns + 3 * pad : ns + 3 * pad + nd].reshape(dst_shape)
    a.view(np.uint8)[...] = (
        np.random.default_rng(0).integers(1, 255, a.nbytes, dtype=np.uint8).reshape(a.view(np.uint8).shape)
    )
    b.view(np.uint8)[...] = 0xEE
    src = a[src_index]
    if broadcast is not None:
        src = np.broadcast_to(src, broadcast)
    return mem, src, b[dst_index]


def _check(mem, src, dst) -> CopyPlan:
    want_mem = mem.copy()
    base = mem.__array_interface__["data"][0]
    want = np.ndarray(dst.shape, dst.dtype, want_mem, dst.__array_interface__["data"][0] - base, dst.strides)
    want[...] = src
    plan = _plan(src, dst, mem)
    _run(plan, mem)
    np.testing.assert_array_equal(mem, want_mem)  # dst equal, and not one byte written elsewhere
    return plan


ALL = slice(None)


def test_split_along_the_last_axis_is_the_vectorised_kernel():
    # The GPT-2 attention split: [4096, 2304] fp32 into 3 parts of 768 columns. 16-byte units: 4 floats;
    # the row strides count units too.
    mem, src, dst = _views((64, 2304), (ALL, slice(768, 1536)), (64, 768), (ALL, ALL), np.float32)
    plan = _check(mem, src, dst)
    assert plan.kind == "kernel" and plan.unit == 16 and plan.dims == (64, 192)
    assert plan.src_strides == (576, 1) and plan.dst_strides == (192, 1) and plan.index32


def test_concat_into_a_column_block_is_the_kernel():
    mem, src, dst = _views((33, 5), (ALL, ALL), (33, 12), (ALL, slice(7, 12)), np.float16)
    plan = _check(mem, src, dst)
    assert plan.kind == "kernel" and plan.dims == (33, 5) and plan.dst_strides == (12, 1)


@pytest.mark.parametrize(
    "cols, start, unit",
    [(768, 768, 16), (766, 768, 8), (765, 768, 4), (765, 767, 4), (768, 767, 4), (768, 770, 8)],
)
def test_the_kernel_unit_is_the_widest_vector_the_alignment_allows(cols, start, unit):
    # fp32 with odd widths / starts: narrower vectors, never a misaligned one (the runner asserts it).
    mem, src, dst = _views((8, 2304), (ALL, slice(start, start + cols)), (8, cols), (ALL, ALL), np.float32)
    plan = _check(mem, src, dst)
    assert plan.kind == "kernel" and plan.unit == unit


def test_a_16_bit_odd_sized_slice_keeps_the_element_as_unit():
    mem, src, dst = _views(
        (7, 9, 13), (ALL, slice(1, 8, 2), slice(0, 13, 3)), (7, 4, 5), (ALL,) * 3, np.float16
    )
    plan = _check(mem, src, dst)
    assert plan.kind == "kernel" and plan.unit == 2 and plan.index32


def test_negative_steps_copy_right_and_reversed_destinations_walk_forward():
    # Rows reversed: the source walks backwards.
    mem, src, dst = _views((16, 32), (slice(None, None, -1), ALL), (16, 32), (ALL, ALL), np.float32)
    plan = _check(mem, src, dst)
    assert plan.kind == "kernel" and plan.unit == 16 and plan.src_strides[0] < 0
    # Columns reversed: element units.
    mem, src, dst = _views((5, 7), (ALL, slice(None, None, -2)), (5, 4), (ALL, ALL), np.float16)
    assert _check(mem, src, dst).unit == 2
    # Both reversed the same way: both walks turn forward and merge into one memcpy.
    mem, src, dst = _views(
        (6, 10), (slice(None, None, -1), ALL), (6, 10), (slice(None, None, -1), ALL), np.int8
    )
    plan = _check(mem, src, dst)
    assert plan.kind == "memcpy" and plan.dims == (60,)


def test_broadcast_rows_stride_0_use_the_kernel():
    mem, src, dst = _views((1, 40), (ALL, ALL), (9, 40), (ALL, ALL), np.float32, broadcast=(9, 40))
    plan = _check(mem, src, dst)
    assert plan.kind == "kernel" and plan.src_strides == (0, 1) and plan.unit == 16
    mem, src, dst = _views((9, 1), (ALL, ALL), (9, 6), (ALL, ALL), np.float16, broadcast=(9, 6))
    plan = _check(mem, src, dst)
    assert plan.kind == "kernel" and plan.src_strides == (1, 0) and plan.unit == 2


def test_a_transpose_and_a_one_element_copy():
    mem, src, dst = _views((6, 10), (ALL, ALL), (10, 6), (ALL, ALL), np.float64)
    src = src.T
    assert _check(mem, src, dst).kind == "kernel"
    mem, src, dst = _views((3, 4), (slice(1, 2), slice(2, 3)), (1, 1), (ALL, ALL), np.float32)
    assert _check(mem, src, dst).kind == "memcpy"


def test_middle_axis_split_of_a_3d_tensor_merges_to_rows():
    # [B, S, D] split along S: per batch row one run of s*D elements (8-byte units: 2 floats).
    mem, src, dst = _views((4, 10, 6), (ALL, slice(3, 7), ALL), (4, 4, 6), (ALL,) * 3, np.float32)
    plan = _check(mem, src, dst)
    assert (
        plan.kind == "kernel" and plan.dims[0] == 4 and plan.dims[0] * plan.dims[1] * plan.unit == 4 * 24 * 4
    )


def test_index32_only_when_every_offset_fits():
    big = plan_copy((70000, 40000), (40001, 1), (40000, 1), 1, 0, 0, max_threads=THREADS)
    assert big.kind == "kernel" and not big.index32
    # Few elements but a far stride: the offsets overflow 32 bits.
    far = plan_copy((2, 3), (1 << 31, 1), (3, 1), 1, 0, 0, max_threads=THREADS)
    assert far.kind == "kernel" and not far.index32
    # The grid's last step must fit too.
    edge = (1 << 31) - 1 - COPY_UNROLL * THREADS
    near = plan_copy((edge,), (-1,), (1,), 1, edge, 0, max_threads=THREADS)
    assert near.kind == "kernel" and near.dims == (edge,) and near.index32
    assert not plan_copy((edge + 1,), (-1,), (1,), 1, edge, 0, max_threads=THREADS).index32


def test_more_than_8_dims_after_merging_is_refused_with_a_way_out():
    shape = (2,) * 9
    src = tuple(1 << k for k in range(9))  # fully reversed order: nothing merges
    dst = tuple(reversed(src))
    with pytest.raises(InvalidArgumentError, match="up to 8 dimensions.*contiguous first"):
        plan_copy(shape, src, dst, 4, 0, 4096, max_threads=THREADS)


@pytest.mark.parametrize("seed", range(40))
def test_random_views_copy_exactly(seed):
    # Any mix of steps (negative too), broadcast dims, offsets and 1/2/4/8-byte dtypes.
    rng = np.random.default_rng(seed)
    dtype = rng.choice([np.int8, np.float16, np.float32, np.float64])
    ndim = int(rng.integers(1, 5))
    shape = tuple(int(v) for v in rng.integers(1, 9, ndim))
    index = []
    for d in shape:
        step = int(rng.choice([1, 1, 2, -1, -2]))
        start = int(rng.integers(0, d))
        index.append(slice(start, None, step) if step > 0 else slice(start, None, step))
    index = tuple(index)
    out_shape = np.empty(shape)[index].shape
    bshape = tuple(int(rng.integers(1, 4)) if d == 1 else d for d in out_shape)
    mem, src, dst = _views(shape, index, bshape, (ALL,) * ndim, dtype, broadcast=bshape)
    if rng.random() < 0.3:  # the destination a reversed view too
        mem2 = mem
        dst = dst[(slice(None, None, -1),) + (ALL,) * (ndim - 1)]
        _check(mem2, src, dst)
    else:
        _check(mem, src, dst)
