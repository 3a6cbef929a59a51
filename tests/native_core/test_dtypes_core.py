"""The native core's dtype table (plan.c: plk_dtype_info) reads a plan tensor of every integer width,
int16/uint16/uint32/uint64 included, and runs it bit for bit; a float8 or sub-byte tensor (int4, uint4,
int2, uint2, float4_e2m1fn) stays refused (no plan stage of the core takes one)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from pipelink.dtypes import get_dtype
from pipelink.modules.services import PipeLinkTensor
from pipelink.runtime.planfile import (
    DEVICE_CPU,
    STAGE_RELAYOUT,
    STORAGE_EXTERNAL,
    PlanParts,
    _Payload,
    assemble,
)


@pytest.fixture(scope="module")
def core(runtime_lib):
    lib = ctypes.CDLL(str(runtime_lib))
    lib.pipeLinkLoadPipeline.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.pipeLinkDestroyPipeline.argtypes = [ctypes.c_void_p]
    tensors = ctypes.POINTER(PipeLinkTensor)
    lib.pipeLinkExecute.argtypes = [ctypes.c_void_p, tensors, ctypes.c_int32, tensors, ctypes.c_int32]
    lib.pipeLinkGetLastErrorMessage.restype = ctypes.c_char_p
    assert lib.pipeLinkInitialize() == 0
    yield lib
    assert lib.pipeLinkFinalize() == 0


def _copy_plan(dtype: str, shape: tuple[int, ...]) -> bytes:
    """x -> y through the core's own relayout stage: a CPU plan needing no module."""
    stages = _Payload()
    stages.u8(STAGE_RELAYOUT)
    stages.str("copy")
    stages.u8(0)
    stages.refs([0])
    stages.refs([1])
    return assemble(
        PlanParts(
            name=f"copy_{dtype}",
            arena_bytes=0,
            arena_alignment=256,
            compute_capability=0,
            tensors=[("x", dtype, shape, STORAGE_EXTERNAL, 0), ("y", dtype, shape, STORAGE_EXTERNAL, 0)],
            inputs=[0],
            outputs=[1],
            libraries=[],
            cubins=[],
            n_stages=1,
            stages=stages.bytes(),
            device=(DEVICE_CPU, 0),
        )
    )


def _tensor(a: np.ndarray, keep: list, *, bits: int | None = None) -> PipeLinkTensor:
    dt = get_dtype(a.dtype)
    t = PipeLinkTensor()
    dims = (ctypes.c_int64 * a.ndim)(*a.shape)
    keep.append(dims)
    t.data, t.ndim, t.shape = a.ctypes.data, a.ndim, dims
    t.device.device_type, t.device.device_id = DEVICE_CPU, 0
    t.dtype.code, t.dtype.bits, t.dtype.lanes = dt.dl_code, bits or dt.bits, 1
    return t


@pytest.mark.parametrize("dtype", ["int16", "uint16", "uint32", "uint64", "int8", "int64", "bool"])
def test_a_plan_of_every_integer_width_loads_and_runs(core, tmp_path, dtype):
    path = tmp_path / f"copy_{dtype}.plk"
    path.write_bytes(_copy_plan(dtype, (3, 5)))
    handle = ctypes.c_void_p()
    assert core.pipeLinkLoadPipeline(str(path).encode(), ctypes.byref(handle)) == 0, (
        core.pipeLinkGetLastErrorMessage().decode()
    )
    try:
        npd = get_dtype(dtype).numpy
        info = np.iinfo(npd) if npd != np.bool_ else None
        x = np.random.default_rng(3).integers(0, 2, (3, 5)).astype(npd)
        if info is not None:  # both ends of the range: the copy is bit for bit
            x[0, :2] = [info.min, info.max]
        y = np.zeros_like(x)
        keep: list = []
        ins, outs = (PipeLinkTensor * 1)(_tensor(x, keep)), (PipeLinkTensor * 1)(_tensor(y, keep))
        assert core.pipeLinkExecute(handle, ins, 1, outs, 1) == 0, core.pipeLinkGetLastErrorMessage().decode()
        np.testing.assert_array_equal(y, x)
        # the same bytes under another width of the code are refused with the plan's dtype id in the message
        wrong = (PipeLinkTensor * 1)(_tensor(x, keep, bits=8 if get_dtype(dtype).bits != 8 else 16))
        assert core.pipeLinkExecute(handle, wrong, 1, outs, 1) != 0
        assert f"dtype id {get_dtype(dtype).c_enum}" in core.pipeLinkGetLastErrorMessage().decode()
    finally:
        core.pipeLinkDestroyPipeline(handle)


@pytest.mark.parametrize(
    "dtype",
    [
        *("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"),
        *("int4", "uint4", "int2", "uint2", "float4_e2m1fn"),  # ids 18..22, past plan.c's table
    ],
)
def test_a_float8_or_sub_byte_plan_tensor_is_refused(core, tmp_path, dtype):
    path = tmp_path / f"copy_{dtype}.plk"
    path.write_bytes(_copy_plan(dtype, (4,)))
    handle = ctypes.c_void_p()
    assert core.pipeLinkLoadPipeline(str(path).encode(), ctypes.byref(handle)) != 0
    assert "a known dtype" in core.pipeLinkGetLastErrorMessage().decode()
