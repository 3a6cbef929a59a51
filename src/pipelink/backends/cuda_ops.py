"""CUDA variants of the built-in operators: NVRTC kernels of ``pipelink.ops.cuda`` bound per stage.

``bind(ctx)`` compiles (cached), builds the launch config and the argument template once; the kernel
call then only drops the current pointers into the template and launches. Imported only by the CUDA
backend. A launch whose pointers are less aligned than the plan assumed (a DLPack view with an offset)
switches to a scalar-access plan of the same op, compiled on first need.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..descriptor import KernelContext, Variant
from ..dtypes import get_dtype
from ..ops.linalg import resolve_perm

__all__ = ["CUDA_VARIANT", "FLOAT_NAMES", "PlanLaunch", "register_cuda_variants"]

log = logging.getLogger("pipelink")

CUDA_VARIANT = "cuda:nvrtc"
FLOAT_NAMES = frozenset({"float32", "float16", "bfloat16", "float64"})
_SCALAR = {"i64": ctypes.c_int64, "i32": ctypes.c_int32, "f32": ctypes.c_float, "f64": ctypes.c_double}
Slot = tuple[str, int]  # ("in" | "out", position)


class PlanLaunch:
    """One prebuilt launch of a catalogue plan.

    The kernel's parameters live in ctypes storage built once, with an array of their addresses: a call
    writes the current pointers into their slots and calls ``cuLaunchKernel`` with that array (the
    driver copies the values at the launch, so the storage is reused at once). No per-call argument
    objects are built.

    Parameters
    ----------
    backend : CUDABackend
    make_plan : callable
        ``make_plan(alignment) -> LaunchPlan``; called with 16, and with the element size when a launch
        meets less aligned pointers.
    slots : mapping
        Kernel pointer argument name -> ``("in" | "out", position)``; names absent here are null.
    stage : str
    """

    def __init__(self, backend: Any, make_plan: Callable[[int], Any], slots: Mapping[str, Slot], stage: str,
                 alignment: int = 16):
        self.backend = backend
        self.stage = stage
        self._make_plan = make_plan
        self._slots = dict(slots)
        plan = make_plan(alignment)
        self.plan = plan
        self.kernel = backend.compile_kernel(plan.source(), plan.kernel, plan.program_options())
        self._function = backend.kernel_function(self.kernel)
        self._dims = (*plan.grid, *plan.block, int(plan.shared_mem))
        self._values: list[Any] = []  # ctypes storage of every parameter, in order
        self.pointers: list[tuple[Any, bool, int]] = []  # (storage, is output, position)
        self.scalar_index: dict[str, int] = {}
        mask = 0
        for i, spec in enumerate(plan.arg_specs):
            if spec.kind == "ptr":
                value = ctypes.c_uint64(0)
                slot = self._slots.get(spec.name)
                if slot is not None:
                    self.pointers.append((value, slot[0] == "out", slot[1]))
                mask |= spec.align - 1
            else:
                value = _SCALAR[spec.kind](plan.scalars[spec.name])
                self.scalar_index[spec.name] = i
            self._values.append(value)
        self._params = (ctypes.c_void_p * max(1, len(self._values)))(
            *[ctypes.addressof(v) for v in self._values])
        self._params_address = ctypes.addressof(self._params)
        self.mask = mask
        self._fallback: PlanLaunch | None = None

    def _bind(self, ins: list, outs: list) -> bool:
        """Write the tensors' pointers into the parameter storage; False when one breaks the alignment."""
        acc = 0
        for value, is_out, pos in self.pointers:
            t = outs[pos] if is_out else ins[pos]
            p = t.ptr if t is not None else 0
            acc |= p
            value.value = p
        return not acc & self.mask

    def __call__(self, ins: list, outs: list, stream: Any, **scalars: Any) -> None:
        if not self._bind(ins, outs):
            self.scalar_plan()(ins, outs, stream, **scalars)
            return
        values = self._values
        saved = []
        for name, value in scalars.items():
            slot = values[self.scalar_index[name]]
            saved.append((slot, slot.value))
            slot.value = value
        try:
            self.backend.launch_prepared(self._function, self._dims, self._params_address, stream,
                                         what=f"launch of {self.plan.kernel}", stage=self.stage)
        finally:
            for slot, value in saved:
                slot.value = value

    def scalar_plan(self) -> PlanLaunch:
        """The same op planned for element-aligned pointers only (compiled on first need)."""
        if self._fallback is None:
            self._fallback = PlanLaunch(self.backend, self._make_plan, self._slots, self.stage, alignment=1)
        return self._fallback


