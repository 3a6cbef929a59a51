"""The worker process of an isolated stage: rebuilds the stage's kernel and runs it on shared memory.

It must report every Python-level failure back as a PipeLinkError; a crash (signal) is detected by the
parent from the closed pipe and the exit code.
"""

from __future__ import annotations

from multiprocessing.shared_memory import SharedMemory

import numpy as np

from ..errors import ModuleCrashError, PipeLinkError

__all__ = ["worker_main"]


def _build_kernel(spec):
    from ..descriptor import KernelContext
    from ..modules.python import python_kernel
    from ..modules.registry import OperatorRegistry
    from ..ops import register_builtins

    ctx = KernelContext(stage=spec.stage, attrs=spec.attrs, in_shapes=spec.in_shapes, in_dtypes=spec.in_dtypes,
                        out_shapes=spec.out_shapes, out_dtypes=spec.out_dtypes, backend=None, params=spec.params)
    if spec.source == "python":
        return python_kernel(spec.function, n_in=len(spec.in_shapes))(ctx)
    registry = OperatorRegistry()
    register_builtins(registry)
    if spec.source != "builtin":
        from ..modules.native import load_library

        load_library(spec.source, registry=registry)
    desc = registry.get(spec.operator, f"=={spec.version}",
                        source=None if spec.source == "builtin" else spec.source)
    variant = next(v for v in desc.variants if v.name == spec.variant or (not spec.variant and v.device == "cpu"))
    return variant.bind(ctx)


def _attach(name: str | None) -> SharedMemory | None:
    if name is None:
        return None
    # A spawned worker shares the parent's resource tracker, so attaching registers the same name the
    # parent registered (a set: no double unlink); the parent unlinks it when the plan is released.
    return SharedMemory(name=name)


def worker_main(conn, spec) -> None:
    """Entry point of the spawned process."""
    try:
        from ..dtypes import get_dtype

        kernel = _build_kernel(spec)
        arena = _attach(spec.arena)
        staging = _attach(spec.staging)
        in_dtypes = [get_dtype(d).numpy if d is not None else None for d in spec.in_dtypes]
        out_dtypes = [get_dtype(d).numpy for d in spec.out_dtypes]
    except BaseException as e:  # noqa: BLE001 - reported to the parent, never raised here
        conn.send(("failed", e if isinstance(e, PipeLinkError) else ModuleCrashError(
            f"stage {spec.stage!r}: its worker could not build the kernel: {type(e).__name__}: {e}",
            stage=spec.stage, operator=spec.operator)))
        return
    conn.send(("ready", None))

    def view(ref, shape, dtype):
        block = arena if ref[0] == "arena" else staging
        return np.ndarray(shape, dtype=dtype, buffer=block.buf, offset=ref[1])

    with np.errstate(all="ignore"):
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return
            if message[0] == "exit":
                return
            _, in_refs, out_refs = message
            try:
                ins = [view(r, s, d) if r is not None else None
                       for r, s, d in zip(in_refs, spec.in_shapes, in_dtypes, strict=True)]
                outs = [view(r, s, d) for r, s, d in zip(out_refs, spec.out_shapes, out_dtypes, strict=True)]
                kernel(ins, outs, None)
                conn.send(("ok", None))
            except PipeLinkError as e:
                conn.send(("error", e))
            except Exception as e:  # noqa: BLE001 - the stage's failure, reported with its cause
                conn.send(("error", ModuleCrashError(
                    f"stage {spec.stage!r} (operator {spec.operator!r}) raised {type(e).__name__}: {e} "
                    "in its worker process", stage=spec.stage, operator=spec.operator,
                    cause=f"{type(e).__name__}: {e}")))
