"""Every bad config a user can write gives its code, a JSON Pointer, and (on the CLI) no traceback."""

from __future__ import annotations

import json

import numpy as np
import pytest

import pipelink as pl
from pipelink.cli import main

GOOD = {
    "inputs": {"x": {"shape": [4, 8], "dtype": "float32"}},
    "pipeline": [
        {"name": "relu", "id": "a", "inputs": ["x"], "outputs": ["hidden"]},
        {"name": "gelu", "id": "b", "inputs": ["hidden"], "outputs": ["y"]},
    ],
}


def with_stage(i, **changes):
    doc = json.loads(json.dumps(GOOD))
    doc["pipeline"][i].update(changes)
    return doc


CASES = [
    ("schema", with_stage(0, inputs="x"), "/pipeline/0/inputs"),
    ("unknown key", with_stage(0, constrains={}), "/pipeline/0/constrains"),
    ("unknown operator", with_stage(1, name="gleu"), "/pipeline/1/name"),
    ("unknown tensor", with_stage(1, inputs=["hiden"]), "/pipeline/1/inputs/0"),
    ("duplicate id", with_stage(1, id="a"), "/pipeline/1/id"),
    (
        "alignment 48",
        with_stage(0, constraints={"memory_alignment": 48}),
        "/pipeline/0/constraints/memory_alignment",
    ),
]


@pytest.mark.parametrize("label, doc, path", CASES, ids=[c[0] for c in CASES])
def test_bad_config_problem_has_code_and_path(label, doc, path):
    problems = pl.validate(doc)
    assert problems, label
    assert problems[0].path == path
    assert problems[0].code == pl.ErrorCode.PIPELINK_ERR_INVALID_CONFIG
    with pytest.raises(pl.ConfigError) as e:
        pl.load(doc, device="cpu")
    assert e.value.code == pl.ErrorCode.PIPELINK_ERR_INVALID_CONFIG
    assert any(p.path == path for p in e.value.errors)


def test_did_you_mean_for_operator_and_tensor():
    assert "did you mean 'gelu'" in pl.validate(with_stage(1, name="gleu"))[0].message
    assert "did you mean 'hidden'" in pl.validate(with_stage(1, inputs=["hiden"]))[0].message


def test_cycle_is_rejected():
    doc = {
        "pipeline": [
            {"name": "relu", "id": "a", "inputs": ["y"], "outputs": ["h"]},
            {"name": "relu", "id": "b", "inputs": ["h"], "outputs": ["y"]},
        ]
    }
    problems = pl.validate(doc)
    assert problems and "cycle" in " ".join(p.message for p in problems)


def test_all_problems_reported_at_once():
    doc = json.loads(json.dumps(GOOD))
    doc["pipeline"][0]["name"] = "rleu"
    doc["pipeline"][1]["id"] = "a"
    doc["pipeline"][1]["constraints"] = {"memory_alignment": 48}
    doc["outputs"] = ["yy"]
    assert len(pl.validate(doc)) >= 4


def test_hardware_requirement_names_what_is_missing():
    doc = {**GOOD, "requires": {"compute_capability": ">=8.0"}}
    (problem,) = pl.validate(doc)
    assert problem.code == pl.ErrorCode.PIPELINK_ERR_HARDWARE_UNSUPPORTED and problem.path == "/requires"
    assert "requires compute capability 8.0" in problem.message


@pytest.fixture
def files(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(GOOD))
    bad = tmp_path / "bad.json"
    bad.write_text('{"pipeline": [ {"name": "relu", }')
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps(with_stage(1, name="gleu")))
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32))
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, x=np.ones((3, 8), np.float32))
    return {"good": good, "bad": bad, "unknown": unknown, "inputs": inputs, "wrong": wrong, "dir": tmp_path}


