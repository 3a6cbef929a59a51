"""build_module (C, CUDA, .desc.h), the CMake package, inspect_library, the LayerNorm example end to end."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import EXAMPLE
from native_helpers import layer_norm_reference, run_op

from pipelink.errors import InvalidArgumentError, ModuleLoadError
from pipelink.modules.build import build_module, cmake_dir, include_dir
from pipelink.modules.descheader import manifest_from_header
from pipelink.modules.inspect import format_inspect, inspect_library
from pipelink.modules.native import load_library

rng = np.random.default_rng()
SRC = EXAMPLE / "src"


def _check_layer_norm(desc, n=7, c=300):
    x = (rng.standard_normal((n, c)) * 3 + 1).astype(np.float32)
    g, b = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    eps = np.array(1e-5, dtype=np.float32)
    outs = run_op(desc, [x, g, b, eps])
    for got, want in zip(outs, layer_norm_reference(x, g, b, eps), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_inspect_reads_ports_versions_symbols_and_digest(libs):
    info = inspect_library(libs["good"])
    assert info["sha256"] == hashlib.sha256(libs["good"].read_bytes()).hexdigest()
    assert info["abi_version"] == 1 and info["manifest_source"] == "section" and info["problems"] == []
    assert info["version_symbols"] == [
        "pipeLinkVersion_attr_probe_1_0_0",
        "pipeLinkVersion_row_sum_1_1_0",
        "pipeLinkVersion_scale_add_1_0_0",
    ]
    row_sum = next(op for op in info["operators"] if op["name"] == "row_sum")
    assert row_sum["inputs"] == [{"name": "x", "shape": ["N", "C"], "dtype": "T"}]
    assert row_sum["required_features"] == [{"feature": "fp64", "minimum": 1.0}]
    text = format_inspect(info)
    assert "operator row_sum 1.1.0" in text and "tunable  block: [64, 128]" in text


def test_inspect_never_executes_the_library(libs):
    # The bomb aborts when opened; inspecting it in this process must not open it.
    info = inspect_library(libs["bomb"], allow_load=False)
    assert info["operators"][0]["name"] == "bomb" and info["version_symbols"] == [
        "pipeLinkVersion_bomb_1_0_0"
    ]


def test_inspect_reports_disagreeing_version_symbols(libs):
    problems = inspect_library(libs["version_disagree"])["problems"]
    assert any("pipeLinkVersion_skew_1_0_0 is not exported" in p for p in problems)
    assert any("pipeLinkVersion_skew_1_1_0 is exported" in p for p in problems)
    with pytest.raises(ModuleLoadError, match="not an ELF"):
        inspect_library(libs["notelf"])


def test_desc_header_generates_the_manifest_and_the_c_twin_matches_numpy(tmp_path, reg):
    manifest = manifest_from_header(SRC / "layernorm.desc.h", devices=["cpu"])
    (op,) = manifest["operators"]
    assert op["name"] == "layer_norm_v1" and op["version"] == "1.0.0"
    assert [p["name"] for p in op["inputs"]] == ["input", "gamma", "beta", "eps"]
    assert op["required_features"] == [{"feature": "fp32", "minimum": 1.0}]
    lib = build_module(
        [SRC / "layernorm_cpu.c", SRC / "layernorm.desc.h"], tmp_path / "liblayernorm_module.so"
    )
    module = load_library(lib, registry=reg)
    assert "pipeLinkVersion_layer_norm_v1_1_0_0" in module.elf.version_symbols
    _check_layer_norm(module.operator("layer_norm_v1", "^1"))


def test_two_native_stages_chained(libs, reg):
    # scale_add's output feeds row_sum, through the same bound kernels an executor would replay.
    module = load_library(libs["good"], registry=reg)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    (h,) = run_op(module.operator("scale_add"), [x, None], {"alpha": 3.0}, stage="scale")
    (y,) = run_op(module.operator("row_sum"), [h], stage="sum")
    # A float32 sum of six terms can land near zero: its error is bounded by the terms' size.
    want = (3 * x.astype(np.float64)).sum(axis=1)
    bound = 8 * np.finfo(np.float32).eps * (3 * np.abs(x.astype(np.float64))).sum(axis=1)
    assert np.all(np.abs(y - want) <= bound), (y, want)


def test_bad_descriptor_header_is_rejected(tmp_path):
    bad = tmp_path / "bad.desc.h"
    bad.write_text(
        'struct B { static constexpr const char* name = "b"; static constexpr int32_t version = 1;\n'
        '  static constexpr const char* input_names[] = {"x"};\n'
        '  static constexpr const char* output_names[] = {"y"};\n'
        "  static constexpr int32_t num_inputs = 2; };\n"
    )
    with pytest.raises(InvalidArgumentError, match="num_inputs is 2, but 1 names"):
        build_module([bad], tmp_path / "libb.so")


def test_compile_errors_are_reported(tmp_path):
    src = tmp_path / "broken.c"
    src.write_text("int f( { return 0; }\n")
    with pytest.raises(ModuleLoadError, match="compiling broken.c failed"):
        build_module(src, tmp_path / "libbroken.so")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_cuda_example_compiles_with_nvcc_and_inspects(tmp_path):
    lib = build_module(
        [SRC / "layernorm_kernel.cu", SRC / "layernorm.desc.h"],
        tmp_path / "liblayernorm_module.so",
        arch="sm_90",
    )
    info = inspect_library(lib, allow_load=False)
    (op,) = info["operators"]
    assert (op["name"], op["version"], op["devices"]) == ("layer_norm_v1", "1.0.0", ["cuda"])
    assert op["version_symbol_exported"] and info["problems"] == []
    nm = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
    assert " T pipeLinkLayerNorm" in nm and " T layer_norm_v1_compute" in nm


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cmake_package_builds_the_example_twin(tmp_path, reg):
    build, out = tmp_path / "build", tmp_path / "lib"
    configure = subprocess.run(
        [
            "cmake",
            "-S",
            str(EXAMPLE),
            "-B",
            str(build),
            f"-DPipeLink_DIR={cmake_dir()}",
            "-DLAYERNORM_CPU_TWIN=ON",
            f"-DLAYERNORM_OUTPUT_DIR={out}",
            f"-DPython3_EXECUTABLE={sys.executable}",
        ],
        capture_output=True,
        text=True,
    )
    assert configure.returncode == 0, configure.stderr
    built = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout + built.stderr
    module = load_library(out / "liblayernorm_module.so", registry=reg)
    _check_layer_norm(module.operator("layer_norm_v1"))


def test_include_dir_holds_the_header():
    assert (include_dir() / "pipelink.h").is_file() and (cmake_dir() / "PipeLinkConfig.cmake").is_file()


def test_example_config_runs_through_a_pipeline(tmp_path):
    import pipelink

    if not hasattr(pipelink, "load"):
        pytest.skip("pipelink.load (the pipeline linker) is not available in this tree yet")
    (tmp_path / "lib").mkdir()
    build_module(
        [SRC / "layernorm_cpu.c", SRC / "layernorm.desc.h"], tmp_path / "lib" / "liblayernorm_module.so"
    )
    shutil.copy(EXAMPLE / "config.json", tmp_path / "config.json")
    assert (
        json.loads((tmp_path / "config.json").read_text())["pipeline"][0]["library"]
        == "./lib/liblayernorm_module.so"
    )
    x = rng.standard_normal((5, 64)).astype(np.float32)
    g, b = rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    eps = np.array(1e-5, dtype=np.float32)
    with pipelink.load(tmp_path / "config.json", device="cpu") as pipe:
        outs = pipe.run({"input_tensor": x, "gamma_tensor": g, "beta_tensor": b, "eps_scalar": eps})
        got = [np.asarray(outs[k]) for k in ("norm_output", "mean_tensor", "rstd_tensor")]
    for got_i, want in zip(got, layer_norm_reference(x, g, b, eps), strict=True):
        np.testing.assert_allclose(got_i, want, rtol=1e-5, atol=1e-5)
