"""examples/cpp_host: the seed's main.cpp built with CMake (find_package(PipeLink), PipeLink::runtime) and
run on the CPU with the walkthrough's C twin; its config is compiled through this package at load."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipelink.modules.build import cmake_dir

from .conftest import host_env

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cpp_host"


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cpp_host_builds_and_runs_the_walkthrough(tmp_path, runtime_lib):
    build = tmp_path / "build"
    configure = ["cmake", "-S", EXAMPLE, "-B", build, f"-DPipeLink_DIR={cmake_dir()}"]
    subprocess.run([*configure, f"-DPython3_EXECUTABLE={sys.executable}"], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", build], check=True, capture_output=True)
    # The module is built without a dependency on the runtime (modules never link against PipeLink).
    if shutil.which("readelf"):
        module = build / "lib" / "liblayernorm_module.so"
        needed = subprocess.run(["readelf", "-d", module], capture_output=True, text=True).stdout
        assert "pipelink_runtime" not in needed
    run = [build / "test_main"]
    proc = subprocess.run(run, cwd=build, capture_output=True, text=True, env=host_env(), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "norm_output [1 x 1024]" in proc.stdout
