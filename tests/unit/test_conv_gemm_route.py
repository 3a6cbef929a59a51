"""conv2d's pointwise GEMM variant (``cuda:cublaslt``) without a GPU: which stages take it (a pure
function of the shapes and attributes), that it is ranked before cuDNN and declines the rest with a
reason, and that the cuBLASLt call it makes computes the convolution. A stand-in for nvmath's cuBLASLt
bindings runs each ``cublasLtMatmul`` in NumPy on host memory, as cuBLASLt defines it (column-major
layouts, batch strides, ``D = alpha * op(A) @ op(B) + beta * C``); the bias launch before it is its
plan replayed in NumPy. The numbers on the device are checked on the H200 (tests/cuda/test_conv_gemm_cuda.py).
"""

from __future__ import annotations

import ctypes
import enum
import sys
import types

import numpy as np
import pytest

from pipelink.descriptor import KernelContext, VariantDeclined
from pipelink.hardware import HardwareInfo
from pipelink.modules.registry import OperatorRegistry
from pipelink.ops import register_builtins
from pipelink.ops.conv.cuda import CUBLASLT_VARIANT, PointwiseGemm, bind_conv2d_gemm, pointwise_gemm
from pipelink.ops.gemm.lt import NativeMatmul
from tests.unit.test_cuda_sources import _emulate_strided

GPU = HardwareInfo(kind="cuda", name="FakeGPU", compute_capability=(9, 0), features={"fp32": 1, "bf16": 1})
BASE = {
    "strides": (1, 1),
    "pads": (0, 0, 0, 0),
    "dilations": (1, 1),
    "group": 1,
    "auto_pad": "NOTSET",
    "activation": "none",
}


def _attrs(**kw):
    return {**BASE, **kw}


# -- routing: which stages are a GEMM ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("x", "w", "attrs", "want"),
    [
        ((32, 256, 56, 56), (64, 256, 1, 1), _attrs(), PointwiseGemm(32, 64, 256, 3136)),
        ((1, 3, 7, 5), (2, 3, 1, 1), _attrs(), PointwiseGemm(1, 2, 3, 35)),  # batch 1, odd HW, C=3
        ((2, 4, 5, 5), (8, 4, 1, 1), _attrs(dilations=(2, 3)), PointwiseGemm(2, 8, 4, 25)),  # one tap
        ((2, 4, 5, 5), (8, 4, 1, 1), _attrs(auto_pad="SAME_UPPER"), PointwiseGemm(2, 8, 4, 25)),
    ],
)
def test_pointwise_stages_are_a_batched_gemm(x, w, attrs, want):
    assert pointwise_gemm(x, w, attrs) == want


@pytest.mark.parametrize(
    ("x", "w", "attrs", "why"),
    [
        ((2, 4, 5, 5), (8, 4, 3, 3), _attrs(), "kernel 3x3"),
        ((2, 4, 5, 5), (8, 4, 1, 3), _attrs(), "kernel 1x3"),
        ((2, 4, 6, 6), (8, 4, 1, 1), _attrs(strides=(2, 2)), r"strides \[2, 2\]"),
        ((2, 4, 5, 5), (8, 4, 1, 1), _attrs(pads=(1, 0, 1, 0)), r"pads \[1, 0, 1, 0\]"),
        ((2, 4, 5, 5), (8, 2, 1, 1), _attrs(group=2), "group 2"),
        ((2, 0, 5, 5), (8, 0, 1, 1), _attrs(), "no input channels"),
    ],
)
def test_other_stages_decline_with_the_reason(x, w, attrs, why):
    with pytest.raises(VariantDeclined, match=f"not a pointwise convolution \\({why}"):
        pointwise_gemm(x, w, attrs)


