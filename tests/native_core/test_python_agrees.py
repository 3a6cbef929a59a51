"""The native core and Python's executor agree: the same plan, the same inputs, the same outputs (policies
included). The core is called through ctypes, as Python's run() will once it hands plans to the core."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import pipelink as pl
from pipelink.modules.services import DEVICE_CPU, PipeLinkTensor

DL_FLOAT = 2


class Core:
    """The few C API calls the comparison needs."""

    def __init__(self, path):
        self.lib = lib = ctypes.CDLL(str(path))
        lib.pipeLinkLoadPipeline.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        lib.pipeLinkExecute.argtypes = [
            ctypes.c_void_p,
            ctypes.POINTER(PipeLinkTensor),
            ctypes.c_int32,
            ctypes.POINTER(PipeLinkTensor),
            ctypes.c_int32,
        ]
        lib.pipeLinkDestroyPipeline.argtypes = [ctypes.c_void_p]
        lib.pipeLinkGetLastErrorMessage.restype = ctypes.c_char_p
        assert lib.pipeLinkInitialize() == 0

    def load(self, plan) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        assert self.lib.pipeLinkLoadPipeline(str(plan).encode(), ctypes.byref(handle)) == 0, self.message()
        return handle

    def message(self) -> str:
        return self.lib.pipeLinkGetLastErrorMessage().decode()

    def execute(self, handle, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> int:
        keep = []

        def tensors(arrays):
            out = (PipeLinkTensor * max(len(arrays), 1))()
            for t, a in zip(out, arrays, strict=False):
                shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
                keep.append(shape)
                t.data, t.ndim, t.shape = a.ctypes.data, a.ndim, shape
                t.device.device_type = DEVICE_CPU
                t.dtype.code, t.dtype.bits, t.dtype.lanes = DL_FLOAT, a.dtype.itemsize * 8, 1
            return out

        return self.lib.pipeLinkExecute(handle, tensors(inputs), len(inputs), tensors(outputs), len(outputs))

    def close(self, handle) -> None:
        assert self.lib.pipeLinkDestroyPipeline(handle) == 0
        assert self.lib.pipeLinkFinalize() == 0


@pytest.mark.parametrize("negative", [False, True], ids=["clean", "degraded"])
def test_core_matches_python_on_the_policy_pipeline(runtime_lib, plans, negative):
    rng = np.random.default_rng(3)
    x = rng.uniform(0.25, 2.0, (4, 6)).astype(np.float32)
    if negative:
        x[0, 0] = -1.0  # core_flaky fails and core_nanify writes a NaN: identity and fallback take over
    with pl.load(plans / "ops.json", device="cpu", native=False) as pipe:  # the Python executor's result
        expected = {k: np.asarray(v) for k, v in pipe.run(x=x).items()}
        names = pipe.outputs
    core = Core(runtime_lib)
    handle = core.load(plans / "ops.plk")
    outs = [np.full(expected[n].shape, np.nan, np.float32) for n in names]
    assert core.execute(handle, [x], outs) == 0, core.message()
    assert ("degraded" in core.message()) == negative
    core.close(handle)
    for name, got in zip(names, outs, strict=True):
        np.testing.assert_allclose(got, expected[name], rtol=1e-6, err_msg=name)


def test_core_matches_python_on_the_walkthrough(runtime_lib, plans):
    rng = np.random.default_rng(4)
    args = {
        "input_tensor": rng.standard_normal((8, 1024)).astype(np.float32),
        "gamma_tensor": rng.standard_normal(1024).astype(np.float32),
        "beta_tensor": rng.standard_normal(1024).astype(np.float32),
        "eps_scalar": np.array(1e-5, np.float32),
    }
    with pl.load(plans / "ln.json", device="cpu", native=False) as pipe:  # the Python executor's result
        expected = [np.asarray(v) for v in pipe.run(args).values()]
        order = pipe.inputs
    core = Core(runtime_lib)
    handle = core.load(plans / "ln.plk")
    outs = [np.full(e.shape, np.nan, np.float32) for e in expected]
    assert core.execute(handle, [args[n] for n in order], outs) == 0, core.message()
    core.close(handle)
    for got, want in zip(outs, expected, strict=True):
        np.testing.assert_array_equal(got, want)  # the same module on the same bytes: bit for bit
