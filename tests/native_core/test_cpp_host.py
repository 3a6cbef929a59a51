"""examples/cpp_host: the seed's main.cpp built with CMake (find_package(PipeLink), PipeLink::runtime) and
run on the CPU with the walkthrough's C twin (its config is compiled through this package at load); on a GPU
host, mlp_gpu.cpp runs the transformer MLP block's CUDA plan on cudaMalloc'd buffers (built wherever the
CUDA toolkit is, so CI compiles it too)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipelink.modules.build import cmake_dir
from pipelink.native import cublaslt_path

from .conftest import host_env

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cpp_host"


def _build(tmp_path) -> Path:
    build = tmp_path / "build"
    configure = ["cmake", "-S", EXAMPLE, "-B", build, f"-DPipeLink_DIR={cmake_dir()}"]
    subprocess.run([*configure, f"-DPython3_EXECUTABLE={sys.executable}"], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", build], check=True, capture_output=True)
    return build


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cpp_host_builds_and_runs_the_walkthrough(tmp_path, runtime_lib):
    build = _build(tmp_path)
    # The module is built without a dependency on the runtime (modules never link against PipeLink).
    if shutil.which("readelf"):
        module = build / "lib" / "liblayernorm_module.so"
        needed = subprocess.run(["readelf", "-d", module], capture_output=True, text=True).stdout
        assert "pipelink_runtime" not in needed
    run = [build / "test_main"]
    proc = subprocess.run(run, cwd=build, capture_output=True, text=True, env=host_env(), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "norm_output [1 x 1024]" in proc.stdout


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cpp_host_runs_the_mlp_block_on_the_gpu(tmp_path, runtime_lib):
    build = _build(tmp_path)
    assert (build / "mlp_gpu").is_file(), "the CUDA toolkit was not found: mlp_gpu was not built"
    env = host_env()
    compile_plan = [sys.executable, "-m", "pipelink", "compile", "mlp_block.json", "-o", "mlp_block.plk"]
    subprocess.run([*compile_plan, "--device", "cuda"], cwd=build, check=True, env=env, timeout=300)
    if cublaslt_path() is not None and not os.environ.get("PIPELINK_CUBLASLT"):
        env["PIPELINK_CUBLASLT"] = str(cublaslt_path())  # a C++ host says where cuBLASLt is
    run = [build / "mlp_gpu"]
    proc = subprocess.run(run, cwd=build, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "mlp_block [8 x 256] on cuda:0" in proc.stdout