def test_the_gemm_variant_is_ranked_before_cudnn_and_declines_to_it():
    registry = OperatorRegistry()
    register_builtins(registry)
    desc = registry.get("conv2d")
    for dtype in ("float16", "bfloat16", "float32"):
        assert registry.select_variant(desc, GPU, (dtype, dtype)).variant.name == CUBLASLT_VARIANT
    # float64: cuDNN has no engine, cuBLASLt does
    assert registry.select_variant(desc, GPU, ("float64", "float64")).variant.name == CUBLASLT_VARIANT
    declined = ((next(v for v in desc.variants if v.name == CUBLASLT_VARIANT), "not a pointwise ..."),)
    after = registry.select_variant(desc, GPU, ("float16", "float16"), declined=declined)
    assert after.variant.name == "cuda:cudnn"
    assert any(s.startswith(f"{CUBLASLT_VARIANT}: not a pointwise") for s in after.skipped)


# -- the cuBLASLt call, replayed in NumPy -------------------------------------------------------------
class _Desc(enum.Enum):
    TRANSA = 0
    TRANSB = 1
    EPILOGUE = 2
    BIAS_POINTER = 3


class _Layout(enum.Enum):
    BATCH_COUNT = 0
    STRIDED_BATCH_OFFSET = 1


_Pref = enum.Enum("_Pref", ["MAX_WORKSPACE_BYTES"] + [f"MIN_ALIGNMENT_{x}_BYTES" for x in "ABCD"], start=0)
_CTYPES = {0: ctypes.c_float, 1: ctypes.c_double}  # cudaDataType -> element (R_32F, R_64F)


def _value(ptr: int, size: int) -> int:
    return int.from_bytes(ctypes.string_at(ptr, size), "little", signed=True)


class FakeLt(types.ModuleType):
    """nvmath.bindings.cublasLt, computing each matmul in NumPy on host memory."""

    Epilogue = enum.IntEnum("Epilogue", {"DEFAULT": 1, "RELU": 2, "BIAS": 4, "RELU_BIAS": 6})
    MatmulDescAttribute = _Desc
    MatrixLayoutAttribute = _Layout
    MatmulPreferenceAttribute = _Pref
    matmul_heuristic_result_dtype = np.dtype([("algo", "u8", 8), ("workspace_size", "u8"), ("state", "i4")])

    class cuBLASLtError(Exception):  # noqa: N801 - nvmath's name
        pass

    def __init__(self):
        super().__init__("nvmath.bindings.cublasLt")
        self.objects: dict[int, dict] = {}
        self.calls = 0

    def _new(self, **fields) -> int:
        key = len(self.objects) + 1
        self.objects[key] = fields
        return key

    def create(self):
        return self._new(kind="handle")

    def destroy(self, handle):
        pass

    def matmul_desc_create(self, compute, scale):
        return self._new(kind="desc", compute=compute, scale=scale)

    def matmul_desc_set_attribute(self, desc, attr, ptr, size):
        self.objects[desc][attr.name] = _value(ptr, size)

    matmul_desc_destroy = destroy

    def matrix_layout_create(self, dtype, rows, cols, ld):
        return self._new(kind="layout", dtype=dtype, rows=rows, cols=cols, ld=ld, count=1, stride=0)

    def matrix_layout_set_attribute(self, layout, attr, ptr, size):
        self.objects[layout][{"BATCH_COUNT": "count", "STRIDED_BATCH_OFFSET": "stride"}[attr.name]] = _value(
            ptr, size
        )

    matrix_layout_destroy = destroy

    def matmul_preference_create(self):
        return self._new(kind="pref")

    def matmul_preference_set_attribute(self, pref, attr, ptr, size):
        pass

    matmul_preference_destroy = destroy

    def matmul_algo_get_heuristic(self, handle, desc, a, b, c, d, pref, n, result, found):
        ctypes.c_int32.from_address(found).value = 1

    def matmul(self, handle, desc, alpha, a, la, b, lb, beta, c, lc, d, ld_, algo, ws, ws_size, stream):
        self.calls += 1
        dsc = self.objects[desc]
        scale = _CTYPES[dsc["scale"]]
        al, be = scale.from_address(alpha).value, scale.from_address(beta).value
        epilogue = dsc.get("EPILOGUE", 1)
        assert epilogue in (1, 2), "a pointwise conv's only epilogue is RELU"
        lay = [self.objects[x] for x in (la, lb, lc, ld_)]
        for i in range(lay[0]["count"]):
            mats = []
            for ptr, spec in zip((a, b, c), lay[:3], strict=True):
                mats.append(_colmajor(ptr, spec, i))
            op_a = mats[0].T if dsc.get("TRANSA") else mats[0]
            op_b = mats[1].T if dsc.get("TRANSB") else mats[1]
            result = al * (op_a @ op_b) + (be * mats[2] if be else 0.0)
            if epilogue == 2:
                result = np.maximum(result, 0.0)
            _colmajor(d, lay[3], i)[...] = result


