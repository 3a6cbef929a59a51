"""Writing compiled plans (``.plk``) for the native core: ``Pipeline.save`` and ``pipelink compile``.

The format is documented in ``docs/plan-format.md``; ``src/pipelink/native/plan.c`` reads it. This module
only serialises a plan the executor already compiled (shapes, memory plan, steps); it never plans itself.
A CPU plan calls native modules; a CUDA plan replays the launches its steps describe
(``native_launches()``: the built-in kernels' cubins, cuBLASLt matmuls). Bound weights (``Pipeline._bound``,
a config's weights file) are embedded as constants. A stage the native core cannot run makes the compile
fail with a ``ConfigError`` pointing at the stage.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..errors import ConfigError, ErrorCode, HardwareUnsupportedError, InvalidArgumentError, Problem
from ..graph.linker import LinkedStage
from ..modules.native import load_library
from ..modules.services import ATTR_FLOATS, ATTR_INTS, ATTR_STR, AttrArray
from ..ops.gemm.lt import NativeMatmul
from ..ops.kernel import NativeKernel
from .executor import compile_plan

__all__ = [
    "MAGIC",
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "MAX_CONSTANT_BYTES",
    "PlanParts",
    "assemble",
    "write_plan",
    "plan_bytes",
    "parse_shape",
]

MAGIC = b"PLKPLAN\0"
FORMAT_VERSION = 5
HEADER_SIZE = 64
BUNDLE_MAGIC = b"PLKBNDL\0"  # several signatures of one pipeline: one plan each (docs/plan-format.md)
BUNDLE_VERSION = 1
MAX_SIGNATURES = 64
DEVICE_CPU, DEVICE_CUDA = 1, 2
FLAG_CUDA_GRAPH = 1  # header flags (the high 16 bits of the device-id word): the core captures CUDA graphs
STORAGE_EXTERNAL, STORAGE_ARENA, STORAGE_CONSTANT = 0, 1, 2
# The embedded constants (bound weights) a plan holds by default; the core reads plan files below 4 GiB.
MAX_CONSTANT_BYTES = 2 << 30
_PLAN_FILE_LIMIT = 4 << 30
STAGE_CALL, STAGE_RELAYOUT, STAGE_KERNEL, STAGE_MATMUL, STAGE_CHECK = 0, 1, 2, 3, 4
ON_ERROR = {"fail": 0, "identity": 1, "skip": 2, "fallback": 3}
PARAM_KINDS = {"ptr": 0, "i32": 1, "i64": 2, "f32": 3, "f64": 4}
PORT_NONE, PORT_IN, PORT_OUT = 0, 1, 2


class _Payload:
    """Little-endian primitives of the payload (docs/plan-format.md, "Encoding")."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def u8(self, v: int) -> None:
        self.parts.append(struct.pack("<B", v))

    def u32(self, v: int) -> None:
        self.parts.append(struct.pack("<I", v))

    def i32(self, v: int) -> None:
        self.parts.append(struct.pack("<i", v))

    def u64(self, v: int) -> None:
        self.parts.append(struct.pack("<Q", v))

    def i64s(self, vs) -> None:
        self.parts.append(struct.pack(f"<{len(vs)}q", *vs))

    def raw(self, b: bytes) -> None:
        self.parts.append(b)

    def f64s(self, vs) -> None:
        self.parts.append(struct.pack(f"<{len(vs)}d", *vs))

    def str(self, s: str | bytes) -> None:
        b = s.encode() if isinstance(s, str) else s
        self.u32(len(b))
        self.parts.append(b)

    def refs(self, refs) -> None:
        self.u32(len(refs))
        for r in refs:
            self.i32(r)

    def bytes(self) -> bytes:
        return b"".join(self.parts)


def _refuse(st: LinkedStage, why: str) -> ConfigError:
    message = f"stage {st.id!r} (operator {st.desc.name!r}) cannot be compiled for the native core: {why}"
    return ConfigError(
        f"cannot compile the pipeline: {message}",
        errors=[Problem(ErrorCode.PIPELINK_ERR_INVALID_CONFIG, st.path, message)],
        stage=st.id,
    )


