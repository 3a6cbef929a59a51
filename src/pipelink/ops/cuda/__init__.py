"""Catalogue of the built-in CUDA kernels: which source, macros, kernel, grid and arguments each op needs.

Pure Python + NumPy: it plans launches and never imports ``cuda.core``, touches a device or allocates.
The backend compiles ``plan.source()`` with ``plan.options(arch=...)`` (NVRTC or nvcc) or
``ProgramOptions(**plan.program_options(arch=...))``, takes ``plan.kernel`` from the module and runs
``launch(stream, LaunchConfig(grid=plan.grid, block=plan.block, shmem_size=plan.shared_mem), kernel,
*plan.args(x=ptr, y=ptr, ...))``. ``plan.arg_specs`` lists each kernel argument, in order, with its C type.

Alignment rule: every buffer the runtime gives is aligned to >= 256 bytes (``alignment=`` says what
may be assumed; default 16). A kernel touches ``vec`` elements per access, so a plan picks ``vec``
(at most ``16 // itemsize``) only when every address it forms is a multiple of ``vec * itemsize``:
row-wise ops need ``C % vec == 0`` (so every row start stays aligned when C is odd, vec is 1),
bias_add ``N % vec == 0``, batch_norm ``S % vec == 0`` (``C % vec == 0`` when S == 1), flat
elementwise ops only the base pointers. :meth:`LaunchPlan.args` re-checks the pointers it is given.

Tunables (``KERNELS[op].tunables``: name -> (default, allowed values); 0 means "chosen from the shape")
are passed as ``tuned={...}``; every plan records the values it used in ``plan.params``.
"""

from __future__ import annotations

import ctypes
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...dtypes import DType, get_dtype
from ...errors import InvalidArgumentError

__all__ = [
    "KERNELS",
    "ArgSpec",
    "KernelSource",
    "LaunchPlan",
    "include_dir",
    "source_text",
    "plan",
    "plan_unary",
    "plan_binary",
    "plan_bias_add",
    "plan_cast",
    "plan_layer_norm",
    "plan_rms_norm",
    "plan_softmax",
    "plan_transpose",
    "plan_batch_norm",
]

_DIR = Path(__file__).resolve().parent
_FLOATS = ("float32", "float16", "bfloat16", "float64")
_DEFAULT_SM_COUNT = 132  # H200
_MAX_NDIM = 8
_I32_LIMIT = 2**31
_GRID_YZ_MAX = 65535

# name -> (C type in the kernel signature, numpy scalar type used to pass it)
_KINDS = {
    "ptr": ("void*", np.uint64),
    "i64": ("long long", np.int64),
    "i32": ("int", np.int32),
    "f32": ("float", np.float32),
    "f64": ("double", np.float64),
}


def include_dir() -> str:
    """The folder holding the ``.cu`` sources and ``common.cuh`` (pass it as ``-I``)."""
    return str(_DIR)


def source_text(file: str) -> str:
    """The text of one kernel source of this folder (``common.cuh`` is reached via ``-I``).

    Raises
    ------
    InvalidArgumentError
        When ``file`` is not a source of this folder.
    """
    path = _DIR / file
    if path.parent != _DIR or path.suffix not in (".cu", ".cuh") or not path.is_file():
        raise InvalidArgumentError(
            f"no built-in CUDA source named {file!r} (have: "
            f"{', '.join(sorted(p.name for p in _DIR.glob('*.cu')))})",
            file=file,
        )
    return path.read_text(encoding="utf-8")


@dataclass(frozen=True)
class KernelSource:
    """One built-in op: its source file, kernel name(s), fixed macros and tunable parameters."""

    op: str
    file: str
    kernel: str
    macros: dict[str, str]
    tunables: dict[str, tuple[int, tuple[int, ...]]]
    dtypes: tuple[str, ...] = _FLOATS


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
    """Everything needed to compile and launch one kernel for one shape (see the module docstring)."""

    op: str
    file: str
    kernel: str
    macros: dict[str, str]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    arg_specs: tuple[ArgSpec, ...]
    scalars: dict[str, Any] = field(default_factory=dict)
    params: dict[str, int] = field(default_factory=dict)

    def source(self) -> str:
        """The kernel source text."""
        return source_text(self.file)

    def options(
        self, arch: str | None = "sm_90", extra_include: list[str] | tuple[str, ...] = ()
    ) -> list[str]:
        """NVRTC / nvcc options: ``-std=c++17``, ``-I<this folder>``, one ``-D`` per macro, ``-arch``."""
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
        """A hash of the source text and the macros: equal keys compile to the same module."""
        h = hashlib.sha256(self.source().encode())
        h.update(source_text("common.cuh").encode())
        h.update(repr(sorted(self.macros.items())).encode())
        return h.hexdigest()[:32]

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
# helpers
# --------------------------------------------------------------------------------------------
def _float_dtype(dtype: Any, op: str) -> DType:
    dt = get_dtype(dtype)
    if dt.name not in _FLOATS:
        raise InvalidArgumentError(
            f"{op}: dtype must be one of {', '.join(_FLOATS)} (got {dt.name})", op=op, dtype=dt.name
        )
    return dt


