"""Checked mode with a native CPU module that writes past its output: the guard bytes catch it, name the
stage, the output and how far it wrote, and the stage's on_error policy applies."""

from __future__ import annotations

import json

import numpy as np
import pytest

import pipelink as pl
from pipelink.runtime.checked import CHECKED_ENV, GUARD_BYTES


def overrun_pipeline(libs, extra: int, on_error: str = "fail", returned: bool = False) -> dict:
    """x -> overrun_copy -> t -> relu -> y; with ``returned`` the overrunning stage writes a returned
    output (allocated per run) instead of an arena buffer."""
    stage = {
        "name": "overrun_copy",
        "id": "bad",
        "library": str(libs["overrun"]),
        "inputs": ["x"],
        "outputs": ["t"],
        "attrs": {"extra": extra},
        "on_error": on_error,
    }
    relu = {"name": "relu", "id": "r", "inputs": ["t"], "outputs": ["y"]}
    return {"outputs": ["t"] if returned else ["y"], "pipeline": [stage] if returned else [stage, relu]}


def load(libs, reg, extra: int, *, checked: bool = True, **kwargs) -> pl.Pipeline:
    return pl.load(overrun_pipeline(libs, extra, **kwargs), device="cpu", registry=reg, checked=checked)


@pytest.mark.parametrize("returned", [False, True], ids=["arena buffer", "returned output"])
def test_a_native_module_writing_past_its_output_is_a_module_crash(libs, reg, returned):
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    pipe = load(libs, reg, 3, returned=returned)
    with pipe, pytest.raises(pl.ModuleCrashError, match=r"stage 'bad' .* wrote 12 bytes past") as e:
        pipe.run(x=x)
    assert e.value.code == pl.ErrorCode.PIPELINK_ERR_MODULE_CRASH
    assert e.value.context["output"] == "t" and e.value.context["bytes_past"] == 12
    assert pipe.last_report.stages["bad"].status == "failed"


def test_an_overrun_over_the_whole_guard_is_reported_in_full(libs, reg):
    # (A kernel writing further than the guard corrupts memory nothing guards: not tested here.)
    x = np.ones(64, np.float32)
    pipe = load(libs, reg, GUARD_BYTES // 4)
    with pipe, pytest.raises(pl.ModuleCrashError, match=f"wrote {GUARD_BYTES} bytes past output 't'"):
        pipe.run(x=x)


def test_the_policy_of_the_overrunning_stage_applies(libs, reg):
    x = np.random.default_rng(1).standard_normal(10).astype(np.float32)
    with load(libs, reg, 1, on_error="identity") as pipe:
        y = np.asarray(pipe.run(x=x)["y"])
        report = pipe.last_report.stages["bad"]
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert report.status == "degraded" and report.action == "identity"
    assert "wrote 4 bytes past output 't'" in report.error.message


def test_a_module_that_stays_in_bounds_passes_checked_mode(libs, reg):
    x = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32)
    with load(libs, reg, 0) as pipe:
        for _ in range(2):
            np.testing.assert_array_equal(np.asarray(pipe.run(x=x)["y"]), np.maximum(x, 0))
        assert pipe.last_report.ok


def test_without_checked_mode_the_overrun_goes_unnoticed(libs, reg):
    """What checked mode is for: the same stage 'succeeds' when nothing guards the arena (8 bytes past a
    64-byte buffer land in the arena's alignment slack, so the test itself corrupts nothing)."""
    x = np.ones(16, np.float32)
    with load(libs, reg, 2, checked=False) as pipe:
        pipe.run(x=x)
        assert pipe.last_report.stages["bad"].status == "ok"


def test_pipelink_run_checked_reports_the_overrun(libs, tmp_path, capsys, monkeypatch):
    from pipelink.cli import main

    monkeypatch.delenv(CHECKED_ENV, raising=False)  # without --checked, the run is unchecked

    config = tmp_path / "overrun.json"
    config.write_text(json.dumps(overrun_pipeline(libs, 2)))
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.ones((2, 8), np.float32))
    argv = ["run", str(config), "--inputs", str(inputs), "--device", "cpu"]
    assert main(argv + ["--checked"]) == 1
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert "error[PIPELINK_ERR_MODULE_CRASH]" in err and "wrote 8 bytes past output 't'" in err
    assert "Traceback" not in err
    assert main(argv) == 0  # unchecked, the overrun goes unnoticed
