"""The gemm family on CUDA: cuBLASLt through nvmath-python's low-level bindings, with fused epilogues.

``c = act(alpha * a @ b + bias) + residual``. cuBLASLt's BIAS / RELU_BIAS / GELU_BIAS epilogues fuse the
bias and the activation (its GELU is the tanh form, so ``"gelu"`` (erf) runs the built-in GELU kernel
after the product); a residual rides on ``beta = 1, C = residual`` when no activation comes before it,
else it is added by the built-in add kernel. Without nvmath (or without a loadable cuBLASLt) the product
falls back to PyTorch through DLPack, with a logged note. nvmath and PyTorch are imported when a stage
binds, never at import time.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from ...descriptor import KernelContext
from ...errors import HardwareUnsupportedError
from ..elementwise.cuda import plan_binary, plan_unary
from ..kernel import KernelSource, PlanLaunch

__all__ = ["KERNELS", "TUNED_AS", "bind_gemm"]

log = logging.getLogger("pipelink")

KERNELS: dict[str, KernelSource] = {}  # cuBLASLt chooses its own kernels: nothing to plan or tune here
TUNED_AS: dict[str, str] = {}
WORKSPACE_BYTES = 32 << 20
# dtype -> (cudaDataType of A/B/C/D, cublasComputeType, cudaDataType of alpha/beta, NumPy scale type)
_TYPES = {"float32": (0, 68, 0, np.float32), "float64": (1, 70, 1, np.float64),
          "float16": (2, 68, 0, np.float32), "bfloat16": (14, 68, 0, np.float32)}


def bind_gemm(ctx: KernelContext) -> Any:
    """The gemm kernel for one stage: cuBLASLt when available, else PyTorch (logged once per stage)."""
    try:
        return _LtGemm(ctx)
    except Exception as e:  # noqa: BLE001 - nvmath missing, libcublasLt not loadable, no algorithm
        log.warning("pipelink: stage %r: cuBLASLt via nvmath-python unavailable (%s); gemm runs through "
                 "PyTorch", ctx.stage, e)
    return _torch_gemm(ctx)


def _dims(ctx: KernelContext) -> tuple[int, int, int, bool]:
    a, b = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
    trans_b = bool(ctx.attrs["trans_b"])
    k = a[-1]
    n = b[0] if trans_b else b[1]
    return math.prod(a[:-1]), n, k, trans_b


class _LtGemm:
    """One stage's cuBLASLt matmul: descriptors, layouts and algorithm chosen at bind."""

    def __init__(self, ctx: KernelContext):
        import nvmath.bindings.cublasLt as lt

        self.lt = lt
        self.backend = backend = ctx.backend
        self.stage = ctx.stage
        dtype = ctx.in_dtypes[0]
        data_type, compute, scale_type, scalar = _TYPES[dtype]
        if dtype == "float32" and dict(ctx.params or {}).get("math") == "tf32":
            compute = 77  # CUBLAS_COMPUTE_32F_FAST_TF32: precision_policy "tf32"
        m, n, k, trans_b = _dims(ctx)
        activation = ctx.attrs["activation"]
        self.has_bias = ctx.in_shapes[2] is not None
        has_residual = ctx.in_shapes[3] is not None
        self.handles: dict[int, int] = {}
        self.handle_for(backend.default_stream())  # loads libcublasLt now: a failure falls back at bind
        self.desc = lt.matmul_desc_create(compute, scale_type)
        op_b = np.array([1 if trans_b else 0], np.int32)  # "A" of the column-major call is our b
        op_n = np.array([0], np.int32)
        self._set(lt.MatmulDescAttribute.TRANSA, op_b)
        self._set(lt.MatmulDescAttribute.TRANSB, op_n)
        # cuBLASLt's GELU epilogue computes in single precision: float64 runs the exact kernel after.
        fusable = {"none": "", "relu": "RELU"} if dtype == "float64" else {"none": "", "relu": "RELU",
                                                                           "gelu_tanh": "GELU"}
        fused = fusable.get(activation, "")
        if self.has_bias:
            epilogue = lt.Epilogue[f"{fused}_BIAS"] if fused else lt.Epilogue.BIAS
        else:
            epilogue = lt.Epilogue[fused] if fused else lt.Epilogue.DEFAULT
        self._set(lt.MatmulDescAttribute.EPILOGUE, np.array([int(epilogue)], np.uint32))
        self.bias_ptr = np.zeros(1, np.int64)
        # Row-major c[M,N] = a[M,K] @ b[K,N] is column-major c^T = b^T a^T: "A" = b, "B" = a.
        self.a_layout = (lt.matrix_layout_create(data_type, k, n, k) if trans_b
                         else lt.matrix_layout_create(data_type, n, k, n))
        self.b_layout = lt.matrix_layout_create(data_type, k, m, k)
        self.c_layout = lt.matrix_layout_create(data_type, n, m, n)
        out_shape = tuple(ctx.out_shapes[0])
        self.use_beta = has_residual and activation == "none" and tuple(ctx.in_shapes[3]) == out_shape
        self.alpha = np.array([float(ctx.attrs["alpha"])], scalar)
        self.beta = np.array([1.0 if self.use_beta else 0.0], scalar)
        pref = lt.matmul_preference_create()
        ws = np.array([WORKSPACE_BYTES], np.uint64)
        lt.matmul_preference_set_attribute(pref, lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES,
                                           ws.ctypes.data, ws.itemsize)
        self.heuristic = np.zeros(1, dtype=lt.matmul_heuristic_result_dtype)
        found = np.zeros(1, np.int32)
        lt.matmul_algo_get_heuristic(self.handle_for(backend.default_stream()), self.desc, self.a_layout,
                                     self.b_layout, self.c_layout, self.c_layout, pref, 1,
                                     self.heuristic.ctypes.data, found.ctypes.data)
        lt.matmul_preference_destroy(pref)
        if found[0] < 1:
            raise RuntimeError(f"cuBLASLt has no algorithm for {dtype} {m}x{n}x{k} with this epilogue")
        self.workspace_size = min(int(self.heuristic["workspace_size"][0]) or 0, WORKSPACE_BYTES)
        self.workspace = backend.allocate(max(self.workspace_size, 1), tag="cublaslt-workspace")
        self.post: list[PlanLaunch] = []
        if activation in ("gelu", "gelu_tanh") and not fused:
            self.post.append(PlanLaunch(
                backend, lambda a: plan_unary(activation, dtype, out_shape, alignment=a),
                {"x": ("out", 0), "y": ("out", 0)}, ctx.stage))
        if has_residual and not self.use_beta:
            res_shape = tuple(ctx.in_shapes[3])
            self.post.append(PlanLaunch(backend, lambda a: plan_binary("add", dtype, out_shape, res_shape,
                                                                           alignment=a),
                                        {"a": ("out", 0), "b": ("in", 3), "y": ("out", 0)}, ctx.stage))

    def _set(self, attr: Any, value: np.ndarray) -> None:
        self.lt.matmul_desc_set_attribute(self.desc, attr, value.ctypes.data, value.itemsize)

    def handle_for(self, stream: Any) -> int:
        key = int(stream.handle)
        handle = self.handles.get(key)
        if handle is None:
            handle = self.handles[key] = self.lt.create()
        return handle

    def __call__(self, ins: list, outs: list, stream: Any) -> None:
        a, b, bias, residual = ins
        c = outs[0]
        lt = self.lt
        if self.has_bias and self.bias_ptr[0] != bias.ptr:  # the descriptor keeps it between calls
            self.bias_ptr[0] = bias.ptr
            self._set(lt.MatmulDescAttribute.BIAS_POINTER, self.bias_ptr)
        c_in = residual.ptr if self.use_beta else c.ptr
        try:
            lt.matmul(self.handle_for(stream), self.desc, self.alpha.ctypes.data, b.ptr, self.a_layout,
                      a.ptr, self.b_layout, self.beta.ctypes.data, c_in, self.c_layout, c.ptr, self.c_layout,
                      self.heuristic.ctypes.data, self.workspace.ptr, self.workspace_size, int(stream.handle))
        except lt.cuBLASLtError as e:
            raise self.backend.raise_cuda(e, "cublasLtMatmul", self.stage) from e
        for launch in self.post:
            launch(ins, outs, stream)

    def __del__(self):
        try:
            lt = self.lt
            lt.matmul_desc_destroy(self.desc)
            for layout in (self.a_layout, self.b_layout, self.c_layout):
                lt.matrix_layout_destroy(layout)
            for handle in self.handles.values():
                lt.destroy(handle)
            self.workspace.free()
        except Exception:  # noqa: BLE001 - partially built, or at interpreter exit
            pass