def _native_spec(desc, registry, st: LinkedStage, what: str = "its operator", device: str = "cpu"):
    """The manifest entry of a native operator with an entry point for ``device`` ("cpu" or "cuda"), or a
    ConfigError saying why the core cannot call it."""
    if desc.source in ("builtin", "python"):
        kind = "a built-in NumPy operator" if desc.source == "builtin" else "a Python operator"
        raise _refuse(
            st,
            f"{what} {desc.name!r} is {kind}; the native core calls native modules (C ABI) only. Use a "
            "native module for it, or run this pipeline from Python",
        )
    module = load_library(desc.source, registry=registry)
    spec = next(s for s in module.specs if s.name == desc.name and s.version == desc.version)
    if spec.signature is not None:
        raise _refuse(
            st, f"{what} is a legacy kernel bound through a sidecar; the core calls ABI entry points only"
        )
    if device not in spec.entry:
        raise _refuse(
            st,
            f"{what} has no {device} entry point (devices {list(spec.devices)}); {device} plans need one",
        )
    return module, spec


def _check_stage(st: LinkedStage, registry, cuda: bool, cuda_graph: bool = False) -> None:
    c = st.config
    if c.isolation == "process":
        raise _refuse(st, "isolation 'process' runs only in the Python executor; remove it to compile")
    if not cuda:
        _native_spec(st.desc, registry, st)
        if st.fallback is not None:
            _native_spec(st.fallback, registry, st, what="its fallback")
        return
    # CUDA plans replay the launches of built-in kernels and call native modules' CUDA entry points. A
    # native module's on_error policy and check_finite apply in the core; a built-in launch that fails
    # fails the run (docs/plan-format.md).
    if st.desc.source == "python":
        raise _refuse(
            st,
            f"its operator {st.desc.name!r} is a Python operator; the native core runs built-in kernels, "
            "cuBLASLt and native modules. Run this pipeline from Python",
        )
    if st.desc.source != "builtin":
        _native_spec(st.desc, registry, st, device="cuda")
        if st.fallback is not None:
            _native_spec(st.fallback, registry, st, what="its fallback", device="cuda")
    if c.constraints.timeout_ms:
        raise _refuse(
            st,
            "timeout_ms is not applied by the native core's CUDA path (a stage's work is asynchronous: the "
            "host cannot time it); remove it to compile, or run this pipeline from Python",
        )
    policy = c.on_error.kind != "fail" or c.constraints.check_finite
    if policy and cuda_graph:
        raise _refuse(
            st,
            "on_error and check_finite decide on the host after the stage runs, which a CUDA graph cannot "
            "replay; compile without cuda_graph, or remove them",
        )
    if st.desc.source == "builtin" and c.on_error.kind != "fail" and not c.constraints.check_finite:
        raise _refuse(
            st,
            "on_error on a built-in kernel applies in the native core's CUDA path only with check_finite (a "
            "launch that fails fails the run); add check_finite, remove on_error, or run this pipeline from "
            "Python",
        )
    if st.desc.source == "builtin" and c.on_error.kind == "fallback":
        raise _refuse(
            st,
            "the native core does not run a built-in kernel's fallback; use on_error 'identity' or 'skip' "
            "with check_finite, or run this pipeline from Python",
        )


def _launches(step) -> list:
    """The native launches of a CUDA step, or a ConfigError naming the stage."""
    describe = getattr(step.kernel, "native_launches", None)
    if step.isolated or step.staged or describe is None:
        why = (
            "its CUDA kernel is not a prebuilt launch (host staging, a read of a device value, launches "
            "around host code, or the PyTorch fallback of a product without nvmath)"
            if not step.isolated
            else "isolation 'process' runs only in the Python executor"
        )
        raise _refuse(step.stage, f"{why}, which the native core cannot replay; run it from Python")
    return describe()


