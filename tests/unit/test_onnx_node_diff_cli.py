"""``scripts/onnx_node_diff.py`` (which node of an imported model first differs from the reference, per
device; docs/onnx-import.md, Real models) on the CPU: a model that matches is exit 0, a threshold every
output passes lists them in graph order and bisects to the first node, and misuse is exit 2 with one
error line, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import helper  # noqa: E402

from tests.backend import onnx_models as om  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "onnx_node_diff.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def _model(tmp_path: Path, batch="2") -> Path:
    """x [batch, 8] -> Relu -> MatMul by w [8, 4] -> Tanh."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w"], ["m"], name="matmul"),
        helper.make_node("Tanh", ["m"], ["y"], name="tanh"),
    ]
    w = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    shape = [int(batch) if batch.isdigit() else batch, 8]
    model = om.make_model(nodes, [("x", shape)], [("y", None)], {"w": w}, "diff")
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return path


def test_a_model_that_matches_is_exit_0(tmp_path):
    out = _run(str(_model(tmp_path)), "--devices", "cpu")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[cpu] 0 of 3 node outputs differ by more than 0.0001" in out.stdout


def test_every_output_past_the_threshold_is_listed_and_bisected_to_the_first_node(tmp_path):
    out = _run(str(_model(tmp_path)), "--devices", "cpu", "--threshold", "-1", "--show", "2")
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("[cpu] r (Relu 'relu'): ") and lines[1].startswith(
        "[cpu] m (MatMul 'matmul'): "
    )
    assert "[cpu] 3 of 3 node outputs differ by more than -1" in out.stdout
    assert "bisection: the first prefix that differs ends at node 0 (Relu 'relu'" in out.stdout


def test_inputs_from_an_npz_give_a_symbolic_batch_its_size(tmp_path):
    path = _model(tmp_path, batch="batch")
    out = _run(str(path), "--devices", "cpu")
    errors = [line for line in out.stderr.splitlines() if "error:" in line]
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(errors) == 1
    assert "input 'x' has dims known only at run time; give --inputs" in errors[0]
    np.savez(tmp_path / "feeds.npz", x=np.ones((3, 8), np.float32))
    out = _run(str(path), "--devices", "cpu", "--inputs", str(tmp_path / "feeds.npz"))
    assert out.returncode == 0 and "0 of 3 node outputs differ" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["missing.onnx"], "missing.onnx: no such file"),
        (["MODEL", "--inputs", "missing.npz"], "--inputs missing.npz: no such file"),
        (["MODEL", "--threshold", "small"], "argument --threshold: invalid float value: 'small'"),
    ],
)
def test_misuse_is_exit_2_with_one_error_line(tmp_path, args, error):
    model = str(_model(tmp_path))
    out = _run(*[model if a == "MODEL" else a for a in args])
    errors = [line for line in out.stderr.splitlines() if "error:" in line]
    assert out.returncode == 2 and len(errors) == 1 and error in errors[0], out.stderr
    assert "Traceback" not in out.stderr