# -- binds ----------------------------------------------------------------------------------------
def _catalogue():
    from ..ops import cuda as catalogue

    return catalogue


def _common(ctx: KernelContext, op: str) -> dict[str, Any]:
    tunables = _catalogue().KERNELS[op].tunables
    tuned = {k: v for k, v in dict(ctx.params or {}).items() if k in tunables}
    return {"tuned": tuned or None, "sm_count": int(ctx.backend.info.features.get("sm_count", 132))}


def _align(alignment: int, itemsize: int) -> int:
    return max(alignment, itemsize)


def _unary_bind(op: str) -> Callable[[KernelContext], Callable]:
    def bind(ctx: KernelContext):
        cat, dtype, shape = _catalogue(), ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
        name = "gelu_tanh" if op == "gelu" and ctx.attrs.get("approximate", "none") == "tanh" else op
        factor = float(ctx.attrs.get("factor", 1.0))
        itemsize = get_dtype(dtype).itemsize
        return PlanLaunch(ctx.backend, lambda a: cat.plan_unary(
            name, dtype, shape, factor=factor, alignment=_align(a, itemsize), **_common(ctx, name)),
            {"x": ("in", 0), "y": ("out", 0)}, ctx.stage)

    return bind


def _binary_bind(op: str) -> Callable[[KernelContext], Callable]:
    def bind(ctx: KernelContext):
        cat, dtype = _catalogue(), ctx.in_dtypes[0]
        sa, sb = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
        itemsize = get_dtype(dtype).itemsize
        return PlanLaunch(ctx.backend, lambda a: cat.plan_binary(
            op, dtype, sa, sb, alignment=_align(a, itemsize), **_common(ctx, op)),
            {"a": ("in", 0), "b": ("in", 1), "y": ("out", 0)}, ctx.stage)

    return bind


def _bias_add_bind(ctx: KernelContext):
    cat, dtype, shape = _catalogue(), ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
    itemsize = get_dtype(dtype).itemsize
    return PlanLaunch(ctx.backend, lambda a: cat.plan_bias_add(
        dtype, shape, alignment=_align(a, itemsize), **_common(ctx, "bias_add")),
        {"x": ("in", 0), "bias": ("in", 1), "y": ("out", 0)}, ctx.stage)


def _copy_bind(ctx: KernelContext):
    backend = ctx.backend

    def kernel(ins, outs, stream):
        backend.copy(outs[0], ins[0], stream=stream)

    return kernel


