"""The operator families of issue 13 (shape, reduce, conv, pool, resize, attention, quantize) on CUDA.

Every family's CUDA variant must be chosen on a CUDA device: conv and attention run cuDNN there (with
nvidia-cudnn-frontend installed; without it they run their reference on staged copies, which the load
report names). These tests pin that contract: a pipeline mixing them loads on "cuda", reports the
expected variant for each stage, and gives the CPU device's results with outputs on the device.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import pipelink as pl
from tests.backend.ops_helpers import check_close, rand

pytestmark = pytest.mark.gpu

CONFIGS = {
    "conv_pool": (
        {
            "inputs": {
                "x": {"shape": [2, 3, 17, 16], "dtype": "float32"},
                "w": {"shape": [8, 3, 3, 3], "dtype": "float32"},
            },
            "pipeline": [
                {"name": "relu", "id": "pre", "inputs": ["x"], "outputs": ["r"]},
                {
                    "name": "conv2d",
                    "id": "conv",
                    "inputs": ["r", "w"],
                    "outputs": ["c"],
                    "attrs": {"auto_pad": "SAME_UPPER"},
                },
                {
                    "name": "max_pool2d",
                    "id": "pool",
                    "inputs": ["c"],
                    "outputs": ["p"],
                    "attrs": {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": True},
                },
                {
                    "name": "resize",
                    "id": "up",
                    "inputs": ["p"],
                    "outputs": ["y"],
                    "attrs": {"mode": "linear", "scales": [1.0, 1.0, 2.0, 2.0]},
                },
            ],
        },
        {"x": (2, 3, 17, 16), "w": (8, 3, 3, 3)},
        "float32",
    ),
    "attention": (
        {
            "inputs": {n: {"shape": [2, 4, 33, 64], "dtype": "bfloat16"} for n in ("q", "k", "v")},
            "pipeline": [
                {
                    "name": "attention",
                    "id": "sdpa",
                    "inputs": ["q", "k", "v"],
                    "outputs": ["h"],
                    "attrs": {"is_causal": True},
                },
                {
                    "name": "transpose",
                    "id": "t",
                    "inputs": ["h"],
                    "outputs": ["ht"],
                    "attrs": {"perm": [0, 2, 1, 3]},
                },
                {
                    "name": "reshape",
                    "id": "merge",
                    "inputs": ["ht"],
                    "outputs": ["y"],
                    "attrs": {"shape": [0, 0, -1]},
                },
            ],
        },
        {"q": (2, 4, 33, 64), "k": (2, 4, 33, 64), "v": (2, 4, 33, 64)},
        "bfloat16",
    ),
    "quantize": (
        {
            "inputs": {
                "x": {"shape": [64, 96], "dtype": "float16"},
                "s": {"shape": [96], "dtype": "float16"},
            },
            "pipeline": [
                {
                    "name": "quantize_linear",
                    "id": "q",
                    "inputs": ["x", "s"],
                    "outputs": ["q8"],
                    "attrs": {"output_dtype": "float8_e4m3fn"},
                },
                {"name": "dequantize_linear", "id": "dq", "inputs": ["q8", "s"], "outputs": ["d"]},
                {
                    "name": "reduce_sum",
                    "id": "sum",
                    "inputs": ["d"],
                    "outputs": ["y"],
                    "attrs": {"axes": [-1]},
                },
            ],
        },
        {"x": (64, 96), "s": (96,)},
        "float16",
    ),
}
CUDNN_STAGES = {"conv", "sdpa"}  # stages that run cuDNN (staged on the host without it)
HAS_CUDNN = importlib.util.find_spec("cudnn") is not None


@pytest.mark.parametrize("name", list(CONFIGS))
def test_families_run_on_a_cuda_device_like_on_the_cpu(name):
    config, shapes, dtype = CONFIGS[name]
    rng = np.random.default_rng(81)
    feed = {k: rand(rng, s, dtype, *((0.01, 0.1) if k == "s" else (-1, 1))) for k, s in shapes.items()}
    with pl.load(config, device="cpu") as cpu:
        ref = {k: np.asarray(v) for k, v in cpu.run(feed).items()}
    with pl.load(config, device="cuda") as gpu:
        variants = dict(gpu.load_report.variants)
        out = gpu.run(feed)
        assert all(t.is_cuda for t in out.values()), "outputs of a CUDA pipeline live on the device"
        got = {k: v.numpy() for k, v in out.items()}
    for stage, variant in variants.items():
        staged = stage in CUDNN_STAGES and not HAS_CUDNN
        assert variant.startswith("cpu" if staged else "cuda"), (stage, variant, gpu.load_report)
    for key in ref:
        check_close(got[key], ref[key], dtype)
