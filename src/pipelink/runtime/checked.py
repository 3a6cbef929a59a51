"""Checked mode: catch a stage that did not write an output, or wrote past one (a debugging mode).

Before each stage its outputs are filled with a poison pattern and the guard bytes after each output
(``GUARD_BYTES``, laid out by the planner in the arena, allocated with every returned output) with a
canary; after the stage both are read back. It works through the backend contract only (views, copies,
``to_host``), so the same code checks the CPU and the CUDA backends. It is slow, and never on by default.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..backends.base import Allocation
from ..dtypes import DType, get_dtype
from ..errors import ModuleCrashError, PipeLinkError
from ..graph.planner import MemoryPlan
from .plan import Step

__all__ = [
    "CHECKED_ENV",
    "GUARD_BYTES",
    "GUARD_BYTE",
    "POISON_BYTE",
    "CheckedPlan",
    "is_checked",
    "poison_word",
]

CHECKED_ENV = "PIPELINK_CHECKED"
GUARD_BYTES = 64  # canary bytes after every buffer
GUARD_BYTE = 0xFD
POISON_BYTE = 0xCD  # every byte of an integer or bool output
# Floats are poisoned with a quiet NaN whose payload is 0xCD...: a kernel that computes NaN writes the
# canonical NaN, not this bit pattern, so "untouched" means exactly these bits.
_FLOAT_POISON = {
    "float16": 0x7ECD,
    "bfloat16": 0x7FCD,
    "float32": 0x7FCDCDCD,
    "float64": 0x7FFDCDCDCDCDCDCD,
}


def is_checked(checked: bool | None) -> bool:
    """``checked`` itself, or when None the ``PIPELINK_CHECKED`` environment variable (``1``/``true``)."""
    if checked is not None:
        return bool(checked)
    return os.environ.get(CHECKED_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def poison_word(dtype: DType) -> int:
    """The bit pattern of one poisoned element of ``dtype`` (an unsigned integer of its size)."""
    word = _FLOAT_POISON.get(dtype.name)
    if word is not None:
        return word
    return int.from_bytes(bytes([POISON_BYTE]) * dtype.itemsize, "little")


def _words(dtype: DType) -> np.dtype:
    return np.dtype(f"<u{dtype.itemsize}")


def _untouched(host: np.ndarray) -> bool:
    """Whether every element of a (non-empty) output still holds the exact poison bits."""
    if not host.size:
        return False
    dtype = get_dtype(host.dtype)
    return bool(np.all(np.ascontiguousarray(host).view(_words(dtype)) == poison_word(dtype)))


def _as_allocation(backend, arg: Any, nbytes: int) -> Allocation:
    """A byte buffer from ``backend.empty`` as an Allocation, so ``backend.view`` can cut it (it is freed
    with its last view, never through ``Allocation.free``)."""
    return Allocation(backend.wrap(arg).ptr, nbytes, arg, backend, tag="checked")


class CheckedPlan:
    """The poison sources and guard views of one plan (see the module docstring).

    Parameters
    ----------
    backend
    memory : MemoryPlan
        Planned with ``guard_bytes=GUARD_BYTES``: every arena buffer owns the bytes after it.
    arena : Allocation or None
    outputs : mapping of name -> (shape, dtype name)
        Every tensor a stage writes (arena buffers and returned outputs).
    """

    def __init__(
        self,
        backend,
        memory: MemoryPlan,
        arena: Allocation | None,
        outputs: Mapping[str, tuple[tuple[int, ...], str]],
    ):
        self._backend = backend
        uint8 = get_dtype("uint8")
        self._guards = {
            b.name: backend.view(arena, b.offset + b.nbytes, (b.guard,), uint8)
            for b in memory.buffers.values()
            if b.guard
        }
        self._run_guards: dict[str, Any] = {}  # guards of this run's returned outputs
        self._guard_source = self._upload(np.full(GUARD_BYTES, GUARD_BYTE, np.uint8))
        # One poison block per dtype, as large as its largest output; each output poisons from a view.
        counts: dict[str, int] = {}
        for shape, dtype in outputs.values():
            counts[dtype] = max(counts.get(dtype, 1), int(np.prod(shape, dtype=np.int64)))
        blocks = {}
        for name, count in counts.items():
            dtype = get_dtype(name)
            pattern = np.full(count, poison_word(dtype), _words(dtype)).view(np.uint8)
            blocks[name] = _as_allocation(backend, self._upload(pattern), pattern.nbytes)
        self._poison = {
            name: backend.view(blocks[dtype], 0, tuple(shape), get_dtype(dtype))
            for name, (shape, dtype) in outputs.items()
        }
        backend.synchronize(backend.default_stream())

    def _upload(self, host: np.ndarray) -> Any:
        return self._backend.import_input(host, stream=self._backend.default_stream())

    def new_output(self, name: str, shape: tuple[int, ...], dtype: DType) -> Any:
        """A returned output of this run, followed by guard bytes of its own."""
        backend = self._backend
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        raw = backend.empty((nbytes + GUARD_BYTES,), get_dtype("uint8"))
        block = _as_allocation(backend, raw, nbytes + GUARD_BYTES)
        self._run_guards[name] = backend.view(block, nbytes, (GUARD_BYTES,), get_dtype("uint8"))
        return backend.view(block, 0, tuple(shape), dtype)

    def caller_output(self, name: str, buffer: Any) -> Any:
        """An output written into a caller's ``out=`` buffer: poisoned and verified like the others, but
        without guard bytes (the bytes after it are the caller's memory)."""
        self._run_guards.pop(name, None)
        return buffer

    def _guard(self, name: str) -> Any:
        return self._guards.get(name, self._run_guards.get(name))

    def arm(self, step: Step, outs: Iterable[Any], stream: Any) -> None:
        """Poison the step's outputs and fill their guards, on the step's stream."""
        copy = self._backend.copy
        for name, out in zip(step.out_names, outs, strict=True):
            copy(out, self._poison[name], stream=stream)
            guard = self._guard(name)
            if guard is not None:
                copy(guard, self._guard_source, stream=stream)

    def verify(self, step: Step, outs: Iterable[Any], stream: Any) -> PipeLinkError | None:
        """The stage's error when it wrote past an output or left one untouched, else None."""
        backend = self._backend
        st = step.stage
        try:
            backend.synchronize(stream)
            for name, out in zip(step.out_names, outs, strict=True):
                guard = self._guard(name)
                if guard is not None:
                    hit = np.flatnonzero(self._host(guard) != GUARD_BYTE)
                    if hit.size:
                        past = int(hit[-1]) + 1
                        return ModuleCrashError(
                            f"stage {st.id!r} (operator {st.desc.name!r}) wrote {past} bytes past output "
                            f"{name!r} (checked mode: its guard bytes changed); the kernel writes outside "
                            "the tensor it was given",
                            stage=st.id,
                            operator=st.desc.name,
                            output=name,
                            bytes_past=past,
                        )
                if _untouched(self._host(out)):
                    return ModuleCrashError(
                        f"stage {st.id!r} (operator {st.desc.name!r}) did not write output {name!r} "
                        "(checked mode: every element still holds the poison pattern); the kernel must "
                        "fill every output it is given",
                        stage=st.id,
                        operator=st.desc.name,
                        output=name,
                    )
        except PipeLinkError as e:
            return e
        return None

    def _host(self, arg: Any) -> np.ndarray:
        backend = self._backend
        return np.asarray(backend.to_host(backend.wrap(arg)).numpy())
