"""The worker process of an isolated stage: rebuilds the stage's kernel and runs it on shared memory.

It must report every Python-level failure back as a PipeLinkError; a crash (signal) is detected by the
parent from the closed pipe and the exit code.
"""

from __future__ import annotations

from multiprocessing.shared_memory import SharedMemory

import numpy as np

from ..backends import get_backend
from ..descriptor import KernelContext
from ..dtypes import get_dtype
from ..errors import CUDAError, ErrorCode, ModuleCrashError, PipeLinkError
from ..modules.native import load_image
from ..modules.python import python_kernel
from ..modules.registry import OperatorRegistry
from ..ops import register_builtins
from ..tensor import Tensor
from .staging import HostStaged

__all__ = ["worker_main"]


def _build_kernel(spec, backend=None):
    kernel, ctx = _bind(spec, backend)
    # A host variant chosen for a device (Variant.host_ok) runs here on staged copies, as in-process.
    return HostStaged(kernel, ctx, backend) if spec.staged else kernel


def _bind(spec, backend):
    ctx = KernelContext(
        stage=spec.stage,
        attrs=spec.attrs,
        in_shapes=spec.in_shapes,
        in_dtypes=spec.in_dtypes,
        out_shapes=spec.out_shapes,
        out_dtypes=spec.out_dtypes,
        backend=backend,
        params=spec.params,
    )
    if spec.source == "python":
        return python_kernel(spec.function, n_in=len(spec.in_shapes))(ctx), ctx
    registry = OperatorRegistry()
    register_builtins(registry)  # with their CUDA variants
    if spec.source != "builtin":
        # The caller's verified bytes, not the path (which may have changed); the worker is the isolation.
        load_image(spec.image, registry=registry, probe=False)
    desc = registry.get(
        spec.operator, f"=={spec.version}", source=None if spec.source == "builtin" else spec.source
    )
    device = "cpu" if backend is None else backend.info.kind
    variant = next(
        v for v in desc.variants if v.name == spec.variant or (not spec.variant and v.device == device)
    )
    return variant.bind(ctx), ctx


def _attach(name: str | None) -> SharedMemory | None:
    if name is None:
        return None
    # A spawned worker shares the parent's resource tracker, so attaching registers the same name the
    # parent registered (a set: no double unlink); the parent unlinks it when the plan is released.
    return SharedMemory(name=name)


def worker_main(conn, spec) -> None:
    """Entry point of the spawned process: set up, say "ready", then serve "run" requests until "exit"."""
    try:
        step = _cuda_setup(spec) if spec.device != "cpu" else _cpu_setup(spec)
    except BaseException as e:  # noqa: BLE001 - reported to the parent, never raised here
        conn.send(
            (
                "failed",
                e
                if isinstance(e, PipeLinkError)
                else ModuleCrashError(
                    f"stage {spec.stage!r}: its worker could not start: {type(e).__name__}: {e}",
                    stage=spec.stage,
                    operator=spec.operator,
                ),
            )
        )
        return
    conn.send(("ready", None))
    with np.errstate(all="ignore"):
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return
            if message[0] == "exit":
                return
            try:
                step(message)
                conn.send(("ok", None))
            except PipeLinkError as e:
                e = _as_module_crash(e, spec)
                conn.send(("error", e))
                if e.code == ErrorCode.PIPELINK_ERR_CUDA or e.context.get("cuda_error"):
                    return  # the CUDA context may be corrupted (sticky error): the parent starts a new worker
            except Exception as e:  # noqa: BLE001 - the stage's failure, reported with its cause
                conn.send(
                    (
                        "error",
                        ModuleCrashError(
                            f"stage {spec.stage!r} (operator {spec.operator!r}) raised "
                            f"{type(e).__name__}: {e} in its worker process",
                            stage=spec.stage,
                            operator=spec.operator,
                            cause=f"{type(e).__name__}: {e}",
                        ),
                    )
                )


def _as_module_crash(e: PipeLinkError, spec) -> PipeLinkError:
    """A native module's CUDA fault is the module's crash (MODULE_CRASH for modules, CUDA for built-ins)."""
    if e.code != ErrorCode.PIPELINK_ERR_CUDA or spec.source in ("builtin", "python"):
        return e
    return ModuleCrashError(
        f"stage {spec.stage!r} (operator {spec.operator!r}, module {spec.source}) crashed its CUDA worker: "
        f"{e.message}",
        stage=spec.stage,
        operator=spec.operator,
        module=spec.source,
        cuda_error=e.context.get("cuda_error"),
        cuda_code=e.context.get("cuda_code"),
    )


def _cpu_setup(spec):
    """CPU: map the plan's arena and the stage's staging block; each request names where tensors live."""
    kernel = _build_kernel(spec)
    blocks = {"arena": _attach(spec.arena), "staging": _attach(spec.staging)}
    in_dtypes = [get_dtype(d).numpy if d is not None else None for d in spec.in_dtypes]
    out_dtypes = [get_dtype(d).numpy for d in spec.out_dtypes]

    def view(ref, shape, dtype):
        return np.ndarray(shape, dtype=dtype, buffer=blocks[ref[0]].buf, offset=ref[1])

    def step(message):
        _, in_refs, out_refs = message
        ins = [
            view(r, s, d) if r is not None else None
            for r, s, d in zip(in_refs, spec.in_shapes, in_dtypes, strict=True)
        ]
        outs = [view(r, s, d) for r, s, d in zip(out_refs, spec.out_shapes, out_dtypes, strict=True)]
        kernel(ins, outs, None)

    return step


def _cuda_setup(spec):
    """CUDA: our own context; the parent's staging block opened through its CUDA IPC handle."""
    from cuda.bindings import driver

    backend = get_backend(spec.device)
    handle = driver.CUipcMemHandle()
    handle.reserved = spec.ipc_handle
    err, base = driver.cuIpcOpenMemHandle(handle, driver.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise CUDAError(f"stage {spec.stage!r}: cuIpcOpenMemHandle failed ({err.name})", stage=spec.stage)
    slots = iter(int(base) + off for off in spec.offsets)
    ins = [
        Tensor(next(slots), s, d, spec.device) if s is not None else None
        for s, d in zip(spec.in_shapes, spec.in_dtypes, strict=True)
    ]
    outs = [
        Tensor(next(slots), s, d, spec.device) for s, d in zip(spec.out_shapes, spec.out_dtypes, strict=True)
    ]
    kernel = _build_kernel(spec, backend)
    stream = backend.default_stream()

    def step(message):
        kernel(ins, outs, stream)
        backend.synchronize(stream)
        backend.check_errors(stage=spec.stage)

    return step
