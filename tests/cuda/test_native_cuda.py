"""A native CUDA module (the seed's LayerNorm walkthrough) built with nvcc on the GPU host, run in a
pipeline eagerly and inside a captured CUDA graph, compared with the NumPy reference."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import pipelink as pl
from pipelink.modules.build import build_module
from tests.conftest import assert_close

pytestmark = pytest.mark.gpu
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "layernorm_module"


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    out = tmp_path_factory.mktemp("lnmod") / "liblayernorm_module.so"
    return build_module([EXAMPLE / "src" / "layernorm_kernel.cu", EXAMPLE / "src" / "layernorm.desc.h"], out)


def reference(x, g, b, eps):
    x64 = x.astype(np.float64)
    mu, var = x64.mean(1), x64.var(1)
    return (x64 - mu[:, None]) / np.sqrt(var[:, None] + eps) * g + b, mu, 1 / np.sqrt(var + eps)


@pytest.mark.parametrize("graph", [False, True])
def test_native_cuda_layernorm_in_pipeline(library, graph):
    doc = {
        "outputs": ["norm_output", "mean_tensor", "rstd_tensor", "act"],
        "pipeline": [
            {
                "name": "layer_norm_v1",
                "library": str(library),
                "inputs": ["input_tensor", "gamma_tensor", "beta_tensor", "eps_scalar"],
                "outputs": ["norm_output", "mean_tensor", "rstd_tensor"],
            },
            {"name": "relu", "inputs": ["norm_output"], "outputs": ["act"]},
        ],
    }
    pipe = pl.load(doc, device="cuda", cuda_graph=graph)
    rng = np.random.default_rng(5)
    for rows, cols in ((37, 1000), (64, 4096)):
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        g, b = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
        eps = np.asarray(1e-5, np.float32)
        for _ in range(3):  # the first run captures in graph mode, later ones replay
            out = pipe.run(input_tensor=x, gamma_tensor=g, beta_tensor=b, eps_scalar=eps)
            y, mu, rstd = reference(x, g, b, 1e-5)
            assert_close(out["norm_output"].numpy(), y, "float32", "native layer_norm output")
            assert_close(out["mean_tensor"].numpy(), mu, "float32", "mean")
            assert_close(out["rstd_tensor"].numpy(), rstd, "float32", "rstd")
            assert_close(out["act"].numpy(), np.maximum(y, 0), "float32", "relu after the module")
        if graph:
            assert pipe.last_report.graph_replay
