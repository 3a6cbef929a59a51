"""Helpers for the native-module tests: run one operator the way the executor does, NumPy references."""

from __future__ import annotations

import numpy as np

from pipelink.backends.cpu import CPUBackend
from pipelink.descriptor import KernelContext, infer_outputs

__all__ = ["poison", "run_op", "layer_norm_reference"]


def poison(shape, dtype) -> np.ndarray:
    """An output buffer filled with NaN (floats) or 0xCD bytes (integers)."""
    arr = np.empty(shape, dtype=dtype)
    if arr.dtype.kind == "f":
        arr.fill(np.nan)
    else:
        arr.view(np.uint8).fill(0xCD)
    return arr


def run_op(desc, inputs, attrs=None, params=None, *, stage="s"):
    """Bind the CPU variant of ``desc`` for these inputs (as the executor would) and run it once.

    Returns the outputs, which start poisoned.
    """
    in_shapes = tuple(None if x is None else x.shape for x in inputs)
    in_dtypes = tuple(None if x is None else str(x.dtype) for x in inputs)
    resolved = desc.resolve_attrs(attrs or {}, where=f"stage {stage!r}")
    out_shapes, out_dtypes = infer_outputs(desc, in_shapes, in_dtypes, resolved, stage=stage)
    ctx = KernelContext(
        stage, resolved, in_shapes, in_dtypes, out_shapes, out_dtypes, CPUBackend(), params=dict(params or {})
    )
    variant = next(v for v in desc.variants if v.device == "cpu")
    kernel = variant.bind(ctx)
    outputs = [poison(s, d) for s, d in zip(out_shapes, out_dtypes, strict=True)]
    kernel(list(inputs), outputs, None)
    return outputs


def layer_norm_reference(x, gamma, beta, eps):
    """NumPy LayerNorm over the last axis, in float64: (output, mean, rstd)."""
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1)
    rstd = 1.0 / np.sqrt(((x64 - mean[:, None]) ** 2).mean(axis=1) + float(eps))
    y = (x64 - mean[:, None]) * rstd[:, None] * gamma + beta
    return y, mean, rstd