def _torch_gemm(ctx: KernelContext) -> Any:
    """The fallback: PyTorch on the stage's stream, zero-copy through DLPack (allocates temporaries)."""
    try:
        import torch
    except ImportError as e:
        raise HardwareUnsupportedError(
            f"stage {ctx.stage!r}: gemm on CUDA needs nvmath-python (cuBLASLt) or PyTorch; install "
            "'pipelink[cuda]'", stage=ctx.stage) from e
    m, n, k, trans_b = _dims(ctx)
    alpha = float(ctx.attrs["alpha"])
    activation = ctx.attrs["activation"]
    compute = torch.float64 if ctx.in_dtypes[0] == "float64" else torch.float32

    def kernel(ins, outs, stream):
        a, b, bias, residual = ins
        with torch.cuda.stream(torch.cuda.ExternalStream(int(stream.handle))):
            ta = torch.from_dlpack(a).reshape(m, k).to(compute)
            tb = torch.from_dlpack(b).to(compute)
            r = ta @ (tb.t() if trans_b else tb)
            if alpha != 1.0:
                r.mul_(alpha)
            if bias is not None:
                r.add_(torch.from_dlpack(bias).to(compute))
            if activation == "relu":
                r.relu_()
            elif activation in ("gelu", "gelu_tanh"):
                r = torch.nn.functional.gelu(r, approximate="tanh" if activation == "gelu_tanh" else "none")
            tc = torch.from_dlpack(outs[0])
            if residual is not None:
                r = r.reshape(tc.shape) + torch.from_dlpack(residual).to(compute)
            tc.copy_(r.reshape(tc.shape))

    return kernel