def _attrs(p: _Payload, values: Mapping[str, Any], where: str) -> None:
    # AttrArray decides how each Python value crosses the ABI; the plan stores exactly that.
    arr = AttrArray(values, where=where)
    p.u32(arr.count)
    for slot in list(arr.array)[: arr.count]:
        p.str(slot.name)
        p.u8(slot.type)
        if slot.type == ATTR_STR:
            p.str(ctypes.string_at(slot.value.s, slot.count))
        elif slot.type in (ATTR_FLOATS, ATTR_INTS):
            p.u32(slot.count)
            if slot.type == ATTR_FLOATS:
                p.f64s(slot.value.floats[: slot.count])
            else:
                p.i64s(slot.value.ints[: slot.count])
        elif slot.type == 0:  # ATTR_FLOAT
            p.f64s([slot.value.f])
        else:  # int, bool
            p.i64s([slot.value.i])


def _call(p: _Payload, spec, library: int, values: Mapping[str, Any], where: str, device: str) -> None:
    p.str(spec.name)
    p.u32(library)
    p.str(spec.entry[device])
    p.str(spec.workspace_size or "")
    p.str(spec.context_create or "")
    p.str(spec.context_destroy or "")
    _attrs(p, values, where)


def _signature(pipe, shapes: Mapping[str, tuple] | None, contiguous: bool) -> tuple:
    decls = pipe.graph.config.inputs or {}
    weights = pipe.graph.config.weights
    sig = []
    for name in pipe.graph.external_inputs:
        if name in pipe._bound:  # a constant: its array's shape and dtype, contiguous
            if shapes and name in shapes:
                raise InvalidArgumentError(
                    f"--shape {name}=...: {name!r} is bound by the weights file, so the plan holds it as a "
                    "constant of the array's shape; drop it from the shapes",
                    input=name,
                )
            array = weights[name]
            sig.append((name, tuple(int(d) for d in array.shape), get_dtype(array.dtype).name, True))
            continue
        shape, dtype = (shapes or {}).get(name, (None, None))
        decl = decls.get(name)
        if shape is None and decl is not None and decl.shape is not None:
            shape = decl.shape
        if dtype is None and decl is not None:
            dtype = decl.dtype
        if shape is None or dtype is None or not all(isinstance(d, int) for d in shape):
            raise InvalidArgumentError(
                f"input {name!r} has no concrete shape and dtype to compile for; declare it in the config's "
                f"'inputs', or pass --shape {name}=AxB:dtype (Pipeline.save(shapes={{...}}))",
                input=name,
            )
        sig.append((name, tuple(int(d) for d in shape), get_dtype(dtype).name, contiguous))
    return tuple(sig)


