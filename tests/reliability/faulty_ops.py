"""Operators that fail in every way a module can; importable, so isolated workers can rebuild them."""

from __future__ import annotations

import ctypes
import os
import time

import numpy as np

import pipelink as pl

FAULTS = ("none", "raise", "status", "nan", "segfault", "abort", "hang")
NEEDS_PROCESS = {"segfault", "abort", "hang"}


@pl.operator("test_faulty_v1", inputs=["x"], outputs=["y"], shapes={"y": "x"}, attrs={"fault": "none"})
def faulty(x, y, *, fault):
    """y = 2x, unless told to fail."""
    if fault == "raise":
        raise RuntimeError("injected failure")
    if fault == "status":
        raise pl.ModuleCrashError("native status 77 (injected)", status=77)
    if fault == "segfault":
        ctypes.string_at(0)
    if fault == "abort":
        os.abort()
    if fault == "hang":
        time.sleep(600)
    np.multiply(x, 2, out=y)
    if fault == "nan":
        y.flat[::5] = np.nan


def fault_pipeline(fault: str, policy, *, isolation: str = "none") -> dict:
    """x -> faulty -> f -> relu -> g   and a healthy branch x -> gelu -> h -> scale -> k."""
    constraints = {"check_finite": True}
    if fault == "hang" or isolation == "process":
        constraints["timeout_ms"] = 3000 if fault == "hang" else 60000
    return {
        "inputs": {"x": {"shape": [8, 16], "dtype": "float32"}},
        "outputs": ["g", "k"],
        "pipeline": [
            {
                "name": "test_faulty_v1",
                "id": "faulty",
                "inputs": ["x"],
                "outputs": ["f"],
                "attrs": {"fault": fault},
                "on_error": policy,
                "isolation": isolation,
                "constraints": constraints,
            },
            {"name": "relu", "id": "after", "inputs": ["f"], "outputs": ["g"]},
            {"name": "gelu", "id": "healthy", "inputs": ["x"], "outputs": ["h"]},
            {"name": "scale", "id": "healthy2", "inputs": ["h"], "outputs": ["k"], "attrs": {"factor": 3.0}},
        ],
    }
