"""The native core replays a pointwise conv2d's cuBLASLt product (the ``cuda:cublaslt`` variant) on the
stand-in driver and cuBLASLt of fake_cuda.c, on any machine: the product the bind describes
(``NativeMatmul``: x as cuBLASLt's A, w as its B shared by the batch with stride 0, y as C = D) is written
into a plan with the planfile's encoders, executed through the C API, and y compared with the
convolution. The real thing runs on the H200 in tests/cuda/test_conv_gemm_cuda.py.
"""

from __future__ import annotations

import sys

from pipelink.descriptor import KernelContext
from pipelink.ops.conv.cuda import bind_conv2d_gemm
from pipelink.runtime.planfile import (
    DEVICE_CUDA,
    STORAGE_EXTERNAL,
    PlanParts,
    _matmul_stage,
    _Payload,
    assemble,
)
from tests.unit.test_conv_gemm_route import FakeBackend, FakeLt, _attrs

from .test_cuda_fake import _run, fake_dir  # noqa: F401 - the fixture that builds the stand-ins

N, C, H, W, M = 3, 5, 4, 7, 6

CHILD = r"""
import ctypes, sys
import numpy as np
from pipelink.modules.services import PipeLinkTensor

runtime_path, plan_path = sys.argv[1], sys.argv[2]
N, C, H, W, M = 3, 5, 4, 7, 6
fake = ctypes.CDLL("libcuda.so.1")
fake.fake_mem_alloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
rt = ctypes.CDLL(runtime_path)
rt.pipeLinkLoadPipeline.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
args = [ctypes.c_void_p, ctypes.POINTER(PipeLinkTensor), ctypes.c_int32]
rt.pipeLinkExecute.argtypes = args + args[1:]
rt.pipeLinkGetLastErrorMessage.restype = ctypes.c_char_p
msg = lambda: rt.pipeLinkGetLastErrorMessage().decode()
assert rt.pipeLinkInitialize() == 0
h = ctypes.c_void_p()
assert rt.pipeLinkLoadPipeline(plan_path.encode(), ctypes.byref(h)) == 0, msg()
rng = np.random.default_rng(0)
x = rng.standard_normal((N, C, H, W)).astype(np.float32)
w = rng.standard_normal((M, C, 1, 1)).astype(np.float32)
keep = []

def device(a):
    ptr = ctypes.c_uint64()
    assert fake.fake_mem_alloc(ctypes.byref(ptr), a.nbytes) == 0
    ctypes.memmove(ptr.value, a.ctypes.data, a.nbytes)
    return ptr.value

def tensors(items):
    out = (PipeLinkTensor * len(items))()
    for t, (ptr, shape) in zip(out, items):
        dims = (ctypes.c_int64 * len(shape))(*shape)
        keep.append(dims)
        t.data, t.ndim, t.shape = ptr, len(shape), dims
        t.device.device_type, t.device.device_id = 2, 0
        t.dtype.code, t.dtype.bits, t.dtype.lanes = 2, 32, 1
    return out

y = np.full((N, M, H, W), np.nan, np.float32)
y_ptr = device(y)
ins = tensors([(device(x), x.shape), (device(w), w.shape)])
assert rt.pipeLinkExecute(h, ins, 2, tensors([(y_ptr, y.shape)]), 1) == 0, msg()
got = np.frombuffer(ctypes.string_at(y_ptr, y.nbytes), np.float32).reshape(y.shape)
want = np.einsum("mc,nchw->nmhw", w[:, :, 0, 0].astype(np.float64), x.astype(np.float64))
assert np.allclose(got, want, rtol=1e-5, atol=1e-5), np.abs(got - want).max()
print("OK")
"""


def _conv_product(monkeypatch):
    """The NativeMatmul a float32 pointwise conv2d (no bias) binds to, under the stand-in nvmath."""
    for name, module in (
        ("nvmath", type(sys)("nvmath")),
        ("nvmath.bindings", type(sys)("nvmath.bindings")),
        ("nvmath.bindings.cublasLt", FakeLt()),
    ):
        monkeypatch.setitem(sys.modules, name, module)
    ctx = KernelContext(
        stage="pw",
        attrs=_attrs(),
        in_shapes=((N, C, H, W), (M, C, 1, 1), None),
        in_dtypes=("float32", "float32", None),
        out_shapes=((N, M, H, W),),
        out_dtypes=("float32",),
        backend=FakeBackend(),
    )
    (product,) = bind_conv2d_gemm(ctx).native_launches()
    return product


def test_the_core_replays_a_pointwise_conv_product(monkeypatch, fake_dir, runtime_lib, tmp_path):  # noqa: F811
    product = _conv_product(monkeypatch)
    stages = _Payload()
    _matmul_stage(stages, "pw", product, lambda: (stages.refs([0, 1, -1]), stages.refs([2])))
    parts = PlanParts(
        name="pointwise_conv",
        arena_bytes=256,
        arena_alignment=256,
        compute_capability=90,
        tensors=[
            ("x", "float32", (N, C, H, W), STORAGE_EXTERNAL, 0),
            ("w", "float32", (M, C, 1, 1), STORAGE_EXTERNAL, 0),
            ("y", "float32", (N, M, H, W), STORAGE_EXTERNAL, 0),
        ],
        inputs=[0, 1],
        outputs=[2],
        libraries=[],
        cubins=[],
        n_stages=1,
        stages=stages.bytes(),
        device=(DEVICE_CUDA, 0),
    )
    plan = tmp_path / "pointwise.plk"
    plan.write_bytes(assemble(parts))
    proc = _run(fake_dir, runtime_lib, plan, CHILD)
    assert proc.returncode == 0 and proc.stdout.startswith("OK"), proc.stdout + proc.stderr
