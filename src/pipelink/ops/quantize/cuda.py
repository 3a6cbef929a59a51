"""Linear (de)quantization on CUDA: ``quantize.cu`` (one thread per element, float32 arithmetic as the CPU
reference, float8, float4 and sub-byte conversions in software on the bits), its plans and binds. Pure
Python + NumPy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...descriptor import KernelContext
from ...dtypes import get_dtype
from ...errors import InvalidArgumentError
from ..kernel import (
    BLOCKS,
    DEFAULT_SM_COUNT,
    STORAGE_KINDS,
    ArgSpec,
    KernelSource,
    LaunchPlan,
    PlanLaunch,
    flat_grid,
    make_plan,
    pointer,
    prod,
    shape_of,
    sm_count_of,
    tuned_of,
    tuned_values,
)

__all__ = [
    "KERNELS",
    "TUNED_AS",
    "Q_KINDS",
    "FLOAT_TYPES",
    "plan_quantize",
    "quantize_bind",
    "dequantize_bind",
]

_SOURCE = Path(__file__).resolve().parent / "quantize.cu"
_TUNABLES = {"block": (256, BLOCKS), "max_blocks_per_sm": (8, (1, 2, 4, 8, 16, 32))}
Q_KINDS = {
    "int8": "PL_Q_INT8",
    "uint8": "PL_Q_UINT8",
    "int16": "PL_Q_INT16",
    "uint16": "PL_Q_UINT16",
    **STORAGE_KINDS,
}
FLOAT_TYPES = ("float32", "float16", "bfloat16")  # of x / y and the scale
KERNELS: dict[str, KernelSource] = {
    "quantize_linear": KernelSource(
        "quantize_linear", _SOURCE, "pl_quantize", {"PL_QUANTIZE": "1"}, dict(_TUNABLES), dtypes=FLOAT_TYPES
    ),
    "dequantize_linear": KernelSource(
        "dequantize_linear",
        _SOURCE,
        "pl_dequantize",
        {"PL_DEQUANTIZE": "1"},
        dict(_TUNABLES),
        dtypes=tuple(Q_KINDS),
    ),
}
TUNED_AS: dict[str, str] = {}
_ROUND_MACROS = {"up": "PL_E8M0_UP", "down": "PL_E8M0_DOWN", "nearest": "PL_E8M0_NEAREST"}  # fp8.cuh's


def plan_quantize(
    op: str,
    float_dtype: Any,
    q_dtype: Any,
    shape: Any,
    axis: int | None,
    *,
    saturate: bool = True,
    round_mode: str = "up",
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``quantize_linear`` (float x -> q y) or ``dequantize_linear`` (q x -> float y) over a contiguous
    x of ``shape``, with one scale (``axis`` None) or one per index of ``axis``.

    Kernel ``pl_quantize(x, scale, zero, y, n, inner, axis_len)`` / ``pl_dequantize(...)`` (same
    arguments); ``zero`` may be null. ``round_mode`` (up, down, nearest) is float8_e8m0fnu's rounding.

    Raises
    ------
    InvalidArgumentError
        An unknown op, a float or quantized dtype the kernel does not take, an unknown round_mode, a bad
        tunable.
    """
    if op not in KERNELS:
        raise InvalidArgumentError(f"unknown op {op!r}; known: {', '.join(KERNELS)}", op=op)
    source = KERNELS[op]
    ft, qt = get_dtype(float_dtype), get_dtype(q_dtype)
    if ft.name not in FLOAT_TYPES or qt.name not in Q_KINDS:
        raise InvalidArgumentError(
            f"{op}: needs a float of {', '.join(FLOAT_TYPES)} and a quantized type of {', '.join(Q_KINDS)} "
            f"(got {ft.name} and {qt.name})",
            op=op,
        )
    if round_mode not in _ROUND_MACROS:
        raise InvalidArgumentError(
            f"{op}: round_mode must be one of {', '.join(_ROUND_MACROS)} (got {round_mode!r})", op=op
        )
    shp = shape_of(shape, op)
    n = prod(shp)
    axis_len = shp[axis] if axis is not None else 1
    inner = prod(shp[axis + 1 :]) if axis is not None else 1
    t = tuned_values(source, tuned)
    macros = {
        **source.macros,
        "PL_T": ft.cuda_type,
        "PL_Q": Q_KINDS[qt.name],
        "PL_SATURATE": int(bool(saturate)),
        "PL_BLOCK": t["block"],
    }
    if qt.name == "float8_e8m0fnu":  # the one type round_mode rounds into
        macros["PL_ROUND"] = _ROUND_MACROS[round_mode]
    specs = [
        pointer("x"),
        pointer("scale"),
        pointer("zero", optional=True),
        pointer("y"),
        ArgSpec("n", "i64"),
        ArgSpec("inner", "i64"),
        ArgSpec("axis_len", "i64"),
    ]
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return make_plan(
        source,
        source.kernel,
        macros,
        grid,
        t["block"],
        specs,
        {"n": n, "inner": max(inner, 1), "axis_len": max(axis_len, 1)},
        dict(t),
    )


_SLOTS = {"x": ("in", 0), "scale": ("in", 1), "zero": ("in", 2), "y": ("out", 0)}


def quantize_bind(scale_layout):
    """The CUDA bind of quantize_linear; ``scale_layout`` is the reference's (per tensor or per axis)."""

    def bind(ctx: KernelContext):
        shape = tuple(ctx.in_shapes[0])
        axis = scale_layout(
            "quantize_linear", shape, tuple(ctx.in_shapes[1]), ctx.in_shapes[2], int(ctx.attrs["axis"])
        )
        fdt, qdt, saturate = ctx.in_dtypes[0], ctx.out_dtypes[0], bool(ctx.attrs["saturate"])
        round_mode = ctx.attrs["round_mode"]
        tuned, sms = tuned_of(ctx, KERNELS["quantize_linear"]), sm_count_of(ctx)
        return PlanLaunch(
            ctx.backend,
            lambda a: plan_quantize(
                "quantize_linear",
                fdt,
                qdt,
                shape,
                axis,
                saturate=saturate,
                round_mode=round_mode,
                tuned=tuned,
                sm_count=sms,
            ),
            _SLOTS,
            ctx.stage,
        )

    return bind


def dequantize_bind(scale_layout):
    """The CUDA bind of dequantize_linear; ``scale_layout`` is the reference's."""

    def bind(ctx: KernelContext):
        shape = tuple(ctx.in_shapes[0])
        axis = scale_layout(
            "dequantize_linear", shape, tuple(ctx.in_shapes[1]), ctx.in_shapes[2], int(ctx.attrs["axis"])
        )
        qdt, fdt = ctx.in_dtypes[0], ctx.out_dtypes[0]
        tuned, sms = tuned_of(ctx, KERNELS["dequantize_linear"]), sm_count_of(ctx)
        return PlanLaunch(
            ctx.backend,
            lambda a: plan_quantize("dequantize_linear", fdt, qdt, shape, axis, tuned=tuned, sm_count=sms),
            _SLOTS,
            ctx.stage,
        )

    return bind
