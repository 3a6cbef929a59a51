"""The command line as a user meets it: usage errors are one line and exit 2 (never a traceback), run's
options are checked before anything runs, and what it prints is readable."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import pipelink as pl
from pipelink.cli import main

SRC = Path(pl.__file__).resolve().parents[1]
ROOT = SRC.parent
CONFIG = {
    "inputs": {"x": {"shape": [4, 8], "dtype": "float32"}, "gamma": {"dtype": "float32"}},
    "pipeline": [{"name": "mul", "inputs": ["x", "gamma"], "outputs": ["y"]}],
}


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(CONFIG))
    return path


def pipelink(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m pipelink ARGS`` in a fresh interpreter, as a user's shell runs it."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "80"}
    env.pop("PIPELINK_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "pipelink", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


USAGE_ERRORS = [
    ([], "no command given"),
    (["frobnicate"], "no such command 'frobnicate'"),
    (["--bogus"], "no such option: --bogus"),
    (["run"], "missing argument 'config'"),
    (["run", "CFG", "--bogus"], "no such option: --bogus"),
    (["run", "CFG", "--repeat", "abc"], "'--repeat'"),
    (["run", "CFG", "--repeat", "0"], "'--repeat'"),
    (["run", "CFG", "--random", "--shape"], "'--shape' requires an argument"),
    (["validate", "CFG", "--device"], "'--device' requires an argument"),
]


@pytest.mark.parametrize(
    ("args", "says"), USAGE_ERRORS, ids=[" ".join(a) or "no-args" for a, _ in USAGE_ERRORS]
)
def test_usage_errors_are_one_line_exit_2_with_a_hint(config, args, says):
    # Before: every one of these printed two chained tracebacks (the handler imported a missing `click`).
    result = pipelink(*[str(config) if a == "CFG" else a for a in args])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error[") and says in lines[0] and "--help" in lines[0]
    assert "Traceback" not in result.stderr + result.stdout


def test_version_prints_the_version():
    result = pipelink("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"pipelink {pl.__version__}"


def test_bad_shape_value_is_a_usage_error(config, capsys):
    assert main(["run", str(config), "--random", "--shape", "gamma=8xq"]) == 2
    err = capsys.readouterr().err
    assert "--shape gamma='8xq'" in err and "e.g. --shape gamma=8x1024" in err


def test_shape_for_a_nonexistent_input_is_an_error_with_a_suggestion(config, capsys):
    assert main(["run", str(config), "--random", "--shape", "gama=8"]) == 2
    err = capsys.readouterr().err
    assert "'gama', not an input" in err and "did you mean 'gamma'" in err


def test_random_names_every_missing_shape_at_once(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"pipeline": [{"name": "add", "inputs": ["a", "b"], "outputs": ["c"]}]}))
    assert main(["run", str(path), "--random"]) == 2
    err = capsys.readouterr().err
    assert "inputs 'a', 'b'" in err and "--shape a=DIMxDIM --shape b=DIMxDIM" in err


def test_a_shape_past_memory_is_refused_before_allocating(config, capsys):
    assert main(["run", str(config), "--random", "--shape", "gamma=100000000x256000000"]) == 2
    err = capsys.readouterr().err
    assert "PIPELINK_ERR_OUT_OF_MEMORY" in err and "needs" in err and "bytes" in err


def test_missing_npz_and_missing_input_are_both_usage_errors(config, tmp_path, capsys):
    assert main(["run", str(config), "--inputs", str(tmp_path / "none.npz")]) == 2
    assert "cannot read inputs" in capsys.readouterr().err
    misspelled = tmp_path / "in.npz"
    np.savez(misspelled, x=np.ones((4, 8), np.float32), gama=np.ones(8, np.float32))
    assert main(["run", str(config), "--inputs", str(misspelled)]) == 2
    err = capsys.readouterr().err
    assert "missing input 'gamma'" in err and "did you mean 'gamma' (given 'gama')" in err


def test_pl_run_suggests_the_misspelled_input_too(config):
    pipe = pl.load(config, device="cpu")
    with pytest.raises(pl.InvalidArgumentError, match=r"did you mean 'gamma' \(given 'gama'\)"):
        pipe.run({"x": np.ones((4, 8), np.float32), "gama": np.ones(8, np.float32)})


def test_npz_inputs_follow_the_same_dtype_rule_as_run(config, tmp_path, capsys):
    # Before: the CLI cast float64 to the declared float32, while run() refused the same array.
    feed = {"x": np.ones((4, 8), np.float64), "gamma": np.ones(8, np.float32)}
    with pytest.raises(pl.PipeLinkError) as refused:
        pl.load(config, device="cpu").run(feed)
    npz = tmp_path / "in.npz"
    np.savez(npz, **feed)
    assert main(["run", str(config), "--inputs", str(npz)]) == 1
    assert f"error[{refused.value.code.name}]" in capsys.readouterr().err


def test_repeat_reports_median_and_p95_and_memory_is_human_readable(config, capsys):
    assert main(["run", str(config), "--random", "--shape", "gamma=8", "--repeat", "12"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"12 runs: median \d+\.\d+ ms, p95 \d+\.\d+ ms", out)
    assert re.search(r"memory plan: \d+(\.\d)? (B|KiB|MiB) arena", out)
    assert "4x8" in out and "[4, 8]" not in out


def test_cuda_graph_flag_and_its_deprecated_alias_are_accepted(config, capsys):
    for flag in ("--cuda-graph", "--graph"):
        assert main(["run", str(config), "--random", "--shape", "gamma=8", flag, "--device", "cpu"]) == 0
        err = capsys.readouterr().err
        assert ("--graph is deprecated; use --cuda-graph" in err) == (flag == "--graph")


OPS_FILE = """
import pipelink as pl

