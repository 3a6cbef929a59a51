"""Misuse of ``scripts/onnx_models_check.py`` (the real-model check of docs/onnx-import.md): a bad option
value, a model the zoo lacks, and a host without torch are each exit 2 with one error line, no traceback."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "onnx_models_check.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--exporter", "bogus"], "argument --exporter: invalid choice: 'bogus'"),
        (["--zoo", "wide", "--only", "bert,nosuch"], "--only: no model nosuch in the wide zoo"),
        (["--only", "bert"], "--only: no model bert in the race zoo"),
    ],
)
def test_a_bad_option_is_exit_2_with_one_error_line(args, error):
    out = _run(*args)
    errors = [line for line in out.stderr.splitlines() if "error:" in line]
    assert out.returncode == 2 and len(errors) == 1 and error in errors[0], out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_without_torch_it_says_what_it_needs():
    out = _run("--zoo", "wide", "--only", "bert", "--dynamic-batch", "--dynamic-seq")
    assert out.returncode == 2 and "needs torch, onnx and onnxruntime" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
