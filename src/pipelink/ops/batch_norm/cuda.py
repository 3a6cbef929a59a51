"""The batch_norm family on CUDA: inference batch norm over channel axis 1 (``batch_norm.cu``), its
tunables, launch plan and bind. Pure Python + NumPy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...descriptor import KernelContext
from ...errors import InvalidArgumentError
from ..kernel import (
    DEFAULT_SM_COUNT,
    DEFAULT_UNROLL,
    FLAT_TUNABLES,
    ArgSpec,
    KernelSource,
    LaunchPlan,
    PlanLaunch,
    acc_kind,
    flat_grid,
    float_dtype,
    make_plan,
    pick_vec,
    pointer,
    prod,
    shape_of,
    sm_count_of,
    tuned_of,
    tuned_values,
)

__all__ = ["KERNELS", "TUNED_AS", "plan_batch_norm", "batch_norm_bind"]

KERNELS: dict[str, KernelSource] = {
    "batch_norm": KernelSource(
        "batch_norm",
        Path(__file__).resolve().parent / "batch_norm.cu",
        "pl_batch_norm",
        {},
        dict(FLAT_TUNABLES),
    ),
}
TUNED_AS: dict[str, str] = {}


def plan_batch_norm(
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
    """Plan inference batch norm of contiguous x [N, C, *spatial]; mean, var, gamma, beta: [C], x's dtype.

    Kernel ``pl_batch_norm(const T* x, const T* mean, const T* var, const T* gamma, const T* beta, T* y,
    long long n, long long C, long long S, ACC eps)`` with S = prod(spatial).

    Raises
    ------
    InvalidArgumentError
        x has fewer than 2 dims, a non-float dtype or a bad tunable.
    """
    source = KERNELS["batch_norm"]
    op = source.op
    dt = float_dtype(dtype, op)
    shp = shape_of(shape, op)
    if len(shp) < 2:
        raise InvalidArgumentError(f"batch_norm: x must be [N, C, *spatial] (got {shp})", op=op)
    n, c, s = prod(shp), max(shp[1], 1), max(prod(shp[2:]), 1)
    t = tuned_values(source, tuned)
    t["unroll"] = t["unroll"] or DEFAULT_UNROLL
    channel_last = int(s == 1)
    vec = pick_vec(t["vec"], dt.itemsize, alignment, op, c if channel_last else s)
    index64 = int(n >= 2**32)
    macros = {
        "PL_T": dt.cuda_type,
        "PL_VEC": vec,
        "PL_BLOCK": t["block"],
        "PL_UNROLL": t["unroll"],
        "PL_HAS_GAMMA": int(has_gamma),
        "PL_HAS_BETA": int(has_beta),
        "PL_CHANNEL_LAST": channel_last,
        "PL_INDEX64": index64,
    }
    grid = flat_grid(n // vec, t["block"], t["unroll"], t["max_blocks_per_sm"], sm_count)
    a = vec * dt.itemsize
    specs = [
        pointer("x", a),
        pointer("mean"),
        pointer("var"),
        pointer("gamma", optional=not has_gamma),
        pointer("beta", optional=not has_beta),
        pointer("y", a),
        ArgSpec("n", "i64"),
        ArgSpec("C", "i64"),
        ArgSpec("S", "i64"),
        ArgSpec("eps", acc_kind(dt)),
    ]
    return make_plan(
        source,
        "pl_batch_norm",
        macros,
        grid,
        t["block"],
        specs,
        {"n": n, "C": c, "S": s, "eps": eps},
        dict(t, vec=vec, index64=index64),
    )


def batch_norm_bind(ctx: KernelContext):
    dtype, shape = ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
    eps = float(ctx.attrs["eps"])
    has_gamma, has_beta = ctx.in_shapes[3] is not None, ctx.in_shapes[4] is not None
    tuned, sms = tuned_of(ctx, KERNELS["batch_norm"]), sm_count_of(ctx)
    return PlanLaunch(
        ctx.backend,
        lambda a: plan_batch_norm(
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
            "mean": ("in", 1),
            "var": ("in", 2),
            "gamma": ("in", 3),
            "beta": ("in", 4),
            "y": ("out", 0),
        },
        ctx.stage,
    )