def _cast_bind(ctx: KernelContext):
    cat, backend = _catalogue(), ctx.backend
    din, dout, shape = ctx.in_dtypes[0], ctx.out_dtypes[0], tuple(ctx.in_shapes[0])
    if din == dout:
        return _copy_bind(ctx)
    if din in FLOAT_NAMES and dout in FLOAT_NAMES:
        size = max(get_dtype(din).itemsize, get_dtype(dout).itemsize)
        return PlanLaunch(backend, lambda a: cat.plan_cast(
            din, dout, shape, alignment=_align(a, size), **_common(ctx, "cast")),
            {"x": ("in", 0), "y": ("out", 0)}, ctx.stage)
    # Integer and bool casts: the backend's own generic kernel (the catalogue covers floats only).
    from cuda.core import LaunchConfig

    from .cuda_kernels import CAST_SOURCE

    ti, to = get_dtype(din), get_dtype(dout)
    direct = int(ti.itemsize != 2 or not ti.is_floating) and int(to.itemsize != 2 or not to.is_floating)
    kernel = backend.compile_kernel(CAST_SOURCE, "pl_cast_any", {"std": "c++17", "define_macro": [
        ("PL_TIN", ti.cuda_type), ("PL_TOUT", to.cuda_type), ("PL_DIRECT", str(direct))]},
        [cat.include_dir()])
    n = math.prod(shape)
    blocks = max(1, min(-(-n // 256), int(backend.info.features["sm_count"]) * 8))
    config = LaunchConfig(grid=blocks, block=256)

    def cast_kernel(ins, outs, stream):
        backend.launch(stream, config, kernel, np.uint64(ins[0].ptr), np.uint64(outs[0].ptr), np.int64(n),
                       stage=ctx.stage)

    return cast_kernel


def _norm_bind(op: str, *, eps_input: bool = False):
    def bind(ctx: KernelContext):
        cat, dtype, shape = _catalogue(), ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
        itemsize = get_dtype(dtype).itemsize
        eps = float(ctx.attrs.get("eps", 1e-5))
        has_gamma = len(ctx.in_shapes) > 1 and ctx.in_shapes[1] is not None
        if op == "rms_norm":
            return PlanLaunch(ctx.backend, lambda a: cat.plan_rms_norm(
                dtype, shape, eps=eps, has_gamma=has_gamma, alignment=_align(a, itemsize),
                **_common(ctx, op)),
                {"x": ("in", 0), "gamma": ("in", 1), "y": ("out", 0)}, ctx.stage)
        has_beta = ctx.in_shapes[2] is not None
        launch = PlanLaunch(ctx.backend, lambda a: cat.plan_layer_norm(
            dtype, shape, eps=eps, has_gamma=has_gamma, has_beta=has_beta, alignment=_align(a, itemsize),
            **_common(ctx, "layer_norm")),
            {"x": ("in", 0), "gamma": ("in", 1), "beta": ("in", 2), "y": ("out", 0), "mean": ("out", 1),
             "rstd": ("out", 2)}, ctx.stage)
        if not eps_input:
            return launch
        # layer_norm_v1 takes eps as a 0-d device tensor: read it (4 bytes) before each launch.
        backend = ctx.backend
        host = backend.pinned_empty((1,), "float32")

        def v1_kernel(ins, outs, stream):
            backend._memcpy(host.ctypes.data, ins[3].ptr, 4, stream)
            backend.synchronize(stream)
            launch(ins, outs, stream, eps=float(host[0]))

        return v1_kernel

    return bind


def _softmax_bind(ctx: KernelContext):
    cat, backend, dtype = _catalogue(), ctx.backend, ctx.in_dtypes[0]
    shape = tuple(ctx.in_shapes[0])
    itemsize = get_dtype(dtype).itemsize
    axis = int(ctx.attrs.get("axis", -1)) % len(shape)
    common = _common(ctx, "softmax")
    if axis == len(shape) - 1:
        return PlanLaunch(
            backend, lambda a: cat.plan_softmax(dtype, shape, alignment=_align(a, itemsize), **common),
            {"x": ("in", 0), "y": ("out", 0)}, ctx.stage)
    # Another axis: move it last, softmax the rows, move it back (scratch allocated here, not per run).
    perm = tuple(i for i in range(len(shape)) if i != axis) + (axis,)
    inverse = tuple(int(i) for i in np.argsort(perm))
    moved = tuple(shape[p] for p in perm)
    scratch = [backend.empty(moved, get_dtype(dtype)), backend.empty(moved, get_dtype(dtype))]
    io = {"x": ("in", 0), "y": ("out", 0)}
    sms = common["sm_count"]
    to_last = PlanLaunch(backend, lambda a: cat.plan_transpose(dtype, shape, perm, sm_count=sms), io,
                         ctx.stage)
    rows = PlanLaunch(backend, lambda a: cat.plan_softmax(dtype, moved, alignment=_align(a, itemsize),
                                                          **common), io, ctx.stage)
    back = PlanLaunch(backend, lambda a: cat.plan_transpose(dtype, moved, inverse, sm_count=sms), io,
                      ctx.stage)

    def kernel(ins, outs, stream):
        to_last(ins, [scratch[0]], stream)
        rows([scratch[0]], [scratch[1]], stream)
        back([scratch[1]], outs, stream)

    return kernel


def _transpose_bind(ctx: KernelContext):
    cat, dtype, shape = _catalogue(), ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
    perm = resolve_perm(ctx.attrs.get("perm", ()), len(shape))
    common = _common(ctx, "transpose")
    return PlanLaunch(ctx.backend, lambda a: cat.plan_transpose(dtype, shape, perm, **common),
                      {"x": ("in", 0), "y": ("out", 0)}, ctx.stage)


def _batch_norm_bind(ctx: KernelContext):
    cat, dtype, shape = _catalogue(), ctx.in_dtypes[0], tuple(ctx.in_shapes[0])
    itemsize = get_dtype(dtype).itemsize
    eps = float(ctx.attrs.get("eps", 1e-5))
    has_gamma, has_beta = ctx.in_shapes[3] is not None, ctx.in_shapes[4] is not None
    return PlanLaunch(ctx.backend, lambda a: cat.plan_batch_norm(
        dtype, shape, eps=eps, has_gamma=has_gamma, has_beta=has_beta, alignment=_align(a, itemsize),
        **_common(ctx, "batch_norm")),
        {"x": ("in", 0), "mean": ("in", 1), "var": ("in", 2), "gamma": ("in", 3), "beta": ("in", 4),
         "y": ("out", 0)}, ctx.stage)


def _gemm_bind(ctx: KernelContext):
    from .cuda_gemm import bind_gemm

    return bind_gemm(ctx)


# -- registration ---------------------------------------------------------------------------------
def _variants() -> list[tuple[str, Callable, frozenset[str] | None, bool]]:
    """(operator, bind, input dtypes or None for all, supports graphs)."""
    has_nvmath = importlib.util.find_spec("nvmath") is not None
    floats = FLOAT_NAMES
    return [
        ("identity", _copy_bind, None, True),
        ("relu", _unary_bind("relu"), floats, True),
        ("silu", _unary_bind("silu"), floats, True),
        ("silu_activation", _unary_bind("silu"), floats, True),
        ("gelu", _unary_bind("gelu"), floats, True),
        ("scale", _unary_bind("scale"), floats, True),
        ("add", _binary_bind("add"), floats, True),
        ("mul", _binary_bind("mul"), floats, True),
        ("bias_add", _bias_add_bind, floats, True),
        ("cast", _cast_bind, None, True),
        ("precision_cast", _cast_bind, None, True),
        ("layer_norm", _norm_bind("layer_norm"), floats, True),
        ("layer_norm_v1", _norm_bind("layer_norm", eps_input=True), floats, False),
        ("rms_norm", _norm_bind("rms_norm"), floats, True),
        ("softmax", _softmax_bind, floats, True),
        ("transpose", _transpose_bind, None, True),
        ("batch_norm", _batch_norm_bind, floats, True),
        ("gemm", _gemm_bind, floats, has_nvmath),
    ]


def register_cuda_variants(registry: Any = None) -> int:
    """Attach a ``Variant(device="cuda")`` to every built-in operator (idempotent).

    Parameters
    ----------
    registry : OperatorRegistry, optional
        The global registry by default; the built-in operators are registered there first if needed.

    Returns
    -------
    int
        The number of variants added by this call (0 on a repeated call).
    """
    from ..ops import register_builtins

    if registry is None:
        from ..modules.registry import registry as global_registry

        registry = global_registry
    register_builtins(registry)
    added = 0
    for op, bind, dtypes, graphs in _variants():
        desc = registry.get(op, source="builtin")
        if any(v.device == "cuda" and v.name == CUDA_VARIANT for v in desc.variants):
            continue
        registry.add_variant(op, Variant(device="cuda", bind=bind, name=CUDA_VARIANT, dtypes=dtypes,
                                         priority=0, source="builtin", supports_graphs=graphs))
        added += 1
    return added
