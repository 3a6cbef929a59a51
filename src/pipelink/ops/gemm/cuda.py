"""The gemm family on CUDA: cuBLASLt through nvmath-python's low-level bindings, with fused epilogues.

``gemm``: ``c = act(alpha * op(a) @ op(b) + beta * bias) + residual``. cuBLASLt's BIAS / RELU_BIAS /
GELU_BIAS epilogues fuse a bias vector ([N], beta = 1) and the activation (its GELU is the tanh form, so
``"gelu"`` (erf) runs the built-in GELU kernel after the product). Any other bias is cuBLASLt's C matrix
scaled by beta: read in place when it has c's shape, else first expanded into c by the transpose
family's strided copy (stride 0 on the broadcast dims) and read back as C = D. A residual rides on
``beta = 1, C = residual`` when C is free and no activation comes before it, else it is added by the
built-in add kernel.

``matmul``: cuBLASLt strided batched (:func:`plan_batches`): the batch count and one stride per operand
in the matrix layouts, stride 0 for an operand broadcast over the batch; when b is broadcast over the
whole batch, a's batch folds into M (one plain matmul). Batch dims whose broadcasting one stride per
operand cannot express become one cuBLASLt call per index of those (leading) dims, at element offsets
computed at bind: no copy.

Without nvmath (or without a loadable cuBLASLt) the product falls back to PyTorch through DLPack, with a
logged note. nvmath and PyTorch are imported when a stage binds, never at import time.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from ...descriptor import KernelContext
from ...errors import HardwareUnsupportedError
from ..elementwise.cuda import plan_binary, plan_unary
from ..kernel import KernelSource, LaunchPlan, PlanLaunch, contiguous_strides
from ..transpose.cuda import plan_transpose
from .lt import BatchPlan, LtMatmul, plan_batches
from .reference import gemm_dims, matmul_dims

__all__ = [
    "CUBLASLT_VARIANT",
    "KERNELS",
    "TUNED_AS",
    "GemmRoute",
    "route_gemm",
    "plan_bias_expand",
    "bind_gemm",
    "bind_matmul",
]

CUBLASLT_VARIANT = "cuda:cublaslt"  # the variant name of the operators cuBLASLt runs (gemm, matmul, 1x1 conv)

log = logging.getLogger("pipelink")

KERNELS: dict[str, KernelSource] = {}  # cuBLASLt chooses its own kernels: nothing to plan or tune here
TUNED_AS: dict[str, str] = {}


def bind_gemm(ctx: KernelContext) -> Any:
    """The gemm kernel for one stage: cuBLASLt when available, else PyTorch (logged once per stage)."""
    if math.prod(ctx.out_shapes[0]) == 0:
        return _write_nothing
    try:
        return _gemm_lt(ctx)
    except Exception as e:  # noqa: BLE001 - nvmath missing, libcublasLt not loadable, no algorithm
        _log_fallback(ctx, e)
    return _torch_kernel(ctx, "gemm")


def bind_matmul(ctx: KernelContext) -> Any:
    """The matmul kernel for one stage: cuBLASLt strided batched when available, else PyTorch."""
    if math.prod(ctx.out_shapes[0]) == 0:
        return _write_nothing
    a, b = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
    batch, m, k, n = matmul_dims(a, b)
    plan = plan_batches(a[:-2], b[:-2], batch, m, k, n)
    try:
        return LtMatmul(ctx, m=plan.m, n=n, k=k, batch=plan, alpha=1.0)
    except Exception as e:  # noqa: BLE001 - as in bind_gemm
        _log_fallback(ctx, e)
    return _torch_kernel(ctx, "matmul")


def _write_nothing(ins: list, outs: list, stream: Any) -> None:
    """The kernel of an empty output (an M, N or batch dimension of 0): there is nothing to compute."""


def _log_fallback(ctx: KernelContext, e: Exception) -> None:
    log.warning(
        "pipelink: stage %r: cuBLASLt via nvmath-python unavailable (%s); the product runs through PyTorch",
        ctx.stage,
        e,
    )


def _is_bias_vector(shape: tuple, n: int) -> bool:
    """A bias cuBLASLt's BIAS epilogue reads as is: N values, one per column ([N], [1, N], ...)."""
    return len(shape) >= 1 and shape[-1] == n and all(d == 1 for d in shape[:-1])


@dataclass(frozen=True)
class GemmRoute:
    """Where each part of ``act(alpha * op(a) @ op(b) + beta * bias) + residual`` runs for one stage.

    cuBLASLt computes ``D = epilogue(alpha * A @ B + beta * C [+ bias vector])``. ``epilogue`` is its
    name; ``bias_vector``: the bias is the BIAS epilogue's vector; ``expand_bias``: the bias is first
    broadcast into c, which is then read as C (C = D); ``c_source``: the input read as C (None: c);
    ``beta``: cuBLASLt's beta; ``post_activation`` / ``post_residual``: run as kernels after the call.
    """

    epilogue: str
    bias_vector: bool
    expand_bias: bool
    c_source: int | None
    beta: float
    post_activation: bool
    post_residual: bool


