"""The normalization family on CUDA: layer_norm and rms_norm over rows (``norm.cu``), their tunables,
launch plans and binds; layer_norm_v1 runs the layer_norm kernel with eps read from a tensor. Normalising
the trailing axes from ``axis`` is normalising rows of ``C = prod(x.shape[axis:])`` contiguous elements:
the binds plan for ``[rows, C]`` (gamma and beta, of shape x.shape[axis:], are C contiguous elements).

Pure Python + NumPy: nothing here imports a CUDA package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...descriptor import KernelContext
from ..kernel import (
    DEFAULT_SM_COUNT,
    ROW_TUNABLES,
    ArgSpec,
    KernelSource,
    LaunchPlan,
    PlanLaunch,
    acc_kind,
    float_dtype,
    make_plan,
    pointer,
    row_geometry,
    sm_count_of,
    tuned_of,
)
from .reference import norm_rows

__all__ = ["KERNELS", "TUNED_AS", "plan_layer_norm", "plan_rms_norm", "layer_norm_bind", "rms_norm_bind"]

_SOURCE = Path(__file__).resolve().parent / "norm.cu"
KERNELS: dict[str, KernelSource] = {
    "layer_norm": KernelSource("layer_norm", _SOURCE, "pl_layer_norm", {}, dict(ROW_TUNABLES)),
    "rms_norm": KernelSource("rms_norm", _SOURCE, "pl_rms_norm", {}, dict(ROW_TUNABLES)),
}
TUNED_AS: dict[str, str] = {}  # layer_norm_v1 is not tuned (its eps comes from a device tensor)


def plan_layer_norm(
    dtype: Any,
    shape: Any,
    *,
    eps: float,
    has_gamma: bool = True,
    has_beta: bool = True,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan layer norm over the last dim of a contiguous x; gamma, beta have x's dtype and shape [C].

    Kernel ``pl_layer_norm[_big](const T* x, const T* gamma, const T* beta, T* y, ACC* mean, ACC* rstd,
    long long rows, int C, ACC eps)``; ACC (also the dtype of mean/rstd [rows]) is float32, or float64
    for float64 x. gamma/beta/mean/rstd may be null (0). ``eps``: the stage's attribute (its default is
    the descriptor's).
    """
    source = KERNELS["layer_norm"]
    dt = float_dtype(dtype, source.op)
    macros, suffix, grid, block, rows, c, params = row_geometry(source, dt, shape, tuned, alignment, sm_count)
    macros.update(PL_HAS_GAMMA=int(has_gamma), PL_HAS_BETA=int(has_beta))
    a = int(macros["PL_VEC"]) * dt.itemsize
    specs = [
        pointer("x", a),
        pointer("gamma", a, optional=not has_gamma),
        pointer("beta", a, optional=not has_beta),
        pointer("y", a),
        pointer("mean", optional=True),
        pointer("rstd", optional=True),
        ArgSpec("rows", "i64"),
        ArgSpec("C", "i32"),
        ArgSpec("eps", acc_kind(dt)),
    ]
    return make_plan(
        source,
        "pl_layer_norm" + suffix,
        macros,
        grid,
        block,
        specs,
        {"rows": rows, "C": c, "eps": eps},
        params,
    )


def plan_rms_norm(
    dtype: Any,
    shape: Any,
    *,
    eps: float,
    has_gamma: bool = True,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan RMS norm over the last dim: ``y = x * rsqrt(mean(x^2) + eps) * gamma``.

    Kernel ``pl_rms_norm[_big](const T* x, const T* gamma, T* y, long long rows, int C, ACC eps)``.
    """
    source = KERNELS["rms_norm"]
    dt = float_dtype(dtype, source.op)
    macros, suffix, grid, block, rows, c, params = row_geometry(source, dt, shape, tuned, alignment, sm_count)
    macros.update(PL_HAS_GAMMA=int(has_gamma), PL_HAS_BETA=0)
    a = int(macros["PL_VEC"]) * dt.itemsize
    specs = [
        pointer("x", a),
        pointer("gamma", a, optional=not has_gamma),
        pointer("y", a),
        ArgSpec("rows", "i64"),
        ArgSpec("C", "i32"),
        ArgSpec("eps", acc_kind(dt)),
    ]
    return make_plan(
        source, "pl_rms_norm" + suffix, macros, grid, block, specs, {"rows": rows, "C": c, "eps": eps}, params
    )


def layer_norm_bind(ctx: KernelContext, *, eps_input: bool = False):
    """layer_norm (eps from the attribute), or layer_norm_v1 (eps from a 0-d device tensor, read on the
    host before each launch: such a stage cannot be captured in a CUDA graph)."""
    dtype, shape = ctx.in_dtypes[0], norm_rows(ctx)
    eps = 0.0 if eps_input else float(ctx.attrs["eps"])  # v1: replaced at each launch
    has_gamma, has_beta = ctx.in_shapes[1] is not None, ctx.in_shapes[2] is not None
    tuned, sms = tuned_of(ctx, KERNELS["layer_norm"]), sm_count_of(ctx)
    launch = PlanLaunch(
        ctx.backend,
        lambda a: plan_layer_norm(
            dtype,
            shape,
            eps=eps,
            has_gamma=has_gamma,
            has_beta=has_beta,
            alignment=a,
            tuned=tuned,
            sm_count=sms,
        ),
        {
            "x": ("in", 0),
            "gamma": ("in", 1),
            "beta": ("in", 2),
            "y": ("out", 0),
            "mean": ("out", 1),
            "rstd": ("out", 2),
        },
        ctx.stage,
    )
    if not eps_input:
        return launch
    backend = ctx.backend
    host = backend.pinned_empty((1,), "float32")

    def v1_kernel(ins, outs, stream):
        backend._memcpy(host.ctypes.data, ins[3].ptr, 4, stream)
        backend.synchronize(stream)
        launch(ins, outs, stream, eps=float(host[0]))

    return v1_kernel


def rms_norm_bind(ctx: KernelContext):
    dtype, shape = ctx.in_dtypes[0], norm_rows(ctx)
    eps = float(ctx.attrs["eps"])
    has_gamma = ctx.in_shapes[1] is not None
    tuned, sms = tuned_of(ctx, KERNELS["rms_norm"]), sm_count_of(ctx)
    return PlanLaunch(
        ctx.backend,
        lambda a: plan_rms_norm(
            dtype, shape, eps=eps, has_gamma=has_gamma, alignment=a, tuned=tuned, sm_count=sms
        ),
        {"x": ("in", 0), "gamma": ("in", 1), "y": ("out", 0)},
        ctx.stage,
    )
