"""Fixtures for the native core's tests: the runtime library, test modules, compiled plans, the C program.

Everything is built with the system C compiler against the installed header and library, as a C/C++ host
would (``pipelink include-dir`` / ``pipelink lib-dir``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pipelink as pl
from pipelink.modules.build import build_module, include_dir
from pipelink.native.build import SOURCE_DIR as NATIVE_SRC
from pipelink.native.build import find_compiler

HERE = Path(__file__).parent
EXAMPLE = HERE.parents[1] / "examples" / "layernorm_module"
SHAPE = [4, 6]


def _library() -> Path:
    if find_compiler() is None:
        pytest.skip("no C compiler: the native core cannot be built here")
    from pipelink.native.build import compile_runtime, default_output

    # `pip install` builds it; a checkout updated since (new C sources, a merge) is rebuilt here.
    path = default_output()
    sources = sorted(NATIVE_SRC.glob("*.[ch]")) + [NATIVE_SRC.parent / "include" / "pipelink" / "runtime.h"]
    if not path.is_file() or path.stat().st_mtime < max(p.stat().st_mtime for p in sources):
        compile_runtime(path)
    return path


def graph_cache_size() -> int:
    """PLK_GRAPH_CACHE: the graphs each execution context of a cuda_graph plan keeps (core.h)."""
    import re

    return int(re.search(r"#define PLK_GRAPH_CACHE (\d+)", (NATIVE_SRC / "core.h").read_text()).group(1))


def host_env() -> dict[str, str]:
    """The environment of a C host: pipeLinkLoadPipeline("x.json") compiles through this very package."""
    path = os.pathsep.join(p for p in sys.path if p)
    return dict(os.environ, PIPELINK_PYTHON=sys.executable, PYTHONPATH=path)


def layernorm_config(lib: str) -> dict:
    """The seed's config 4.4 with its inputs declared (a plan is compiled for concrete shapes)."""
    cfg = json.loads((EXAMPLE / "config.json").read_text())
    cfg["pipeline"][0]["library"] = lib
    cfg["inputs"] = {
        "input_tensor": {"shape": [8, 1024], "dtype": "float32"},
        "gamma_tensor": {"shape": [1024], "dtype": "float32"},
        "beta_tensor": {"shape": [1024], "dtype": "float32"},
        "eps_scalar": {"shape": [], "dtype": "float32"},
    }
    return cfg


def bound_weights() -> dict[str, np.ndarray]:
    """gamma and beta of the walkthrough as a weights file binds them in lnw.plk; exact in float32, so
    c_api_test.c computes the same values."""
    j = np.arange(1024)
    return {
        "gamma_tensor": ((j % 7) * 0.25 - 0.5).astype(np.float32),
        "beta_tensor": ((j % 5) * 0.125 - 0.25).astype(np.float32),
    }


def layernorm_weights_config(lib: str, weights: str) -> dict:
    """The walkthrough with gamma and beta bound by the weights file ``weights`` (constants in its plan)."""
    cfg = layernorm_config(lib)
    cfg["weights"] = weights
    return cfg


def ops_configs(lib: str) -> dict[str, dict]:
    """The policy pipelines c_api_test.c expects (see its comments)."""
    x = {"x": {"shape": SHAPE, "dtype": "float32"}}
    fallback, finite, slow = "core_scale", {"check_finite": True}, {"timeout_ms": 5}

    def stage(op, sid, src, dst, **extra):
        return {"name": op, "id": sid, "library": lib, "inputs": [src], "outputs": [dst], **extra}

    return {
        "ops": {
            "name": "ops",
            "inputs": x,
            "outputs": ["y", "a", "c", "d", "e", "x", "t"],
            "pipeline": [
                stage("core_scale", "double", "x", "h", attrs={"alpha": 2.0}),
                stage("core_scale", "halve", "h", "y", attrs={"alpha": 0.5}),
                stage("core_flaky", "ident", "h", "a", attrs={"alpha": 1.0}, on_error="identity"),
                stage("core_flaky", "fb", "h", "c", attrs={"alpha": 3.0}, on_error={"fallback": fallback}),
                stage("core_nanify", "finite", "h", "d", constraints=finite, on_error="identity"),
                stage("core_offset", "ctx", "h", "e", attrs={"offset": 5.0}),
                stage(
                    "core_sleepy", "slow", "h", "t", attrs={"ms": 30.0}, constraints=slow, on_error="identity"
                ),
            ],
        },
        "skip": {
            "name": "skip",
            "inputs": x,
            "outputs": ["h", "a", "b"],
            "pipeline": [
                stage("core_scale", "double", "x", "h", attrs={"alpha": 2.0}),
                stage("core_flaky", "maybe", "h", "a", on_error="skip"),
                stage("core_scale", "halve", "a", "b", attrs={"alpha": 0.5}),
            ],
        },
        "fail": {"name": "fail", "inputs": x, "pipeline": [stage("core_flaky", "boom", "x", "a")]},
    }


@pytest.fixture(scope="session")
def runtime_lib() -> Path:
    return _library()


@pytest.fixture(scope="session")
def plans(tmp_path_factory, runtime_lib) -> Path:
    """A folder with the plans, configs and modules c_api_test.c reads."""
    out = tmp_path_factory.mktemp("core_plans")
    build_module(
        [EXAMPLE / "src" / "layernorm_cpu.c", EXAMPLE / "src" / "layernorm.desc.h"],
        out / "lib" / "liblayernorm_module.so",
    )
    build_module(HERE / "modules" / "core_ops.c", out / "lib" / "libcore_ops.so")
    np.savez(out / "lnw_weights.npz", **bound_weights())
    configs = {
        "ln": layernorm_config("lib/liblayernorm_module.so"),
        "lnw": layernorm_weights_config("lib/liblayernorm_module.so", "lnw_weights.npz"),
        **ops_configs("lib/libcore_ops.so"),
    }
    for name, cfg in configs.items():
        (out / f"{name}.json").write_text(json.dumps(cfg, indent=1))
        with pl.load(out / f"{name}.json", device="cpu") as pipe:
            pipe.save(out / f"{name}.plk")
    bad = {"pipeline": [{"name": "no_such_operator", "inputs": ["x"], "outputs": ["y"]}]}
    (out / "bad.json").write_text(json.dumps(bad))
    # A plan whose module changed after compiling, and a plan moved away from its module.
    (out / "tampered" / "lib").mkdir(parents=True)
    shutil.copy(out / "ln.plk", out / "tampered" / "ln.plk")
    lib = (out / "lib" / "liblayernorm_module.so").read_bytes()
    (out / "tampered" / "lib" / "liblayernorm_module.so").write_bytes(lib + b"\0")
    (out / "moved").mkdir()
    shutil.copy(out / "ln.plk", out / "moved" / "ln.plk")
    return out


@pytest.fixture(scope="session")
def c_api_test(tmp_path_factory, runtime_lib) -> Path:
    """c_api_test.c built against the installed header and library (rpath to the library's folder)."""
    exe = tmp_path_factory.mktemp("core_bin") / "c_api_test"
    cc = find_compiler()
    subprocess.run(
        [
            *cc,
            "-std=c11",
            "-O1",
            "-g",
            "-Wall",
            "-Werror",
            f"-I{include_dir()}",
            str(HERE / "c_api_test.c"),
            str(NATIVE_SRC / "sha256.c"),
            f"-L{runtime_lib.parent}",
            f"-Wl,-rpath,{runtime_lib.parent}",
            "-lpipelink_runtime",
            "-lpthread",
            "-ldl",
            "-lm",
            "-o",
            str(exe),
        ],
        check=True,
    )
    return exe