def _tuned(op: str, tuned: dict[str, int] | None) -> dict[str, int]:
    spec = KERNELS[op].tunables
    values = {k: d for k, (d, _) in spec.items()}
    for k, v in (tuned or {}).items():
        if k not in spec:
            raise InvalidArgumentError(f"{op}: unknown tunable {k!r}; tunables: {', '.join(spec)}", op=op)
        if int(v) not in spec[k][1]:
            raise InvalidArgumentError(f"{op}: tunable {k} must be one of {spec[k][1]} (got {v!r})", op=op)
        values[k] = int(v)
    return values


_TRANSCENDENTAL = ("silu", "gelu", "gelu_tanh")


def _unroll(t: dict[str, int], op: str, itemsize: int) -> int:
    """The ``unroll`` tunable, with 0 resolved: compute-heavy 16-bit ops keep fewer loads in flight."""
    if t["unroll"]:
        return t["unroll"]
    return 1 if op in _TRANSCENDENTAL and itemsize <= 2 else 4


def _acc_kind(dt: DType) -> str:
    return "f64" if dt.name == "float64" else "f32"


def _widest_vec(itemsize: int, alignment: int, *divides: int) -> int:
    """Widest power-of-two vector (<= 16 bytes, <= alignment) dividing every size in ``divides``."""
    vec = max(1, min(16, alignment) // itemsize)
    while vec > 1 and any(d % vec for d in divides):
        vec //= 2
    return vec


def _pick_vec(requested: int, itemsize: int, alignment: int, op: str, *divides: int) -> int:
    widest = _widest_vec(itemsize, alignment, *divides)
    if requested == 0:
        return widest
    if requested > widest:
        raise InvalidArgumentError(
            f"{op}: vec={requested} would misalign accesses (widest valid: {widest})", op=op
        )
    return requested


def _prod(shape: tuple[int, ...] | list[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _shape(shape: Any, op: str) -> tuple[int, ...]:
    out = tuple(int(d) for d in shape)
    if any(d < 0 for d in out):
        raise InvalidArgumentError(f"{op}: dimensions must be >= 0 (got {out})", op=op)
    return out


def _flat_grid(
    work: int, block: int, unroll: int, max_blocks_per_sm: int, sm_count: int
) -> tuple[int, int, int]:
    blocks = max(1, -(-work // (block * unroll)))
    return (min(blocks, sm_count * max_blocks_per_sm), 1, 1)


def _ptr(name: str, align: int = 1, optional: bool = False) -> ArgSpec:
    return ArgSpec(name, "ptr", optional=optional, align=align)


def _plan(op: str, kernel: str, macros: dict[str, Any], grid, block, specs, scalars, params) -> LaunchPlan:
    src = KERNELS[op]
    block3 = block if isinstance(block, tuple) else (block, 1, 1)
    return LaunchPlan(
        op=op,
        file=src.file,
        kernel=kernel,
        macros={k: str(v) for k, v in macros.items()},
        grid=tuple(int(g) for g in grid),
        block=tuple(int(b) for b in block3),
        shared_mem=0,
        arg_specs=tuple(specs),
        scalars=scalars,
        params=params,
    )


# --------------------------------------------------------------------------------------------
# elementwise
# --------------------------------------------------------------------------------------------
_UNARY = {
    "identity": "PL_OP_IDENTITY",
    "relu": "PL_OP_RELU",
    "silu": "PL_OP_SILU",
    "gelu": "PL_OP_GELU",
    "gelu_tanh": "PL_OP_GELU_TANH",
    "scale": "PL_OP_SCALE",
}
_BINARY = {"add": "PL_OP_ADD", "sub": "PL_OP_SUB", "mul": "PL_OP_MUL", "div": "PL_OP_DIV"}


def plan_unary(
    op: str,
    dtype: Any,
    shape: Any,
    *,
    factor: float = 1.0,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = _DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = op(x)`` over a contiguous tensor; ``op`` in identity, relu, silu, gelu, gelu_tanh, scale.

    Kernel ``pl_unary(const T* x, T* y, long long n, ACC alpha)``; alpha is ``factor`` for ``scale``.
    """
    if op not in _UNARY:
        raise InvalidArgumentError(f"unknown unary op {op!r}; known: {', '.join(_UNARY)}", op=op)
    dt = _float_dtype(dtype, op)
    n = _prod(_shape(shape, op))
    t = _tuned(op, tuned)
    t["unroll"] = _unroll(t, op, dt.itemsize)
    vec = _pick_vec(t["vec"], dt.itemsize, alignment, op)
    params = dict(t, vec=vec)
    macros = {
        "PL_T": dt.cuda_type,
        "PL_UNARY_OP": _UNARY[op],
        "PL_VEC": vec,
        "PL_BLOCK": t["block"],
        "PL_UNROLL": t["unroll"],
    }
    grid = _flat_grid(n // vec, t["block"], t["unroll"], t["max_blocks_per_sm"], sm_count)
    a = vec * dt.itemsize
    specs = [_ptr("x", a), _ptr("y", a), ArgSpec("n", "i64"), ArgSpec("alpha", _acc_kind(dt))]
    return _plan(op, "pl_unary", macros, grid, t["block"], specs, {"n": n, "alpha": factor}, params)


def _broadcast(a: tuple[int, ...], b: tuple[int, ...], op: str) -> tuple[int, ...]:
    nd = max(len(a), len(b))
    a1, b1 = (1,) * (nd - len(a)) + a, (1,) * (nd - len(b)) + b
    out = []
    for i, (x, y) in enumerate(zip(a1, b1, strict=True)):
        if x != y and 1 not in (x, y):
            raise InvalidArgumentError(
                f"{op}: shapes {a} and {b} do not broadcast (dim {i}: {x} vs {y})", op=op
            )
        out.append(y if x == 1 else x)
    return tuple(out)


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


def _collapse(dims: list[int], strides: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and merge neighbours that every operand walks contiguously."""
    keep = [i for i, d in enumerate(dims) if d != 1]
    if not keep:  # a single element (or an empty tensor): one dim
        return [_prod(dims)], [[0] for _ in strides]
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


def plan_binary(
    op: str,
    dtype: Any,
    shape_a: Any,
    shape_b: Any,
    *,
    a_strides: Any = None,
    b_strides: Any = None,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = _DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = a op b`` (op in add, sub, mul, div) with NumPy broadcasting; y is contiguous.

    Same contiguous shapes: ``pl_binary(const T* a, const T* b, T* y, long long n)`` (vectorised).
    Otherwise ``pl_binary_bcast(a, b, y, long long n, d0..d7, sa0..sa7, sb0..sb7)`` over the output
    shape collapsed to PL_NDIM dims; strides in elements (0 on broadcast dims; ``a_strides`` /
    ``b_strides`` give non-contiguous inputs, in elements, >= 0).
    """
    if op not in _BINARY:
        raise InvalidArgumentError(f"unknown binary op {op!r}; known: {', '.join(_BINARY)}", op=op)
    dt = _float_dtype(dtype, op)
    sa, sb = _shape(shape_a, op), _shape(shape_b, op)
    out = _broadcast(sa, sb, op)
    n = _prod(out)
    t = _tuned(op, tuned)
    t["unroll"] = _unroll(t, op, dt.itemsize)
    if sa == sb and a_strides is None and b_strides is None:
        vec = _pick_vec(t["vec"], dt.itemsize, alignment, op)
        macros = {
            "PL_T": dt.cuda_type,
            "PL_BINARY_OP": _BINARY[op],
            "PL_VEC": vec,
            "PL_BLOCK": t["block"],
            "PL_UNROLL": t["unroll"],
        }
        grid = _flat_grid(n // vec, t["block"], t["unroll"], t["max_blocks_per_sm"], sm_count)
        a = vec * dt.itemsize
        specs = [_ptr("a", a), _ptr("b", a), _ptr("y", a), ArgSpec("n", "i64")]
        return _plan(op, "pl_binary", macros, grid, t["block"], specs, {"n": n}, dict(t, vec=vec))
    nd = len(out)
    strides = []
    for shp, given in ((sa, a_strides), (sb, b_strides)):
        full = (1,) * (nd - len(shp)) + shp
        st = tuple(int(s) for s in given) if given is not None else _contiguous_strides(shp)
        st = (0,) * (nd - len(st)) + st
        strides.append([0 if full[k] == 1 and out[k] != 1 else st[k] for k in range(nd)])
    dims, (st_a, st_b) = _collapse(list(out), strides)
    if len(dims) > _MAX_NDIM:
        raise InvalidArgumentError(
            f"{op}: broadcast needs {len(dims)} dims after collapsing (max {_MAX_NDIM})", op=op
        )
    span = max(1 + sum((d - 1) * s for d, s in zip(dims, st, strict=True)) for st in (st_a, st_b))
    index64 = int(n >= _I32_LIMIT or span >= _I32_LIMIT)
    scalars = {"n": n}
    for k in range(_MAX_NDIM):
        scalars[f"d{k}"] = dims[k] if k < len(dims) else 1
        scalars[f"sa{k}"] = st_a[k] if k < len(dims) else 0
        scalars[f"sb{k}"] = st_b[k] if k < len(dims) else 0
    macros = {
        "PL_T": dt.cuda_type,
        "PL_BINARY_OP": _BINARY[op],
        "PL_VEC": 1,
        "PL_BLOCK": t["block"],
        "PL_NDIM": len(dims),
        "PL_INDEX64": index64,
    }
    grid = _flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    specs = [_ptr("a"), _ptr("b"), _ptr("y"), ArgSpec("n", "i64")]
    specs += [ArgSpec(f"{p}{k}", "i64") for p in ("d", "sa", "sb") for k in range(_MAX_NDIM)]
    return _plan(
        op,
        "pl_binary_bcast",
        macros,
        grid,
        t["block"],
        specs,
        scalars,
        dict(t, vec=1, ndim=len(dims), index64=index64),
    )


def plan_bias_add(
    dtype: Any,
    shape: Any,
    *,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = _DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y[..., c] = x[..., c] + bias[c]`` for contiguous x of ``shape`` and bias of ``shape[-1]``.

    Kernel ``pl_bias_add(const T* x, const T* bias, T* y, long long n, long long N)``.
    """
    op = "bias_add"
    dt = _float_dtype(dtype, op)
    shp = _shape(shape, op)
    if not shp:
        raise InvalidArgumentError("bias_add: x needs at least one dimension", op=op)
    n, big_n = _prod(shp), shp[-1]
    t = _tuned(op, tuned)
    t["unroll"] = _unroll(t, op, dt.itemsize)
    vec = _pick_vec(t["vec"], dt.itemsize, alignment, op, max(big_n, 1))
    index64 = int(n >= 2**32)
    macros = {
        "PL_T": dt.cuda_type,
        "PL_BIAS_ADD": 1,
        "PL_VEC": vec,
        "PL_BLOCK": t["block"],
        "PL_UNROLL": t["unroll"],
        "PL_INDEX64": index64,
    }
    grid = _flat_grid(n // vec, t["block"], t["unroll"], t["max_blocks_per_sm"], sm_count)
    a = vec * dt.itemsize
    specs = [_ptr("x", a), _ptr("bias", a), _ptr("y", a), ArgSpec("n", "i64"), ArgSpec("N", "i64")]
    return _plan(
        op,
        "pl_bias_add",
        macros,
        grid,
        t["block"],
        specs,
        {"n": n, "N": max(big_n, 1)},
        dict(t, vec=vec, index64=index64),
    )


def plan_cast(
    dtype_in: Any,
    dtype_out: Any,
    shape: Any,
    *,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = _DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = x.astype(dtype_out)`` (round to nearest even). Kernel ``pl_cast(const TIN* x, TOUT* y,
    long long n)``."""
    op = "cast"
    di, do = _float_dtype(dtype_in, op), _float_dtype(dtype_out, op)
    n = _prod(_shape(shape, op))
    t = _tuned(op, tuned)
    t["unroll"] = _unroll(t, op, max(di.itemsize, do.itemsize))
    vec = _pick_vec(t["vec"], max(di.itemsize, do.itemsize), alignment, op)
    macros = {
        "PL_TIN": di.cuda_type,
        "PL_TOUT": do.cuda_type,
        "PL_VEC": vec,
        "PL_BLOCK": t["block"],
        "PL_UNROLL": t["unroll"],
    }
    grid = _flat_grid(n // vec, t["block"], t["unroll"], t["max_blocks_per_sm"], sm_count)
    specs = [_ptr("x", vec * di.itemsize), _ptr("y", vec * do.itemsize), ArgSpec("n", "i64")]
    return _plan(op, "pl_cast", macros, grid, t["block"], specs, {"n": n}, dict(t, vec=vec))


# --------------------------------------------------------------------------------------------
# row-wise: layer_norm, rms_norm, softmax
# --------------------------------------------------------------------------------------------
def _row_plan(
    op: str, dt: DType, shape: Any, tuned: dict[str, int] | None, alignment: int, sm_count: int
) -> tuple[dict[str, Any], str, tuple[int, int, int], int, int, int, dict[str, int]]:
    shp = _shape(shape, op)
    if not shp:
        raise InvalidArgumentError(f"{op}: x needs at least one dimension", op=op)
    c, rows = shp[-1], _prod(shp[:-1])
    if c >= _I32_LIMIT:
        raise InvalidArgumentError(f"{op}: the last dimension must be below 2^31 (got {c})", op=op)
    if c == 0:  # nothing to read or write: launch one block that finds no row
        rows = 0
    t = _tuned(op, tuned)
    vec = _pick_vec(t["vec"], dt.itemsize, alignment, op, c)
    nv = c // vec
    cap = t["max_vec_per_thread"]
    block = t["block"]
    group = t["group"]
    if group == 0:
        # a warp per row while the row fits a warp's registers; 128 threads per row while that keeps
        # <= 4 vectors per thread (best on an H200 for bf16 C = 4096); else the whole block
        if nv <= 32 * min(cap, 8):
            group = 32
        elif nv <= 128 * min(cap, 4) and block >= 128:
            group = 128
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
    suffix = "_big" if is_big else ""
    return macros, suffix, grid, block, rows, c, params


def plan_layer_norm(
    dtype: Any,
    shape: Any,
    *,
    eps: float = 1e-5,
    has_gamma: bool = True,
    has_beta: bool = True,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = _DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan layer norm over the last dim of a contiguous x; gamma, beta have x's dtype and shape [C].

    Kernel ``pl_layer_norm[_big](const T* x, const T* gamma, const T* beta, T* y, ACC* mean, ACC* rstd,
    long long rows, int C, ACC eps)``; ACC (also the dtype of mean/rstd [rows]) is float32, or float64
    for float64 x. gamma/beta/mean/rstd may be null (0).
    """
    op = "layer_norm"
    dt = _float_dtype(dtype, op)
    macros, suffix, grid, block, rows, c, params = _row_plan(op, dt, shape, tuned, alignment, sm_count)
    macros.update(PL_HAS_GAMMA=int(has_gamma), PL_HAS_BETA=int(has_beta))
    a, acc = int(macros["PL_VEC"]) * dt.itemsize, _acc_kind(dt)
    specs = [
        _ptr("x", a),
        _ptr("gamma", a, optional=not has_gamma),
        _ptr("beta", a, optional=not has_beta),
        _ptr("y", a),
        _ptr("mean", optional=True),
        _ptr("rstd", optional=True),
        ArgSpec("rows", "i64"),
        ArgSpec("C", "i32"),
        ArgSpec("eps", acc),
    ]
    return _plan(
        op, "pl_layer_norm" + suffix, macros, grid, block, specs, {"rows": rows, "C": c, "eps": eps}, params
    )


def plan_rms_norm(
    dtype: Any,
    shape: Any,
    *,
    eps: float = 1e-6,
    has_gamma: bool = True,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = _DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan RMS norm over the last dim: ``y = x * rsqrt(mean(x^2) + eps) * gamma``.

    Kernel ``pl_rms_norm[_big](const T* x, const T* gamma, T* y, long long rows, int C, ACC eps)``.
    """
    op = "rms_norm"
    dt = _float_dtype(dtype, op)
    macros, suffix, grid, block, rows, c, params = _row_plan(op, dt, shape, tuned, alignment, sm_count)
    macros.update(PL_HAS_GAMMA=int(has_gamma), PL_HAS_BETA=0)
    a = int(macros["PL_VEC"]) * dt.itemsize
    specs = [
        _ptr("x", a),
        _ptr("gamma", a, optional=not has_gamma),
        _ptr("y", a),
        ArgSpec("rows", "i64"),
        ArgSpec("C", "i32"),
        ArgSpec("eps", _acc_kind(dt)),
    ]
    return _plan(
        op, "pl_rms_norm" + suffix, macros, grid, block, specs, {"rows": rows, "C": c, "eps": eps}, params
    )


def plan_softmax(
    dtype: Any,
    shape: Any,
    *,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = _DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan softmax over the last dim.

    Kernel ``pl_softmax[_big](const T* x, T* y, long long rows, int C)``.
    """
    op = "softmax"
    dt = _float_dtype(dtype, op)
    macros, suffix, grid, block, rows, c, params = _row_plan(op, dt, shape, tuned, alignment, sm_count)
    a = int(macros["PL_VEC"]) * dt.itemsize
    specs = [_ptr("x", a), _ptr("y", a), ArgSpec("rows", "i64"), ArgSpec("C", "i32")]
    return _plan(op, "pl_softmax" + suffix, macros, grid, block, specs, {"rows": rows, "C": c}, params)


# --------------------------------------------------------------------------------------------
# layout and batch norm
# --------------------------------------------------------------------------------------------
def plan_transpose(
    dtype: Any,
    shape: Any,
    perm: Any = None,
    *,
    in_strides: Any = None,
    tuned: dict[str, int] | None = None,
    sm_count: int = _DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan ``y = x.transpose(perm)`` into a contiguous y (perm default: swap the last two dims).

    After dropping size-1 dims and merging dims that stay adjacent, a swap of the last two dims
    (with at most one batch dim in front) uses ``pl_transpose(const T* x, T* y, long long batch,
    long long R, long long C)``; anything else ``pl_permute(x, y, long long n, d0..d7, s0..s7)``
    with d the output shape and s the input strides (elements) of each output dim.
    ``in_strides`` (elements, >= 0) describes a non-contiguous x (then the permute kernel is used).
    """
    op = "transpose"
    dt = get_dtype(dtype)
    shp = _shape(shape, op)
    nd = len(shp)
    p = tuple(range(nd - 2)) + (nd - 1, nd - 2) if perm is None and nd >= 2 else tuple(perm or range(nd))
    p = tuple(int(i) % nd if nd else 0 for i in p)
    if sorted(p) != list(range(nd)):
        raise InvalidArgumentError(f"transpose: perm {tuple(perm)} is not a permutation of {nd} dims", op=op)
    t = _tuned(op, tuned)
    n = _prod(shp)
    if in_strides is None:
        # drop size-1 dims, then merge runs of output dims that come from consecutive input dims
        kept = [k for k in range(nd) if shp[k] != 1]
        rank = {k: i for i, k in enumerate(kept)}
        q = [rank[k] for k in p if shp[k] != 1]
        runs: list[list[int]] = []
        for k in q:
            if runs and runs[-1][-1] == k - 1:
                runs[-1].append(k)
            else:
                runs.append([k])
        order = sorted(range(len(runs)), key=lambda g: runs[g][0])  # merged dims in input order
        in_dims = [_prod([shp[kept[j]] for j in runs[g]]) for g in order]
        new_perm = [order.index(g) for g in range(len(runs))]
        in_st = _contiguous_strides(tuple(in_dims))
        out_dims = [in_dims[i] for i in new_perm]
        out_st = [in_st[i] for i in new_perm]
        if new_perm in ([1, 0], [0, 2, 1]):
            batch = 1 if len(in_dims) == 2 else in_dims[0]
            r, c = in_dims[-2], in_dims[-1]
            tile, rows = t["tile"], t["tile_rows"]
            grid = (min(-(-c // tile), 2**31 - 1), min(-(-r // tile), _GRID_YZ_MAX), min(batch, _GRID_YZ_MAX))
            macros = {
                "PL_T": dt.cuda_type,
                "PL_TILE": tile,
                "PL_TILE_ROWS": rows,
                "PL_TILE_PAD": 1,
                "PL_BLOCK": t["block"],
            }
            specs = [_ptr("x"), _ptr("y"), ArgSpec("batch", "i64"), ArgSpec("R", "i64"), ArgSpec("C", "i64")]
            return _plan(
                op,
                "pl_transpose",
                macros,
                grid,
                (tile, rows, 1),
                specs,
                {"batch": batch, "R": r, "C": c},
                dict(t),
            )
        dims, strides = out_dims or [1], out_st or [1]
    else:
        st = tuple(int(s) for s in in_strides)
        dims, strides = [shp[k] for k in p] or [1], [st[k] for k in p] or [1]
        dims, (strides,) = _collapse(dims, [strides])
    if len(dims) > _MAX_NDIM:
        raise InvalidArgumentError(f"transpose: {len(dims)} dims after merging (max {_MAX_NDIM})", op=op)
    span = 1 + sum((d - 1) * s for d, s in zip(dims, strides, strict=True))
    index64 = int(n >= _I32_LIMIT or span >= _I32_LIMIT)
    scalars: dict[str, Any] = {"n": n}
    for k in range(_MAX_NDIM):
        scalars[f"d{k}"] = dims[k] if k < len(dims) else 1
        scalars[f"s{k}"] = strides[k] if k < len(dims) else 0
    macros = {"PL_T": dt.cuda_type, "PL_BLOCK": t["block"], "PL_NDIM": len(dims), "PL_INDEX64": index64}
    specs = [_ptr("x"), _ptr("y"), ArgSpec("n", "i64")]
    specs += [ArgSpec(f"{q}{k}", "i64") for q in ("d", "s") for k in range(_MAX_NDIM)]
    grid = _flat_grid(n, t["block"], 1, t["max_blocks_per_sm"], sm_count)
    return _plan(
        op, "pl_permute", macros, grid, t["block"], specs, scalars, dict(t, ndim=len(dims), index64=index64)
    )


def plan_batch_norm(
    dtype: Any,
    shape: Any,
    *,
    eps: float = 1e-5,
    has_gamma: bool = True,
    has_beta: bool = True,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = _DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan inference batch norm of contiguous x [N, C, *spatial]; mean, var, gamma, beta: [C], x's dtype.

    Kernel ``pl_batch_norm(const T* x, const T* mean, const T* var, const T* gamma, const T* beta, T* y,
    long long n, long long C, long long S, ACC eps)`` with S = prod(spatial).
    """
    op = "batch_norm"
    dt = _float_dtype(dtype, op)
    shp = _shape(shape, op)
    if len(shp) < 2:
        raise InvalidArgumentError(f"batch_norm: x must be [N, C, *spatial] (got {shp})", op=op)
    n, c, s = _prod(shp), max(shp[1], 1), max(_prod(shp[2:]), 1)
    t = _tuned(op, tuned)
    t["unroll"] = _unroll(t, op, dt.itemsize)
    channel_last = int(s == 1)
    vec = _pick_vec(t["vec"], dt.itemsize, alignment, op, c if channel_last else s)
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
    grid = _flat_grid(n // vec, t["block"], t["unroll"], t["max_blocks_per_sm"], sm_count)
    a = vec * dt.itemsize
    specs = [
        _ptr("x", a),
        _ptr("mean"),
        _ptr("var"),
        _ptr("gamma", optional=not has_gamma),
        _ptr("beta", optional=not has_beta),
        _ptr("y", a),
        ArgSpec("n", "i64"),
        ArgSpec("C", "i64"),
        ArgSpec("S", "i64"),
        ArgSpec("eps", _acc_kind(dt)),
    ]
    return _plan(
        op,
        "pl_batch_norm",
        macros,
        grid,
        t["block"],
        specs,
        {"n": n, "C": c, "S": s, "eps": eps},
        dict(t, vec=vec, index64=index64),
    )


# --------------------------------------------------------------------------------------------
# the catalogue
# --------------------------------------------------------------------------------------------
_BLOCKS = (64, 128, 256, 512, 1024)
_VECS = (0, 1, 2, 4, 8)
_FLAT = {  # defaults measured on an H200 (256 MiB operands): block 512, 16 blocks/SM
    "block": (512, _BLOCKS),
    "vec": (0, _VECS),
    "unroll": (0, (0, 1, 2, 4)),  # 0: 1 for transcendental ops on 16-bit types, else 4
    "max_blocks_per_sm": (16, (1, 2, 4, 8, 16, 32)),
}
_ROW = {
    "block": (256, _BLOCKS),
    "group": (0, (0, 1, 2, 4, 8, 16, 32) + _BLOCKS),
    "vec": (0, _VECS),
    "max_vec_per_thread": (8, (1, 2, 4, 8, 16)),
    "max_blocks_per_sm": (32, (1, 2, 4, 8, 16, 32, 64)),
}
_ALL = ("float32", "float16", "bfloat16", "float64", "int8", "int32", "int64", "uint8", "bool")

KERNELS: dict[str, KernelSource] = {
    **{
        op: KernelSource(op, "elementwise.cu", "pl_unary", {"PL_UNARY_OP": m}, dict(_FLAT))
        for op, m in _UNARY.items()
    },
    **{
        op: KernelSource(op, "elementwise.cu", "pl_binary", {"PL_BINARY_OP": m}, dict(_FLAT))
        for op, m in _BINARY.items()
    },
    "bias_add": KernelSource("bias_add", "elementwise.cu", "pl_bias_add", {"PL_BIAS_ADD": "1"}, dict(_FLAT)),
    "cast": KernelSource("cast", "elementwise.cu", "pl_cast", {}, dict(_FLAT)),
    "layer_norm": KernelSource("layer_norm", "norm.cu", "pl_layer_norm", {}, dict(_ROW)),
    "rms_norm": KernelSource("rms_norm", "norm.cu", "pl_rms_norm", {}, dict(_ROW)),
    "softmax": KernelSource("softmax", "softmax.cu", "pl_softmax", {}, dict(_ROW)),
    "transpose": KernelSource(
        "transpose",
        "transpose.cu",
        "pl_transpose",
        {},
        {
            "tile": (64, (16, 32, 64)),  # 64 x 8 was fastest on an H200 for 2- and 4-byte types
            "tile_rows": (8, (4, 8, 16)),
            "block": (256, _BLOCKS),
            "max_blocks_per_sm": (8, (1, 2, 4, 8, 16, 32)),
        },
        dtypes=_ALL,
    ),
    "batch_norm": KernelSource("batch_norm", "batch_norm.cu", "pl_batch_norm", {}, dict(_FLAT)),
}


def plan(
    op: str,
    dtypes: Any,
    shapes: Any,
    attrs: dict[str, Any] | None = None,
    *,
    tuned: dict[str, int] | None = None,
    alignment: int = 16,
    sm_count: int = _DEFAULT_SM_COUNT,
) -> LaunchPlan:
    """Plan any built-in op from its input dtypes and shapes and its attributes.

    ``dtypes`` / ``shapes`` are the inputs' (a single dtype / shape is accepted for one-input ops).
    Attributes: ``factor`` (scale), ``eps`` (norms), ``has_gamma`` / ``has_beta``, ``perm``
    (transpose), ``dtype`` (cast output), ``a_strides`` / ``b_strides`` / ``in_strides``.

    Raises
    ------
    InvalidArgumentError
        For an unknown op, an unsupported dtype, a bad shape or a bad tunable.
    """
    attrs = dict(attrs or {})
    if op not in KERNELS:
        raise InvalidArgumentError(
            f"no built-in CUDA kernel for op {op!r}; known: {', '.join(KERNELS)}", op=op
        )
    dts = list(dtypes) if isinstance(dtypes, (list, tuple)) else [dtypes]
    shs = list(shapes) if shapes and isinstance(shapes[0], (list, tuple)) else [shapes]
    common = {"tuned": tuned, "sm_count": sm_count}
    if op in _UNARY:
        return plan_unary(op, dts[0], shs[0], factor=attrs.get("factor", 1.0), alignment=alignment, **common)
    if op in _BINARY:
        return plan_binary(
            op,
            dts[0],
            shs[0],
            shs[1],
            a_strides=attrs.get("a_strides"),
            b_strides=attrs.get("b_strides"),
            alignment=alignment,
            **common,
        )
    if op == "bias_add":
        return plan_bias_add(dts[0], shs[0], alignment=alignment, **common)
    if op == "cast":
        return plan_cast(dts[0], attrs["dtype"], shs[0], alignment=alignment, **common)
    if op == "layer_norm":
        return plan_layer_norm(
            dts[0],
            shs[0],
            eps=attrs.get("eps", 1e-5),
            has_gamma=attrs.get("has_gamma", len(shs) > 1),
            has_beta=attrs.get("has_beta", len(shs) > 2),
            alignment=alignment,
            **common,
        )
    if op == "rms_norm":
        return plan_rms_norm(
            dts[0],
            shs[0],
            eps=attrs.get("eps", 1e-6),
            has_gamma=attrs.get("has_gamma", len(shs) > 1),
            alignment=alignment,
            **common,
        )
    if op == "softmax":
        return plan_softmax(dts[0], shs[0], alignment=alignment, **common)
    if op == "transpose":
        return plan_transpose(dts[0], shs[0], attrs.get("perm"), in_strides=attrs.get("in_strides"), **common)
    return plan_batch_norm(
        dts[0],
        shs[0],
        eps=attrs.get("eps", 1e-5),
        has_gamma=attrs.get("has_gamma", True),
        has_beta=attrs.get("has_beta", True),
        alignment=alignment,
        **common,
    )
