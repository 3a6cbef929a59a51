"""The CUDA backend's ``copy`` on the device, every path (one memcpy, the strided
kernel with 16/8/4-byte units or element units, 32-bit index math): split/concat/slice/expand views,
negative steps, broadcast (stride 0), 16-bit dtypes, odd sizes, against NumPy; the destination buffer is
poisoned first and compared whole (nothing written outside the view). Then split/concat/slice/expand in a
cuda_graph pipeline against the CPU backend. The CPU checks of the plans are tests/unit/test_copy_plan.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from pipelink.backends import get_backend
from pipelink.dtypes import get_dtype

pytestmark = pytest.mark.gpu

ALL = slice(None)
REV = slice(None, None, -1)
POISON = 0xEE


def ix(*index):
    """Picks ``index`` of an array (a view)."""
    return lambda a: a[index]


def bcast(shape):
    """Broadcasts an array to ``shape`` (stride-0 dims)."""
    return lambda a: np.broadcast_to(a, shape)


# name: (source shape, source view, destination shape, destination view, dtype, the path the plan takes
#        with the device's pitch limit)
CASES = {
    "gpt2_split_part": ((4096, 2304), ix(ALL, slice(768, 1536)), (4096, 768), ix(), "float32", "kernel"),
    "concat_part_fp16": ((333, 517), ix(), (333, 1034), ix(ALL, slice(517, 1034)), "float16", "kernel"),
    "split_middle_axis": ((8, 100, 64), ix(ALL, slice(30, 70)), (8, 40, 64), ix(), "bfloat16", "kernel"),
    "rows_reversed": ((1000, 256), ix(REV), (1000, 256), ix(), "float32", "kernel"),
    "cols_step_neg2_bf16": (
        (257, 131),
        ix(ALL, slice(None, None, -2)),
        (257, 66),
        ix(),
        "bfloat16",
        "kernel",
    ),
    "odd_slice_3d_fp16": (
        (17, 19, 23),
        ix(slice(1, None, 2), slice(None, None, -3), slice(2, 21)),
        (8, 7, 19),
        ix(),
        "float16",
        "kernel",
    ),
    "expand_row": ((1, 1000), bcast((513, 1000)), (513, 1000), ix(), "float32", "kernel"),
    "expand_col_fp16": ((777, 1), bcast((777, 129)), (777, 129), ix(), "float16", "kernel"),
    "transpose_f64": ((300, 200), lambda a: a.T, (200, 300), ix(), "float64", "kernel"),
    "int8_odd": ((99, 101), ix(slice(1, None), slice(3, 100)), (98, 97), ix(), "int8", "kernel"),
    "full_reverse_1d": ((100003,), ix(REV), (100003,), ix(), "float32", "kernel"),
    "into_reversed_rows": ((64, 96), ix(), (64, 96), ix(REV), "float16", "kernel"),
}


def _host(shape, dtype, seed):
    dt = get_dtype(dtype).numpy
    n = int(np.prod(shape))
    raw = np.random.default_rng(seed).integers(1, 255, n * np.dtype(dt).itemsize, dtype=np.uint8)
    return raw.view(dt).reshape(shape)


def _view(dev: pl.Tensor, base: np.ndarray, view: np.ndarray) -> pl.Tensor:
    """The device view of ``dev`` (a device copy of ``base``) that ``view`` is of ``base``."""
    item = base.itemsize
    offset = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    strides = tuple(s // item for s in view.strides)
    return pl.Tensor(dev.ptr + offset, view.shape, dev.dtype, dev.device, strides, owner=dev)


def _copy_case(backend, name):
    src_shape, pick_src, dst_shape, pick_dst, dtype, path = CASES[name]
    a = _host(src_shape, dtype, 1)
    b = np.zeros(dst_shape, get_dtype(dtype).numpy)
    b.view(np.uint8)[...] = POISON
    stream = backend.default_stream()
    da, db = backend.import_input(a, stream=stream), backend.import_input(b, stream=stream)
    src_np, dst_np = pick_src(a), pick_dst(b)
    want = b.copy()
    pick_dst(want)[...] = src_np
    return backend, _view(da, a, src_np), _view(db, b, dst_np), db, want, path


@pytest.mark.parametrize("name", sorted(CASES))
def test_copy_paths_match_numpy(name):
    backend = get_backend("cuda")
    backend, src, dst, db, want, path = _copy_case(backend, name)
    plan = backend._plan_copy(dst, src)
    assert plan.kind == path, plan
    backend.copy(dst, src, stream=backend.default_stream())
    got = backend.to_host(db).numpy()
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_the_vectorised_kernel_uses_16_byte_units_and_32_bit_indices():
    backend = get_backend("cuda")
    _, src, dst, _, _, _ = _copy_case(backend, "rows_reversed")
    plan = backend._plan_copy(dst, src)
    assert plan.kind == "kernel" and plan.unit == 16 and plan.index32


def _doc(dtype: str) -> dict:
    return {
        "name": "copies",
        "inputs": {"x": {"shape": [64, 2304], "dtype": dtype}, "b": {"shape": [1, 768], "dtype": dtype}},
        "outputs": ["q", "kv", "r", "e"],
        "pipeline": [
            {
                "name": "split",
                "id": "qkv",
                "inputs": ["x"],
                "outputs": ["q", "k", "v"],
                "attrs": {"axis": -1, "num_outputs": 3},
            },
            {"name": "concat", "id": "cat", "inputs": ["v", "k"], "outputs": ["kv"], "attrs": {"axis": -1}},
            {
                "name": "slice",
                "id": "rev",
                "inputs": ["x"],
                "outputs": ["r"],
                "attrs": {"starts": [-1, 2300], "ends": [-1000, 3], "steps": [-2, -3]},
            },
            {"name": "expand", "id": "ex", "inputs": ["b"], "outputs": ["e"], "attrs": {"shape": [64, 768]}},
        ],
    }


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_shape_copies_in_a_cuda_graph_pipeline_match_the_cpu(dtype):
    rng = np.random.default_rng(3)
    npdt = get_dtype(dtype).numpy
    feeds = [
        {"x": rng.standard_normal((64, 2304)).astype(npdt), "b": rng.standard_normal((1, 768)).astype(npdt)}
        for _ in range(3)
    ]
    with (
        pl.load(_doc(dtype), device="cpu") as cpu,
        pl.load(_doc(dtype), device="cuda", cuda_graph=True) as gpu,
    ):
        for feed in feeds:  # replays with new data: the graph re-reads its inputs
            want, got = cpu.run(**feed), gpu.run(**feed)
            for name in ("q", "kv", "r", "e"):
                g = np.asarray(got[name].cpu())
                np.testing.assert_array_equal(g.view(np.uint8), np.asarray(want[name]).view(np.uint8), name)
