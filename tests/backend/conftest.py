"""Fixtures of the operator tests: every test runs on each available device, with inputs drawn from a
seed fixed by the test's id (the same inputs in every process and run)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request) -> str:
    """The device under test: the CPU always, CUDA where a GPU is available (else skipped with why)."""
    return request.param


@pytest.fixture
def rng(request) -> np.random.Generator:
    """Fresh random numbers from a seed fixed by the test's id (zlib.crc32: stable across processes)."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
