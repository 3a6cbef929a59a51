"""Helpers of the CUDA tests (not a test module): one-stage configs, the CPU reference, pool poisoning."""

from __future__ import annotations

import numpy as np

import pipelink as pl
from pipelink.backends import get_backend
from pipelink.dtypes import get_dtype

__all__ = ["FLOATS", "TOL", "one_stage", "rand", "run_both", "poison_pool", "check_close"]

FLOATS = ("float32", "float16", "bfloat16", "float64")
# (rtol, atol) per output dtype, as STYLE.md: fp32 ~1e-5, half types 1e-2.
TOL = {"float32": (1e-5, 1e-5), "float16": (1e-2, 1e-2), "bfloat16": (1e-2, 2e-2), "float64": (1e-10, 1e-10),
       "int8": (0, 0), "int32": (0, 0), "int64": (0, 0), "uint8": (0, 0), "bool": (0, 0)}


def one_stage(op: str, inputs: dict, outputs: list[str], attrs: dict | None = None) -> dict:
    """A config with one stage of ``op`` whose inputs are all external."""
    stage = {"name": op, "id": "s", "inputs": list(inputs), "outputs": outputs}
    if attrs:
        stage["attrs"] = attrs
    return {"name": f"test_{op}", "outputs": outputs, "pipeline": [stage]}


def rand(rng: np.random.Generator, shape, dtype: str, low: float = -3.0, high: float = 3.0) -> np.ndarray:
    npd = get_dtype(dtype).numpy
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(npd, np.integer):
        return rng.integers(-100 if np.issubdtype(npd, np.signedinteger) else 0, 100, size=shape).astype(npd)
    return rng.uniform(low, high, size=shape).astype(npd)


def poison_pool(shapes_dtypes, copies: int = 3) -> None:
    """Fill pool blocks of each output's size with NaN bytes (0xFF) and return them to the pool, so the
    tensors the executor allocates next start as NaN: an element a kernel forgets stays NaN."""
    backend = get_backend("cuda")
    keep = []
    for shape, dtype in shapes_dtypes:
        dt = get_dtype(dtype)
        for _ in range(copies):
            t = backend.empty(tuple(shape), dt)
            host = np.full(max(t.nbytes, 1), 0xFF, dtype=np.uint8)[: t.nbytes].view(dt.numpy).reshape(shape)
            backend.copy(t, backend.import_input(host), stream=backend.default_stream())
            keep.append(t)
    backend.synchronize(backend.default_stream())
    del keep


def run_both(config: dict, feed: dict) -> tuple[dict, dict]:
    """Run a config on the CPU (the reference) and on CUDA with the same inputs; returns NumPy outputs."""
    with pl.load(config, device="cpu") as cpu:
        ref = {k: np.asarray(v) for k, v in cpu.run(feed).items()}
    poison_pool([(v.shape, get_dtype(v.dtype).name) for v in ref.values()])
    with pl.load(config, device="cuda") as gpu:
        out = gpu.run(feed)
        assert all(t.is_cuda for t in out.values()), "CUDA outputs must live on the device"
        got = {k: v.numpy() for k, v in out.items()}
        variants = dict(gpu.load_report.variants)
    assert all(v.startswith("cuda") for v in variants.values()), f"a stage fell back to the CPU: {variants}"
    return got, ref


def check_close(got: np.ndarray, ref: np.ndarray, dtype: str, what: str) -> None:
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    g = np.asarray(got).astype(np.float64)
    r = np.asarray(ref).astype(np.float64)
    if dtype in FLOATS:
        assert not np.isnan(g).any(), f"{what}: {int(np.isnan(g).sum())} element(s) left unwritten (NaN)"
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(g, r, rtol=rtol, atol=atol, err_msg=what)