def _colmajor(ptr: int, spec: dict, batch: int) -> np.ndarray:
    """A writable view of matrix ``batch`` of a column-major, strided-batched layout at ``ptr``."""
    ctype = _CTYPES[spec["dtype"]]
    start = ptr + batch * spec["stride"] * ctypes.sizeof(ctype)
    span = spec["rows"] + (spec["cols"] - 1) * spec["ld"]
    flat = np.ctypeslib.as_array((ctype * span).from_address(start))
    return np.lib.stride_tricks.as_strided(
        flat, (spec["rows"], spec["cols"]), (flat.itemsize, spec["ld"] * flat.itemsize)
    )


class _Tensor:
    def __init__(self, array: np.ndarray):
        self.array = array
        self.ptr = array.ctypes.data


class FakeBackend:
    """What a cuBLASLt bind asks of the CUDA backend; kernels are never launched (plans are replayed)."""

    class _Stream:
        handle = 7

    class _Buffer:
        ptr = 0

    def default_stream(self):
        return self._Stream()

    def workspace(self, size, *, stream):
        return self._Buffer()

    def compile_kernel(self, source, name, options):
        return name

    def kernel_function(self, kernel):
        return kernel


@pytest.fixture
def lt(monkeypatch):
    fake = FakeLt()
    bindings = types.ModuleType("nvmath.bindings")
    bindings.cublasLt = fake
    nvmath = types.ModuleType("nvmath")
    nvmath.bindings = bindings
    monkeypatch.setitem(sys.modules, "nvmath", nvmath)
    monkeypatch.setitem(sys.modules, "nvmath.bindings", bindings)
    monkeypatch.setitem(sys.modules, "nvmath.bindings.cublasLt", fake)
    return fake