def _check_constant_bytes(pipe, limit: int) -> None:
    """Refuse, before compiling, bound weights over ``limit`` bytes (or a limit the core cannot read)."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 0 <= limit < _PLAN_FILE_LIMIT:
        raise InvalidArgumentError(
            f"max_constant_bytes must be an int in [0, {_PLAN_FILE_LIMIT}) (the native core reads plan files "
            f"below 4 GiB); got {limit!r}"
        )
    sizes = {n: int(pipe.graph.config.weights[n].nbytes) for n in pipe._bound}
    total = sum(sizes.values())
    if total > limit:
        largest = sorted(sizes, key=sizes.get, reverse=True)[:3]
        raise InvalidArgumentError(
            f"pipeline {pipe.name!r}: its bound weights are {total} bytes ({total / 2**30:.2f} GiB; largest: "
            + ", ".join(f"{n!r} {sizes[n]} bytes" for n in largest)
            + f"), over the plan's limit of {limit} bytes. Raise it (Pipeline.save(max_constant_bytes=N), "
            "pipelink compile --max-constant-bytes N; the core reads plans below 4 GiB), or take those "
            "arrays out of the weights file and pass them as inputs",
            total=total,
            limit=limit,
        )


def plan_bytes(
    pipe,
    path: Path,
    shapes: Mapping[str, tuple] | None = None,
    *,
    cuda_graph: bool = False,
    max_constant_bytes: int = MAX_CONSTANT_BYTES,
    variants: dict[str, str] | None = None,
) -> bytes:
    """The ``.plk`` file of ``pipe`` for one input signature, with library paths relative to ``path``
    (``variants``: see :func:`write_plan`)."""
    _check_constant_bytes(pipe, max_constant_bytes)
    backend = pipe._backend
    cuda = backend.info.kind == "cuda"  # the plan's device (DLPack device type), not a capability question
    if cuda_graph and not cuda:
        raise InvalidArgumentError(
            f"cuda_graph: pipeline {pipe.name!r} is loaded on {pipe.device}, and CUDA graphs apply to CUDA "
            "plans only: compile for cuda[:N] or drop --cuda-graph"
        )
    if not cuda and not backend.capabilities.host_access:
        raise HardwareUnsupportedError(
            f"pipeline {pipe.name!r} is loaded on {pipe.device}; the native core runs CPU and CUDA plans: "
            "load it with device='cpu' or 'cuda[:N]'",
            device=pipe.device,
        )
    graph, registry = pipe.graph, pipe._registry
    for st in graph.stages:
        _check_stage(st, registry, cuda, cuda_graph)
    # CPU inputs are marked non-contiguous so the plan reserves a relayout buffer for each input a
    # contiguous port reads (the core uses it only when a caller's tensor is strided); a CUDA plan takes
    # contiguous device inputs.
    signature = _signature(pipe, shapes, contiguous=cuda)
    tuned = pipe._tuned_params(signature) if pipe.use_tuned else {}
    # Views of intermediates are arena tensors at their source's offset; the core binds only inputs and
    # outputs as external tensors, so a view of an input stays a copying stage (one device copy in the plan).
    # No arena: the plan records arena tensors by offset and launches by port; each execution context of the
    # core makes its own (allocating one here too would hold the plan's arena twice while compiling).
    plan = compile_plan(graph, registry, backend, {}, signature, tuned=tuned, views="arena", allocate=False)
    try:
        return _serialise(pipe, plan, path, tuned, cuda, FLAG_CUDA_GRAPH if cuda_graph else 0, variants)
    finally:
        plan.release()


class _Cubins:
    """The distinct cubins of a CUDA plan, by SHA-256."""

    def __init__(self) -> None:
        self.index: dict[bytes, int] = {}
        self.blobs: list[tuple[bytes, bytes]] = []  # (sha256, bytes)

    def of(self, data: bytes) -> int:
        digest = hashlib.sha256(data).digest()
        if digest not in self.index:
            self.index[digest] = len(self.blobs)
            self.blobs.append((digest, data))
        return self.index[digest]


def _port(p: _Payload, slot) -> None:
    """A kernel's reference to one of its stage's ports: u8 none/in/out, u32 position."""
    p.u8(PORT_NONE if slot is None else PORT_IN if slot[0] == "in" else PORT_OUT)
    p.u32(0 if slot is None else slot[1])


def _kernel_stage(p: _Payload, sid: str, launch: NativeKernel, cubins: _Cubins, ports) -> None:
    p.u8(STAGE_KERNEL)
    p.str(sid)
    ports()
    p.u32(cubins.of(launch.cubin))
    p.str(launch.name)
    for d in launch.dims:
        p.u32(int(d))
    p.u32(len(launch.params))
    for param in launch.params:
        kind = param[0]
        p.u8(PARAM_KINDS[kind])
        if kind == "ptr":
            _port(p, param[1])
            p.u32(int(param[2]))
        elif kind == "i32":
            p.i32(int(param[1]))
        elif kind == "i64":
            p.i64s([int(param[1])])
        elif kind == "f32":
            p.raw(struct.pack("<f", float(param[1])))
        else:
            p.f64s([float(param[1])])


def _checks_finite(st: LinkedStage) -> bool:
    """Whether a stage has ``constraints.check_finite``."""
    return bool(st.config.constraints.check_finite)


def _check_record(p: _Payload, sid: str, on_error: str, ports) -> None:
    """A built-in stage's check_finite after its launches (format 5): its ports, its on_error (fail,
    identity or skip) and the check_finite flag."""
    p.u8(STAGE_CHECK)
    p.str(sid)
    ports()
    p.u8(ON_ERROR[on_error])
    p.u8(1)


def _matmul_stage(p: _Payload, sid: str, mm: NativeMatmul, ports) -> None:
    p.u8(STAGE_MATMUL)
    p.str(sid)
    ports()
    for v in (mm.data_type, mm.compute_type, mm.scale_type):
        p.i32(v)
    p.u8(mm.trans[0])
    p.u8(mm.trans[1])
    p.u32(mm.epilogue)
    for rows, cols, ld, count, stride in mm.layouts:
        p.u64(rows)
        p.u64(cols)
        p.i64s([ld])
        p.i32(count)
        p.i64s([stride])
    p.f64s([mm.alpha, mm.beta])
    for slot in mm.operands:
        _port(p, slot)
    _port(p, mm.bias)
    p.u32(len(mm.offsets))
    for offsets in mm.offsets:
        p.i64s(list(offsets))
    p.u32(mm.itemsize)
    p.u64(mm.max_workspace)
    for align in mm.min_alignment:
        p.u32(align)
    p.u32(mm.algo_rank)  # [v4] the candidate the bind timed fastest, of how many asked, and what it needs
    p.u32(mm.algo_asked)
    p.u64(mm.algo_workspace)


def _serialise(
    pipe,
    plan,
    path: Path,
    tuned: Mapping[str, Mapping[str, Any]],
    cuda: bool,
    flags: int = 0,
    variants: dict[str, str] | None = None,
) -> bytes:
    graph, registry = pipe.graph, pipe._registry
    ran = variants if variants is not None else {}  # stage id -> what the core runs for it
    tensors: list[tuple[str, str, tuple, int, int]] = []  # name, dtype, shape, storage, offset
    index: dict[str, int] = {}

    def add(name: str, storage: int, offset: int = 0, *, bind: bool = True) -> int:
        tensors.append((name, plan.dtypes[name], plan.shapes[name], storage, offset))
        if bind:
            index[name] = len(tensors) - 1
        return len(tensors) - 1

    inputs = [add(n, STORAGE_EXTERNAL) for n in graph.external_inputs if n not in pipe._bound]
    # Bound weights: constant tensors with their bytes in the plan, loaded once by the core.
    constants = [
        (add(n, STORAGE_CONSTANT), graph.config.weights[n]) for n in graph.external_inputs if n in pipe._bound
    ]
    passthrough = [n for n in graph.outputs if n in index]
    outputs = [add(n, STORAGE_EXTERNAL, bind=n not in index) for n in graph.outputs]
    for b in plan.memory.buffers.values():
        add(b.name, STORAGE_ARENA, b.offset)

    libraries: dict[str, int] = {}
    lib_entries: list[tuple[str, bytes]] = []

    def library(module) -> int:
        key = str(module.path)
        if key not in libraries:
            libraries[key] = len(lib_entries)
            rel = os.path.relpath(module.path, Path(path).resolve().parent)
            lib_entries.append((rel, hashlib.sha256(module.path.read_bytes()).digest()))
        return libraries[key]

    stages = _Payload()
    n_stages = 0
    relayouts: set[str] = set()
    cubins = _Cubins() if cuda else None
    for step in plan.steps:
        st = step.stage
        ran[st.id] = step.variant
        if cuda and st.desc.source == "builtin" and _checks_finite(st) and (step.view or st.desc.view):
            raise _refuse(
                st,
                "check_finite on a stage that runs as a view (its output is its input's memory) is not "
                "applied by the native core; put it on the stage that makes the tensor, or run this pipeline "
                "from Python",
            )
        if step.view:  # no stage: its output is a tensor at its source's arena offset
            continue
        if step.empty:  # no stage: its outputs have no element (nothing to write)
            continue
        for source, name in zip(st.inputs, step.in_names, strict=True):
            if name is not None and name != source and name not in relayouts:
                # An input a contiguous port reads: copied into its arena buffer only when strided.
                relayouts.add(name)
                stages.u8(STAGE_RELAYOUT)
                stages.str(f"{st.id}.relayout.{source}")
                stages.u8(1)
                stages.refs([index[source]])
                stages.refs([index[name]])
                n_stages += 1
        if cuda and st.desc.view:  # a view kept as a copy (of an input, or into an output): one device copy
            ran[st.id] = "copy"
            stages.u8(STAGE_RELAYOUT)
            stages.str(st.id)
            stages.u8(0)
            stages.refs([index[step.in_names[0]]])
            stages.refs([index[step.out_names[0]]])
            n_stages += 1
            continue
        if cuda and st.desc.source == "builtin":

            def ports(step=step) -> None:
                stages.refs([index[n] if n is not None else -1 for n in step.in_names])
                stages.refs([index[n] for n in step.out_names])

            for launch in _launches(step):
                if isinstance(launch, NativeMatmul):
                    _matmul_stage(stages, st.id, launch, ports)
                else:
                    _kernel_stage(stages, st.id, launch, cubins, ports)
                n_stages += 1
            if _checks_finite(st):  # its outputs counted after its last launch, and its on_error applied
                _check_record(stages, st.id, st.config.on_error.kind, ports)
                n_stages += 1
            continue
        device = "cuda" if cuda else "cpu"
        module, spec = _native_spec(st.desc, registry, st, device=device)
        c = st.config
        stages.u8(STAGE_CALL)
        stages.str(st.id)
        stages.str(str(st.desc.version))
        stages.str(json.dumps(spec.raw, sort_keys=True))
        stages.u8(ON_ERROR[c.on_error.kind])
        stages.u8(1 if c.constraints.check_finite else 0)
        stages.f64s([float(c.constraints.timeout_ms or 0.0)])
        params = dict(tuned.get(st.id, {}))
        if st.math:
            params["math"] = st.math
        _call(stages, spec, library(module), {**st.attrs, **params}, f"stage {st.id!r}", device)
        stages.refs([index[n] if n is not None else -1 for n in step.in_names])
        stages.refs([index[n] for n in step.out_names])
        if c.on_error.kind == "fallback":
            fb_module, fb_spec = _native_spec(st.fallback, registry, st, what="its fallback", device=device)
            _call(stages, fb_spec, library(fb_module), st.fallback_attrs, f"stage {st.id!r} fallback", device)
            stages.u32(len(st.fallback.inputs))
            stages.u32(len(st.fallback.outputs))
        n_stages += 1
    for name in passthrough:  # an input returned as an output: copied into the caller's output
        stages.u8(STAGE_RELAYOUT)
        stages.str(f"output.{name}")
        stages.u8(0)
        stages.refs([index[name]])
        stages.refs([outputs[graph.outputs.index(name)]])
        n_stages += 1

    cc = pipe._backend.info.compute_capability if cuda else (0, 0)
    return assemble(
        PlanParts(
            name=pipe.name,
            arena_bytes=plan.memory.peak_bytes,
            arena_alignment=max([b.alignment for b in plan.memory.buffers.values()] + [256]),
            compute_capability=int(cc[0]) * 10 + int(cc[1]),
            tensors=tensors,
            inputs=inputs,
            outputs=outputs,
            libraries=lib_entries,
            cubins=cubins.blobs if cubins is not None else [],
            n_stages=n_stages,
            stages=stages.bytes(),
            device=(DEVICE_CUDA, pipe._backend.info.index) if cuda else (DEVICE_CPU, 0),
            flags=flags,
            constants=[(i, _raw_bytes(a)) for i, a in constants],
        )
    )


def _raw_bytes(array) -> memoryview:
    """An array's bytes in C order, without a copy when it is contiguous (any dtype, bfloat16 included)."""
    return memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))


