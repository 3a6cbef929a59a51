"""Process isolation on the GPU: a native CUDA module that performs an illegal memory access runs in a
worker; the fault is reported for its stage, the policy applies, the caller's context stays healthy and
later runs are correct."""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest

import pipelink as pl
from pipelink.backends import get_backend
from pipelink.modules.build import build_module

pytestmark = pytest.mark.gpu

CRASHY = r"""
#include <pipelink.h>
#include <cuda_runtime.h>
// y = 2x; when x[0] > 1000 the kernel writes through a wild pointer (an illegal address, error 700).
__global__ void crashy_kernel(const float* x, float* y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
    if (i == 0 && x[0] > 1000.0f) { float* wild = (float*)0x10; *wild = 1.0f; }
}
PIPELINK_COMPUTE(crashy_compute) {
    long long n = pipelink_numel(&in[0]);
    crashy_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
        (const float*)in[0].data, (float*)out[0].data, n);
    return cudaGetLastError() == cudaSuccess ? PIPELINK_SUCCESS : PIPELINK_ERR_CUDA;
}
PIPELINK_VERSION(crashy, 1, 0, 0)
PIPELINK_MANIFEST({"name": "crashy", "version": "1.0.0", "entry": "crashy_compute", "devices": ["cuda"],
                   "inputs": [{"name": "x", "dtype": "float32"}], "outputs": [{"name": "y", "shape": "x"}]})
"""


@pytest.fixture(scope="module")
def crashy(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    folder = tmp_path_factory.mktemp("crashy")
    (folder / "crashy.cu").write_text(CRASHY)
    return build_module(folder / "crashy.cu", folder / "libcrashy.so")


def doc(library, isolation="process"):
    return {
        "outputs": ["g", "h"],
        "pipeline": [
            {
                "name": "crashy",
                "library": str(library),
                "inputs": ["x"],
                "outputs": ["f"],
                "isolation": isolation,
                "on_error": "identity",
                "constraints": {"timeout_ms": 20000},
            },
            {"name": "relu", "inputs": ["f"], "outputs": ["g"]},
            {"name": "gelu", "id": "healthy", "inputs": ["x"], "outputs": ["h"]},
        ],
    }


def test_illegal_address_in_isolated_module_is_contained(crashy):
    from pipelink.modules.image import is_opened, read_image

    pipe = pl.load(doc(crashy), device="cuda")
    assert not is_opened(read_image(crashy).sha256)  # only the worker opens an isolated stage's module
    rng = np.random.default_rng(3)
    x = rng.standard_normal(10_000).astype(np.float32)
    healthy = pl.load({"pipeline": [{"name": "gelu", "inputs": ["x"], "outputs": ["h"]}]}, device="cuda")

    out = pipe.run(x=x)
    np.testing.assert_allclose(out["g"].numpy(), np.maximum(2 * x, 0), rtol=1e-6)
    assert pipe.last_report.stages["crashy"].status == "ok"

    bad = x.copy()
    bad[0] = 5000.0
    out = pipe.run(x=bad)
    rep = pipe.last_report.stages["crashy"]
    assert rep.status == "degraded" and rep.action == "identity"
    assert rep.error.code == pl.ErrorCode.PIPELINK_ERR_MODULE_CRASH
    assert "ILLEGAL_ADDRESS" in rep.error.message, rep.error.message
    np.testing.assert_array_equal(out["g"].numpy(), np.maximum(bad, 0))  # identity passed x through
    np.testing.assert_array_equal(out["h"].numpy(), healthy.run(x=bad)["h"].numpy())

    get_backend("cuda").check_errors()  # the caller's context is healthy
    for _ in range(3):  # the worker was restarted: later runs are correct
        x = rng.standard_normal(10_000).astype(np.float32)
        out = pipe.run(x=x)
        np.testing.assert_allclose(out["g"].numpy(), np.maximum(2 * x, 0), rtol=1e-6)
        assert pipe.last_report.stages["crashy"].status == "ok"
    pipe.close()


def test_isolated_stage_matches_in_process_and_reports_its_cost(crashy):
    x = np.random.default_rng(4).standard_normal(1 << 16).astype(np.float32)
    times, results = {}, {}
    for isolation in ("none", "process"):
        pipe = pl.load(doc(crashy, isolation), device="cuda")
        for _ in range(20):
            pipe.run(x=x)
        get_backend("cuda").synchronize()
        t0 = time.perf_counter()
        for _ in range(200):
            pipe.run(x=x)
        get_backend("cuda").synchronize()
        times[isolation] = (time.perf_counter() - t0) / 200
        results[isolation] = {k: v.numpy() for k, v in pipe.run(x=x).items()}
        pipe.close()
    added = (times["process"] - times["none"]) * 1e6
    print(
        f"\nGPU isolation cost: {times['none'] * 1e6:.1f} us in process, {times['process'] * 1e6:.1f} us "
        f"isolated -> {added:.1f} us added per isolated stage"
    )
    for name in ("g", "h"):
        np.testing.assert_array_equal(results["process"][name], results["none"][name])
