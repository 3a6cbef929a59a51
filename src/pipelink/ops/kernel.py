"""The kernel-plan machinery every built-in CUDA operator shares: what a kernel source is (KernelSource),
what one launch needs (ArgSpec, LaunchPlan), the planning helpers (vector width, grid, tunables, shape
collapsing), the one hash of a kernel source, and the prebuilt launch (PlanLaunch).

Pure Python + NumPy: it never imports ``cuda.core`` or ``cuda.bindings``, touches a device or allocates.
An operator family's ``cuda.py`` declares its ``KernelSource`` entries and plans launches with these
helpers; a bind wraps the plan in a :class:`PlanLaunch`, which compiles through
``backend.compile_kernel`` and launches through ``backend.kernel_function`` / ``backend.launch_prepared``.

Alignment rule: every buffer the runtime gives is aligned to >= 256 bytes (``alignment=`` says what
may be assumed; default 16). A kernel touches ``vec`` elements per access, so a plan picks ``vec``
(at most ``16 // itemsize``) only when every address it forms is a multiple of ``vec * itemsize``.
:meth:`LaunchPlan.args` and :class:`PlanLaunch` re-check the pointers they are given.

Tunables (``KernelSource.tunables``: name -> (default, allowed values); 0 means "chosen from the shape")
are passed as ``tuned={...}``; every plan records the values it used in ``plan.params``.
"""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..descriptor import KernelContext, Variant
from ..dtypes import DType, get_dtype
from ..errors import InvalidArgumentError

__all__ = [
    "CUDA_VARIANT",
    "FLOATS",
    "DEFAULT_SM_COUNT",
    "DEFAULT_UNROLL",
    "MAX_NDIM",
    "I32_LIMIT",
    "GRID_YZ_MAX",
    "SEED_ALIASES",
    "FLAT_TUNABLES",
    "ROW_TUNABLES",
    "BLOCKS",
    "ArgSpec",
    "KernelSource",
    "LaunchPlan",
    "NativeKernel",
    "PlanLaunch",
    "include_dir",
    "source_hash",
    "cuda_variant",
    "tuned_values",
    "spread_small",
    "tuned_of",
    "float_dtype",
    "kernel_dtype",
    "acc_kind",
    "pick_vec",
    "prod",
    "shape_of",
    "flat_grid",
    "pointer",
    "make_plan",
    "contiguous_strides",
    "broadcast_strides",
    "broadcast_walk",
    "BroadcastWalk",
    "collapse",
    "strided_scalars",
    "strided_specs",
    "row_geometry",
    "sm_count_of",
    "STORAGE_KINDS",
]

_DIR = Path(__file__).resolve().parent
CUDA_VARIANT = "cuda:nvrtc"
FLOATS = ("float32", "float16", "bfloat16", "float64")
#: the storage types fp8.cuh converts in software, each held as a byte, by the macro naming each: the
#: float8s (PL_Q_E4M3FN...PL_Q_E8M0), float4_e2m1fn (PL_Q_E2M1), the sub-byte integers (PL_Q_INT4...)
STORAGE_KINDS = {
    "float8_e4m3fn": "PL_Q_E4M3FN",
    "float8_e5m2": "PL_Q_E5M2",
    "float8_e4m3fnuz": "PL_Q_E4M3FNUZ",
    "float8_e5m2fnuz": "PL_Q_E5M2FNUZ",
    "float8_e8m0fnu": "PL_Q_E8M0",
    "float4_e2m1fn": "PL_Q_E2M1",
    "int4": "PL_Q_INT4",
    "uint4": "PL_Q_UINT4",
    "int2": "PL_Q_INT2",
    "uint2": "PL_Q_UINT2",
}
DEFAULT_SM_COUNT = 132  # H200
MAX_NDIM = 8
I32_LIMIT = 2**31
GRID_YZ_MAX = 65535

#: The seed's tuning-space parameter names -> the kernels' tunables (a family may declare more).
SEED_ALIASES = {"block_size": "block", "unroll_factor": "unroll", "vector_width": "vec", "vec_width": "vec"}