@dataclass
class PlanParts:
    """The sections of a plan, in file order (docs/plan-format.md); ``stages`` is their encoded bytes."""

    name: str
    arena_bytes: int
    arena_alignment: int
    compute_capability: int  # major * 10 + minor; 0 for CPU plans
    tensors: list[tuple[str, str, tuple, int, int]]  # name, dtype, shape, storage, offset
    inputs: list[int]
    outputs: list[int]
    libraries: list[tuple[str, bytes]]  # path relative to the plan, sha256
    cubins: list[tuple[bytes, bytes]]  # sha256, bytes
    n_stages: int
    stages: bytes
    device: tuple[int, int]  # DLPack device type, id
    flags: int = 0  # FLAG_*: the high 16 bits of the header's device-id word
    # (tensor index, bytes) of each tensor of storage STORAGE_CONSTANT: the bound weights
    constants: list[tuple[int, Any]] = field(default_factory=list)


def assemble(parts: PlanParts) -> bytes:
    """The plan file: the 64-byte envelope, then the payload."""
    p = _Payload()
    p.str(parts.name)
    p.u64(parts.arena_bytes)
    p.u32(parts.arena_alignment)
    p.u32(parts.compute_capability)
    p.u32(len(parts.tensors))
    for name, dtype, shape, storage, offset in parts.tensors:
        p.str(name)
        p.i32(get_dtype(dtype).c_enum)
        p.u32(len(shape))
        p.i64s(shape)
        p.u8(storage)
        p.u64(offset)
    p.refs(parts.inputs)
    p.refs(parts.outputs)
    p.u32(len(parts.libraries))
    for rel, digest in parts.libraries:
        p.str(rel)
        p.raw(digest)
    p.u32(len(parts.cubins))
    for digest, data in parts.cubins:
        p.raw(digest)
        p.u64(len(data))
        p.raw(data)
    p.u32(len(parts.constants))
    for ref, data in parts.constants:
        p.i32(ref)
        p.raw(hashlib.sha256(data).digest())
        p.u64(len(data))
        p.raw(data)
    p.u32(parts.n_stages)
    p.raw(parts.stages)
    payload = p.bytes()
    device_type, device_id = parts.device
    header = MAGIC + struct.pack(
        "<IIiIQ", FORMAT_VERSION, HEADER_SIZE, device_type, device_id | parts.flags << 16, len(payload)
    )
    return header + hashlib.sha256(payload).digest() + payload


