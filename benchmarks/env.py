"""The benchmark environment: device, optional torch, time budget, random inputs and logging.

On CUDA every tensor is a torch CUDA tensor (PipeLink takes it zero-copy through DLPack); on the CPU
every tensor is a NumPy array and torch is never needed.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .timing import BUDGETS, Budget, rel_err

__all__ = ["Env"]


@dataclass
class Env:
    """What every case needs to know about the run."""

    device: str  # "cuda" or "cpu"
    size: str  # "default" | "quick" | "tiny"
    torch: Any = None  # the torch module on CUDA runs; None on the CPU
    torch_note: str | None = None  # why torch comparisons are missing, when they are
    compile: bool = True  # time torch.compile too
    seed: int = 0
    ceilings: dict[str, Any] = field(default_factory=dict)
    rng: np.random.Generator = field(init=False)
    started: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        if self.torch is not None and self.is_cuda:
            self.torch.manual_seed(self.seed)

    # -- properties --------------------------------------------------------------------------------
    @property
    def is_cuda(self) -> bool:
        return self.device == "cuda"

    @property
    def pl_device(self) -> str:
        return "cuda:0" if self.is_cuda else "cpu"

    @property
    def tiny(self) -> bool:
        return self.size == "tiny"

    @property
    def quick(self) -> bool:
        return self.size == "quick"

    @property
    def budget(self) -> Budget:
        return BUDGETS[self.size]

    @property
    def has_torch(self) -> bool:
        """True when torch comparisons run (CUDA runs with torch importable)."""
        return self.torch is not None and self.is_cuda

    # -- tensors -----------------------------------------------------------------------------------
    def randn(self, shape: tuple[int, ...], dtype: str, scale: float = 1.0, offset: float = 0.0) -> Any:
        """Fresh normal random data (never zeros) of ``dtype`` on the run's device."""
        if self.is_cuda:
            t = self.torch
            x = t.randn(shape, device="cuda", dtype=t.float32)
            if scale != 1.0 or offset != 0.0:
                x.mul_(scale).add_(offset)
            return x.to(getattr(t, dtype))
        x = self.rng.standard_normal(shape).astype(np.float32) * np.float32(scale) + np.float32(offset)
        return x.astype(_np_dtype(dtype))

    def empty(self, shape: tuple[int, ...], dtype: str) -> Any:
        if self.is_cuda:
            return self.torch.empty(shape, device="cuda", dtype=getattr(self.torch, dtype))
        return np.empty(shape, _np_dtype(dtype))

    def from_pl(self, tensor: Any) -> Any:
        """A PipeLink output as a torch tensor (zero-copy) or a NumPy array."""
        if self.is_cuda:
            return self.torch.from_dlpack(tensor)
        return np.asarray(tensor)

    def to_reference(self, x: Any) -> Any:
        """x in the reference precision: float32 torch tensor on CUDA, float64 NumPy array on the CPU."""
        if self.is_cuda:
            return x.float()
        return np.asarray(x).astype(np.float64)

    def rel_err(self, out: Any, ref: Any) -> float:
        return rel_err(out, ref, self.torch if self.is_cuda else None)

    def synchronize(self) -> None:
        if self.is_cuda:
            self.torch.cuda.synchronize()

    def free(self) -> None:
        """Return cached memory between cases (torch's cache and PipeLink's pool)."""
        import gc

        import pipelink as pl

        gc.collect()
        if self.is_cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()
        with contextlib.suppress(Exception):  # best effort between cases
            pl.memory.clear_pool(self.pl_device)

    # -- output ------------------------------------------------------------------------------------
    def log(self, message: str) -> None:
        """A progress line with the elapsed time, flushed at once (the device run's output is streamed)."""
        print(f"[{time.perf_counter() - self.started:7.1f}s] {message}", flush=True)
        sys.stdout.flush()


def _np_dtype(name: str) -> Any:
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(name)