BLOCKS = (64, 128, 256, 512, 1024)
DEFAULT_UNROLL = 4  # vectors in flight per thread of a memory-bound flat kernel (unroll 0)
_VECS = (0, 1, 2, 4, 8)
FLAT_TUNABLES = {  # defaults measured on an H200 (256 MiB operands): block 512, 16 blocks/SM
    "block": (512, BLOCKS),
    "vec": (0, _VECS),
    "unroll": (0, (0, 1, 2, 4)),  # 0: chosen per op, DEFAULT_UNROLL unless the family's plan says why not
    "max_blocks_per_sm": (16, (1, 2, 4, 8, 16, 32)),
}
# block 512 measured best on an H200 for fp32 and bf16 rows of 4096 (scripts/kernel_sweep.py)
ROW_TUNABLES = {
    "block": (512, BLOCKS),
    "group": (0, (0, 1, 2, 4, 8, 16, 32) + BLOCKS),
    "vec": (0, _VECS),
    "max_vec_per_thread": (8, (1, 2, 4, 8, 16)),
    "max_blocks_per_sm": (32, (1, 2, 4, 8, 16, 32, 64)),
}

# name -> (C type in the kernel signature, numpy scalar type used to pass it, ctypes storage type)
_KINDS = {
    "ptr": ("void*", np.uint64, ctypes.c_uint64),
    "i64": ("long long", np.int64, ctypes.c_int64),
    "i32": ("int", np.int32, ctypes.c_int32),
    "f32": ("float", np.float32, ctypes.c_float),
    "f64": ("double", np.float64, ctypes.c_double),
}


def include_dir() -> str:
    """The folder holding ``common.cuh``, the one header every built-in kernel includes (``-I``)."""
    return str(_DIR)


def source_hash(text: str, macros: Mapping[str, Any] | None = None, headers: Iterable[str] = ()) -> str:
    """The one hash of a kernel source: SHA-256 over its text, each header's text and the sorted macros.

    Used for the compiled-module key of a plan and for the tuning cache key, so both change exactly when
    the code that would run changes.
    """
    h = hashlib.sha256(text.encode() + b"\0")
    for header in headers:
        h.update(header.encode() + b"\0")
    h.update(repr(sorted((str(k), str(v)) for k, v in dict(macros or {}).items())).encode())
    return h.hexdigest()


def _common_header() -> str:
    return (_DIR / "common.cuh").read_text(encoding="utf-8")


@dataclass(frozen=True)
class KernelSource:
    """One built-in kernel: its ``.cu`` file (in its family's folder), kernel name, fixed macros, tunable
    parameters and the tuning-space names that map onto them.

    Raises
    ------
    InvalidArgumentError
        From :meth:`text` when the file does not exist.
    """

    op: str
    path: Path
    kernel: str
    macros: dict[str, str]
    tunables: dict[str, tuple[int, tuple[int, ...]]]
    dtypes: tuple[str, ...] = FLOATS
    aliases: dict[str, str] = field(default_factory=lambda: dict(SEED_ALIASES))

    @property
    def file(self) -> str:
        return self.path.name

    def text(self) -> str:
        """The source text (``common.cuh`` is reached through ``-I``, see :func:`include_dir`)."""
        if not self.path.is_file():
            raise InvalidArgumentError(
                f"{self.op}: kernel source {self.path} is missing; reinstall pipelink",
                op=self.op,
                file=str(self.path),
            )
        return self.path.read_text(encoding="utf-8")

    def source_hash(self) -> str:
        """:func:`source_hash` of this kernel's file, ``common.cuh`` and its fixed macros."""
        return source_hash(self.text(), self.macros, (_common_header(),))


