"""Shared helpers for the CPU reference-kernel tests of the built-in operators (not a test module).

Kernels are driven exactly as the runtime drives them: attrs resolved by the descriptor, output shapes
and dtypes from ``infer_outputs``, outputs preallocated and poisoned, then ``bind(ctx)(ins, outs, None)``.
"""

from __future__ import annotations

import math

import numpy as np

from pipelink.descriptor import KernelContext, infer_outputs
from pipelink.dtypes import get_dtype
from pipelink.modules.registry import OperatorRegistry
from pipelink.ops import register_builtins

__all__ = ["FLOAT_NAMES", "INT_NAMES", "TOL", "make_registry", "rand", "poison", "run_op", "check_close",
           "ref_erf", "as64"]

FLOAT_NAMES = ("float32", "float16", "bfloat16", "float64")
INT_NAMES = ("int8", "int32", "int64", "uint8")
# (rtol, atol) per output dtype: STYLE.md's tolerances.
TOL = {"float32": (1e-5, 1e-5), "float16": (1e-2, 1e-2), "bfloat16": (1e-2, 1e-2), "float64": (1e-12, 1e-12)}


def make_registry() -> OperatorRegistry:
    registry = OperatorRegistry()
    register_builtins(registry)
    return registry


def rand(rng: np.random.Generator, shape, dtype: str, low: float = -3.0, high: float = 3.0) -> np.ndarray:
    """Fresh random values of a PipeLink dtype (ints over a range that keeps products in int8 too)."""
    npd = get_dtype(dtype).numpy
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(npd, np.integer):
        info = np.iinfo(npd)
        return rng.integers(max(info.min, -100), min(info.max, 100), size=shape, endpoint=True).astype(npd)
    return rng.uniform(low, high, size=shape).astype(npd)


def poison(shape, dtype: str) -> np.ndarray:
    """An output buffer full of NaN (floats) or 0xCD bytes (ints, bool)."""
    npd = get_dtype(dtype).numpy
    if dtype in FLOAT_NAMES:
        return np.full(shape, np.nan, dtype=npd)
    out = np.empty(shape, dtype=npd)
    out.reshape(-1).view(np.uint8)[...] = 0xCD  # reshape: a 0-d array cannot change its itemsize
    return out


def run_op(registry, name: str, inputs: list, attrs: dict | None = None, *, stage: str = "stage0"):
    """Bind the operator's CPU variant for these inputs and run it once; returns the outputs."""
    desc = registry.get(name)
    inputs = list(inputs) + [None] * (len(desc.inputs) - len(inputs))  # absent trailing optional ports
    resolved = desc.resolve_attrs(attrs or {}, where=f"stage {stage!r}")
    in_shapes = tuple(None if a is None else a.shape for a in inputs)
    in_dtypes = tuple(None if a is None else get_dtype(a.dtype).name for a in inputs)
    out_shapes, out_dtypes = infer_outputs(desc, in_shapes, in_dtypes, resolved, stage=stage)
    outputs = [poison(s, d) for s, d in zip(out_shapes, out_dtypes, strict=True)]
    variant = desc.variants[0]
    assert variant.device == "cpu" and variant.name == "cpu:numpy"
    ctx = KernelContext(stage=stage, attrs=resolved, in_shapes=in_shapes, in_dtypes=in_dtypes,
                        out_shapes=out_shapes, out_dtypes=out_dtypes, backend=None)
    kernel = variant.bind(ctx)
    assert kernel(list(inputs), outputs, None) is None, "kernels write outputs in place, they return nothing"
    return outputs


def as64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def check_close(actual: np.ndarray, ref: np.ndarray, dtype: str | None = None) -> None:
    """Compare with a float64 reference at the tolerance of ``dtype``; NaN never passes."""
    dtype = dtype or get_dtype(actual.dtype).name
    assert actual.shape == ref.shape, (actual.shape, ref.shape)
    got = as64(actual)
    assert not np.isnan(got).any(), f"{np.isnan(got).sum()} element(s) not written (still NaN)"
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, equal_nan=False)


_math_erf = np.vectorize(math.erf, otypes=[np.float64])


def ref_erf(x: np.ndarray) -> np.ndarray:
    """erf from the standard library, element by element (slow, independent of the kernel code)."""
    return _math_erf(np.asarray(x, dtype=np.float64))