def bundle(plans: Sequence[bytes]) -> bytes:
    """Several plans of one pipeline (whole ``.plk`` files, one per input signature) as one bundle: a 64-byte
    header (magic, version, count, payload size, its SHA-256), then each plan's length (u64) and bytes."""
    if not 1 <= len(plans) <= MAX_SIGNATURES:
        raise InvalidArgumentError(f"a plan bundle holds 1 to {MAX_SIGNATURES} signatures (got {len(plans)})")
    payload = b"".join(struct.pack("<Q", len(p)) + bytes(p) for p in plans)
    header = BUNDLE_MAGIC + struct.pack("<IIIIQ", BUNDLE_VERSION, HEADER_SIZE, len(plans), 0, len(payload))
    return header + hashlib.sha256(payload).digest() + payload


def write_plan(
    pipe,
    path: str | os.PathLike,
    shapes: Mapping[str, tuple] | Sequence[Mapping[str, tuple]] | None = None,
    *,
    cuda_graph: bool = False,
    max_constant_bytes: int = MAX_CONSTANT_BYTES,
    variants: dict[str, str] | None = None,
) -> Path:
    """Compile ``pipe`` for the native core and write the plan to ``path`` (atomically).

    Parameters
    ----------
    shapes : dict of name -> (shape, dtype), or a list of them, optional
        The input signature to compile for; by default the config's declared ``inputs``. A dtype of None
        takes the declared one. Bound weights are not inputs: the plan holds them as constants. A list of
        several signatures writes a bundle: one plan each, the core running the one whose input shapes a
        call's tensors have (at most 64).
    max_constant_bytes : int
        The most bytes of bound weights the plan may embed (default 2 GiB; below 4 GiB, the largest plan
        file the native core reads).
    cuda_graph : bool
        Set the plan's ``cuda_graph`` flag: the core captures each execution context's launches into CUDA
        graphs and replays them (docs/native-core.md). CUDA plans only.
    variants : dict, optional
        Filled with each stage's id -> the variant the plan runs for it, named as the Python executor's
        reports name it (``"cuda:nvrtc"``, ``"cuda:cublaslt"``, a native module's variant...), ``"view"``
        for a stage that is an arena alias, ``"copy"`` for a view stage a CUDA plan keeps as a device copy.

    Raises
    ------
    ConfigError
        A stage the native core cannot run (a built-in or Python operator, a legacy kernel, isolation
        'process'): the problem points at the stage.
    InvalidArgumentError
        An input without a concrete shape and dtype; ``cuda_graph`` for a pipeline not on CUDA; bound
        weights over ``max_constant_bytes``.
    HardwareUnsupportedError
        The pipeline is loaded on a device without native plans.
    """
    out = Path(path)
    several = isinstance(shapes, Sequence) and not isinstance(shapes, str | bytes)
    signatures = list(shapes) if several else [shapes]
    if several and not 1 <= len(signatures) <= MAX_SIGNATURES:
        raise InvalidArgumentError(f"a plan holds 1 to {MAX_SIGNATURES} signatures (got {len(signatures)})")
    plans = [
        plan_bytes(
            pipe, out, s, cuda_graph=cuda_graph, max_constant_bytes=max_constant_bytes, variants=variants
        )
        for s in signatures
    ]
    data = bundle(plans) if len(plans) > 1 else plans[0]
    _write_atomically(out, data)
    return out