def test_cli_exit_codes_and_messages(files, capsys):
    assert main(["validate", str(files["good"])]) == 0
    assert main(["validate", str(files["bad"])]) == 2
    err = capsys.readouterr().err
    assert "error[PIPELINK_ERR_INVALID_CONFIG]" in err and "line 1" in err and "Traceback" not in err
    assert main(["validate", str(files["unknown"])]) == 2
    err = capsys.readouterr().err
    assert "/pipeline/1/name" in err and "did you mean 'gelu'" in err
    assert main(["run", str(files["unknown"]), "--random", "--device", "cpu"]) == 2
    out_path = files["dir"] / "out.npz"
    assert (
        main(
            [
                "run",
                str(files["good"]),
                "--inputs",
                str(files["inputs"]),
                "--device",
                "cpu",
                "--output",
                str(out_path),
            ]
        )
        == 0
    )
    x = np.load(files["inputs"])["x"]
    y = np.load(out_path)["y"]
    assert y.shape == (4, 8) and np.isfinite(y).all() and np.allclose(y[x < -4], 0, atol=1e-3)
    capsys.readouterr()
    assert main(["run", str(files["good"]), "--inputs", str(files["wrong"]), "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert "error[PIPELINK_ERR_INVALID_ARGUMENT]" in err and "'x'" in err and "Traceback" not in err


def test_cli_schema_ops_graph(files, capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert "pipeline" in schema["properties"]
    assert main(["ops"]) == 0
    assert "layer_norm" in capsys.readouterr().out
    assert main(["graph", str(files["good"])]) == 0
    dot = capsys.readouterr().out
    assert dot.startswith("digraph") and '"stage:a" -> "stage:b"' in dot
    assert main(["graph", str(files["good"]), "-o", str(files["dir"] / "g.dot")]) == 0
    assert (files["dir"] / "g.dot").read_text() == dot


def test_path_with_nul_byte_is_a_config_error():
    # Found by the long fuzz run: a NUL byte made pathlib raise ValueError out of pl.validate.
    problems = pl.validate("\x00")
    assert problems and problems[0].code == pl.ErrorCode.PIPELINK_ERR_INVALID_CONFIG


def test_cli_bench_needs_a_checkout(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--quick"]) == 2
    assert "repository root" in capsys.readouterr().err


def test_cli_doctor_include_dir_build_and_inspect(tmp_path, capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "CUDA" in out and "cpu features" in out
    assert main(["include-dir"]) == 0
    from pathlib import Path

    assert (Path(capsys.readouterr().out.strip()) / "pipelink.h").is_file()
    src = tmp_path / "twice.c"
    src.write_text(
        "#include <pipelink.h>\nPIPELINK_COMPUTE(twice) {\n"
        "    const float* x = (const float*)in[0].data; float* y = (float*)out[0].data;\n"
        "    for (int64_t i = 0; i < pipelink_numel(&in[0]); ++i) y[i] = 2 * x[i];\n"
        "    return PIPELINK_SUCCESS;\n}\nPIPELINK_VERSION(twice, 1, 2, 0)\n"
        'PIPELINK_MANIFEST({"name": "twice", "version": "1.2.0", "entry": "twice",'
        ' "devices": ["cpu"], "inputs": [{"name": "x", "dtype": "float32"}],'
        ' "outputs": [{"name": "y", "shape": "x"}]})\n'
    )
    lib = tmp_path / "libtwice.so"
    assert main(["build", str(src), "-o", str(lib)]) == 0 and lib.is_file()
    capsys.readouterr()
    assert main(["inspect", str(lib)]) == 0
    text = capsys.readouterr().out
    assert "twice" in text and "1.2.0" in text and "pipeLinkVersion_twice_1_2_0" in text
    assert main(["inspect", str(tmp_path / "missing.so")]) == 2
    assert "PIPELINK_ERR_MODULE_LOAD_FAILED" in capsys.readouterr().err


def test_readme_config_example_is_valid():
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    blocks = re.findall(r"```json\n(.*?)```", readme, re.S)
    assert blocks, "the README shows a config"
    for block in blocks:
        assert pl.validate(json.loads(block)) == []


def test_cli_trace_and_error_log(files, tmp_path, capsys):
    flaky = tmp_path / "flaky.json"
    flaky.write_text(
        json.dumps(
            {
                "inputs": {"x": {"shape": [4, 8], "dtype": "float32"}},
                "pipeline": [
                    {
                        "name": "layer_norm",
                        "id": "norm",
                        "inputs": ["x"],
                        "outputs": ["h"],
                        "attrs": {"eps": 0.0},
                        "constraints": {"check_finite": True},
                        "on_error": "identity",
                    },
                    {"name": "relu", "id": "act", "inputs": ["h"], "outputs": ["y"]},
                ],
            }
        )
    )
    constant = tmp_path / "constant.npz"
    np.savez(constant, x=np.full((4, 8), 3.0, np.float32))  # zero variance: 0/0 in every row
    trace, log = tmp_path / "trace.json", tmp_path / "errors.jsonl"
    code = main(
        [
            "run",
            str(flaky),
            "--inputs",
            str(constant),
            "--device",
            "cpu",
            "--trace",
            str(trace),
            "--error-log",
            str(log),
        ]
    )
    assert code == 1, "a degraded stage makes the run's exit status 1"
    err = capsys.readouterr().err
    assert "warning[PIPELINK_ERR_MODULE_CRASH]" in err and "non-finite" in err
    events = json.loads(trace.read_text())["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X"]
    assert [e["name"] for e in spans] == ["norm", "act"]
    assert spans[0]["args"]["status"] == "degraded" and spans[1]["ts"] >= spans[0]["ts"] + spans[0]["dur"]
    entry = json.loads(log.read_text().splitlines()[0])
    assert entry["stage"] == "norm" and entry["code"] == "PIPELINK_ERR_MODULE_CRASH"
    pl.configure_error_log(None)


def test_cli_graph_image_needs_graphviz_or_says_so(files, capsys, monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert main(["graph", str(files["good"]), "-o", str(files["dir"] / "g.svg")]) == 2
    assert "graphviz" in capsys.readouterr().err.lower()
