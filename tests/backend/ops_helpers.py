"""Shared helpers of the built-in operator tests (not a test module): each test is written once and runs
on every available device (the ``device`` fixture of conftest.py), against a float64 reference the test
writes itself.

Kernels are driven exactly as the runtime drives them: attrs resolved by the descriptor, output shapes
and dtypes from ``infer_outputs``, inputs imported and outputs allocated by the device's backend, outputs
poisoned, then ``bind(ctx)(ins, outs, stream)``. A CUDA variant that declines a stage (cuDNN's) fails the
call unless the test allows the staged reference the runtime would then run (``staged_ok``).
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

from pipelink.backends import get_backend
from pipelink.descriptor import KernelContext, VariantDeclined, infer_outputs
from pipelink.dtypes import TOLERANCES, get_dtype
from pipelink.modules.registry import OperatorRegistry
from pipelink.ops import register_builtins
from pipelink.ops.cudnn_graph import CUDNN_VARIANT
from pipelink.runtime.staging import HostStaged

__all__ = [
    "FLOAT_NAMES",
    "INT_NAMES",
    "TOL",
    "make_registry",
    "rand",
    "poison",
    "run_op",
    "check_close",
    "ref_erf",
    "as64",
]

FLOAT_NAMES = ("float32", "float16", "bfloat16", "float64")
INT_NAMES = ("int8", "int32", "int64", "uint8", "int16", "uint16", "uint32", "uint64")
TOL = TOLERANCES  # (rtol, atol) per output dtype: the package's one table


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


def run_op(
    registry,
    name: str,
    inputs: list,
    attrs: dict | None = None,
    *,
    stage: str = "stage0",
    device: str = "cpu",
    staged_ok: bool = False,
    variant_name: str | None = None,
):
    """Bind the operator's variant for ``device`` to these inputs and run it once; returns the outputs as
    NumPy arrays. Skips the test when the device has no kernel for the input dtype (a float-only CUDA
    kernel asked for ints), or when cuDNN is not installed for a variant that needs it. A variant that
    declines the stage fails the test, unless ``staged_ok``: then the reference runs on staged copies, as
    the runtime runs it. ``variant_name`` picks the variant to bind (default: the device's first built-in
    one)."""
    desc = registry.get(name)
    inputs = list(inputs) + [None] * (len(desc.inputs) - len(inputs))  # absent trailing optional ports
    resolved = desc.resolve_attrs(attrs or {}, where=f"stage {stage!r}")
    in_shapes = tuple(None if a is None else a.shape for a in inputs)
    in_dtypes = tuple(None if a is None else get_dtype(a.dtype).name for a in inputs)
    out_shapes, out_dtypes = infer_outputs(desc, in_shapes, in_dtypes, resolved, stage=stage)
    variant = next(
        (
            v
            for v in desc.variants
            if v.device == device and v.source == "builtin" and variant_name in (None, v.name)
        ),
        None,
    )
    host_only = variant is None  # no kernel for the device: its reference runs staged, as the runtime runs it
    if host_only:
        variant = next(v for v in desc.variants if v.device == "cpu" and v.host_ok)
    if variant.dtypes is not None and in_dtypes[0] not in variant.dtypes:
        pytest.skip(f"{name} has no {device} kernel for {in_dtypes[0]}")
    backend = get_backend(device)
    stream = backend.default_stream()
    ins = [None if a is None else backend.import_input(a, stream=stream) for a in inputs]
    outs = []
    for shape, dtype in zip(out_shapes, out_dtypes, strict=True):
        out = backend.empty(tuple(shape), get_dtype(dtype))
        backend.copy(out, backend.import_input(poison(shape, dtype), stream=stream), stream=stream)
        outs.append(out)
    ctx = KernelContext(
        stage=stage,
        attrs=resolved,
        in_shapes=in_shapes,
        in_dtypes=in_dtypes,
        out_shapes=out_shapes,
        out_dtypes=out_dtypes,
        backend=backend,
    )
    try:
        kernel = HostStaged(variant.bind(ctx), ctx, backend) if host_only else variant.bind(ctx)
    except VariantDeclined:
        if variant.name == CUDNN_VARIANT and importlib.util.find_spec("cudnn") is None:
            pytest.skip(f"{name}: nvidia-cudnn-frontend is not installed")
        if not staged_ok:
            raise
        host = next(v for v in desc.variants if v.device == "cpu" and v.host_ok)
        kernel = HostStaged(host.bind(ctx), ctx, backend)
    assert kernel(ins, outs, stream) is None, "kernels write outputs in place, they return nothing"
    backend.synchronize(stream)
    return [np.array(backend.to_host(backend.wrap(out)).numpy()) for out in outs]


def infer_float_shapes(reg: OperatorRegistry, name: str, shapes, attrs: dict) -> list:
    """The output shapes ``name`` infers from float32 inputs of ``shapes`` (absent trailing optional
    ports padded with None)."""
    desc = reg.get(name)
    shapes = list(shapes) + [None] * (len(desc.inputs) - len(shapes))
    dtypes = ["float32" if s is not None else None for s in shapes]
    resolved = desc.resolve_attrs(attrs, where="t")
    return infer_outputs(desc, tuple(shapes), tuple(dtypes), resolved, stage="t")[0]


def assert_same_bytes(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal dtypes and shapes, and every byte equal (NaN payloads and signed zeros included)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype)
    g, w = got.reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8)
    bad = np.flatnonzero(g != w)
    assert bad.size == 0, (what, bad[:6], g[bad[:6]], w[bad[:6]])


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