def route_gemm(
    dtype: str,
    out_shape: tuple,
    n: int,
    bias_shape: tuple | None,
    res_shape: tuple | None,
    beta: float,
    activation: str,
) -> GemmRoute:
    """The cuBLASLt mapping of one gemm stage (inputs: a 0, b 1, bias 2, residual 3)."""
    # cuBLASLt's GELU epilogue is the tanh form and computes in single precision: the erf GELU, and any
    # GELU in float64, run the exact kernel after.
    fusable = (
        {"none": "", "relu": "RELU"}
        if dtype == "float64"
        else {"none": "", "relu": "RELU", "gelu_tanh": "GELU"}
    )
    fused = fusable.get(activation, "")
    bias_vector = bias_shape is not None and beta == 1.0 and _is_bias_vector(bias_shape, n)
    c_source, c_beta, expand = None, 0.0, False
    if bias_shape is not None and not bias_vector:
        c_beta = beta
        if bias_shape == out_shape:
            c_source = 2
        else:
            expand = True
    elif res_shape == out_shape and activation == "none":
        c_source, c_beta = 3, 1.0
    epilogue = f"{fused}_BIAS" if bias_vector and fused else "BIAS" if bias_vector else fused or "DEFAULT"
    return GemmRoute(
        epilogue,
        bias_vector,
        expand,
        c_source,
        c_beta,
        post_activation=activation != "none" and not fused,
        post_residual=res_shape is not None and c_source != 3,
    )


def plan_bias_expand(dtype: str, bias_shape: tuple, out_shape: tuple) -> LaunchPlan:
    """Plan ``c = bias`` broadcast to c's shape: the transpose family's strided copy (identity
    permutation), reading the bias with stride 0 along the dims where it broadcasts."""
    nd = len(out_shape)
    padded = (1,) * (nd - len(bias_shape)) + tuple(bias_shape)
    strides = tuple(0 if d == 1 else st for d, st in zip(padded, contiguous_strides(padded), strict=True))
    return plan_transpose(dtype, out_shape, tuple(range(nd)), in_strides=strides)


def _gemm_lt(ctx: KernelContext) -> LtMatmul:
    """gemm's cuBLASLt call, with the launches :func:`route_gemm` puts before and after it."""
    backend, dtype, stage = ctx.backend, ctx.in_dtypes[0], ctx.stage
    a, b = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
    trans_a, trans_b = bool(ctx.attrs["trans_a"]), bool(ctx.attrs["trans_b"])
    lead, k, n = gemm_dims(a, b, trans_a, trans_b)
    out_shape = tuple(ctx.out_shapes[0])
    activation = ctx.attrs["activation"]
    bias_shape = None if ctx.in_shapes[2] is None else tuple(ctx.in_shapes[2])
    res_shape = None if ctx.in_shapes[3] is None else tuple(ctx.in_shapes[3])
    route = route_gemm(dtype, out_shape, n, bias_shape, res_shape, float(ctx.attrs["beta"]), activation)
    pre: list[PlanLaunch] = []
    post: list[PlanLaunch] = []
    if route.expand_bias:
        pre.append(
            PlanLaunch(
                backend,
                lambda _a: plan_bias_expand(dtype, bias_shape, out_shape),
                {"x": ("in", 2), "y": ("out", 0)},
                stage,
            )
        )
    if route.post_activation:
        post.append(
            PlanLaunch(
                backend,
                lambda al: plan_unary(activation, dtype, out_shape, alignment=al),
                {"x": ("out", 0), "y": ("out", 0)},
                stage,
            )
        )
    if route.post_residual:
        post.append(
            PlanLaunch(
                backend,
                lambda al: plan_binary("add", dtype, out_shape, res_shape, alignment=al),
                {"a": ("out", 0), "b": ("in", 3), "y": ("out", 0)},
                stage,
            )
        )
    m = math.prod(lead)
    return LtMatmul(
        ctx,
        m=m,
        n=n,
        k=k,
        batch=BatchPlan(1, m, (0, 0, 0), ((0, 0, 0),)),
        alpha=float(ctx.attrs["alpha"]),
        trans_a=trans_a,
        trans_b=trans_b,
        epilogue=route.epilogue,
        bias_input=2 if route.bias_vector else None,
        c_source=route.c_source,
        beta=route.beta,
        pre=pre,
        post=post,
    )


def _torch_kernel(ctx: KernelContext, op: str) -> Any:
    """The fallback: PyTorch on the stage's stream, zero-copy through DLPack (allocates temporaries)."""
    try:
        import torch
    except ImportError as e:
        raise HardwareUnsupportedError(
            f"stage {ctx.stage!r}: {op} on CUDA needs nvmath-python (cuBLASLt) or PyTorch; install "
            "'pipelink[cuda]'",
            stage=ctx.stage,
        ) from e
    compute = torch.float64 if ctx.in_dtypes[0] == "float64" else torch.float32
    attrs = ctx.attrs
    gemm = op == "gemm"

    def kernel(ins, outs, stream):
        with torch.cuda.stream(torch.cuda.ExternalStream(int(stream.handle))):
            ta, tb = (torch.from_dlpack(t).to(compute) for t in ins[:2])
            tc = torch.from_dlpack(outs[0])
            if not gemm:
                tc.copy_(torch.matmul(ta, tb))
                return
            bias, residual = ins[2], ins[3]
            r = (ta.t() if attrs["trans_a"] else ta) @ (tb.t() if attrs["trans_b"] else tb)
            r = r * attrs["alpha"]
            if bias is not None:
                r = r + attrs["beta"] * torch.from_dlpack(bias).to(compute)
            if attrs["activation"] == "relu":
                r = r.relu()
            elif attrs["activation"] in ("gelu", "gelu_tanh"):
                r = torch.nn.functional.gelu(
                    r, approximate="tanh" if attrs["activation"] == "gelu_tanh" else "none"
                )
            if residual is not None:
                r = r + torch.from_dlpack(residual).to(compute)
            tc.copy_(r)

    return kernel
