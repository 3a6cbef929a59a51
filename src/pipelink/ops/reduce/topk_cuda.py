"""top_k on CUDA (``topk.cu``): a block per line, windows of the line sorted in shared memory with the best
k so far; its tunables, the slots a dtype gets, when the kernel declines, the launch plan and the bind.
Pure Python + NumPy (imports nothing CUDA).

The kernel keeps up to ``slots`` (value, index) pairs in shared memory: 4096 (2048 for 8-byte values on
lines of 65,535 elements or more, whose indices need 4 bytes). A line up to ``slots`` long takes any k;
a longer one (a vocabulary) takes k up to ``slots / 2``. A larger k on such a line declines, and the
runtime runs the NumPy reference on staged copies (``staged_fallback``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...descriptor import KernelContext, VariantDeclined
from ...dtypes import get_dtype
from ...errors import InvalidArgumentError
from .._common import NUMERIC
from ..kernel import (
    DEFAULT_SM_COUNT,
    ArgSpec,
    KernelSource,
    LaunchPlan,
    PlanLaunch,
    kernel_dtype,
    make_plan,
    pointer,
    prod,
    shape_of,
    sm_count_of,
    tuned_of,
    tuned_values,
)
from .reference import top_k_axis

__all__ = ["KERNEL", "MAX_SLOTS", "top_k_slots", "top_k_decline", "plan_top_k", "top_k_bind"]

MAX_SLOTS = 4096
_SHARED_BYTES = 40 * 1024  # of the 48 KiB a block may hold statically
_NARROW_LIMIT = 0xFFFF  # indices below this fit the unsigned short slots (0xFFFF marks an empty slot)
KERNEL = KernelSource(
    "top_k",
    Path(__file__).resolve().parent / "topk.cu",
    "pl_top_k",
    {},
    {"block": (512, (128, 256, 512, 1024)), "max_blocks_per_sm": (4, (1, 2, 4, 8, 16))},
    dtypes=tuple(sorted(NUMERIC)),
)


def _value_bytes(dtype: Any) -> int:
    """Bytes of a value in the kernel's compare type (pl_acc: float for 16-bit types and float32,
    int for the 8- and 16-bit types and int32, uint32 itself, 8 bytes for the 64-bit types)."""
    return 8 if get_dtype(dtype).itemsize == 8 else 4


def top_k_slots(dtype: Any, length: int) -> tuple[int, bool]:
    """(the shared slots, whether indices are 4 bytes) for lines of ``length`` elements of ``dtype``."""
    wide = length >= _NARROW_LIMIT
    per_slot = _value_bytes(dtype) + (4 if wide else 2)
    slots = MAX_SLOTS
    while slots * per_slot > _SHARED_BYTES:
        slots //= 2
    return slots, wide


def top_k_decline(dtype: Any, length: int, k: int) -> str | None:
    """Why the kernel cannot take lines of ``length`` with this ``k`` (None: it can)."""
    slots, _ = top_k_slots(dtype, length)
    if length >= 2**32 - 1:
        return f"lines of {length} elements are longer than the CUDA kernel indexes (2^32 - 2)"
    if length > slots and k > slots // 2:
        return (
            f"k={k} on lines of {length} elements: the CUDA kernel keeps at most {slots // 2} candidates "
            f"on lines longer than {slots}"
        )
    return None


def plan_top_k(
    dtype: Any,
    shape: Any,
    axis: int,
    k: int,
    *,
    largest: bool = True,
    tuned: dict[str, int] | None = None,
    sm_count: int = DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``values, indices = top_k(x, k, axis)`` for a contiguous x into contiguous outputs of x's
    shape with the axis of size k: ``pl_top_k(x, values, indices, lines, len, inner, k)`` over x seen as
    ``[outer, len, inner]`` around ``axis`` (normalised). A block per line, as wide as half the slots a
    line of this length needs (at least a warp, at most the tuned block).

    Raises
    ------
    InvalidArgumentError
        A dtype the kernel does not take, an axis out of range, k outside ``[0, len]``, a line and k
        the kernel cannot take (:func:`top_k_decline`), a bad tunable.
    """
    op = KERNEL.op
    dt = kernel_dtype(dtype, op, KERNEL.dtypes)
    shp = shape_of(shape, op)
    if not 0 <= int(axis) < len(shp):
        raise InvalidArgumentError(
            f"{op}: the axis must be one of the {len(shp)} axes of shape {list(shp)} (got {axis})",
            op=op,
            axis=axis,
        )
    axis, k = int(axis), int(k)
    length, inner = shp[axis], prod(shp[axis + 1 :])
    if not 0 <= k <= length:
        raise InvalidArgumentError(f"{op}: k must be in [0, {length}] (got {k})", op=op, k=k)
    why = top_k_decline(dt.name, length, k)
    if why is not None:
        raise InvalidArgumentError(f"{op}: {why}", op=op, k=k)
    slots, wide = top_k_slots(dt.name, length)
    slots = min(slots, max(32, 1 << max(0, length - 1).bit_length()))  # a short line: fewer slots
    t = tuned_values(KERNEL, tuned)
    block = min(t["block"], max(32, slots // 2))
    lines = prod(shp[:axis]) * inner
    # narrow blocks (short lines) leave room for more of them on each multiprocessor
    per_sm = t["max_blocks_per_sm"] * max(1, 512 // block)
    grid = (max(1, min(lines, sm_count * per_sm)), 1, 1)
    macros = {
        "PL_T": dt.cuda_type,
        "PL_IS_INT": int(not dt.is_floating),
        "PL_LARGEST": int(bool(largest)),
        "PL_SLOTS": slots,
        "PL_WIDE_INDEX": int(wide),
        "PL_BLOCK": block,
    }
    specs = [
        pointer("x"),
        pointer("values"),
        pointer("indices"),
        ArgSpec("lines", "i64"),
        ArgSpec("len", "i64"),
        ArgSpec("inner", "i64"),
        ArgSpec("k", "i64"),
    ]
    scalars = {"lines": lines, "len": length, "inner": inner, "k": k}
    return make_plan(KERNEL, "pl_top_k", macros, grid, block, specs, scalars, dict(t, slots=slots))


def top_k_bind(ctx: KernelContext):
    """The CUDA bind of ``top_k``; declines (the staged reference runs) where :func:`top_k_decline` says."""
    dtype, shape = ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
    axis = top_k_axis(shape, ctx.attrs)  # k past an axis bound at run is refused here
    k, largest = int(ctx.attrs["k"]), bool(ctx.attrs["largest"])
    why = top_k_decline(dtype, shape[axis], k)
    if why is not None:
        raise VariantDeclined(f"{why}; top_k runs on the host for this stage")
    tuned, sms = tuned_of(ctx, KERNEL), sm_count_of(ctx)
    return PlanLaunch(
        ctx.backend,
        lambda a: plan_top_k(dtype, shape, axis, k, largest=largest, tuned=tuned, sm_count=sms),
        {"x": ("in", 0), "values": ("out", 0), "indices": ("out", 1)},
        ctx.stage,
    )
