"""Compiling configs into plans (Pipeline.save, `pipelink compile`, `pipelink lib-dir`); what is refused."""

from __future__ import annotations

import json

import pytest

import pipelink as pl
from pipelink.cli import main
from pipelink.errors import ConfigError, ErrorCode, InvalidArgumentError
from pipelink.runtime.planfile import parse_shape

from .conftest import EXAMPLE, layernorm_config


@pytest.fixture
def ln_dir(plans, tmp_path):
    """A folder with the example's undeclared config (seed 4.4) and the C twin module beside it."""
    (tmp_path / "lib").mkdir()
    module = (plans / "lib" / "liblayernorm_module.so").read_bytes()
    (tmp_path / "lib" / "liblayernorm_module.so").write_bytes(module)
    (tmp_path / "config.json").write_text((EXAMPLE / "config.json").read_text())
    return tmp_path


def test_cli_compile_with_shapes_equals_save_of_declared_inputs(ln_dir, capsys):
    # One signature, on the command line or declared in the config: the same plan, byte for byte.
    rc = main(
        [
            "compile",
            str(ln_dir / "config.json"),
            "-o",
            str(ln_dir / "cli.plk"),
            "--shape",
            "input_tensor=8x1024:float32",
            "--shape",
            "gamma_tensor=1024:float32",
            "--shape",
            "beta_tensor=1024:float32",
            "--shape",
            "eps_scalar=:float32",
        ]
    )
    assert rc == 0, capsys.readouterr()
    declared = ln_dir / "declared.json"
    declared.write_text(json.dumps(layernorm_config("./lib/liblayernorm_module.so")))
    with pl.load(declared, device="cpu") as pipe:
        pipe.save(ln_dir / "api.plk")
    cli, api = (ln_dir / "cli.plk").read_bytes(), (ln_dir / "api.plk").read_bytes()
    # Only the pipeline's name (the config's stem) differs: compare past it.
    assert len(cli) - len("config") == len(api) - len("declared")
    assert cli[68 + len("config") :] == api[68 + len("declared") :]


def test_compile_without_shapes_names_the_input(ln_dir, capsys):
    with pl.load(ln_dir / "config.json", device="cpu") as pipe, pytest.raises(InvalidArgumentError) as e:
        pipe.save(ln_dir / "x.plk")
    assert "input_tensor" in str(e.value) and "--shape" in str(e.value)
    assert main(["compile", str(ln_dir / "config.json"), "-o", str(ln_dir / "x.plk")]) == 1
    assert "error[PIPELINK_ERR_INVALID_ARGUMENT]" in capsys.readouterr().err


def test_a_builtin_stage_is_refused_naming_it(tmp_path, capsys):
    cfg = {
        "inputs": {"x": {"shape": [4], "dtype": "float32"}},
        "pipeline": [{"name": "relu", "id": "act", "inputs": ["x"], "outputs": ["y"]}],
    }
    path = tmp_path / "builtin.json"
    path.write_text(json.dumps(cfg))
    with pl.load(path, device="cpu") as pipe, pytest.raises(ConfigError) as e:
        pipe.save(tmp_path / "x.plk")
    assert e.value.code == ErrorCode.PIPELINK_ERR_INVALID_CONFIG
    assert e.value.errors[0].path == "/pipeline/0"
    assert "'act'" in e.value.message and "built-in NumPy operator" in e.value.message
    assert not (tmp_path / "x.plk").exists()
    assert main(["compile", str(path), "-o", str(tmp_path / "x.plk")]) == 2
    assert "error[PIPELINK_ERR_INVALID_CONFIG]" in capsys.readouterr().err


def test_process_isolation_is_refused(plans, tmp_path):
    cfg = json.loads((plans / "fail.json").read_text())
    cfg["pipeline"][0]["library"] = str(plans / "lib" / "libcore_ops.so")
    cfg["pipeline"][0]["isolation"] = "process"
    with pl.load(cfg, device="cpu") as pipe, pytest.raises(ConfigError, match="isolation 'process'"):
        pipe.save(tmp_path / "x.plk")


@pytest.mark.parametrize("text", ["x", "=4", "x=4xA", "x=-1", "x=4:notadtype"])
def test_bad_shape_options(text):
    with pytest.raises(InvalidArgumentError):
        parse_shape(text)