def _replayed(launch):
    """A pre launch run as its plan says, in NumPy: the strided copy of the bias (or of the residual) into
    y, or the residual's add onto it."""

    def run(ins, outs, stream):
        def array(slot):
            kind, pos = slot
            return (ins if kind == "in" else outs)[pos].array

        slots = launch._slots
        y = array(slots["y"])
        assert slots["y"] == ("out", 0)
        if "x" in slots:
            assert slots["x"] in (("in", 2), ("in", 3))
            y.reshape(-1)[:] = _emulate_strided(launch.plan, "s", array(slots["x"]))
        else:
            assert launch.plan.kernel == "pl_binary" and slots == {
                "a": ("out", 0),
                "b": ("in", 3),
                "y": ("out", 0),
            }
            np.add(array(slots["a"]), array(slots["b"]), out=y)

    return run


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize(("with_residual", "activation"), [(False, "none"), (True, "none"), (True, "relu")])
@pytest.mark.parametrize(("n", "c", "h", "w", "m"), [(3, 5, 3, 7, 4), (1, 3, 1, 1, 2), (2, 16, 5, 5, 9)])
def test_the_cublaslt_call_computes_the_convolution(
    lt, dtype, with_bias, with_residual, activation, n, c, h, w, m
):
    rng = np.random.default_rng(5)
    x, wt = rng.standard_normal((n, c, h, w)).astype(dtype), rng.standard_normal((m, c, 1, 1)).astype(dtype)
    bias = rng.standard_normal(m).astype(dtype) if with_bias else None
    res = rng.standard_normal((n, m, h, w)).astype(dtype) if with_residual else None
    ctx = KernelContext(
        stage="pw",
        attrs=_attrs(activation=activation),
        in_shapes=(
            x.shape,
            wt.shape,
            None if bias is None else bias.shape,
            None if res is None else res.shape,
        ),
        in_dtypes=(dtype, dtype, None if bias is None else dtype, None if res is None else dtype),
        out_shapes=((n, m, h, w),),
        out_dtypes=(dtype,),
        backend=FakeBackend(),
    )
    kernel = bind_conv2d_gemm(ctx)
    # y = b broadcast and/or the residual first (one launch each), then the product accumulates onto it
    assert len(kernel.pre) == int(with_bias) + int(with_residual) and not kernel.post
    kernel.pre = [_replayed(p) for p in kernel.pre]
    y = np.full((n, m, h, w), np.nan, dtype)
    ins = [_Tensor(x), _Tensor(wt)] + [None if t is None else _Tensor(t) for t in (bias, res)]
    kernel(ins, [_Tensor(y)], FakeBackend._Stream())
    assert lt.calls == 1, "one strided-batched call for the whole batch"
    want = np.einsum("mc,nchw->nmhw", wt[:, :, 0, 0].astype(np.float64), x.astype(np.float64))
    if bias is not None:
        want += bias.astype(np.float64)[None, :, None, None]
    if res is not None:
        want += res.astype(np.float64)
    if activation == "relu":
        want = np.maximum(want, 0.0)
    tol = 1e-12 if dtype == "float64" else 1e-5  # float32: the call's own float32 rounding
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol)
    # what the native core replays: the same call, x as cuBLASLt's A, w as its B (batch stride 0)
    native = kernel.native
    assert isinstance(native, NativeMatmul)
    assert native.operands == (("in", 0), ("in", 1), ("out", 0), ("out", 0)) and native.bias is None
    assert native.beta == (1.0 if with_bias or with_residual else 0.0)
    assert native.epilogue == int(lt.Epilogue.RELU if activation == "relu" else lt.Epilogue.DEFAULT)
    a_layout, b_layout, c_layout = native.layouts
    assert a_layout == (h * w, c, h * w, n, c * h * w if n > 1 else 0)
    assert b_layout == (c, m, c, n, 0)  # w: the same matrix for every image
    assert c_layout == (h * w, m, h * w, n, m * h * w if n > 1 else 0)


def test_tf32_policy_reaches_the_call(lt):
    ctx = KernelContext(
        stage="pw",
        attrs=_attrs(),
        in_shapes=((2, 4, 3, 3), (5, 4, 1, 1), None),
        in_dtypes=("float32", "float32", None),
        out_shapes=((2, 5, 3, 3),),
        out_dtypes=("float32",),
        backend=FakeBackend(),
        params={"math": "tf32"},
    )
    assert bind_conv2d_gemm(ctx).native.compute_type == 77  # CUBLAS_COMPUTE_32F_FAST_TF32
    strict = KernelContext(**{**ctx.__dict__, "params": {}})
    assert bind_conv2d_gemm(strict).native.compute_type == 68  # CUBLAS_COMPUTE_32F: no TF32


def test_without_cublaslt_the_variant_declines(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvmath", None)  # import nvmath -> ImportError
    ctx = KernelContext(
        stage="pw",
        attrs=_attrs(),
        in_shapes=((2, 4, 3, 3), (5, 4, 1, 1), None),
        in_dtypes=("float16", "float16", None),
        out_shapes=((2, 5, 3, 3),),
        out_dtypes=("float16",),
        backend=FakeBackend(),
    )
    with pytest.raises(VariantDeclined, match="cuBLASLt unavailable"):
        bind_conv2d_gemm(ctx)