@pl.operator("{name}", inputs=["x"], outputs=["y"])
def _double(x, y):
    y[...] = 2 * x
"""


def test_import_registers_python_operators_for_the_cli(tmp_path, capsys):
    name = "twice_" + "really_long_operator_name_" * 3 + "v1"
    ops = tmp_path / "my_ops.py"
    ops.write_text(OPS_FILE.format(name=name))
    cfg = tmp_path / "p.json"
    cfg.write_text(
        json.dumps(
            {
                "inputs": {"x": {"shape": [2, 3], "dtype": "float32"}},
                "pipeline": [{"name": name, "inputs": ["x"], "outputs": ["y"]}],
            }
        )
    )
    assert main(["validate", str(cfg)]) == 2  # unknown without the import
    capsys.readouterr()
    assert main(["validate", str(cfg), "--import", str(ops)]) == 0
    assert main(["run", str(cfg), "--random", "--import", str(ops)]) == 0
    capsys.readouterr()
    assert main(["ops"]) == 0
    assert name in capsys.readouterr().out  # never cut at 80 columns


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("no_such_module_xyz", "not found"),
        ("missing_file.py", "no such file"),
        ("BROKEN", "raised ZeroDivisionError"),
    ],
)
def test_import_failures_are_usage_errors(tmp_path, config, capsys, spec, says):
    if spec == "BROKEN":
        spec = str(tmp_path / "broken.py")
        Path(spec).write_text("1 / 0\n")
    assert main(["validate", str(config), "--import", spec]) == 2
    err = capsys.readouterr().err
    assert "PIPELINK_ERR_MODULE_LOAD_FAILED" in err and says in err


def test_entry_point_plugins_register_operators(tmp_path, monkeypatch):
    from pipelink.modules import plugins

    (tmp_path / "plug_ops.py").write_text(OPS_FILE.format(name="plugin_twice"))
    (tmp_path / "plug_bad.py").write_text("raise RuntimeError('broken plugin')\n")
    dist = tmp_path / "plug-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plug\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[pipelink.operators]\ntwice = plug_ops\nbad = plug_bad\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugins, "_entry_points_loaded", False)
    with pytest.warns(RuntimeWarning, match="'bad'.*broken plugin"):
        loaded = plugins.load_entry_points()
    assert loaded == ["twice"] and "plugin_twice" in pl.list_operators()
    assert plugins.load_entry_points() == []  # once per process


def test_validate_reports_an_operator_with_no_variant_for_the_device(tmp_path, capsys):
    # Before: validate (device cpu) passed a CUDA-only operator that run --device cpu then refused.
    @pl.operator("cuda_only_op_for_validate", inputs=["x"], outputs=["y"], device="cuda")
    def _cuda_only(x, y):
        y[...] = x

    cfg = tmp_path / "p.json"
    cfg.write_text(
        json.dumps({"pipeline": [{"name": "cuda_only_op_for_validate", "inputs": ["x"], "outputs": ["y"]}]})
    )
    problems = pl.validate(cfg)
    assert [p.code for p in problems] == [pl.ErrorCode.PIPELINK_ERR_HARDWARE_UNSUPPORTED]
    assert problems[0].path == "/pipeline/0/name" and "no variant of operator" in problems[0].message
    assert main(["validate", str(cfg)]) == 2
    assert main(["run", str(cfg), "--random", "--shape", "x=2", "--device", "cpu"]) == 2
    assert "runs on cpu" in capsys.readouterr().err


def test_graph_labels_use_line_breaks_and_plain_shapes(config, capsys):
    assert main(["graph", str(config)]) == 0
    dot = capsys.readouterr().out
    assert 'label="x\\n4x8 float32"' in dot  # DOT's own line break, one backslash
    assert "\\\\n" not in dot and "[4, 8]" not in dot


def test_build_without_a_manifest_fails_instead_of_saying_built(tmp_path, capsys):
    src = tmp_path / "plain.c"
    src.write_text("int plain(int x) { return x + 1; }\n")
    lib = tmp_path / "libplain.so"
    assert main(["build", str(src), "-o", str(lib)]) == 2
    err = capsys.readouterr().err
    assert "no PipeLink manifest" in err and "desc.h" in err and "built" not in err.split(":")[0]


def test_bench_help_lists_the_suite_options(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--quick" in out and "--cases" in out


def test_layernorm_readme_run_command_names_every_input():
    readme = (ROOT / "examples" / "layernorm_module" / "README.md").read_text()
    command = re.search(r"pipelink run config\.json --random[^\n\\]*(?:\\\n[^\n\\]*)*", readme).group()
    config = json.loads((ROOT / "examples" / "layernorm_module" / "config.json").read_text())
    for name in config["pipeline"][0]["inputs"]:
        assert f"{name}=" in command, f"the README's run command does not give {name}"


def test_usage_line_does_not_wrap(tmp_path):
    long_dir = tmp_path / ("d" * 60)
    long_dir.mkdir()
    result = pipelink("run", str(long_dir / "p.json"), "--random")
    assert result.returncode == 2
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1, textwrap.shorten(
        result.stderr, 300
    )


def test_unknown_tensor_and_output_names_always_get_a_suggestion():
    doc = {
        "inputs": {"x": {"dtype": "float32"}, "gamma": {"dtype": "float32"}},
        "pipeline": [
            {"name": "mul", "inputs": ["x", "gama"], "outputs": ["hidden"]},
            {"name": "mul", "inputs": ["hidden", "beta"], "outputs": ["y"]},
        ],
        "outputs": ["yy"],
    }
    messages = {p.path: p.message for p in pl.validate(doc)}
    assert "did you mean 'gamma'?" in messages["/pipeline/0/inputs/1"]
    # No close match: the names that would be valid there are listed instead.
    assert "known here: 'x', 'gamma', 'hidden'" in messages["/pipeline/1/inputs/1"]
    assert "('hidden', 'y', 'x', 'gamma')" in messages["/outputs/0"]