def test_shape_options():
    assert parse_shape("x=8x1024:float16") == ("x", ((8, 1024), "float16"))
    assert parse_shape("eps=:float32") == ("eps", ((), "float32"))
    assert parse_shape("x=3") == ("x", ((3,), None))


def test_lib_dir_prints_the_library_folder(runtime_lib, capsys):
    assert main(["lib-dir"]) == 0
    assert capsys.readouterr().out.strip() == str(runtime_lib.parent)


def test_a_missing_library_says_how_to_build_it(monkeypatch, tmp_path, capsys):
    # An install without a C compiler succeeds; the library is then missing and lib-dir says what to do.
    import pipelink.native.build as native_build

    monkeypatch.setattr(native_build, "default_output", lambda: tmp_path / "lib" / "libpipelink_runtime.so")
    assert main(["lib-dir"]) == 1
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert "error[PIPELINK_ERR_MODULE_LOAD_FAILED]" in err and "python -m pipelink.native.build" in err


def test_a_failing_compiler_is_reported(tmp_path):
    from pipelink.native.build import compile_runtime

    with pytest.raises(RuntimeError, match="failed"):
        compile_runtime(tmp_path / "lib.so", compiler=["false"])
    assert not (tmp_path / "lib.so").exists()


def test_run_extensions_build_and_say_why_not(tmp_path, monkeypatch):
    # Wrong if a failing compiler or missing Python headers left a half-written extension, or built one
    # silently without the other (run() then takes its Python path: setup.py and native.build warn).
    import sysconfig

    from pipelink.native.build import EXTENSIONS, compile_extension

    assert set(EXTENSIONS) == {"pipelink.runtime._hotpath", "pipelink.backends.cuda._pool"}
    for name in EXTENSIONS:
        with pytest.raises(RuntimeError, match="failed"):
            compile_extension(name, tmp_path / f"{name}.so", compiler=["false"])
        built = compile_extension(name, tmp_path / f"{name}.so")
        assert built.is_file() and built.stat().st_size > 0
    monkeypatch.setattr(sysconfig, "get_paths", lambda: {"include": str(tmp_path / "no-headers")})
    with pytest.raises(RuntimeError, match=r"Python\.h is not in"):
        compile_extension("pipelink.runtime._hotpath", tmp_path / "missing.so")
    assert not (tmp_path / "missing.so").exists()


def test_the_build_script_takes_no_option_for_an_output_path(tmp_path, capsys, monkeypatch):
    # `python -m pipelink.native.build --help` once wrote the library to a file named "--help".
    from pipelink.native.build import main as build_main

    monkeypatch.chdir(tmp_path)
    assert build_main(["--help"]) == 0
    assert "usage" in capsys.readouterr().out
    assert build_main(["--output", "x"]) == 2
    assert build_main(["-o"]) == 2
    assert list(tmp_path.iterdir()) == []


def test_cuda_graph_is_refused_for_a_cpu_plan(ln_dir, capsys):
    # The flag means the core captures CUDA graphs: asked for a CPU plan it is an error, never dropped.
    declared = ln_dir / "declared.json"
    declared.write_text(json.dumps(layernorm_config("./lib/liblayernorm_module.so")))
    with pl.load(declared, device="cpu") as pipe:
        with pytest.raises(InvalidArgumentError) as e:
            pipe.save(ln_dir / "g.plk", cuda_graph=True)
        assert "CUDA plans only" in str(e.value)
        assert not pipe.cuda_graph  # the default follows the pipeline's mode: no flag
        pipe.save(ln_dir / "plain.plk")
    assert not (ln_dir / "g.plk").exists()
    assert (ln_dir / "plain.plk").read_bytes()[22:24] == b"\0\0"  # the flags half of the device-id word
    assert main(["compile", str(declared), "-o", str(ln_dir / "g.plk"), "--cuda-graph"]) == 1
    assert "CUDA plans only" in capsys.readouterr().err


def test_the_header_carries_the_flags_beside_the_device_id():
    from pipelink.runtime.planfile import FLAG_CUDA_GRAPH, PlanParts, assemble

    parts = PlanParts("p", 0, 256, 90, [], [], [], [], [], 0, b"", (2, 3), flags=FLAG_CUDA_GRAPH)
    data = assemble(parts)
    assert data[20:24] == bytes([3, 0, FLAG_CUDA_GRAPH, 0])
