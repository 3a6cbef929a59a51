"""The compare family on CUDA: kernel sources and tunables, launch plans and binds.

Every operator runs a kernel of ``compare.cu``: the comparisons and the two-input logical operators
``pl_compare`` (same shape, vectorised) or ``pl_compare_bcast`` (NumPy broadcasting), the one-input
``logical_not``, ``is_nan`` and ``is_inf`` ``pl_predicate``. Pure Python + NumPy: nothing here imports a
CUDA package (a bind's :class:`PlanLaunch` compiles and launches through the backend).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...descriptor import KernelContext
from ...errors import InvalidArgumentError
from ..kernel import (
    DEFAULT_SM_COUNT,
    DEFAULT_UNROLL,
    FLAT_TUNABLES,
    FLOATS,
    ArgSpec,
    KernelSource,
    LaunchPlan,
    PlanLaunch,
    broadcast_walk,
    flat_grid,
    flat_launch,
    kernel_dtype,
    make_plan,
    pick_vec,
    pointer,
    prod,
    shape_of,
    sm_count_of,
    spread_small,
    strided_scalars,
    strided_specs,
    tuned_of,
    tuned_values,
)

__all__ = [
    "KERNELS",
    "TUNED_AS",
    "COMPARE",
    "LOGICAL",
    "DTYPES",
    "plan_compare",
    "PREDICATES",
    "plan_logical_not",
    "plan_predicate",
    "compare_bind",
    "logical_not_bind",
    "predicate_bind",
]

_SOURCE = Path(__file__).resolve().parent / "compare.cu"

_NUMERIC = FLOATS + ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
# operator -> the PL_CMP_* code of compare.cu
COMPARE = {
    "equal": "PL_CMP_EQ",
    "less": "PL_CMP_LT",
    "greater": "PL_CMP_GT",
    "less_equal": "PL_CMP_LE",
    "greater_equal": "PL_CMP_GE",
}
LOGICAL = {"logical_and": "PL_CMP_AND", "logical_or": "PL_CMP_OR", "logical_xor": "PL_CMP_XOR"}
PREDICATES = {"logical_not": "PL_CMP_NOT", "is_nan": "PL_CMP_ISNAN", "is_inf": "PL_CMP_ISINF"}
"""The one-input operators (``pl_predicate``) -> their PL_CMP_* code."""
DTYPES: dict[str, tuple[str, ...]] = {
    **{op: _NUMERIC + (("bool",) if op == "equal" else ()) for op in COMPARE},
    **{op: ("bool",) for op in (*LOGICAL, "logical_not")},
    **{op: FLOATS for op in ("is_nan", "is_inf")},
}
"""The input dtypes each kernel accepts (the CUDA variants' dtypes); every output is bool."""

KERNELS: dict[str, KernelSource] = {
    **{
        op: KernelSource(op, _SOURCE, "pl_compare", {"PL_CMP_OP": m}, dict(FLAT_TUNABLES), dtypes=DTYPES[op])
        for op, m in {**COMPARE, **LOGICAL}.items()
    },
    **{
        op: KernelSource(
            op, _SOURCE, "pl_predicate", {"PL_CMP_OP": m}, dict(FLAT_TUNABLES), dtypes=DTYPES[op]
        )
        for op, m in PREDICATES.items()
    },
}
"""Every kernel of this family, by the op name its plans use."""

TUNED_AS: dict[str, str] = {}
"""Operators that run (and are tuned as) another operator's kernel: none here."""


def _input_dtype(op: str, dtype: Any):
    """The DType of the inputs, checked against :data:`DTYPES`, and the C type the kernel reads them as
    (bool as its byte)."""
    dt = kernel_dtype(dtype, op, DTYPES[op])
    return dt, "unsigned char" if dt.name == "bool" else dt.cuda_type


def _flat(
    op: str,
    kernel: str,
    dtype: Any,
    n: int,
    io: list[str],
    tuned,
    alignment: int,
    sm_count: int,
    extra: dict[str, Any] | None = None,
) -> LaunchPlan:
    """The vectorised flat launch over ``n`` elements: inputs ``io[:-1]`` of ``dtype``, bool output
    ``io[-1]`` (its vectors are ``vec`` bytes: aligned whenever the inputs' are)."""
    dt, ctype = _input_dtype(op, dtype)
    source = KERNELS[op]
    t = tuned_values(source, tuned)
    t["unroll"] = t["unroll"] or DEFAULT_UNROLL  # memory-bound: no transcendental to make it 1
    vec = pick_vec(t["vec"], dt.itemsize, alignment, op)
    t = spread_small(t, tuned, n // vec, sm_count)
    macros = {
        "PL_T": ctype,
        **source.macros,
        "PL_BOOL_IN": int(dt.name == "bool"),
        "PL_VEC": vec,
        **(extra or {}),
    }
    launch, grid = flat_launch(t, n, vec, sm_count)
    macros.update(launch)
    # Alignment the vector accesses need, none at vec 1: PlanLaunch checks every pointer against the
    # widest alignment of all, so an element-aligned T input (itemsize > 1) would refuse an odd bool output
    # of the element-aligned plan, which is the fallback for exactly such pointers.
    a = vec * dt.itemsize if vec > 1 else 1
    specs = [pointer(name, a) for name in io[:-1]]
    specs += [pointer(io[-1], vec), ArgSpec("n", "i64")]
    return make_plan(source, kernel, macros, grid, t["block"], specs, {"n": n}, dict(t, vec=vec))


def plan_compare(
    op: str,
    dtype: Any,
    shape_a: Any,
    shape_b: Any,
    *,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan the bool ``y = a op b`` (op in :data:`COMPARE` or :data:`LOGICAL`) with NumPy broadcasting;
    a and b contiguous, of ``dtype``; y contiguous.

    Same shapes: ``pl_compare(const T* a, const T* b, bool* y, long long n)`` (vectorised). Otherwise
    ``pl_compare_bcast(a, b, y, long long n, d0..d7, sa0..sa7, sb0..sb7)`` over the output shape collapsed
    to PL_NDIM dims (strides in elements, 0 on broadcast dims).

    Raises
    ------
    InvalidArgumentError
        An unknown op, a dtype outside :data:`DTYPES`, shapes that do not broadcast, more than 8 dims
        after collapsing, a bad tunable.
    """
    if op not in COMPARE and op not in LOGICAL:
        raise InvalidArgumentError(
            f"unknown compare op {op!r}; known: {', '.join([*COMPARE, *LOGICAL])}", op=op
        )
    sa, sb = shape_of(shape_a, op), shape_of(shape_b, op)
    if sa == sb:
        return _flat(op, "pl_compare", dtype, prod(sa), ["a", "b", "y"], tuned, alignment, sm_count)
    dt, ctype = _input_dtype(op, dtype)
    walk = broadcast_walk(op, [sa, sb])
    n, dims, (st_a, st_b), index64 = walk.n, walk.dims, walk.strides, walk.index64
    source = KERNELS[op]
    t = tuned_values(source, tuned)
    macros = {
        "PL_T": ctype,
        **source.macros,
        "PL_BOOL_IN": int(dt.name == "bool"),
        "PL_VEC": 1,
        "PL_BLOCK": t["block"],
        "PL_NDIM": len(dims),
        "PL_INDEX64": index64,
    }
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    specs = [pointer("a"), pointer("b"), pointer("y"), ArgSpec("n", "i64"), *strided_specs(("sa", "sb"))]
    scalars = {"n": n, **strided_scalars(dims, {"sa": st_a, "sb": st_b})}
    params = dict(t, vec=1, ndim=len(dims), index64=index64)
    return make_plan(source, "pl_compare_bcast", macros, grid, t["block"], specs, scalars, params)


def plan_logical_not(
    shape: Any,
    *,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan the bool ``y = not x`` over a contiguous bool x: ``pl_logical_not(const bool* x, bool* y,
    long long n)`` (vectorised).

    Raises
    ------
    InvalidArgumentError
        A negative dimension or a bad tunable.
    """
    return plan_predicate("logical_not", "bool", shape, tuned=tuned, alignment=alignment, sm_count=sm_count)


def plan_predicate(
    op: str,
    dtype: Any,
    shape: Any,
    *,
    detect_positive: bool = True,
    detect_negative: bool = True,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan the bool ``y = op(x)`` (op in :data:`PREDICATES`) over a contiguous x: ``pl_predicate(const
    T* x, bool* y, long long n)`` (vectorised). ``is_inf`` reports +inf with ``detect_positive`` and -inf
    with ``detect_negative``.

    Raises
    ------
    InvalidArgumentError
        An unknown op, a dtype outside :data:`DTYPES`, a negative dimension or a bad tunable.
    """
    if op not in PREDICATES:
        raise InvalidArgumentError(f"unknown predicate {op!r}; known: {', '.join(PREDICATES)}", op=op)
    n = prod(shape_of(shape, op))
    extra = (
        {"PL_DETECT_POS": int(detect_positive), "PL_DETECT_NEG": int(detect_negative)}
        if op == "is_inf"
        else None
    )
    return _flat(op, "pl_predicate", dtype, n, ["x", "y"], tuned, alignment, sm_count, extra)


# -- binds ----------------------------------------------------------------------------------------
def compare_bind(op: str):
    """The CUDA bind of a comparison or two-input logical operator, with broadcasting."""

    def bind(ctx: KernelContext):
        dtype = ctx.in_dtypes[0]
        sa, sb = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
        tuned, sms = tuned_of(ctx, KERNELS[op]), sm_count_of(ctx)
        return PlanLaunch(
            ctx.backend,
            lambda a: plan_compare(op, dtype, sa, sb, alignment=a, tuned=tuned, sm_count=sms),
            {"a": ("in", 0), "b": ("in", 1), "y": ("out", 0)},
            ctx.stage,
        )

    return bind


def predicate_bind(op: str):
    """The CUDA bind of a one-input operator of :data:`PREDICATES` (is_inf's attributes read here)."""

    def bind(ctx: KernelContext):
        dtype, shape = ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
        flags = {}
        if op == "is_inf":
            flags = {k: bool(ctx.attrs[k]) for k in ("detect_positive", "detect_negative")}
        tuned, sms = tuned_of(ctx, KERNELS[op]), sm_count_of(ctx)
        return PlanLaunch(
            ctx.backend,
            lambda a: plan_predicate(op, dtype, shape, alignment=a, tuned=tuned, sm_count=sms, **flags),
            {"x": ("in", 0), "y": ("out", 0)},
            ctx.stage,
        )

    return bind


logical_not_bind = predicate_bind("logical_not")
"""The CUDA bind of logical_not."""
