"""Launch plans of the built-in CUDA kernels: the data types (KernelSource, ArgSpec, LaunchPlan), the
kernel table with its tunables, and the helpers every plan function shares. Pure Python + NumPy."""

from __future__ import annotations

import ctypes
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...dtypes import DType, get_dtype
from ...errors import InvalidArgumentError

__all__ = ["KERNELS", "ArgSpec", "KernelSource", "LaunchPlan", "include_dir", "source_text"]


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


_BLOCKS = (64, 128, 256, 512, 1024)
_VECS = (0, 1, 2, 4, 8)
_FLAT = {  # defaults measured on an H200 (256 MiB operands): block 512, 16 blocks/SM
    "block": (512, _BLOCKS),
    "vec": (0, _VECS),
    "unroll": (0, (0, 1, 2, 4)),  # 0: 1 for transcendental ops on 16-bit types, else 4
    "max_blocks_per_sm": (16, (1, 2, 4, 8, 16, 32)),
}
_ROW = {  # block 512 measured best on an H200 for fp32 and bf16 rows of 4096 (scripts/kernel_sweep.py)
    "block": (512, _BLOCKS),
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
