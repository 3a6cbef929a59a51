"""precision_policy on the GPU: the stage computes in the half type the device supports, output cast back;
the result matches the CPU run of the same policy within the half type's tolerance."""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from tests.conftest import assert_close

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "policy, compute",
    [
        ("bf16_if_supported_else_fp32", "bfloat16"),
        ("fp16_if_supported_else_fp32", "float16"),
        ("tf32", "float32"),
    ],
)
def test_precision_policy_on_gpu(policy, compute):
    doc = {
        "outputs": ["y"],
        "pipeline": [
            {
                "name": "gemm",
                "id": "proj",
                "inputs": ["x", "w"],
                "outputs": ["h"],
                "constraints": {"precision_policy": policy},
            },
            {
                "name": "layer_norm",
                "inputs": ["h"],
                "outputs": ["y"],
                "constraints": {"precision_policy": policy},
            },
        ],
    }
    rng = np.random.default_rng(9)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    w = (rng.standard_normal((256, 128)) / 16).astype(np.float32)
    pipe = pl.load(doc, device="cuda")
    got = pipe.run(x=x, w=w)["y"].numpy()
    assert got.dtype == np.float32
    if compute != "float32":
        inner = "h@proj:" + {"bfloat16": "bf16", "float16": "fp16"}[compute]
        assert pipe._last_plan.dtypes[inner] == compute  # noqa: SLF001 - the stage ran in the half type
    h = x.astype(np.float64) @ w
    ref = (h - h.mean(1, keepdims=True)) / np.sqrt(h.var(1, keepdims=True) + 1e-5)
    assert_close(got, ref, compute if compute != "float32" else "bfloat16", policy)  # tf32 ~ 1e-3