def _write_atomically(out: Path, data: bytes) -> None:
    """Write ``out`` through a temporary file beside it and a rename, so a reader never sees half a plan;
    only a regular file (or nothing) is replaced: the rename would put a plan in place of a device."""
    if out.exists() and not out.is_file():
        raise InvalidArgumentError(
            f"cannot write the plan to {out}: it exists and is not a regular file; give a .plk file path",
            path=str(out),
        )
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, out)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise InvalidArgumentError(
            f"cannot write the plan to {out}: {e.strerror or e}; give a writable .plk file path",
            path=str(out),
        ) from e


def signatures_of(options: Sequence[str]) -> dict | list[dict]:
    """``--shape`` options as the signature(s) to compile: one per value of a repeated input (an input
    given once is the same in every signature), e.g. ``x=8x1024 x=16x1024`` -> two signatures.

    Raises
    ------
    InvalidArgumentError
        A malformed option, or inputs repeated different numbers of times.
    """
    per_name: dict[str, list] = {}
    for text in options:
        name, spec = parse_shape(text)
        per_name.setdefault(name, []).append(spec)
    counts = {len(v) for v in per_name.values() if len(v) > 1}
    if len(counts) > 1:
        raise InvalidArgumentError(
            "--shape: every input given more than once must be given as many times (one value per signature; "
            f"got {', '.join(f'{n} {len(v)}x' for n, v in per_name.items())})"
        )
    n = counts.pop() if counts else 1
    found = [{name: specs[k if len(specs) > 1 else 0] for name, specs in per_name.items()} for k in range(n)]
    return found if n > 1 else found[0]


def parse_shape(text: str) -> tuple[str, tuple[tuple[int, ...], str | None]]:
    """``NAME=AxB[:dtype]`` (``NAME=:dtype`` or ``NAME=`` for 0-d) -> (name, (shape, dtype or None)).

    Raises
    ------
    InvalidArgumentError
        Naming the text and the expected form.
    """
    name, sep, rest = text.partition("=")
    dims, _, dtype = rest.partition(":")
    try:
        shape = tuple(int(d) for d in dims.lower().split("x")) if dims.strip() else ()
    except ValueError:
        shape = None
    if not sep or not name or shape is None or any(d < 0 for d in shape):
        raise InvalidArgumentError(
            f"--shape {text!r}: expected NAME=AxB[:dtype], e.g. x=8x1024:float32 (NAME=:float32 for a 0-d "
            "input)"
        )
    return name, (shape, get_dtype(dtype).name if dtype else None)
