"""The rotary family on CUDA: rotary_embedding's kernel (``rotary.cu``), its tunables, launch plan and
bind. Pure Python + NumPy; position ids out of range follow gather's contract (``check_indices``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...descriptor import KernelContext
from ...dtypes import get_dtype
from ...errors import InvalidArgumentError
from ..kernel import (
    BLOCKS,
    DEFAULT_SM_COUNT,
    I32_LIMIT,
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
from ..shape.cuda import INDEX_TYPES, CheckedGather
from .reference import rotary_geometry

__all__ = ["KERNELS", "TUNED_AS", "ROTARY_DTYPES", "plan_rotary_embedding", "rotary_embedding_bind"]

ROTARY_DTYPES = ("float32", "float16", "bfloat16")  # ONNX RotaryEmbedding's T
KERNELS: dict[str, KernelSource] = {
    "rotary_embedding": KernelSource(
        "rotary_embedding",
        Path(__file__).resolve().parent / "rotary.cu",
        "pl_rotary_embedding",
        {},
        {"block": (256, BLOCKS), "max_blocks_per_sm": (8, (1, 2, 4, 8, 16, 32))},
        dtypes=ROTARY_DTYPES,
    ),
}
TUNED_AS: dict[str, str] = {}


def plan_rotary_embedding(
    dtype: Any,
    shape: Any,
    *,
    rotary_dim: int = 0,
    num_heads: int = 0,
    interleaved: bool = False,
    cache_shape: Any,
    index_dtype: str | None = None,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan rotary_embedding of contiguous x (``[B, S, H * D]`` with ``num_heads``, or ``[B, H, S, D]``),
    one thread per slot of a head (a rotated pair or a copied element): ``pl_rotary_embedding(x, cos_cache,
    sin_cache, position_ids, y, n, S, H, D, rotary_dim, max_pos, bad)``.

    ``cache_shape`` is the caches' (``[max_pos, rotary_dim/2]`` with position ids of ``index_dtype``, else
    ``[B, S, rotary_dim/2]``). The scalar ``bad`` (0 in the plan) is the address of a device word the
    kernel lowers to the first position of an out-of-range position id (the checked bind passes one).

    Raises
    ------
    InvalidArgumentError
        A dtype the kernel lacks, a position id dtype other than int32/int64, a geometry
        :func:`~pipelink.ops.rotary.reference.rotary_geometry` refuses, a bad tunable.
    """
    source = KERNELS["rotary_embedding"]
    op = source.op
    if str(dtype) not in ROTARY_DTYPES:
        raise InvalidArgumentError(
            f"{op}: dtype must be one of {', '.join(ROTARY_DTYPES)} (got {dtype})", op=op
        )
    if index_dtype is not None and index_dtype not in INDEX_TYPES:
        raise InvalidArgumentError(f"{op}: position_ids must be int32 or int64 (got {index_dtype})", op=op)
    dt = get_dtype(dtype)
    shp, cache = shape_of(shape, op), shape_of(cache_shape, op)
    geo = rotary_geometry(shp, {"num_heads": num_heads, "rotary_embedding_dim": rotary_dim})
    n = prod(shp) // geo.head_size * (geo.head_size - geo.half) if geo.head_size else 0
    t = tuned_values(source, tuned)
    index64 = int(prod(shp) >= I32_LIMIT or prod(cache) >= I32_LIMIT)
    macros = {
        "PL_T": dt.cuda_type,
        "PL_BLOCK": t["block"],
        "PL_HEADS_OUTER": int(geo.heads_outer),
        "PL_INTERLEAVED": int(bool(interleaved)),
        "PL_HAS_POSITIONS": int(index_dtype is not None),
        "PL_INDEX_T": INDEX_TYPES[index_dtype or "int64"],
        "PL_INDEX64": index64,
    }
    specs = [
        pointer("x"),
        pointer("cos_cache"),
        pointer("sin_cache"),
        pointer("position_ids", optional=index_dtype is None),
        pointer("y"),
        *(ArgSpec(name, "i64") for name in ("n", "S", "H", "D", "rotary_dim", "max_pos", "bad")),
    ]
    scalars = {
        "n": n,
        "S": max(geo.seq, 1),
        "H": max(geo.heads, 1),
        "D": max(geo.head_size, 1),
        "rotary_dim": geo.rotary_dim,
        "max_pos": cache[0] if index_dtype is not None else 0,
        "bad": 0,
    }
    grid = flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return make_plan(
        source, "pl_rotary_embedding", macros, grid, t["block"], specs, scalars, dict(t, index64=index64)
    )


class CheckedRotary(CheckedGather):
    """rotary_embedding with ``check_indices`` on CUDA: gather's check (a device word the kernel lowers to
    the first bad position, read back after a wait, then the CPU's error), over the position ids. The
    launch is built with the position ids in slot 1, where the check reads the offending id."""

    def __init__(self, ctx: KernelContext, launch: PlanLaunch):  # gather's state, for the caches' axis 0
        self.backend, self.launch, self.stage = ctx.backend, launch, ctx.stage
        self.op, self.axis, self.axis_n = "rotary_embedding position id (cache)", 0, int(ctx.in_shapes[1][0])
        self.word = self.backend.allocate(8, tag="rotary position check")
        self.host = self.backend.pinned_empty((2,), "int64")
        self.index = self.backend.pinned_empty((1,), ctx.in_dtypes[3])

    def __call__(self, ins: list, outs: list, stream: Any) -> None:
        x, cos_cache, sin_cache, positions = ins
        super().__call__([x, positions, cos_cache, sin_cache], outs, stream)


def rotary_embedding_bind(ctx: KernelContext):
    dtype, shape, cache = ctx.in_dtypes[0], tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
    index_dtype = ctx.in_dtypes[3] if ctx.in_shapes[3] is not None else None
    attrs = ctx.attrs
    tuned, sms = tuned_of(ctx, KERNELS["rotary_embedding"]), sm_count_of(ctx)
    checked = index_dtype is not None and attrs["check_indices"]
    # The checked launch sees the position ids in slot 1 (CheckedRotary's order), the plain one in 3.
    order = (
        ("x", "position_ids", "cos_cache", "sin_cache")
        if checked
        else ("x", "cos_cache", "sin_cache", "position_ids")
    )
    launch = PlanLaunch(
        ctx.backend,
        lambda a: plan_rotary_embedding(
            dtype,
            shape,
            rotary_dim=int(attrs["rotary_embedding_dim"]),
            num_heads=int(attrs["num_heads"]),
            interleaved=bool(attrs["interleaved"]),
            cache_shape=cache,
            index_dtype=index_dtype,
            tuned=tuned,
            sm_count=sms,
        ),
        {**{name: ("in", k) for k, name in enumerate(order)}, "y": ("out", 0)},
        ctx.stage,
    )
    return CheckedRotary(ctx, launch) if checked else launch