@dataclass(frozen=True)
class ArgSpec:
    """One kernel argument: its name, kind (``ptr``, ``i64``, ``i32``, ``f32``, ``f64``) and, for
    pointers, whether it may be null and the byte alignment the kernel relies on."""

    name: str
    kind: str
    optional: bool = False
    align: int = 1

    @property
    def c_type(self) -> str:
        return _KINDS[self.kind][0]


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to compile and launch one kernel for one shape.

    The backend compiles :meth:`source` with :meth:`program_options` (or :meth:`options` for nvcc / raw
    NVRTC), takes ``kernel`` from the module and launches ``grid`` x ``block`` with :meth:`args`.
    """

    op: str
    path: Path
    kernel: str
    macros: dict[str, str]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    arg_specs: tuple[ArgSpec, ...]
    scalars: dict[str, Any] = field(default_factory=dict)
    params: dict[str, int] = field(default_factory=dict)

    @property
    def file(self) -> str:
        return self.path.name

    def source(self) -> str:
        """The kernel source text."""
        return self.path.read_text(encoding="utf-8")

    def options(
        self, arch: str | None = "sm_90", extra_include: list[str] | tuple[str, ...] = ()
    ) -> list[str]:
        """NVRTC / nvcc options: ``-std=c++17``, ``-I<ops folder>``, one ``-D`` per macro, ``-arch``."""
        opts = ["-std=c++17", f"-I{_DIR}"] + [f"-I{d}" for d in extra_include]
        opts += [f"-D{k}={v}" for k, v in sorted(self.macros.items())]
        if arch:
            opts.append(f"-arch={arch}")
        return opts

    def program_options(self, arch: str | None = None) -> dict[str, Any]:
        """Keyword arguments for ``cuda.core.ProgramOptions`` (arch None: the current device's)."""
        kwargs: dict[str, Any] = {
            "std": "c++17",
            "include_path": [str(_DIR)],
            "define_macro": [(k, v) for k, v in sorted(self.macros.items())],
        }
        if arch:
            kwargs["arch"] = arch
        return kwargs

    @property
    def cache_key(self) -> str:
        """:func:`source_hash` of the source, ``common.cuh`` and the macros: equal keys, equal modules."""
        return source_hash(self.source(), self.macros, (_common_header(),))[:32]

    def args(self, **values: Any) -> tuple:
        """The kernel arguments, in order, as NumPy scalars.

        Pointers (``int``, ``ctypes.c_void_p`` or anything with ``__int__``) are given by name;
        sizes and attributes come from the plan (``self.scalars``) unless given.

        Raises
        ------
        InvalidArgumentError
            When a required pointer is missing, a pointer is misaligned for the plan's vector width,
            or an unknown name is given.
        """
        names = {a.name for a in self.arg_specs}
        unknown = sorted(set(values) - names)
        if unknown:
            raise InvalidArgumentError(
                f"{self.kernel}: unknown argument(s) {unknown}; expected {sorted(names)}", kernel=self.kernel
            )
        out = []
        for spec in self.arg_specs:
            if spec.kind == "ptr":
                ptr = _as_pointer(values.get(spec.name))
                if ptr == 0 and not spec.optional:
                    raise InvalidArgumentError(
                        f"{self.kernel}: pointer {spec.name!r} is required (got null)",
                        kernel=self.kernel,
                        arg=spec.name,
                    )
                if ptr % spec.align:
                    raise InvalidArgumentError(
                        f"{self.kernel}: pointer {spec.name!r}=0x{ptr:x} is not {spec.align}-byte aligned; "
                        f"re-plan with alignment={ptr & -ptr}",
                        kernel=self.kernel,
                        arg=spec.name,
                    )
                out.append(np.uint64(ptr))
            else:
                value = values.get(spec.name, self.scalars.get(spec.name))
                if value is None:
                    raise InvalidArgumentError(
                        f"{self.kernel}: missing scalar argument {spec.name!r}",
                        kernel=self.kernel,
                        arg=spec.name,
                    )
                out.append(_KINDS[spec.kind][1](value))
        return tuple(out)


def _as_pointer(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, ctypes.c_void_p):
        return value.value or 0
    return int(value)


# --------------------------------------------------------------------------------------------
# The prebuilt launch
# --------------------------------------------------------------------------------------------
Slot = tuple[str, int]  # ("in" | "out", position)


@dataclass(frozen=True)
class NativeKernel:
    """One kernel launch as the native core replays it (``runtime/planfile.py`` writes it into a plan).

    ``cubin`` is the module NVRTC made holding kernel ``name``; ``dims`` is
    ``(gx, gy, gz, bx, by, bz, shared_mem)``; ``params`` has one entry per kernel parameter, in order:
    ``("ptr", slot or None, align)`` for a pointer (None: always null) or ``(kind, value)`` for a scalar.
    """

    cubin: bytes
    name: str
    dims: tuple[int, ...]
    params: tuple[tuple, ...]


class PlanLaunch:
    """One prebuilt launch of a plan: the kernel a bind returns.

    The kernel's parameters live in ctypes storage built once, with an array of their addresses: a call
    writes the current pointers into their slots and launches with that array (the driver copies the
    values at the launch, so the storage is reused at once). No per-call argument objects are built.
    A launch whose pointers are less aligned than the plan assumed (a DLPack view with an offset)
    switches to a scalar-access plan of the same op, compiled on first need.

    Parameters
    ----------
    backend : CUDABackend
        Provides ``compile_kernel``, ``kernel_function`` and ``launch_prepared``.
    make_plan : callable
        ``make_plan(alignment) -> LaunchPlan``; called with 16, and with 1 when a launch meets less
        aligned pointers.
    slots : mapping
        Kernel pointer argument name -> ``("in" | "out", position)``; names absent here are null.
    stage : str
    """

    def __init__(
        self,
        backend: Any,
        make_plan: Callable[[int], LaunchPlan],
        slots: Mapping[str, Slot],
        stage: str,
        alignment: int = 16,
    ):
        self.backend = backend
        self.stage = stage
        self._make_plan = make_plan
        self._slots = dict(slots)
        plan = make_plan(alignment)
        self.plan = plan
        self.kernel = backend.compile_kernel(plan.source(), plan.kernel, plan.program_options())
        self._function = backend.kernel_function(self.kernel)
        self._dims = (*plan.grid, *plan.block, int(plan.shared_mem))
        self._alignment = alignment
        self._values: list[Any] = []  # ctypes storage of every parameter, in order
        # (storage, is output, position, the low address bits that must be 0: each pointer's own alignment,
        # so an output of a narrower type than the input is checked against its own, not the input's)
        self.pointers: list[tuple[Any, bool, int, int]] = []
        self.scalar_index: dict[str, int] = {}
        for i, spec in enumerate(plan.arg_specs):
            if spec.kind == "ptr":
                value = ctypes.c_uint64(0)
                slot = self._slots.get(spec.name)
                if slot is not None:
                    self.pointers.append((value, slot[0] == "out", slot[1], spec.align - 1))
            else:
                value = _KINDS[spec.kind][2](plan.scalars[spec.name])
                self.scalar_index[spec.name] = i
            self._values.append(value)
        self._params = (ctypes.c_void_p * max(1, len(self._values)))(
            *[ctypes.addressof(v) for v in self._values]
        )
        self._params_address = ctypes.addressof(self._params)
        self._fallback: PlanLaunch | None = None

    def _bind(self, ins: list, outs: list) -> bool:
        """Write the tensors' pointers into the parameter storage; False when one breaks its alignment."""
        bad = 0
        for value, is_out, pos, mask in self.pointers:
            t = outs[pos] if is_out else ins[pos]
            p = t.ptr if t is not None else 0
            bad |= p & mask
            value.value = p
        return not bad

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
            self.backend.launch_prepared(
                self._function,
                self._dims,
                self._params_address,
                stream,
                what=f"launch of {self.plan.kernel}",
                stage=self.stage,
            )
        finally:
            for slot, value in saved:
                slot.value = value

    def native_launches(self) -> list[NativeKernel]:
        """This launch for the native core (scalars as planned; pointers by slot, with their alignment)."""
        params = tuple(
            ("ptr", self._slots.get(s.name), s.align) if s.kind == "ptr" else (s.kind, value.value)
            for s, value in zip(self.plan.arg_specs, self._values, strict=True)
        )
        cubin = self.backend.compiler.cubin_of(self.kernel)
        return [NativeKernel(cubin, self.plan.kernel, self._dims, params)]

    def scalar_plan(self) -> PlanLaunch:
        """The same op planned for element-aligned pointers only (compiled on first need).

        Raises
        ------
        InvalidArgumentError
            This is that plan already: a pointer is not aligned even to its element's size (a view at
            an odd byte offset), which no kernel of the op reads.
        """
        if self._alignment == 1:
            raise InvalidArgumentError(
                f"stage {self.stage!r}: a tensor of {self.plan.kernel} starts at an address that is not a "
                "multiple of its element size; pass tensors whose data is aligned to their dtype "
                "(a copy, or a view at an element boundary)",
                stage=self.stage,
            )
        if self._fallback is None:
            self._fallback = PlanLaunch(self.backend, self._make_plan, self._slots, self.stage, alignment=1)
        return self._fallback


def cuda_variant(
    bind: Callable[[KernelContext], Any],
    dtypes: Iterable[str] | None,
    *,
    supports_graphs: bool = True,
    name: str = CUDA_VARIANT,
) -> Variant:
    """The CUDA variant a family declares for one of its operators (dtypes None: any): ``cuda:nvrtc`` for
    the built-in kernels, another ``name`` where a library does the work (``cuda:cudnn``)."""
    return Variant(
        device="cuda",
        bind=bind,
        name=name,
        dtypes=frozenset(dtypes) if dtypes is not None else None,
        priority=0,
        source="builtin",
        supports_graphs=supports_graphs,
    )


# --------------------------------------------------------------------------------------------
# Planning helpers
# --------------------------------------------------------------------------------------------
def sm_count_of(ctx: KernelContext) -> int:
    """The stage's device's multiprocessor count (the H200's when the backend does not say)."""
    return int(ctx.backend.info.features.get("sm_count", DEFAULT_SM_COUNT))


def tuned_of(ctx: KernelContext, source: KernelSource) -> dict[str, int] | None:
    """The stage's tuned values of ``source``'s tunables (None when there are none)."""
    tuned = {k: v for k, v in dict(ctx.params or {}).items() if k in source.tunables}
    return tuned or None


def tuned_values(source: KernelSource, tuned: Mapping[str, int] | None) -> dict[str, int]:
    """Every tunable of ``source``: its default, or the tuned value after checking it is allowed.

    Raises
    ------
    InvalidArgumentError
        An unknown tunable, or a value outside its allowed set.
    """
    spec, op = source.tunables, source.op
    values = {k: d for k, (d, _) in spec.items()}
    for k, v in (tuned or {}).items():
        if k not in spec:
            raise InvalidArgumentError(f"{op}: unknown tunable {k!r}; tunables: {', '.join(spec)}", op=op)
        if int(v) not in spec[k][1]:
            raise InvalidArgumentError(f"{op}: tunable {k} must be one of {spec[k][1]} (got {v!r})", op=op)
        values[k] = int(v)
    return values


def kernel_dtype(dtype: Any, op: str, allowed: Iterable[str]) -> DType:
    """The DType of ``dtype``, which must be one of ``allowed`` (the dtypes a kernel is built for).

    Raises
    ------
    InvalidArgumentError
        For another dtype, naming the allowed ones.
    """
    dt = get_dtype(dtype)
    allowed = tuple(allowed)
    if dt.name not in allowed:
        raise InvalidArgumentError(
            f"{op}: dtype must be one of {', '.join(allowed)} (got {dt.name})", op=op, dtype=dt.name
        )
    return dt


def float_dtype(dtype: Any, op: str) -> DType:
    """The DType of ``dtype``, which must be a float the kernels support (:func:`kernel_dtype`)."""
    return kernel_dtype(dtype, op, FLOATS)


def acc_kind(dt: DType) -> str:
    """The ArgSpec kind of an accumulation-type scalar: ``f64`` for float64, else ``f32``."""
    return "f64" if dt.name == "float64" else "f32"


def _widest_vec(itemsize: int, alignment: int, *divides: int) -> int:
    """Widest power-of-two vector (<= 16 bytes, <= alignment) dividing every size in ``divides``."""
    vec = max(1, min(16, alignment) // itemsize)
    while vec > 1 and any(d % vec for d in divides):
        vec //= 2
    return vec


def pick_vec(requested: int, itemsize: int, alignment: int, op: str, *divides: int) -> int:
    """The vector width: ``requested``, or the widest valid one for 0.

    Raises
    ------
    InvalidArgumentError
        When ``requested`` would misalign an access.
    """
    widest = _widest_vec(itemsize, alignment, *divides)
    if requested == 0:
        return widest
    if requested > widest:
        raise InvalidArgumentError(
            f"{op}: vec={requested} would misalign accesses (widest valid: {widest})", op=op
        )
    return requested


def prod(shape: Iterable[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def shape_of(shape: Any, op: str) -> tuple[int, ...]:
    """``shape`` as a tuple of ints.

    Raises
    ------
    InvalidArgumentError
        For a negative dimension.
    """
    out = tuple(int(d) for d in shape)
    if any(d < 0 for d in out):
        raise InvalidArgumentError(f"{op}: dimensions must be >= 0 (got {out})", op=op)
    return out


SMALL_BLOCK = 256  # threads per block of a vectorised flat kernel over small work (spread_small)


def spread_small(
    t: dict[str, int], tuned: Mapping[str, int] | None, work: int, sm_count: int
) -> dict[str, int]:
    """The tunables of a vectorised flat kernel over ``work`` vectors: when neither ``block`` nor ``unroll``
    was tuned and the work fits one :data:`SMALL_BLOCK`-thread block per SM at one vector per thread, those
    (block 256, unroll 1); else ``t`` unchanged. Small kernels are latency-bound: spread over more SMs with
    one load in flight per thread they finish sooner (H200, relu on 4,096 / 65,536 floats: 1.26 -> 1.01 us
    and 1.57 -> 1.09 us against the defaults; torch.relu 0.94 and 1.03 us; at 1M floats the defaults stay
    best, 2.06 us against 2.49 us)."""
    if tuned and ("block" in tuned or "unroll" in tuned):
        return t
    if work > sm_count * SMALL_BLOCK:
        return t
    return dict(t, block=SMALL_BLOCK, unroll=1)


def flat_launch(t: Mapping[str, int], n: int, vec: int, sm_count: int) -> tuple[dict[str, int], tuple]:
    """The launch of a vectorised flat kernel (``common.cuh: pl_vector_loop``) over ``n`` elements in
    vectors of ``vec``: its launch macros (``PL_BLOCK``, ``PL_UNROLL``, ``PL_ONE_PASS``) and its grid.
    ``PL_ONE_PASS`` when the grid covers every vector once at unroll 1 and ``n < 2**31``: no grid-stride
    loop, 32-bit indices (H200, a CUDA graph of 20 such kernels on 4,096 floats: 22.7 us with the loop,
    20.6 us without, PyTorch's graph of the same ops 20.7 us)."""
    work = n // vec
    grid = flat_grid(work, t["block"], t["unroll"], t["max_blocks_per_sm"], sm_count)
    one_pass = t["unroll"] == 1 and grid[0] * t["block"] >= work and n < 2**31
    return {"PL_BLOCK": t["block"], "PL_UNROLL": t["unroll"], "PL_ONE_PASS": int(one_pass)}, grid


def flat_grid(
    work: int, block: int, unroll: int, max_blocks_per_sm: int, sm_count: int
) -> tuple[int, int, int]:
    """A 1-d grid for a grid-stride loop over ``work`` items, capped at ``max_blocks_per_sm`` per SM."""
    blocks = max(1, -(-work // (block * unroll)))
    return (min(blocks, sm_count * max_blocks_per_sm), 1, 1)


def pointer(name: str, align: int = 1, optional: bool = False) -> ArgSpec:
    return ArgSpec(name, "ptr", optional=optional, align=align)


def make_plan(
    source: KernelSource, kernel: str, macros: Mapping[str, Any], grid, block, specs, scalars, params
) -> LaunchPlan:
    """A LaunchPlan of ``source`` (macros stringified, block given as an int or a 3-tuple)."""
    block3 = block if isinstance(block, tuple) else (block, 1, 1)
    return LaunchPlan(
        op=source.op,
        path=source.path,
        kernel=kernel,
        macros={k: str(v) for k, v in macros.items()},
        grid=tuple(int(g) for g in grid),
        block=tuple(int(b) for b in block3),
        shared_mem=0,
        arg_specs=tuple(specs),
        scalars=dict(scalars),
        params=dict(params),
    )


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides of ``shape``, in elements."""
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


def broadcast_strides(out: tuple[int, ...], shape: tuple[int, ...], strides: Any = None) -> list[int]:
    """The element strides that read a tensor of ``shape`` (contiguous, or with ``strides``) broadcast to
    ``out``: leading dims it lacks and its size-1 dims that ``out`` stretches get stride 0."""
    nd = len(out)
    full = (1,) * (nd - len(shape)) + tuple(shape)
    st = tuple(int(s) for s in strides) if strides is not None else contiguous_strides(tuple(shape))
    st = (0,) * (nd - len(st)) + st
    return [0 if full[k] == 1 and out[k] != 1 else st[k] for k in range(nd)]


def collapse(dims: list[int], strides: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and merge neighbours that every operand walks contiguously."""
    keep = [i for i, d in enumerate(dims) if d != 1]
    if not keep:  # a single element (or an empty tensor): one dim
        return [prod(dims)], [[0] for _ in strides]
    d = [dims[i] for i in keep]
    s = [[st[i] for i in keep] for st in strides]
    i = len(d) - 2
    while i >= 0:
        if all(st[i] == st[i + 1] * d[i + 1] for st in s):
            d[i] *= d[i + 1]
            del d[i + 1]
            for st in s:
                del st[i]
        i -= 1
    return d, s


@dataclass(frozen=True)
class BroadcastWalk:
    """The index space of an elementwise kernel over operands broadcast NumPy's way (:func:`broadcast_walk`):
    the output shape and size, its dims collapsed, each operand's element strides over them, and whether
    an index or offset needs 64 bits (``PL_INDEX64``)."""

    out: tuple[int, ...]
    n: int
    dims: list[int]
    strides: list[list[int]]
    index64: int


def broadcast_walk(
    op: str, shapes: list[tuple[int, ...]], element_strides: list | None = None
) -> BroadcastWalk:
    """The :class:`BroadcastWalk` of operands of ``shapes`` (contiguous, or with ``element_strides``, one
    entry per operand, None for contiguous) broadcast together into a contiguous output.

    Raises
    ------
    InvalidArgumentError
        Shapes that do not broadcast (naming the first dim that does not), or more than
        :data:`MAX_NDIM` dims after collapsing.
    """
    nd = max((len(s) for s in shapes), default=0)
    padded = [(1,) * (nd - len(s)) + tuple(s) for s in shapes]
    out = []
    for k in range(nd):
        sizes = {p[k] for p in padded} - {1}
        if len(sizes) > 1:
            listed = " and ".join(str(tuple(s)) for s in shapes)
            raise InvalidArgumentError(
                f"{op}: shapes {listed} do not broadcast (dim {k}: {' vs '.join(str(p[k]) for p in padded)})",
                op=op,
            )
        out.append(sizes.pop() if sizes else 1)
    out_t = tuple(out)
    given = element_strides if element_strides is not None else [None] * len(shapes)
    dims, strides = collapse(
        list(out_t), [broadcast_strides(out_t, s, st) for s, st in zip(shapes, given, strict=True)]
    )
    if len(dims) > MAX_NDIM:
        raise InvalidArgumentError(
            f"{op}: broadcast needs {len(dims)} dims after collapsing (max {MAX_NDIM})", op=op
        )
    n = prod(out_t)
    span = max((1 + sum((d - 1) * s for d, s in zip(dims, st, strict=True)) for st in strides), default=1)
    return BroadcastWalk(out_t, n, dims, strides, int(n >= I32_LIMIT or span >= I32_LIMIT))


def strided_scalars(dims: list[int], strides: dict[str, list[int]]) -> dict[str, int]:
    """The ``d0..d7`` and per-operand stride scalars (``<prefix>0..7``) of a strided kernel."""
    scalars = {f"d{k}": dims[k] if k < len(dims) else 1 for k in range(MAX_NDIM)}
    for prefix, st in strides.items():
        scalars.update({f"{prefix}{k}": st[k] if k < len(dims) else 0 for k in range(MAX_NDIM)})
    return scalars


def strided_specs(prefixes: Iterable[str]) -> list[ArgSpec]:
    """The ``long long`` arguments ``d0..d7`` then ``<prefix>0..7`` for each prefix."""
    return [ArgSpec(f"{p}{k}", "i64") for p in ("d", *prefixes) for k in range(MAX_NDIM)]


def row_geometry(
    source: KernelSource,
    dt: DType,
    shape: Any,
    tuned: Mapping[str, int] | None,
    alignment: int,
    sm_count: int,
) -> tuple[dict[str, Any], str, tuple[int, int, int], int, int, int, dict]:
    """Launch geometry of a row kernel (one reduction per row over the last dim; ``_big`` above the
    register cap): ``(macros, kernel suffix, grid, block, rows, C, params)``.

    Raises
    ------
    InvalidArgumentError
        A 0-d input, a last dimension of 2^31 or more, or a bad tunable.
    """
    op = source.op
    shp = shape_of(shape, op)
    if not shp:
        raise InvalidArgumentError(f"{op}: x needs at least one dimension", op=op)
    c, rows = shp[-1], prod(shp[:-1])
    if c >= I32_LIMIT:
        raise InvalidArgumentError(f"{op}: the last dimension must be below 2^31 (got {c})", op=op)
    if c == 0:  # nothing to read or write: launch one block that finds no row
        rows = 0
    t = tuned_values(source, tuned)
    vec = pick_vec(t["vec"], dt.itemsize, alignment, op, c)
    nv = c // vec
    cap = t["max_vec_per_thread"]
    block = t["block"]
    group = t["group"]
    if group == 0:
        # a warp per row while the row fits a warp's registers; then the fewest threads per row (128 or
        # 256) that keep <= 4 vectors per thread (best on an H200 for bf16 and fp32 C = 4096, several
        # rows per block); else the whole block
        if nv <= 32 * min(cap, 8):
            group = 32
        elif nv <= 128 * min(cap, 4) and block >= 128:
            group = 128
        elif nv <= 256 * min(cap, 4) and block >= 256:
            group = 256
        else:
            group = block
    if group > block:
        block = group
    if group == block and -(-nv // group) > cap and "block" not in (tuned or {}):
        while block < 1024 and -(-nv // block) > cap:
            block *= 2
        group = block
    per_thread = -(-nv // group)
    is_big = per_thread > cap
    if is_big:
        group = block
    rpb = 1 if is_big else block // group
    grid = (max(1, min(-(-rows // rpb), sm_count * t["max_blocks_per_sm"])), 1, 1)
    macros = {
        "PL_T": dt.cuda_type,
        "PL_BLOCK": block,
        "PL_GROUP": group,
        "PL_VEC": vec,
        "PL_MAX_VEC_PER_THREAD": max(1, min(per_thread, cap)),
    }
    params = dict(t, block=block, group=group, vec=vec, big=int(is_big))
    return macros, "_big" if is_big else "", grid, block, rows, c, params
