"""Memory of runs through the native core (issue 18's regression: the MLP peak-memory targets missed once
``run()`` went through the core): compiling a plan for the core allocates no Python arena, and the Python
plan made at load holds none while the core takes the runs."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import pipelink as pl
from pipelink.backends import get_backend
from pipelink.runtime.planfile import write_plan

from .conftest import SHAPE


def _chain(plans) -> dict:
    """x -double-> h -halve-> y through core_scale (a workspace user): h is an arena buffer of the plan."""
    lib = str(plans / "lib" / "libcore_ops.so")

    def stage(sid, src, dst, alpha):
        attrs = {"alpha": alpha}
        return {
            "name": "core_scale",
            "id": sid,
            "library": lib,
            "inputs": [src],
            "outputs": [dst],
            "attrs": attrs,
        }

    return {
        "name": "chain",
        "inputs": {"x": {"shape": SHAPE, "dtype": "float32"}},
        "outputs": ["y"],
        "pipeline": [stage("double", "x", "h", 2.0), stage("halve", "h", "y", 0.5)],
    }


def _arena_of(plan: bytes) -> int:
    """The arena size a plan file declares (docs/plan-format.md: the payload opens with the name, then it)."""
    name_length = struct.unpack_from("<I", plan, 64)[0]
    return struct.unpack_from("<Q", plan, 68 + name_length)[0]


@pytest.fixture
def arenas(monkeypatch):
    """The sizes of the arenas the CPU backend allocates from now on (Backend.allocate with tag "arena")."""
    backend = get_backend("cpu")
    made: list[int] = []
    real = backend.allocate

    def spy(nbytes, **options):
        if options.get("tag") == "arena":
            made.append(nbytes)
        return real(nbytes, **options)

    monkeypatch.setattr(backend, "allocate", spy)
    return made


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)


def test_compiling_a_plan_for_the_core_allocates_no_arena(runtime_lib, plans, tmp_path, arenas):
    with pl.load(_chain(plans), device="cpu", native=False) as pipe:
        assert len(arenas) == 1  # the Python executor's plan, made at load (native=False)
        held = get_backend("cpu").memory_stats().allocated_bytes
        path = write_plan(pipe, tmp_path / "chain.plk")
        # The plan has an arena (so an allocation would show), yet compiling it allocated none and left
        # nothing allocated: the core makes its own per execution context.
        assert _arena_of(path.read_bytes()) > 0
        assert len(arenas) == 1, f"compiling the plan allocated arenas of {arenas[1:]} bytes"
        assert get_backend("cpu").memory_stats().allocated_bytes == held


def test_auto_holds_no_python_arena_while_the_core_runs(runtime_lib, plans, arenas):
    x = _x(1)
    with pl.load(_chain(plans), device="cpu", native=False) as ref:
        want = np.asarray(ref.run(x=x)["y"]).copy()
    arenas.clear()
    with pl.load(_chain(plans), device="cpu") as pipe:
        assert pipe.memory_plan.peak_bytes > 0  # planned at load, for the declared inputs
        out = pipe.run(x=x)
        assert pipe.last_report.executor == "native"
        np.testing.assert_array_equal(np.asarray(out["y"]), want)
        assert arenas == [], "a Python arena was allocated, though the core made the run"
        # A run the Python executor makes (profile=True) allocates the plan's arena then, once.
        out = pipe.run(x=x, profile=True)
        assert pipe.last_report.executor == "python"
        np.testing.assert_array_equal(np.asarray(out["y"]), want)
        pipe.run(x=x, profile=True)
        assert arenas == [pipe.memory_plan.peak_bytes]
